"""bench/gpu.py's `fused` part: K runs trained as one model (bertology.train.fused) against one run's step,
eager and as CUDA graphs (on CUDA also the largest K compiled), after a check of what a fused run's
difference from one run is made of, and on CUDA a check that the graphed steps train as the eager ones. Apart
from gpu.py to keep each file one subject; `b` is gpu.py's Bench."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

import numpy as np
import torch
from gpu_streams import compare, exact_fp32
from gpu_workload import random_batch

from bertology import tasks
from bertology.train.device import sync
from bertology.train.heads import head_for

if TYPE_CHECKING:  # gpu.py imports this module: its Bench only names the type here
    from gpu import Bench


class Fp32:
    """A step's loss without autocast (in fp32 on CUDA too): mixed into one run's or fused runs' step class."""

    def loss(self, inputs):
        with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
            return super().loss(inputs)


def training_step(b: Bench, head, k: int, *, fused: bool, graphed: bool, lr: float, weight_decay: float,
                  warmup: int, total: int, dropout: bool = True, fp32: bool = False, compiled: bool = False):
    """K fresh models (seeds 0..K-1) of the bench's checkpoint as one run's step (K = 1) or K fused runs',
    eager or graphed, with a linear schedule; without `dropout`, in eval mode; with `fp32`, without
    autocast; `compiled`: the fused runs' vmapped loss torch.compiled (inductor's default mode, inside the
    step's graphs): whether compiling makes fusing pay, which decides whether the fused path stays."""
    from transformers import get_linear_schedule_with_warmup

    from bertology.train.fused import FusedStep
    from bertology.train.graphs import GraphedStep
    from bertology.train.step import TrainStep, param_groups

    models = []
    for seed in range(k):
        torch.manual_seed(seed)
        models.append(head.load(b.path, device=b.device))
    if fused:
        kind = type("Fp32FusedStep", (Fp32, FusedStep), {}) if fp32 else FusedStep
        step = kind(models, lr=lr, weight_decay=weight_decay, max_grad_norm=1.0)
        if compiled:
            step._losses = torch.compile(step._losses)
    else:
        (model,) = models
        kind = type("Fp32TrainStep", (Fp32, TrainStep), {}) if fp32 else TrainStep
        step = kind(model, torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, fused=True),
                    max_grad_norm=1.0, device=b.device)
    step.model.train(dropout)  # without dropout eager and graphed steps compute the same thing
    scheduler = get_linear_schedule_with_warmup(step.optimizer, warmup, total)
    return (GraphedStep(step, log=lambda _: None) if graphed else step), scheduler


def graphs_agree(b: Bench, head, vocab: int) -> None:
    """On CUDA, before the timings: whether the graphed steps train as the eager ones. One run and K = 2 fused
    runs, eager and as CUDA graphs, 8 steps from the same weights on the same 8 batches (each its own tokens
    and labels), dropout off (eval mode, so no RNG stream differs): the largest difference of a step's loss.
    bf16 noise is about 1e-2; a wrong capture (stale inputs, state re-created on replay) is far larger."""
    from bertology.train.step import SINCE_CONSOLE_LINE

    rng = np.random.default_rng(1)
    batches = [random_batch(rng, vocab, 32, 128) for _ in range(8)]
    losses = {}
    for kind, k in (("one run", 1), ("fused", 2)):
        for graphed in (False, True):
            step, scheduler = training_step(b, head, k, fused=kind == "fused", graphed=graphed, lr=1e-4,
                                            weight_decay=0.01, warmup=2, total=100, dropout=False)
            per_step = []
            for batch in batches:
                step(batch)
                scheduler.step()
                per_step.append(np.atleast_1d(step.total(SINCE_CONSOLE_LINE)))
                step.reset(SINCE_CONSOLE_LINE)
            losses[kind, graphed] = np.stack(per_step)  # [steps, runs]
            del step, scheduler
            torch.cuda.empty_cache()
    agreement = {"one run: graphed vs eager": float(np.abs(losses["one run", True] - losses["one run", False]).max()),
                 "fused: graphed vs eager": float(np.abs(losses["fused", True] - losses["fused", False]).max()),
                 "fused run 0 vs one run (eager)": float(np.abs(losses["fused", False][:, 0]
                                                                - losses["one run", False][:, 0]).max()),
                 "first loss": float(losses["one run", False][0, 0])}
    b.rec.put("fused", "agreement", agreement)
    b.rec.lines("| check (8 steps, dropout off, bf16) | largest difference of a step's loss |", "|---|---|",
                *(f"| {name} | {value:.2e} |" for name, value in agreement.items() if name != "first loss"), "")


