"""GPU speed of fine-tuning, in one command: ours against the HF Trainer, per-run overhead, the effect of
each optimisation, a GLUE sweep estimate and several runs sharing one GPU. Prints one Markdown report.

    python bench/gpu.py                  # on a CUDA machine: BERT-base (BertConfig(), random weights)
    python bench/gpu.py --parts ours,overhead --scale 0.5

What is measured (on CUDA: BERT-base from `BertConfig()` with random weights, so no hub is needed; bf16
autocast, SDPA, batch 32, max length 128, lr 2e-5, AdamW):

- ours vs the Trainer: training sequences/s of `bertology.train.finetune` and of the HF Trainer on the same
  batches (`bench/finetune_throughput.run_trainer`: group_by_length, bf16, SDPA, the same batch size,
  eval batch, lr, warmup, weight decay and seed), one after the other in this process, on token lengths
  drawn from the GLUE length histograms in bench/glue_lengths.json (see bench/glue_lengths.py; MNLI and QQP
  are assumed to look like QNLI). MFU = 6 x non-embedding parameters x real (unpadded) tokens / time /
  peak bf16 dense FLOP/s of the device (a table by device name: H100 SXM 989 TFLOP/s, H100 PCIe 756, H200
  989, A100 312); attention's own FLOPs (small at length <= 128) and pad tokens are not counted.
- optimisations: compile on and off, the padding waste (share of pad tokens) with and without length
  grouping and with widths bucketed to multiples of 8, training seq/s with and without the buckets, and
  evaluation seq/s at eval batch 128 and 512.
- per-run overhead, by phase, timed by running the finetune step's own calls: process start (a fresh
  interpreter importing the step), loading (tokenizer and model onto the device), tokenized data (the
  prepared Parquet into batches), evaluation (3 epochs' dev evaluations), resume states (a snapshot per
  1,000 steps), saving and publishing (the model into a store artifact), and its share of a run's GPU time
  for an RTE-sized and an SST-2-sized run (3 epochs, K = 1).
- the GLUE sweep: nine tasks, 3 epochs, one model and seed: per-task training throughput measured on each
  task's lengths, plus the measured overheads, at the public training and dev sizes.
- runs side by side: the finetune step on a bundle of 4 RTE-sized and of 4 SST-2-sized runs (one epoch for
  SST-2 unless --scale says otherwise) with `gpu_concurrency` K = 1, 2, 4: aggregate training seq/s
  (all sequences / wall time of the whole bundle, overheads included).

On CPU it runs a reduced version (a tiny BertConfig, a few steps, fp32) and marks what needs CUDA
"n/a (no CUDA)"; those figures are CPU figures and say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from bertology import models, tasks
from bertology.data import Encoded, length_grouped_batches, padded_width
from bertology.train import Hyper, finetune
from bertology.train.heads import head_for

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
LENGTHS = json.loads((HERE / "glue_lengths.json").read_text())
GLUE = tuple(LENGTHS["tasks"])
# Public GLUE dev sizes (MNLI: matched + mismatched), for the evaluation part of the sweep estimate.
DEV_SIZES = {"cola": 1043, "sst2": 872, "mrpc": 408, "stsb": 1500, "qqp": 40430, "mnli": 19647, "qnli": 5463,
             "rte": 277, "wnli": 71}
# Peak dense bf16 tensor FLOP/s by device name (vendor datasheets, no sparsity), most specific first.
PEAK_BF16 = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("GH200", 989e12), ("A100", 312e12))
NA = "n/a (no CUDA)"
PARTS = ("ours", "optimisations", "overhead", "sweep", "concurrency")


# -- data and model -------------------------------------------------------------------------------------
def sample_lengths(task: str, n: int, rng: np.random.Generator) -> np.ndarray:
    hist = LENGTHS["tasks"][task]["histogram"]
    values = np.array([int(k) for k in hist])
    counts = np.array(list(hist.values()), dtype=float)
    return rng.choice(values, size=n, p=counts / counts.sum())


def synthetic_split(task: str, n: int, seed: int, vocab_size: int) -> pa.Table:
    """`n` rows in the prepared-data format whose lengths follow `task`'s GLUE histogram: [CLS] random
    word pieces [SEP] (a pair: two segments), random binary labels."""
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(task, n, rng)
    pair = len(tasks.get_task(task).text_fields) == 2
    ids, types = [], []
    for length in lengths:
        row = rng.integers(1000, vocab_size, size=length, dtype=np.int32)
        row[0], row[-1] = 101, 102
        seg = np.zeros(length, dtype=np.int8)
        if pair and length > 3:
            seg[length // 2:] = 1
            row[length // 2 - 1] = 102
        ids.append(row)
        types.append(seg)
    return pa.table({"idx": np.arange(n, dtype=np.int64), "input_ids": pa.array(ids, pa.list_(pa.int32())),
                     "token_type_ids": pa.array(types, pa.list_(pa.int8())),
                     "label": rng.integers(0, 2, size=n, dtype=np.int64), "length": lengths.astype(np.int32)})


def make_model(root: Path, cuda: bool) -> Path:
    """BERT-base with random weights on CUDA; a tiny BERT on CPU. The bert-base-uncased tokenizer."""
    if cuda:
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        model, tokenizer = BertModel(BertConfig()), models.load_tokenizer(models.parse_model_ref("tiny:bert"))
    else:
        model, tokenizer = models.tiny_bert(0)
    return models.save_checkpoint(model, tokenizer, root / "model")


def matmul_params(path: Path) -> int:
    """Parameters that take part in matmuls: everything but the embedding tables."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(path)
    return sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16 if key in name), None)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- measurements ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Bench:
    device: torch.device
    root: Path
    path: Path
    params: int
    scale: float
    hp: Hyper
    snapshot_s: float = 0.0  # one resume-state snapshot (weights and optimizer to the CPU), measured

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def n(self, cuda_rows: int, cpu_rows: int) -> int:
        return max(self.hp.batch_size, int((cuda_rows if self.cuda else cpu_rows) * self.scale))

    def split(self, task: str, n: int, seed: int = 0) -> pa.Table:
        return synthetic_split(task, n, seed, 30522)

    def mfu(self, tokens: float, seconds: float) -> str:
        peak = peak_flops(self.device)
        if peak is None:
            return NA if not self.cuda else "n/a (unknown device)"
        return f"{100 * 6 * self.params * tokens / seconds / peak:.1f}%"

    def ours(self, task: str, train: pa.Table, val: pa.Table, **hp) -> dict:
        out = self.root / f"ours-{time.monotonic_ns()}"
        result = finetune(self.path, tasks.get_task(task), train, {"validation": val},
                          dataclasses.replace(self.hp, **hp), 1, out, device=self.device, log=lambda _: None)
        shutil.rmtree(out, ignore_errors=True)
        return {"train_s": result.train_seconds, "eval_s": result.eval_seconds}

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


