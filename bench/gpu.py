"""GPU speed of fine-tuning, in one command: K runs side by side on CUDA streams (and whether each equals the
run alone), ours against the HF Trainer, per-run overhead, the effect of each optimisation, a GLUE sweep
estimate and several runs sharing one GPU. Prints one Markdown report.

    python bench/gpu.py                  # on a CUDA machine: BERT-base (BertConfig(), random weights)
    python bench/gpu.py --parts ours,overhead --scale 0.5
    python bench/gpu.py --budget-s 330 --out DIR   # the lent GPU's call (bench/README.md, bench/device.sh)

With --out, report.md and figures.json (every figure of the report, and each part's status) are rewritten
after every measurement, so a call cut off at its limit still returns what was measured; --budget-s stops
whatever runs at the deadline and skips the rest (bench/gpu_record.py). Parts run in the order of the
targets they measure (runs side by side, compiled runs, their checks, the process start, the per-run
overhead, the sweep, then ours against the Trainer, fused, concurrency), the diagnostics (optimisations,
profile) last.

What is measured (on CUDA: BERT-base from `BertConfig()` with random weights, so no hub is needed; bf16
autocast, SDPA, batch 32, max length 128, lr 2e-5, AdamW):

- streams (bench/gpu_streams.py): the steady-state seq/s, in all and per run, of K = 1, 2, 4, 8 runs trained
  side by side in one process (bertology.train.side_by_side: each run its own model, AdamW, graphed step,
  CUDA stream, graph memory pool and generator state, stepped round-robin from one host thread), on fixed
  32 x 128 batches.
- compiled (bench/gpu_streams.py): the same with each model torch.compiled inside its graphed step
  (`compile: true`); the capture seconds hold the compilation.
- streams-check (bench/gpu_streams.py): whether a run side by side equals the same run alone: in fp32 with
  TF32 and bf16 reduced-precision reductions off, the step-0 loss and gradients and 8 steps' losses and
  weights of 4 runs side by side against each alone, dropout off and on, beside one run alone twice (the
  device's floor); in bf16 (dropout off) side by side against alone, and each run's bf16 losses against its
  fp32 ones.
- compiled-check (bench/gpu_streams.py): a compiled run against the same run not compiled, in fp32 (TF32
  off: step-0 loss and gradients, 8 steps' losses and weights) and in bf16, each against its fp32 run.
- start: a step's process start by part (bench/step_start.py: interpreter, the step module, the training
  imports, `torch.cuda.init()`, the model onto the device, the first step), BERT-base, bytecode as cached;
  the same with CUDA's initialisation overlapping the imports; the imports without bytecode; and the
  modules whose own import time is largest (`python -X importtime`).
- bundle: the finetune step on a pod's bundle of 8 RTE-sized runs (3 epochs), one by one in one process
  (its non-training share) and 4 at a time side by side.
- ours vs the Trainer: training sequences/s of `bertology.train.finetune` and of the HF Trainer on the same
  batches (`bench/finetune_throughput.run_trainer`: group_by_length, bf16, SDPA, the same batch size,
  eval batch, lr, warmup, weight decay and seed), one after the other in this process: at a fixed length
  of 128 (every row 128 tokens, so every batch is 32 x 128 in both), and on token lengths drawn from the
  GLUE length histograms in bench/glue_lengths.json (see bench/glue_lengths.py; MNLI and QQP are assumed
  to look like QNLI). On CUDA each length set first runs one step at every batch width and size the
  loops can meet (`warm_widths`), so neither pays the first-step cost of a new width for the other.
  MFU = 6 x non-embedding parameters x real (unpadded) tokens / time / peak bf16 dense FLOP/s of the
  device (a table by device name: H100 SXM 989 TFLOP/s, H100 PCIe 756, H200 989, A100 312); attention's
  own FLOPs (small at length <= 128) and pad tokens are not counted.
- fused: the steady-state seq/s of one run's step and of K = 1, 2, 4, 8 runs fused into one model
  (bertology.train.fused), eager and as CUDA graphs, on fixed 32 x 128 batches; "in all" counts every
  run's sequences. First, what a fused run's difference from one run is made of: fused run 0 against one
  run in fp32 with TF32 off and in bf16, and each bf16 trajectory against its fp32 one.
- optimisations: eager against the whole step as CUDA graphs (widths in buckets of 32 or 8), compile, the padding waste (share of pad tokens) with and without length
  grouping and with widths bucketed to multiples of 8, training seq/s with and without the buckets, and
  evaluation seq/s at eval batch 128 and 512.
- profile: where the bare training step's time goes (bench/gpu_profile.py): wall, host CPU and device-busy
  time per step, kernels and launches per step, eager and compiled (CUDA graphs too), with inputs made on
  the device or as the loop makes them (pinned copies), at a fixed width and on SST-2's lengths.
- per-run overhead, by phase, timed by running the finetune step's own calls: process start (a fresh
  interpreter importing the step), loading (tokenizer and model onto the device), tokenized data (the
  prepared Parquet into batches), evaluation (3 epochs' dev evaluations; the scoring reuses the selected
  point's), resume states (a snapshot per 1,000 steps), measures (inference speed and weight distances, from the
  model in memory: weights not kept are never saved), publishing (the run's tables into store
  artifacts), and its share of a run's GPU time
  for an RTE-sized and an SST-2-sized run (3 epochs, K = 1).
- the GLUE sweep: nine tasks, 3 epochs, one model and seed: per-task training throughput measured on each
  task's lengths, plus the measured overheads, at the public training and dev sizes.
- runs side by side: the finetune step on a bundle of 4 RTE-sized runs (3 epochs) and of 4 runs of a
  quarter of SST-2 (1 epoch) with `gpu_concurrency` K = 1, 2, 4: aggregate training seq/s (all sequences /
  wall time of the whole bundle, overheads included), its speed-up over K = 1, and at K = 1 the step's
  non-training share (the per-run overhead of the real step, scoring and analysis included). At K > 1 both
  ways the step can run K at once: side by side in its process (the setting's meaning) and, with
  BERTOLOGY_GPU_CONCURRENCY=processes, each run in its own process (figures.json: the bundle's
  "processes").
- the targets: each target's measured value, next to the target, in the report's last section
  and in figures.json's "targets".

On CPU it runs a reduced version (a tiny BertConfig, a few steps, fp32; streams and its check at K = 1, 2,
interleaved, eager; side by side, the RTE-sized bundle only, of 2 runs, K = 1, 2) and marks what needs CUDA "n/a (no CUDA)"; those figures are CPU figures and
say nothing about a GPU. tests/test_device_kit.py runs it so, through bench/device.sh, in a Python 3.12
environment holding only the GPU machine's packages and the device kit.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import io
import json
import logging
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTED = time.monotonic()  # --budget-s counts from here: the imports below take seconds on a busy machine

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from bertology import tasks
from bertology.data import Encoded
from bertology.train import Hyper, finetune
from bertology.train.heads import head_for

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpu_fused import part_fused
from gpu_record import (  # bench/ is not a package: imported from its folder
    Record,
    Terminated,
    raise_on_sigterm,
    run_child,
)
from gpu_streams import part_compiled_check, part_streams, part_streams_check
from gpu_targets import FIXED, figure_at, render_targets
from gpu_workload import (
    DEV_SIZES,
    GLUE,
    LENGTHS,
    make_model,
    matmul_params,
    padding_waste,
    sample_lengths,
    synthetic_split,
)

# Peak dense bf16 tensor FLOP/s by device name (vendor datasheets, no sparsity), most specific first.
PEAK_BF16 = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("GH200", 989e12), ("A100", 312e12))
NA = "n/a (no CUDA)"
CONCURRENCY_ENV = "BERTOLOGY_GPU_CONCURRENCY"  # bertology.steps.finetune's: `processes` runs K processes
PARTS = ("streams", "compiled", "streams-check", "compiled-check", "start", "bundle", "overhead", "sweep", "ours",
         "fused", "concurrency", "optimisations", "profile")  # the order they run in: the targets' order
VERSIONS = ("torch", "transformers", "tokenizers", "accelerate", "datasets", "numpy", "pyarrow")


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16 if key in name), None)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# -- measurements ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Bench:
    device: torch.device
    root: Path
    path: Path
    params: int
    scale: float
    hp: Hyper
    rec: Record
    snapshot_s: float = 0.0  # one resume-state snapshot (weights and optimizer to the CPU), measured

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def n(self, cuda_rows: int, cpu_rows: int) -> int:
        return max(self.hp.batch_size, int((cuda_rows if self.cuda else cpu_rows) * self.scale))

    def split(self, task: str, n: int, seed: int = 0, length: int | None = None) -> pa.Table:
        return synthetic_split(task, n, seed, 30522, length)

    def mfu(self, tokens: float, seconds: float) -> float | None:
        peak = peak_flops(self.device)
        return None if peak is None else 6 * self.params * tokens / seconds / peak

    def mfu_text(self, mfu: float | None) -> str:
        if mfu is None:
            return NA if not self.cuda else "n/a (unknown device)"
        return f"{100 * mfu:.1f}%"

    def ours(self, task: str, train: pa.Table, val: pa.Table, **hp) -> dict:
        out = self.root / f"ours-{time.monotonic_ns()}"
        result = finetune(self.path, tasks.get_task(task), train, {"validation": val},
                          dataclasses.replace(self.hp, **hp), 1, out, device=self.device, log=lambda _: None)
        shutil.rmtree(out, ignore_errors=True)
        return {"train_s": result.train_seconds, "eval_s": result.eval_seconds, "step_kind": result.step_kind,
                "capture_s": result.capture_seconds}

    def trainer(self, task: str, train: pa.Table, val: pa.Table) -> dict:
        from finetune_throughput import run_trainer

        out = self.root / f"trainer-{time.monotonic_ns()}"
        m = run_trainer(self.path, tasks.get_task(task), train, val, self.hp, 1, self.device, out)
        shutil.rmtree(out, ignore_errors=True)
        return m

    def eval_rate(self, task: str, val: pa.Table, batch_size: int) -> float:
        """Evaluation sequences/s of the head's evaluate (bf16 on CUDA, length-sorted batches)."""
        head = head_for(tasks.get_task(task))
        model = head.load(self.path, device=self.device)
        head.evaluate(model, val.slice(0, min(len(val), batch_size)), batch_size=batch_size, device=self.device)
        sync(self.device)
        start = time.perf_counter()
        head.evaluate(model, val, batch_size=batch_size, device=self.device)
        sync(self.device)
        return len(val) / (time.perf_counter() - start)

    def train_rate(self, task: str) -> float:
        """Ours' training seq/s on `task`'s lengths: the ours part's figure, else measured now."""
        measured = self.rec.figures.get("ours", {}).get(task, {}).get("ours")
        if measured:
            return measured["seq_s"]
        train = self.split(task, self.n(6_400, 192))
        return len(train) / self.ours(task, train, self.split(task, 64, seed=1))["train_s"]