def fused_precision(b: Bench, head, vocab: int) -> None:
    """What a fused run's difference from one run is made of. Eager, dropout off, 8 steps on 8 batches from
    the same weights: fused run 0 (K = 2) against one run in fp32 with TF32 and bf16 reduced-precision
    reductions off (the fused arithmetic itself: float noise, if vmap changes only the order of sums),
    the same in bf16 (the 6.1e-2 of 2026-11-28), and each bf16 trajectory against its own fp32 one (bf16's
    noise, against which a fused run's bf16 difference is read). Step-0 loss, 8 steps' losses, and the
    weights after them."""
    from bertology.train.step import SINCE_CONSOLE_LINE

    rng = np.random.default_rng(3)
    width = 128 if b.cuda else 32
    batches = [random_batch(rng, vocab, b.hp.batch_size, width) for _ in range(8)]
    runs = {}
    for fp32 in (True, False):
        with exact_fp32() if fp32 else contextlib.nullcontext():
            for kind, k in (("one run", 1), ("fused", 2)):
                step, scheduler = training_step(b, head, k, fused=kind == "fused", graphed=False, lr=1e-4,
                                                weight_decay=0.01, warmup=2, total=100, dropout=False, fp32=fp32)
                losses = []
                for batch in batches:
                    step(batch)
                    scheduler.step()
                    losses.append(float(np.atleast_1d(step.total(SINCE_CONSOLE_LINE))[0]))  # run 0's
                    step.reset(SINCE_CONSOLE_LINE)
                weights = step.unstacked(0) if kind == "fused" else step.model.state_dict()  # in one key order
                runs[fp32, kind] = {"losses": losses, "weights": [v.detach().cpu() for v in weights.values()]}
                del step, scheduler
                if b.cuda:
                    torch.cuda.empty_cache()

    bf16 = "bf16" if b.cuda else "autocast (fp32 on CPU)"
    rows = {"fp32, TF32 off: fused run 0 vs one run": compare(runs[True, "fused"], runs[True, "one run"]),
            f"{bf16}: fused run 0 vs one run": compare(runs[False, "fused"], runs[False, "one run"]),
            f"one run: {bf16} vs fp32": compare(runs[False, "one run"], runs[True, "one run"]),
            f"fused run 0: {bf16} vs fp32": compare(runs[False, "fused"], runs[True, "fused"])}
    b.rec.put("fused", "precision", rows)
    b.rec.lines("| what a fused run's difference is made of (eager, 8 steps, dropout off) | step-0 loss | "
                "8 steps' losses | weights after 8 steps |", "|---|---|---|---|",
                *(f"| {name} | {d['step0_loss']:.2e} | {d['losses']:.2e} | {d['weights']:.2e} |"
                  for name, d in rows.items()), "")


def dtypes_agree(b: Bench, head, vocab: int) -> None:
    """On CUDA: the dtypes of one eager step of one run and of K = 2 fused runs under bf16 autocast
    (bench/dispatch_count.py's Dtypes): how many linear outputs, matrix products and operators inside
    linear layers came out fp32, and how many of what autocast runs in fp32 (LayerNorm, softmax, the loss)
    did not. Under vmap autocast sees neither `F.linear` nor the loss; bertology.train.fused makes its
    casts, so every count is 0, as for one run (tested on CPU, whose autocast sits where CUDA's does)."""
    from dispatch_count import Dtypes, counted

    from bertology.train.device import to_device

    batch = to_device(random_batch(np.random.default_rng(2), vocab, 32, 128), b.device)
    found = {}
    for kind, k in (("one run", 1), ("fused", 2)):
        step, _ = training_step(b, head, k, fused=kind == "fused", graphed=False, lr=1e-4, weight_decay=0.01,
                                warmup=2, total=100)
        count = counted(step, Dtypes(step.model), batch, b.hp)
        found[kind] = {**count.fp32(), "not fp32 where autocast runs fp32": count.not_fp32(),
                       "linear outputs by dtype": dict(count.linear_outputs)}
        del step, count
        torch.cuda.empty_cache()
    b.rec.put("fused", "dtypes", found)
    b.rec.lines("| dtypes of one step (bf16 autocast) | fp32 linear outputs | fp32 matrix products | fp32 operators "
                "in linear layers | not fp32 where autocast runs fp32 |", "|---|---|---|---|---|",
                *(f"| {kind} | {f['linear outputs']} | {f['matrix products']} | {f['operators in linear layers']} | "
                  f"{f['not fp32 where autocast runs fp32']} |" for kind, f in found.items()), "")


