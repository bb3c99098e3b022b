"""How many aten operators one training step dispatches: solo (the loop's step) against K runs fused.

On a GPU the eager step is bound by the host's kernel launches (docs/measurements.md), and each dispatched
aten operator is about one launch, so the operators a step dispatches per run are a CPU proxy for what
fusing K runs (bertology.train.fused) saves there. Counted with a TorchDispatchMode around one whole step
(forward, backward, clipping, AdamW, the schedule), by phase; host time is the median wall clock of a few
steps, which on a CPU also holds the arithmetic (it grows with K; on a GPU the host's share would not).

The model is BERT-base-shaped (12 layers, 12 heads) but narrow (hidden 96, intermediate 384, vocabulary
1,000), so K = 8 fits a 24 GB 2-core machine; synthetic batches of 32 x 128 tokens, no padding.

On CPU, SDPA without dropout runs `_scaled_dot_product_flash_attention_for_cpu`, which has no vmap batching
rule: vmap warns and loops over the K runs (the `sdpa` column counts its calls). CUDA's flash, efficient and
cuDNN kernels have batching rules. With dropout (the default 0.1) CPU SDPA takes the math path, which vmap
batches.

    .venv/bin/python bench/dispatch_count.py [--ks 1 2 4 8] [--dropout 0.1] [--steps 3] [--threads 1] [--json PATH]

Measured (2-core box, torch 2.13 CPU, 1 thread, dropout 0.1; docs/measurements.md): operators per step
are flat in K (solo 2,356; fused 4,084 at K = 1 to 4,097 at K = 8), so per run they fall K-fold (512 at
K = 8, 4.6x fewer than solo); kernel operators 871 solo, 1,423 to 1,438 fused (180 per run at K = 8). A
fused step at K = 1 dispatches 1.7x a solo one: vmap's batching rules split fused kernels (a linear layer
is bmm plus a bias add instead of addmm, LayerNorm's affine a separate mul and add, the expanded weights'
gradients copied to the parameter's layout), so fusing pays from K = 2. Host ms on a CPU is mostly
arithmetic at 32 x 128; at `--batch 2 --width 16`, where dispatch dominates, it was 27 ms a step solo and
42, 29, 23, 18 ms per run fused at K = 1, 2, 4, 8.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

from bertology.train.fused import FusedStep
from bertology.train.loop import Hyper
from bertology.train.step import TrainStep, param_groups

PHASES = ("forward", "backward", "clip", "optimizer", "scheduler")
# Operators that only make tensor metadata or allocate: no kernel on a GPU, though each costs host time.
NO_KERNEL = {"_unsafe_view", "empty", "empty_like", "empty_strided", "lift_fresh"}


class Count(TorchDispatchMode):
    """Counts the aten operators dispatched, by the phase the step is in (set from outside), and those of
    them that run a kernel (not views or allocations)."""

    def __init__(self):
        super().__init__()
        self.phase, self.ops, self.names = "forward", collections.Counter(), collections.Counter()
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[self.phase] += 1
        self.names[name] += 1
        self.kernels += not (func.is_view or name in NO_KERNEL)
        return func(*args, **(kwargs or {}))

    def mark_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.register_step_pre_hook(lambda *_: setattr(self, "phase", "optimizer"))
        optimizer.register_step_post_hook(lambda *_: setattr(self, "phase", "scheduler"))


def models(k: int, dropout: float) -> list[torch.nn.Module]:
    config = BertConfig(vocab_size=1000, hidden_size=96, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=384, max_position_embeddings=128, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, attn_implementation="sdpa")
    out = []
    for seed in range(k):
        torch.manual_seed(seed)
        out.append(BertForSequenceClassification(config).train())
    return out


def marked(step: TrainStep, total: int, hp: Hyper, count: Count):
    """`step.run` (what the loop runs eagerly, and what a CUDA graph captures) and the schedule, with each
    part wrapped to mark the phase for the counter; one run's step or K fused runs'."""
    scheduler = get_linear_schedule_with_warmup(step.optimizer, int(hp.warmup_ratio * total), total)
    count.mark_optimizer(step.optimizer)

    def phase(fn, name):
        def wrapper(*args, **kwargs):
            count.phase = name
            return fn(*args, **kwargs)
        return wrapper
    step.loss, step.backward, step.clip = (phase(step.loss, "forward"), phase(step.backward, "backward"),
                                           phase(step.clip, "clip"))

    def one(batch):
        step.run(batch)
        scheduler.step()
    return one


def measure(name: str, k: int, step, count: Count, batch, steps: int) -> dict:
    for _ in range(2):  # AdamW's first step creates its state: count a later one
        step(batch)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
    with warnings.catch_warnings(record=True) as caught, count:
        warnings.simplefilter("always")
        step(batch)
    ms = 1000 * statistics.median(times)
    total = sum(count.ops.values())
    fallbacks = sorted({str(w.message).split("batching rule for ")[1].split(".")[0] for w in caught
                        if "batching rule for" in str(w.message)})
    return {"row": name, "k": k, "ops": total, "ops_per_run": total / k, "kernels": count.kernels,
            "kernels_per_run": count.kernels / k, "ms": ms, "ms_per_run": ms / k,
            **{p: count.ops[p] for p in PHASES},
            "sdpa": sum(n for op, n in count.names.items() if "scaled_dot_product" in op),
            "vmap_fallbacks": fallbacks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per row (median)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (1: steadier on a shared box)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hp, total = Hyper(lr=1e-4, warmup_ratio=0.1), 1000
    g = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(5, 1000, (args.batch, args.width), generator=g),
             "attention_mask": torch.ones(args.batch, args.width, dtype=torch.long),
             "token_type_ids": torch.zeros(args.batch, args.width, dtype=torch.long),
             "labels": torch.randint(0, 2, (args.batch,), generator=g)}
    count = Count()
    (model,) = models(1, args.dropout)
    solo = TrainStep(model, torch.optim.AdamW(param_groups(model, hp.weight_decay), lr=hp.lr, fused=True),
                     max_grad_norm=hp.max_grad_norm, device=torch.device("cpu"))
    rows = [measure("solo (the loop's step)", 1, marked(solo, total, hp, count), count, batch, args.steps)]
    for k in args.ks:
        count = Count()
        fused = FusedStep(models(k, args.dropout), lr=hp.lr, weight_decay=hp.weight_decay,
                          max_grad_norm=hp.max_grad_norm)
        rows.append(measure(f"fused K={k}", k, marked(fused, total, hp, count), count, batch, args.steps))
        del fused
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch} x {args.width}, "
          f"dropout {args.dropout}\n")
    print("| row | ops/step | ops/run | kernel ops/step | kernel ops/run | " + " | ".join(PHASES)
          + " | sdpa calls | host ms/step | host ms/run |")
    print("|---" * (8 + len(PHASES)) + "|")
    for r in rows:
        print(f"| {r['row']} | {r['ops']} | {r['ops_per_run']:.0f} | {r['kernels']} | {r['kernels_per_run']:.0f} | "
              + " | ".join(str(r[p]) for p in PHASES) + f" | {r['sdpa']} | {r['ms']:.0f} | {r['ms_per_run']:.0f} |")
    fallbacks = sorted({op for r in rows for op in r["vmap_fallbacks"]})
    print(f"\nvmap fell back to a per-run loop for: {', '.join(fallbacks) or 'nothing'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