def part_ours(b: Bench, report: list[str]) -> dict[str, float]:
    report += ["## Ours vs the HF Trainer (training seq/s, same batches)", "",
               "| lengths like | loop | seq/s | tokens/s | MFU | ours / Trainer |", "|---|---|---|---|---|---|"]
    rates = {}
    for task in ("sst2", "qnli", "rte"):
        train, val = b.split(task, b.n(12_800, 256)), b.split(task, b.n(1_000, 64), seed=1)
        tokens = int(np.sum(train.column("length").to_numpy()))
        ours = b.ours(task, train, val)
        try:
            trainer = b.trainer(task, train, val)
        except ImportError as e:  # TrainingArguments needs accelerate (pip install -e '.[bench]')
            trainer = None
            missing = f"n/a ({str(e).split(':')[0]})"
        rates[task] = len(train) / ours["train_s"]
        for name, m in (("ours", ours), ("Trainer", trainer)):
            if m is None:
                report.append(f"| {task} | {name} | {missing} | | | |")
                continue
            ratio = f"{trainer['train_s'] / ours['train_s']:.2f}x" if name == "ours" and trainer else ""
            report.append(f"| {task} | {name} | {len(train) / m['train_s']:,.0f} | {tokens / m['train_s']:,.0f} | "
                          f"{b.mfu(tokens, m['train_s'])} | {ratio} |")
    report.append("")
    return rates


def padding_waste(lengths: np.ndarray, batch: int, grouped: bool, multiple: int, limit: int = 128) -> float:
    if grouped:
        batches = length_grouped_batches(lengths, batch, seed=0)
    else:
        order = np.random.default_rng(0).permutation(len(lengths))
        batches = [order[i:i + batch] for i in range(0, len(order), batch)]
    padded = sum(len(rows) * padded_width(int(lengths[rows].max()), multiple, limit) for rows in batches)
    return 1 - lengths.sum() / padded