def warm_widths(b: Bench, task: str, train: pa.Table, val: pa.Table) -> float:
    """On CUDA, one training step (forward and backward) at every batch width and size the loops below can
    meet on `train`, and one evaluation batch at every width of `val`, on a throwaway model: a width's first
    step costs about 0.5 s once per process (H200, 2026-11-26), and whichever loop ran first used to pay it
    for both. Returns the seconds spent; CPU runs have no such cost and skip it."""
    from bertology.train.device import autocast, pad_multiple

    if not b.cuda:
        return 0.0
    start = time.perf_counter()
    head = head_for(tasks.get_task(task))
    model = head.load(b.path, device=b.device)
    step = pad_multiple(b.device)
    for table, sizes, training in ((train, {b.hp.batch_size, len(train) % b.hp.batch_size}, True),
                                   (val, {b.hp.eval_batch_size, len(val) % b.hp.eval_batch_size}, False)):
        longest = int(np.max(table.column("length").to_numpy()))
        model.train(training)
        for width in range(step, -(-longest // step) * step + 1, step):
            for size in sorted(sizes - {0}):
                ids = torch.full((size, width), 1000, dtype=torch.long, device=b.device)
                with torch.inference_mode(not training), autocast(b.device):
                    out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
                if training:
                    out.logits.float().sum().backward()
    model.zero_grad(set_to_none=True)
    del model
    sync(b.device)
    return time.perf_counter() - start


def part_ours(b: Bench) -> None:
    b.rec.lines("## Ours vs the HF Trainer (training seq/s, same batches)", "",
                "| lengths | loop | seq/s | tokens/s | MFU | ours / Trainer |", "|---|---|---|---|---|---|")
    for row in (FIXED, "sst2", "qnli", "rte"):
        task, length = ("sst2", 128) if row == FIXED else (row, None)
        train = b.split(task, b.n(12_800, 256), length=length)
        val = b.split(task, b.n(1_000, 64), seed=1, length=length)
        tokens = int(np.sum(train.column("length").to_numpy()))
        label = "fixed length 128" if row == FIXED else f"like {row}"
        b.rec.put("ours", row, {"task_head": task, "rows": len(train), "tokens": tokens,
                                "warm_widths_s": warm_widths(b, task, train, val)})
        loops = {"ours": b.ours(task, train, val)}
        try:
            loops["Trainer"] = b.trainer(task, train, val)
        except ImportError as e:  # TrainingArguments needs accelerate (pip install -e '.[bench]')
            loops["Trainer"] = None
            missing = f"n/a ({str(e).split(':')[0]})"
        for name, m in loops.items():
            if m is None:
                b.rec.put("ours", row, "trainer", {"error": missing})
                b.rec.lines(f"| {label} | {name} | {missing} | | | |")
                continue
            mfu = b.mfu(tokens, m["train_s"])
            figures = {"train_s": m["train_s"], "eval_s": m.get("eval_s", m.get("fit_s", 0) - m["train_s"]),
                       "seq_s": len(train) / m["train_s"], "tokens_s": tokens / m["train_s"], "mfu": mfu}
            if name == "ours":  # graphed: each new shape's warm-up and capture is in train_s, once per run
                steady = m["train_s"] - m["capture_s"]
                figures.update(step_kind=m["step_kind"], capture_s=m["capture_s"],
                               steady_seq_s=len(train) / steady if steady > 0 else None,
                               steady_mfu=b.mfu(tokens, steady) if steady > 0 else None)
            b.rec.put("ours", row, name.lower(), figures)
            ratio = ""
            if name == "ours" and loops["Trainer"]:
                speedup = loops["Trainer"]["train_s"] / m["train_s"]
                b.rec.put("ours", row, "ours_over_trainer", speedup)
                ratio = f"{speedup:.2f}x"
            b.rec.lines(f"| {label} | {name} | {figures['seq_s']:,.0f} | {figures['tokens_s']:,.0f} | "
                        f"{b.mfu_text(mfu)} | {ratio} |")
            if name == "ours" and m["capture_s"] and figures["steady_seq_s"]:
                b.rec.lines(f"| {label} | ours, its {m['capture_s']:.1f} s of graph captures left out "
                            f"| {figures['steady_seq_s']:,.0f} | | "
                            f"{b.mfu_text(figures['steady_mfu'])} | |")
    b.rec.lines("", ("On CUDA, before each length set, one step at every batch width and size either loop can meet "
                     "(figures.json: warm_widths_s): a width's first step costs about 0.5 s once per process, and "
                     "ours, run first, used to pay it for both."), "")


def part_optimisations(b: Bench) -> None:
    b.rec.lines("## Effect of each optimisation", "",
                ("Padding waste: the share of pad tokens in training batches (batch 32, lengths drawn from each "
                 "task's GLUE histogram)."), "",
                "| task | random batches | length-grouped | grouped, widths to multiples of 8 |", "|---|---|---|---|")
    rng = np.random.default_rng(0)
    for task in GLUE:
        lengths = sample_lengths(task, 20_000, rng)
        waste = {"random": padding_waste(lengths, 32, False, 1), "grouped": padding_waste(lengths, 32, True, 1),
                 "grouped_multiple_8": padding_waste(lengths, 32, True, 8)}
        b.rec.put("optimisations", "padding_waste", task, waste)
        b.rec.lines(f"| {task} | " + " | ".join(f"{v:.1%}" for v in waste.values()) + " |")
    b.rec.lines("", "| setting (SST-2 and RTE lengths) | SST-2 seq/s | RTE seq/s |", "|---|---|---|")
    sets = {t: (b.split(t, b.n(6_400, 192)), b.split(t, b.n(500, 64), seed=1)) for t in ("sst2", "rte")}
    variants = [("eager, widths as long as the longest row (the CPU default)", {"pad_multiple": 1, "cuda_graph": False}),
                ("eager, widths to multiples of 8", {"pad_multiple": 8, "cuda_graph": False})]
    compiled = [("whole step as CUDA graphs, multiples of 32 (the CUDA default)", {}),
                ("whole step as CUDA graphs, multiples of 8", {"pad_multiple": 8}),
                ("compile: true (model-only CUDA graphs), multiples of 8", {"pad_multiple": 8, "compile": True})]
    variants += compiled if b.cuda else [(name, None) for name, _ in compiled]
    for name, hp in variants:
        if hp is None:
            b.rec.put("optimisations", "train_seq_s", name, None)
            b.rec.lines(f"| {name} | {NA} | {NA} |")
            continue
        cells = []
        for task, (train, val) in sets.items():
            rate = len(train) / b.ours(task, train, val, epochs=1, **hp)["train_s"]
            b.rec.put("optimisations", "train_seq_s", name, task, rate)
            cells.append(f"{rate:,.0f}")
        b.rec.lines(f"| {name} | {' | '.join(cells)} |")
    b.rec.lines("", "| evaluation (bf16 on CUDA, length-sorted) | SST-2 dev-like seq/s | RTE dev-like seq/s |",
                "|---|---|---|")
    for batch in (128, 512):
        rates = []
        for task in ("sst2", "rte"):
            rates.append(b.eval_rate(task, b.split(task, b.n(5_000, 256), seed=2), batch))
            b.rec.put("optimisations", "eval_seq_s", f"batch {batch}", task, rates[-1])
        b.rec.lines(f"| eval batch {batch} | {rates[0]:,.0f} | {rates[1]:,.0f} |")
    b.rec.lines("")


def part_profile(b: Bench) -> None:
    """The bare training step's host and device time (bench/gpu_profile.py): which cost bounds a step."""
    import gpu_profile

    b.rec.lines("## Where a step's time goes (bench/gpu_profile.py: the bare step, batch 32, steady state)", "",
                ("| variant | seq/s | ms/step | host CPU ms/step | device busy ms/step | busy share | kernels/step "
                 "| launches/step | widths (new) | first pass's extra s |"), "|---|" + "---|" * 9)
    for variant, (_, _, mode, *_) in gpu_profile.VARIANTS.items():
        if mode is not None and not b.cuda:  # inductor on CPU compiles C++: minutes, and says nothing of a GPU
            b.rec.put("profile", variant, None)
            b.rec.lines(f"| {variant} | {NA} |" + " |" * 8)
            continue
        try:
            f = gpu_profile.measure(variant, b.device, 40 if b.cuda else 3, not b.cuda, 128 if b.cuda else 16)
        except (RuntimeError, torch.OutOfMemoryError, ImportError) as e:  # a compile error: the rest still run
            b.rec.put("profile", variant, {"error": f"{type(e).__name__}: {e}"[:500]})
            b.rec.lines(f"| {variant} | failed: {type(e).__name__} |" + " |" * 8)
            continue
        b.rec.put("profile", variant, {k: v for k, v in f.items() if k != "top_host_ops"})
        cells = [f"{f['seq_s']:,.0f}", f"{f['ms_per_step']:.1f}", f"{f['process_cpu_ms_per_step']:.1f}"]
        cells += ([f"{f['device_busy_ms_per_step']:.1f}", f"{f['device_busy_share']:.0%}", f"{f['kernels_per_step']:,.0f}",
                   f"{f['launch_calls_per_step']:,.0f}"] if b.cuda else [NA] * 4)
        cells += [f"{f['distinct_widths']} ({f['new_widths']})", f"{f['first_pass_extra_s']:.1f}"]
        b.rec.lines(f"| {variant} | " + " | ".join(cells) + " |")
    b.rec.lines("", ("Host CPU is the process's CPU time per step (all threads); a step is bound by the host when "
                     "the device is busy for a small share of it. The first pass runs every distinct batch once before "
                     "the timed pass; its extra time is the one-time cost of widths new to the process (and of compiling). "
                     "Variants: bench/gpu_profile.py's VARIANTS."), "")


def time_phases(b: Bench, task: str, train_rows: int, dev_rows: int, epochs: int, train_rate: float) -> dict:
    """Per-run overhead by phase, timed on the calls the finetune step makes for a run whose weights are not
    kept (a study's default): they are scored and measured in memory, never saved."""
    from transformers import AutoTokenizer

    from bertology.steps.weight_distance import weight_distance
    from bertology.store import LocalStore
    from bertology.train.profile import inference_speed
    from bertology.train.state import snapshot

    phases = {}
    start = time.perf_counter()
    code = ("import torch, bertology.steps.finetune, bertology.train.loop; "
            "torch.cuda.init() if torch.cuda.is_available() else None")
    done = run_child([sys.executable, "-c", code], HERE.parent, b.rec.remaining())
    if done.returncode:
        raise RuntimeError(f"a fresh interpreter importing the finetune step failed: {done.stderr.strip()[-500:]}")
    phases["process start"] = time.perf_counter() - start
    data = b.root / f"data-{task}"
    data.mkdir(exist_ok=True)
    pq.write_table(b.split(task, train_rows), data / "train.parquet")
    pq.write_table(b.split(task, dev_rows, seed=1), data / "validation.parquet")
    head = head_for(tasks.get_task(task))
    sync(b.device)
    start = time.perf_counter()
    AutoTokenizer.from_pretrained(b.path)
    model = head.load(b.path, device=b.device)
    sync(b.device)
    phases["loading"] = time.perf_counter() - start
    start = time.perf_counter()
    Encoded.from_table(pq.read_table(data / "train.parquet"))
    val = head.read_split(data, "validation")
    phases["tokenized data"] = time.perf_counter() - start
    head.evaluate(model, val.slice(0, 8), batch_size=b.hp.eval_batch_size, device=b.device)  # warm kernels
    sync(b.device)
    start = time.perf_counter()
    _, predictions = head.evaluate(model, val, batch_size=b.hp.eval_batch_size, device=b.device)
    sync(b.device)
    phases["evaluation"] = (time.perf_counter() - start) * epochs  # each epoch's: the scoring reuses the selected one's
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)  # one step, so its state has its full size
    model(input_ids=torch.ones(2, 8, dtype=torch.long, device=b.device)).logits.sum().backward()
    optimizer.step()
    sync(b.device)
    start = time.perf_counter()
    snapshot({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    b.snapshot_s = time.perf_counter() - start
    phases["resume states"] = b.snapshot_s * ((math.ceil(train_rows / b.hp.batch_size) * epochs) // b.hp.checkpoint_every)
    sync(b.device)
    start = time.perf_counter()
    inference_speed(model, batch_size=b.hp.eval_batch_size, seq_len=128, device=b.device)
    weight_distance(b.path, model.state_dict())
    sync(b.device)
    phases["measures"] = time.perf_counter() - start
    store = LocalStore(b.root / "store")
    start = time.perf_counter()
    with store.artifact(f"bench/{task}-{time.monotonic_ns()}") as out:  # the run's outputs into an artifact
        pq.write_table(predictions, out / "predictions.parquet")
        (out / "result.json").write_text(json.dumps({"epochs": epochs, "phases_s": phases}))
    phases["publishing"] = time.perf_counter() - start
    phases["training"] = train_rows * epochs / train_rate
    return phases


def part_start(b: Bench) -> None:
    """A step's process start by part (bench/step_start.py, fresh interpreters), and `-X importtime`'s slowest
    modules."""
    import step_start

    ways = [("bytecode as cached, BERT-base", ["--runs", "2", "--bert-base"]),
            ("the same, cuda init overlapping the imports", ["--runs", "1", "--bert-base", "--overlap-cuda-init"]),
            ("no bytecode, imports only", ["--runs", "1", "--no-bytecode", "--no-model"])]
    if not b.cuda:  # the reduced run: imports only, once each
        ways = [("bytecode as cached, imports only", ["--runs", "1", "--no-model"])]
    shown = list(step_start.PARTS[1:])
    b.rec.lines("## A step's process start (seconds, median of fresh interpreters; bench/step_start.py)", "",
                "| how | interpreter | " + " | ".join(shown) + " | to the first step |",
                "|---|" + "---|" * (len(shown) + 2))
    for name, args in ways:
        with contextlib.redirect_stdout(io.StringIO()):
            result = step_start.main(args)
        median = result["median"]
        total = median.get("to first step", median.get("to cuda init"))
        b.rec.put("start", name, {"median_s": median, "to_first_step_s": total, "runs": len(result["runs"])})
        b.rec.lines(f"| {name} | {median['interpreter']:.2f} | "
                    + " | ".join(f"{median[p]:.2f}" if p in median else "" for p in shown) + f" | **{total:.2f}** |")
    imports = "import jobs.finetune, bertology.train.loop, bertology.train.side_by_side"
    path = os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", imports], check=True, cwd=HERE.parent,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": path})
    rows = []
    for line in done.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            rows.append((int(parts[0]), int(parts[1]), parts[2].strip()))
    top = sorted(rows, reverse=True)[:10]
    b.rec.put("start", "importtime_self_top", [{"module": m, "self_s": own / 1e6, "cumulative_s": cum / 1e6}
                                              for own, cum, m in top])
    b.rec.lines("", "The modules whose own import takes longest (`-X importtime`, one fresh interpreter, bytecode "
                "as cached): " + ", ".join(f"{m} {own / 1e6:.2f} s" for own, _, m in top) + ".", "")


def part_overhead(b: Bench) -> None:
    runs = {"RTE-sized": ("rte", b.n(2_490, 256), b.n(277, 64)), "SST-2-sized": ("sst2", b.n(67_349, 1_024), b.n(872, 128))}
    b.rec.lines("## Per-run overhead by phase (seconds, one run at a time, 3 epochs)", "",
                ("| run | process start | loading | tokenized data | evaluation | resume states | measures | publishing "
                 "| training | **overhead** |"),
                "|---|" + "---|" * 9)
    for name, (task, rows, dev) in runs.items():
        phases = time_phases(b, task, rows, dev, 3, b.train_rate(task))
        overhead = sum(v for k, v in phases.items() if k != "training")
        share = overhead / (overhead + phases["training"])
        b.rec.put("overhead", name, {"task": task, "train_rows": rows, "dev_rows": dev, "epochs": 3,
                                     "phases_s": phases, "overhead_s": overhead, "share": share,
                                     "snapshot_s": b.snapshot_s})
        b.rec.lines(f"| {name} ({rows:,} rows) | " + " | ".join(f"{v:.2f}" for v in phases.values())
                    + f" | {overhead:.1f} s, {share:.1%} of the run |")
    b.rec.lines("", ("Training time is the measured training throughput on the task's lengths times the run's "
                     "size; the overhead share is the GPU's idle (or not training) share of the run's GPU time."), "")


def part_sweep(b: Bench) -> None:
    measured = b.rec.figures.get("overhead", {}).get("RTE-sized")
    per_run = {"process start", "loading", "measures", "publishing"}  # the same for any run size
    fixed = {k: v for k, v in measured["phases_s"].items() if k in per_run} if measured else {}
    b.rec.lines("## A GLUE sweep: one model, one seed, nine tasks, 3 epochs (estimate from measured rates)", "",
                "| task | train size | seq/s (measured on its lengths) | training min | eval + overhead min |",
                "|---|---|---|---|---|")
    total = 0.0
    for task in GLUE:
        info = LENGTHS["tasks"][task]
        train, val = b.split(task, b.n(6_400, 128)), b.split(task, b.n(500, 64), seed=1)
        rate = len(train) / b.ours(task, train, val, epochs=1)["train_s"]
        eval_rate = b.eval_rate(task, b.split(task, b.n(2_000, 128), seed=2), b.hp.eval_batch_size)
        train_min = info["train_size"] * 3 / rate / 60
        steps = math.ceil(info["train_size"] / b.hp.batch_size) * 3
        other_min = (DEV_SIZES[task] * 3 / eval_rate + sum(fixed.values())
                     + steps // b.hp.checkpoint_every * b.snapshot_s) / 60
        total += train_min + other_min
        b.rec.put("sweep", "tasks", task, {"train_size": info["train_size"], "seq_s": rate, "eval_seq_s": eval_rate,
                                           "train_min": train_min, "other_min": other_min})
        b.rec.lines(f"| {task} | {info['train_size']:,} | {rate:,.0f} | {train_min:.1f} | {other_min:.1f} |")
    b.rec.put("sweep", "total_min", total)
    b.rec.put("sweep", "train_sequences", 3 * sum(LENGTHS["tasks"][t]["train_size"] for t in GLUE))
    b.rec.put("sweep", "with_measured_overheads", bool(fixed))
    b.rec.lines(f"| **total** | | | | **{total:.1f} min** ({total / 60:.2f} hours on this device) |", "",
                ("MNLI and QQP use QNLI's length histogram (assumed; no MNLI/QQP files here): "
                 "bench/glue_lengths.json.")
                + ("" if fixed else " The overhead part did not finish: per-run overheads are not counted."), "")


def part_bundle(b: Bench) -> None:
    """A pod's bundle of 8 RTE-sized runs through the finetune step: one by one in one process (its
    non-training share: process start, loading, evaluation, saving, publishing, against training), and 4
    at a time side by side. On CPU a reduced version: 2 runs, K = 1, 2."""
    part_concurrency(b, (1, 4) if b.cuda else (1, 2), part="bundle", runs=8 if b.cuda else 2, only="rte",
                     processes=False)


def part_concurrency(b: Bench, ks: tuple[int, ...], *, part: str = "concurrency", runs: int | None = None,
                     only: str | None = None, processes: bool = True) -> None:
    """The finetune step (`python -m jobs.finetune`, scoring and analysis included) on bundles of runs, K at
    a time: side by side in its process (the setting's meaning), and at K > 1 also each run in its own
    process (BERTOLOGY_GPU_CONCURRENCY=processes; not with `processes` false). On CPU a reduced version: the
    RTE-sized bundle only, of 2 runs. `part`, `runs`, `only` (a task): the `bundle` part's figures."""
    from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec, canonical_json
    from bertology.steps.common import checkpoint_key, dataset_key
    from bertology.store import LocalStore

    runs = runs or (4 if b.cuda else 2)
    b.rec.lines(f"## {'A pod' if part == 'bundle' else 'Runs side by side on one device'}: the finetune step on a "
                f"bundle of {runs}, `gpu_concurrency` K",
                "", ("| bundle | K | how | wall s | aggregate training seq/s | speed-up over K = 1 "
                     "| non-training share |"),
                "|---|---|---|---|---|---|---|")
    checkpoint = CheckpointSpec("tiny:bert")  # the key only: the bench's model is stored under it
    sizes = {"RTE-sized, 3 epochs": ("rte", b.n(2_490, 128), b.n(277, 32), 3),
             "SST-2 quarter, 1 epoch": ("sst2", b.n(67_349 // 4, 256), b.n(872, 64), 1)}
    for name, (task, rows, dev, epochs) in sizes.items():
        if only is not None and task != only:
            continue
        if not b.cuda and task != "rte":
            b.rec.lines(f"| {name} | | | {NA} | | | |")
            continue
        dataset = DatasetSpec(task, "synthetic", "tiny:bert", 128, count=rows)
        regime = Regime(lr=b.hp.lr, batch_size=b.hp.batch_size, epochs=epochs, warmup_ratio=b.hp.warmup_ratio,
                        weight_decay=b.hp.weight_decay)
        cells = [Cell("bench-gpu", "pre-trained", "tiny:bert", RunSpec(checkpoint, dataset, regime, seed))
                 for seed in range(1, runs + 1)]
        training_s = rows * epochs / b.train_rate(task)  # one run's training at the measured rate
        ways = [(k, how) for k in ks
                for how in ((("side by side", "processes") if processes else ("side by side",)) if k > 1
                            else ("one by one",))]
        for k, how in ways:
            store = LocalStore(b.root / f"conc-{task}-{k}")
            with store.artifact(checkpoint_key(checkpoint.id)) as out:
                shutil.copytree(b.path, out, dirs_exist_ok=True)
            with store.artifact(dataset_key(dataset.id)) as out:
                pq.write_table(b.split(task, rows), out / "train.parquet")
                pq.write_table(b.split(task, dev, seed=1), out / "validation.parquet")
            argv = [sys.executable, "-m", "jobs.finetune", "--store", str(store.root), "--spec",
                    canonical_json(cells), "--param", f"gpu_concurrency={k}"]
            start = time.perf_counter()
            if how == "processes":
                os.environ[CONCURRENCY_ENV] = "processes"  # the child's environment
            try:
                done = run_child(argv, HERE.parent, b.rec.remaining())
            finally:
                os.environ.pop(CONCURRENCY_ENV, None)
            wall = time.perf_counter() - start
            if done.returncode:
                raise RuntimeError(f"{name}, K = {k}: the finetune step exited {done.returncode}: "
                                   f"{done.stderr.strip()[-1000:]}")
            rate = len(cells) * rows * epochs / wall
            one = figure_at(b.rec.figures, part, name, "1", "seq_s")
            speedup = 1.0 if k == 1 else (rate / one if one else None)
            # At K = 1 the runs take turns: all but training is the step's per-run overhead (its process start
            # shared by the bundle; loading, evaluation, scoring and weight distances each run's own).
            share = 1 - training_s * len(cells) / wall if k == 1 else None
            where = (part, name, "processes", str(k)) if how == "processes" else (part, name, str(k))
            b.rec.put(*where, {"task": task, "runs": len(cells), "rows": rows, "epochs": epochs, "how": how,
                               "wall_s": wall, "seq_s": rate, "speedup": speedup,
                               "run_training_s": training_s, "non_training_share": share})
            b.rec.lines(f"| {name} ({rows:,} rows each) | {k} | {how} | {wall:.1f} | {rate:,.0f} | "
                        f"{'' if speedup is None else f'{speedup:.2f}x'} | {'' if share is None else f'{share:.1%}'} |")
            shutil.rmtree(store.root, ignore_errors=True)
    b.rec.lines("", ("Non-training share (K = 1): 1 - the runs' training time at the ours part's measured rate / the "
                     "bundle's wall time: the per-run overhead of the real step, scoring and weight distances "
                     "included, with one process start shared by the bundle."), "")


# -- the targets -----------------------------------------------------------------------------------------
# -- the command ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every data size (e.g. 0.25 for a quick look)")
    p.add_argument("--device", default=None, help="cpu | cuda (default: cuda when there is one)")
    p.add_argument("--concurrency", default=None, help="the K values of the side-by-side part (default: 1,2,4; "
                   "1,2 on CPU)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="seconds from this process's start until it stops measuring: the part running at the "
                   "deadline is stopped, the rest skipped (default: no limit)")
    p.add_argument("--out", type=Path, default=None, help="a folder for report.md and figures.json, rewritten "
                   "after every measurement (default: print the report only)")
    a = p.parse_args(argv)

    def bad(message: str):
        print(f"bench/gpu.py: {message}", file=sys.stderr)
        raise SystemExit(2)

    a.parts = [x for x in a.parts.split(",") if x]
    unknown = sorted(set(a.parts) - set(PARTS))
    if unknown or not a.parts:
        bad(f"--parts: unknown part {unknown[0] if unknown else ''!r} (allowed: {', '.join(PARTS)})")
    if not (math.isfinite(a.scale) and a.scale > 0):
        bad(f"--scale must be a number > 0, got {a.scale!r}")
    if a.device not in (None, "cpu", "cuda"):
        bad(f"--device must be cpu or cuda, got {a.device!r}")
    if a.device == "cuda" and not torch.cuda.is_available():
        bad("--device cuda: torch sees no CUDA device here")
    try:
        a.ks = tuple(int(k) for k in (a.concurrency or "1").split(","))
    except ValueError:
        a.ks = ()
    if not a.ks or min(a.ks) < 1:
        bad(f"--concurrency must be comma-separated integers >= 1, got {a.concurrency!r}")
    if a.budget_s is not None and not (math.isfinite(a.budget_s) and a.budget_s >= 0):
        bad(f"--budget-s must be a number of seconds >= 0, got {a.budget_s!r}")
    if a.out is not None and not a.out.is_dir():
        bad(f"--out must be an existing folder, got {str(a.out)!r}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    rec = Record(a.out, a.budget_s, render_targets, start=STARTED)
    raise_on_sigterm()
    logging.disable(logging.WARNING)
    from bertology.steps.harness import quiet_libraries

    quiet_libraries()
    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        torch.set_num_threads(1)  # a 32-wide model gains nothing from threads; steadier on a shared machine
    ks = a.ks if a.concurrency else ((1, 2, 4) if device.type == "cuda" else (1, 2))
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        root = Path(tmp)
        path = make_model(root, device.type == "cuda")
        b = Bench(device, root, path, matmul_params(path), a.scale,
                  Hyper(lr=2e-5, batch_size=32, epochs=1, warmup_ratio=0.1, weight_decay=0.01, eval_batch_size=128),
                  rec)
        name = torch.cuda.get_device_name(device) if b.cuda else f"CPU ({platform.processor() or platform.machine()})"
        what = f"{name}, bf16 autocast" if b.cuda else "CPU (1 thread), fp32, a tiny BERT: CPU figures, not GPU figures"
        peak = peak_flops(device)
        model = "BERT-base (BertConfig(), random weights)" if b.cuda else "models.tiny_bert"
        rec.figures["meta"] = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": name, "cuda": b.cuda,
            "cuda_version": torch.version.cuda, "python": platform.python_version(),
            "versions": {d: version(d) for d in VERSIONS}, "model": model, "non_embedding_params": b.params,
            "peak_bf16_flops": peak, "hyper": {"batch_size": 32, "max_length": 128, "lr": 2e-5, "eval_batch_size": 128},
            "args": {"parts": a.parts, "scale": a.scale, "concurrency": list(ks), "budget_s": a.budget_s}}
        if b.cuda:
            rec.figures["meta"]["gpu_memory_gib"] = torch.cuda.get_device_properties(device).total_memory / 2**30
        rec.lines(f"# bench/gpu.py, {rec.figures['meta']['date']}", "",
                  (f"Device: {what}. Model: {model}, {b.params:,} non-embedding parameters; batch 32, max length "
                   f"128, SDPA; torch {torch.__version__}, transformers {version('transformers')}. "
                   f"Peak for MFU: {f'{peak / 1e12:.0f} TFLOP/s bf16 dense' if peak else 'n/a'}."
                   + (f" Time budget: {a.budget_s:g} s." if a.budget_s is not None else "")), "")
        fuse = (1, 2, 4, 8) if b.cuda else (1, 2)
        run = {"streams": lambda: part_streams(b, fuse), "compiled": lambda: part_streams(b, fuse, compiled=True),
               "streams-check": lambda: part_streams_check(b), "compiled-check": lambda: part_compiled_check(b),
               "start": lambda: part_start(b), "bundle": lambda: part_bundle(b),
               "ours": lambda: part_ours(b), "fused": lambda: part_fused(b, fuse), "overhead": lambda: part_overhead(b), "sweep": lambda: part_sweep(b),
               "concurrency": lambda: part_concurrency(b, ks), "optimisations": lambda: part_optimisations(b),
               "profile": lambda: part_profile(b)}
        for part in PARTS:
            if part in a.parts:
                with rec.part(part) as go:
                    if go:
                        run[part]()
        rec.save()
    failed = [name for name, p in rec.figures["parts"].items() if p["status"].startswith("failed")]
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Terminated:
        sys.exit(143)