def part_fused(b: Bench, ks: tuple[int, ...]) -> None:
    """Steady-state training seq/s of one step over K stacked runs (bertology.train.fused), eager and as CUDA
    graphs, against one run's step, all on the same fixed 32 x 128 batches: the whole step with its
    schedule, after the graphs are captured (their capture seconds are reported apart). vmap's fallback
    to a per-run loop (a missing batching rule) fails the row: on CUDA every kernel of the step has one."""
    import warnings

    from transformers import AutoConfig

    task = tasks.get_task("sst2")
    head = head_for(task)
    steps, warm = (40, 3) if b.cuda else (3, 1)
    rng = np.random.default_rng(0)
    width, rows = 128 if b.cuda else 32, b.hp.batch_size
    vocab = AutoConfig.from_pretrained(b.path).vocab_size
    batch = random_batch(rng, vocab, rows, width)
    b.rec.lines("## K runs fused into one model (steady state, fixed 32 x 128 batches)", "")
    fused_precision(b, head, vocab)
    if b.cuda:
        graphs_agree(b, head, vocab)
        dtypes_agree(b, head, vocab)
    b.rec.lines("| step | runs K | seq/s in all | seq/s per run | ms per step | MFU | capture s |", "|---|---|---|---|---|---|---|")
    configs = [("one run", 1, False)] + [("fused", k, False) for k in ks] + ([("fused", max(ks), True)] if b.cuda else [])
    for kind, k, compiled in configs:
        for graphed in ((True,) if compiled else (False, True) if b.cuda else (False,)):
            name = f"{kind}, {'compiled, ' if compiled else ''}{'CUDA graphs' if graphed else 'eager'}"
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("error", message="There is a performance drop")
                    step, scheduler = training_step(b, head, k, fused=kind == "fused", graphed=graphed, lr=b.hp.lr,
                                                    weight_decay=b.hp.weight_decay, warmup=10, total=10_000,
                                                    compiled=compiled)
                    for _ in range(warm):
                        step(batch)
                        scheduler.step()
                    sync(b.device)
                    start = time.perf_counter()
                    for _ in range(steps):
                        step(batch)
                        scheduler.step()
                    step.total(0)  # the host sync that ends the timed steps, as a logging point would
                    seconds = time.perf_counter() - start
                    capture = step.capture_seconds
            except (RuntimeError, torch.OutOfMemoryError, UserWarning) as e:
                b.rec.put("fused", name, str(k), {"error": f"{type(e).__name__}: {e}"[:500]})
                b.rec.lines(f"| {name} | {k} | failed: {type(e).__name__}: {str(e)[:80]} | | | | |")
                continue
            finally:
                step = scheduler = None
                if b.cuda:
                    torch.cuda.empty_cache()
            seq_s = k * rows * steps / seconds
            mfu = b.mfu(k * rows * width * steps, seconds)
            figures = {"seq_s": seq_s, "seq_s_per_run": seq_s / k, "ms_per_step": 1000 * seconds / steps,
                       "mfu": mfu, "capture_s": capture}
            b.rec.put("fused", name, str(k), figures)
            b.rec.lines(f"| {name} | {k} | {seq_s:,.0f} | {seq_s / k:,.0f} | {1000 * seconds / steps:.1f} | "
                        f"{b.mfu_text(mfu)} | {capture:.1f} |")
            if kind == "fused":
                best = b.rec.figures["fused"].get("best_seq_s") or 0.0
                b.rec.put("fused", "best_seq_s", max(best, seq_s))
    b.rec.lines("", ("Every row trains the whole step (forward, backward, clipping, AdamW, the schedule) on one batch "
                     "shape; 'seq/s in all' counts every run's sequences. K = 1 fused goes through the fused code "
                     "(vmap), which splits some fused kernels, so it is slower than one run's step."), "")