def part_optimisations(b: Bench, report: list[str]) -> None:
    report += ["## Effect of each optimisation", "",
               ("Padding waste: the share of pad tokens in training batches (batch 32, lengths drawn from each "
               "task's GLUE histogram)."), "",
               "| task | random batches | length-grouped | grouped, widths to multiples of 8 |", "|---|---|---|---|"]
    rng = np.random.default_rng(0)
    for task in GLUE:
        lengths = sample_lengths(task, 20_000, rng)
        report.append(f"| {task} | {padding_waste(lengths, 32, False, 1):.1%} | {padding_waste(lengths, 32, True, 1):.1%} "
                      f"| {padding_waste(lengths, 32, True, 8):.1%} |")
    report += ["", "| setting (SST-2 and RTE lengths) | SST-2 seq/s | RTE seq/s |", "|---|---|---|"]
    sets = {t: (b.split(t, b.n(6_400, 192)), b.split(t, b.n(500, 64), seed=1)) for t in ("sst2", "rte")}
    variants = [("eager, widths as long as the longest row (the eager default)", {"pad_multiple": 1}),
                ("eager, widths to multiples of 8", {"pad_multiple": 8})]
    compiled = [("torch.compile (dynamic=True), widths as long as the longest row", {"pad_multiple": 1, "compile": True}),
                ("torch.compile (dynamic=True), multiples of 8 (the compiled default)", {"pad_multiple": 8, "compile": True})]
    variants += compiled if b.cuda else [(name, None) for name, _ in compiled]
    for name, hp in variants:
        if hp is None:
            report.append(f"| {name} | {NA} | {NA} |")
            continue
        cells = []
        for task, (train, val) in sets.items():
            m = b.ours(task, train, val, epochs=1, **hp)
            cells.append(f"{len(train) / m['train_s']:,.0f}")
        report.append(f"| {name} | {' | '.join(cells)} |")
    report += ["", "| evaluation (bf16 on CUDA, length-sorted) | SST-2 dev-like seq/s | RTE dev-like seq/s |",
               "|---|---|---|"]
    for batch in (128, 512):
        rates = [b.eval_rate(t, b.split(t, b.n(5_000, 256), seed=2), batch) for t in ("sst2", "rte")]
        report.append(f"| eval batch {batch} | {rates[0]:,.0f} | {rates[1]:,.0f} |")
    report.append("")


def time_phases(b: Bench, task: str, train_rows: int, dev_rows: int, epochs: int, train_rate: float) -> dict:
    """Per-run overhead by phase, timed on the calls the finetune step makes."""
    from transformers import AutoTokenizer

    from bertology.store import LocalStore
    from bertology.train.state import snapshot

    phases = {}
    start = time.perf_counter()
    code = ("import torch, bertology.steps.finetune, bertology.train.loop; "
            "torch.cuda.init() if torch.cuda.is_available() else None")
    subprocess.run([sys.executable, "-c", code], check=True)
    phases["process start"] = time.perf_counter() - start
    data = b.root / f"data-{task}"
    data.mkdir(exist_ok=True)
    pq.write_table(b.split(task, train_rows), data / "train.parquet")
    pq.write_table(b.split(task, dev_rows, seed=1), data / "validation.parquet")
    head = head_for(tasks.get_task(task))
    sync(b.device)
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(b.path)
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
    head.evaluate(model, val, batch_size=b.hp.eval_batch_size, device=b.device)
    sync(b.device)
    phases["evaluation"] = (time.perf_counter() - start) * epochs
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)  # one step, so its state has its full size
    model(input_ids=torch.ones(2, 8, dtype=torch.long, device=b.device)).logits.sum().backward()
    optimizer.step()
    sync(b.device)
    start = time.perf_counter()
    snapshot({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    b.snapshot_s = time.perf_counter() - start
    phases["resume states"] = b.snapshot_s * ((math.ceil(train_rows / b.hp.batch_size) * epochs) // b.hp.checkpoint_every)
    store = LocalStore(b.root / "store")
    start = time.perf_counter()
    with store.artifact(f"bench/{task}-{time.monotonic_ns()}") as out:
        model.save_pretrained(out / "model")
        tokenizer.save_pretrained(out / "model")
        phases["saving"] = time.perf_counter() - start
        start = time.perf_counter()
    phases["publishing"] = time.perf_counter() - start
    phases["training"] = train_rows * epochs / train_rate
    return phases


def part_overhead(b: Bench, report: list[str], rates: dict[str, float]) -> dict[str, float]:
    runs = {"RTE-sized": ("rte", b.n(2_490, 256), b.n(277, 64)), "SST-2-sized": ("sst2", b.n(67_349, 1_024), b.n(872, 128))}
    measured = {name: time_phases(b, task, rows, dev, 3, rates[task]) for name, (task, rows, dev) in runs.items()}
    names = list(next(iter(measured.values())))
    report += ["## Per-run overhead by phase (seconds, one run at a time, 3 epochs)", "",
               f"| phase | {' | '.join(measured)} |", "|---|" + "---|" * len(measured)]
    for phase in names:
        report.append(f"| {phase} | " + " | ".join(f"{m[phase]:.2f}" for m in measured.values()) + " |")
    shares = []
    for m in measured.values():
        overhead = sum(v for k, v in m.items() if k != "training")
        shares.append(f"{overhead:.1f} s, {overhead / (overhead + m['training']):.1%} of the run")
    report += [f"| **overhead** | {' | '.join(shares)} |", "",
               ("Training time is the measured training throughput on the task's lengths times the run's size; "
               "the overhead share is the GPU's idle (or not training) share of the run's GPU time."), ""]
    fixed = next(iter(measured.values()))
    return {k: v for k, v in fixed.items() if k not in ("training", "evaluation", "tokenized data", "resume states")}


def part_sweep(b: Bench, report: list[str], fixed: dict[str, float]) -> None:
    report += ["## A GLUE sweep: one model, one seed, nine tasks, 3 epochs (estimate from measured rates)", "",
               "| task | train size | seq/s (measured on its lengths) | training min | eval + overhead min |",
               "|---|---|---|---|---|"]
    total = 0.0
    for task in GLUE:
        info = LENGTHS["tasks"][task]
        train, val = b.split(task, b.n(6_400, 128)), b.split(task, b.n(500, 64), seed=1)
        m = b.ours(task, train, val, epochs=1)
        rate = len(train) / m["train_s"]
        eval_rate = b.eval_rate(task, b.split(task, b.n(2_000, 128), seed=2), b.hp.eval_batch_size)
        train_min = info["train_size"] * 3 / rate / 60
        steps = math.ceil(info["train_size"] / b.hp.batch_size) * 3
        other_min = (DEV_SIZES[task] * 3 / eval_rate + sum(fixed.values())
                     + steps // b.hp.checkpoint_every * b.snapshot_s) / 60
        total += train_min + other_min
        report.append(f"| {task} | {info['train_size']:,} | {rate:,.0f} | {train_min:.1f} | {other_min:.1f} |")
    report += [f"| **total** | | | | **{total:.1f} min** ({total / 60:.2f} hours on this device) |", "",
               ("MNLI and QQP use QNLI's length histogram (assumed; no MNLI/QQP files here): "
               "bench/glue_lengths.json."), ""]


def part_concurrency(b: Bench, report: list[str], ks: tuple[int, ...]) -> None:
    from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec, canonical_json
    from bertology.steps.common import checkpoint_key, dataset_key
    from bertology.store import LocalStore

    report += ["## Runs side by side on one device (the finetune step on a bundle of 4, `gpu_concurrency` K)", "",
               "| bundle | K | wall s | aggregate training seq/s |", "|---|---|---|---|"]
    checkpoint = CheckpointSpec("tiny:bert")  # the key only: the bench's model is stored under it
    sizes = {"RTE-sized, 3 epochs": ("rte", b.n(2_490, 128), b.n(277, 32), 3),
             "SST-2-sized, 1 epoch": ("sst2", b.n(67_349, 256), b.n(872, 64), 1)}
    for name, (task, rows, dev, epochs) in sizes.items():
        dataset = DatasetSpec(task, "synthetic", "tiny:bert", 128, count=rows)
        regime = Regime(lr=b.hp.lr, batch_size=b.hp.batch_size, epochs=epochs, warmup_ratio=b.hp.warmup_ratio,
                        weight_decay=b.hp.weight_decay)
        cells = [Cell("bench-gpu", "pre-trained", "tiny:bert", RunSpec(checkpoint, dataset, regime, seed))
                 for seed in (1, 2, 3, 4)]
        for k in ks:
            store = LocalStore(b.root / f"conc-{task}-{k}")
            with store.artifact(checkpoint_key(checkpoint.id)) as out:
                shutil.copytree(b.path, out, dirs_exist_ok=True)
            with store.artifact(dataset_key(dataset.id)) as out:
                pq.write_table(b.split(task, rows), out / "train.parquet")
                pq.write_table(b.split(task, dev, seed=1), out / "validation.parquet")
            argv = [sys.executable, "-m", "jobs.finetune", "--store", str(store.root), "--spec",
                    canonical_json(cells), "--param", f"gpu_concurrency={k}"]
            start = time.perf_counter()
            done = subprocess.run(argv, cwd=HERE.parent, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - start
            if done.returncode:
                report.append(f"| {name} | {k} | failed (exit {done.returncode}): "
                              f"{done.stderr.strip().splitlines()[-1:]} | |")
                continue
            report.append(f"| {name} | {k} | {wall:.1f} | {len(cells) * rows * epochs / wall:,.0f} |")
            shutil.rmtree(store.root, ignore_errors=True)
    report.append("")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every data size (e.g. 0.25 for a quick look)")
    p.add_argument("--device", default=None, help="cpu | cuda (default: cuda when there is one)")
    p.add_argument("--concurrency", default=None, help="the K values of the side-by-side part (default: 1,2,4; "
                   "1,2 on CPU)")
    a = p.parse_args()
    parts = [x for x in a.parts.split(",") if x]
    bad = sorted(set(parts) - set(PARTS))
    if bad:
        raise SystemExit(f"--parts: unknown part {bad[0]!r} (allowed: {', '.join(PARTS)})")
    logging.disable(logging.WARNING)
    from bertology.steps.harness import quiet_libraries

    quiet_libraries()
    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        torch.set_num_threads(1)  # a 32-wide model gains nothing from threads; steadier on a shared machine
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        root = Path(tmp)
        path = make_model(root, device.type == "cuda")
        b = Bench(device, root, path, matmul_params(path), a.scale,
                  Hyper(lr=2e-5, batch_size=32, epochs=1, warmup_ratio=0.1, weight_decay=0.01, eval_batch_size=128))
        what = (f"{torch.cuda.get_device_name(device)}, bf16 autocast" if b.cuda
                else "CPU (1 thread), fp32, a tiny BERT: CPU figures, not GPU figures")
        peak = peak_flops(device)
        report = [f"# bench/gpu.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
                  (f"Device: {what}. Model: {'BERT-base (BertConfig(), random weights)' if b.cuda else 'models.tiny_bert'}, "
                  f"{b.params:,} non-embedding parameters; batch 32, max length 128, SDPA; torch {torch.__version__}. "
                  f"Peak for MFU: {f'{peak / 1e12:.0f} TFLOP/s bf16 dense' if peak else 'n/a'}."), ""]
        rates: dict[str, float] = {}
        fixed: dict[str, float] = {}
        printed = 0

        def emit() -> None:  # each part as soon as it is measured: a long GPU run shows progress
            nonlocal printed
            print("\n".join(report[printed:]), flush=True)
            printed = len(report)

        emit()
        if "ours" in parts:
            rates = part_ours(b, report)
            emit()
        if "optimisations" in parts:
            part_optimisations(b, report)
            emit()
        if "overhead" in parts or "sweep" in parts:
            for task in ("sst2", "rte"):
                if task not in rates:
                    train = b.split(task, b.n(6_400, 192))
                    rates[task] = len(train) / b.ours(task, train, b.split(task, 64, seed=1))["train_s"]
            fixed = part_overhead(b, report, rates)
            emit()
        if "sweep" in parts:
            part_sweep(b, report, fixed)
            emit()
        if "concurrency" in parts:
            ks = a.concurrency or ("1,2,4" if b.cuda else "1,2")
            part_concurrency(b, report, tuple(int(k) for k in ks.split(",")))
            emit()


if __name__ == "__main__":
    main()
