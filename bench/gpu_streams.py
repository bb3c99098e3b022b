"""bench/gpu.py's `streams`, `compiled`, `streams-check` and `compiled-check` parts: K runs trained side by
side in one process (bertology.train.side_by_side: one host thread, each run on its own CUDA stream with its
own graph memory pool and generator state), with today's graphed step, and with the model compiled. Apart from gpu.py to keep each file one subject; `b`
is gpu.py's Bench.

- streams: steady-state training seq/s of K = 1, 2, 4, 8 runs side by side (in all and per run), each run
  its own model (seeds 0..K-1), AdamW and CUDA-graphed step, on fixed 32 x 128 batches, stepped round-robin
  by the real scheduler; the graphs' warm-ups and captures are left out of the timing (reported apart).
- compiled: the same, each model torch.compiled inside its graphed step (`compile: true`); its capture
  seconds hold the compilation.
- streams-check: whether a run trained side by side equals the same run trained alone. In fp32 with TF32 and
  bf16 reduced-precision reductions off: the step-0 loss and gradients and 8 steps' losses and weights, of
  each of K runs side by side against the same run alone, with dropout off and on (on: each run's own
  generator state inside its graphs), and one run alone twice (the device's own run-to-run floor). Then the
  production precision (bf16 autocast, dropout off): side by side against alone, and each run's bf16
  trajectory against its fp32 one (float noise, about 1e-2 for BERT-base).
- compiled-check: a compiled run against the same run not compiled, in fp32 (TF32 off) and in bf16, each
  bf16 trajectory against its fp32 one.

On CPU both run reduced (the bench's tiny BERT, K = 1, 2, eager steps: no graphs there) and say nothing
about a GPU; the check is then the CPU proof that interleaving changes no run.
"""

from __future__ import annotations

import contextlib
import copy
import time
from typing import TYPE_CHECKING

import numpy as np
import torch
from gpu_workload import random_batch

from bertology import tasks
from bertology.train.device import compile_model, sync
from bertology.train.graphs import GraphedStep
from bertology.train.heads import head_for
from bertology.train.loop import run_to_end
from bertology.train.side_by_side import lanes_for, raise_failure, side_by_side
from bertology.train.step import SINCE_CONSOLE_LINE, TrainStep, param_groups

if TYPE_CHECKING:  # gpu.py imports this module: its Bench only names the type here
    from gpu import Bench


def quiet(*_) -> None:
    pass


class ProbeStep(TrainStep):
    """The training step, which also keeps each step's gradients (before clipping) in tensors of its own, so
    that they can be read after the step (the step sets them to None); optionally in fp32, without autocast."""

    def __init__(self, *args, fp32: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.fp32 = fp32
        self.kept = [torch.zeros_like(p) for p in self.model.parameters()]

    def loss(self, inputs):
        with torch.autocast(self.device.type, enabled=not self.fp32 and self.device.type == "cuda",
                            dtype=torch.bfloat16, cache_enabled=False):
            return super().loss(inputs)

    @torch.no_grad()
    def clip(self) -> None:
        for kept, p in zip(self.kept, self.model.parameters()):
            if p.grad is not None:
                kept.copy_(p.grad)
        super().clip()


def new_run(b: Bench, model: torch.nn.Module, *, lr: float, lane=None, probe: dict | None = None, dropout: bool = True,
            compiled: bool = False):
    """`model` (a CPU copy) on the device with AdamW and the step the loop uses there (as CUDA graphs into
    the lane's pool on CUDA, eager on CPU) and a linear schedule; with `probe`, a ProbeStep; `compiled`:
    the model torch.compiled as `compile: true` compiles it (device.compile_model)."""
    from transformers import get_linear_schedule_with_warmup

    model = copy.deepcopy(model).to(b.device).train(dropout)
    if compiled:
        compile_model(model, b.device)
    optimizer = torch.optim.AdamW(param_groups(model, b.hp.weight_decay), lr=lr, fused=True)
    if probe is None:
        step = TrainStep(model, optimizer, max_grad_norm=1.0, device=b.device)
    else:
        step = ProbeStep(model, optimizer, max_grad_norm=1.0, device=b.device, fp32=probe["fp32"])
    scheduler = get_linear_schedule_with_warmup(optimizer, 2, 1_000)
    graphed = GraphedStep(step, log=quiet, pool=None if lane is None else lane.pool) if b.cuda else step
    return graphed, step, scheduler


def models_for(b: Bench, head, seeds) -> dict[int, torch.nn.Module]:
    """One CPU model of the bench's checkpoint per seed (the seed draws its task head)."""
    out = {}
    for seed in seeds:
        torch.manual_seed(seed)
        out[seed] = head.load(b.path, device="cpu")
    return out


def part_streams(b: Bench, ks: tuple[int, ...], *, compiled: bool = False) -> None:
    """K runs side by side, round-robin by bertology.train.side_by_side's scheduler: each run's first turns
    load it and capture its graph (warm-up steps), then every run steps `steps` times; the clock runs from a
    device sync at the start of the first timed round to the sync after the last step. `compiled`: the
    `compiled` part, the same with each model torch.compiled (its first warm-up compiles: "capture s")."""
    from transformers import AutoConfig

    head = head_for(tasks.get_task("sst2"))
    warm, steps = (3, 30) if b.cuda else (1, 3)
    width, rows = (128 if b.cuda else 32), b.hp.batch_size
    vocab = AutoConfig.from_pretrained(b.path).vocab_size
    batch = random_batch(np.random.default_rng(0), vocab, rows, width)
    base = models_for(b, head, range(max(ks)))
    part = "compiled" if compiled else "streams"
    b.rec.lines(f"## K runs side by side in one process{', each model compiled' if compiled else ''} "
                f"(bertology.train.side_by_side, {rows} x {width} batches, "
                f"{'CUDA streams, the graphed step' if b.cuda else 'interleaved on CPU, the eager step'})", "",
                "| runs K | seq/s in all | seq/s per run | ms per round | in all over K = 1 | capture s |",
                "|---|---|---|---|---|---|")
    for k in ks:
        clock: dict[str, float] = {"capture": 0.0}

        def run(lane, seed, clock=clock):
            graphed, _, scheduler = new_run(b, base[seed], lr=b.hp.lr, lane=lane, compiled=compiled)
            for i in range(warm + steps):
                if i == warm and seed == 0:  # run 0's turn opens each round: all runs have warmed up
                    sync(b.device)
                    clock["start"] = time.perf_counter()
                graphed(batch)
                scheduler.step()
                yield
            clock["capture"] += graphed.capture_seconds

        try:
            outcomes = side_by_side([lambda lane, seed=seed: run(lane, seed) for seed in range(k)],
                                    lanes_for(b.device), [str(seed) for seed in range(k)], log=quiet)
            raise_failure(outcomes)
            sync(b.device)
            seconds = time.perf_counter() - clock["start"]
        except (RuntimeError, torch.OutOfMemoryError) as e:
            b.rec.put(part, str(k), {"error": f"{type(e).__name__}: {e}"[:500]})
            b.rec.lines(f"| {k} | failed: {type(e).__name__}: {str(e)[:80]} | | | | |")
            continue
        finally:
            if b.cuda:
                torch.cuda.empty_cache()
        seq_s = k * rows * steps / seconds
        one = b.rec.figures.get(part, {}).get("1", {}).get("seq_s")
        figures = {"seq_s": seq_s, "seq_s_per_run": seq_s / k, "ms_per_round": 1000 * seconds / steps,
                   "speedup": seq_s / one if one else None, "capture_s": clock["capture"], "steps": steps,
                   "batch": [rows, width], "mfu": b.mfu(k * rows * width * steps, seconds)}
        b.rec.put(part, str(k), figures)
        b.rec.lines(f"| {k} | {seq_s:,.0f} | {seq_s / k:,.0f} | {1000 * seconds / steps:.1f} | "
                    f"{'' if not one else f'{seq_s / one:.2f}x'} | {clock['capture']:.1f} |")
    b.rec.lines("", ("A round steps every run once (a replay each, on its own stream, from one host thread); 'seq/s "
                     "in all' counts every run's sequences. The runs' first turns (loading, warm-up, capture) are "
                     "not timed."), "")


def trajectory(b: Bench, model: torch.nn.Module, batches, record: dict, *, fp32: bool, dropout: bool, lane=None,
               compiled: bool = False):
    """One run as a generator stepping once per turn: its losses, its step-0 gradients and, at the end,
    its weights, into `record` (CPU copies)."""
    graphed, step, scheduler = new_run(b, model, lr=1e-4, lane=lane, probe={"fp32": fp32}, dropout=dropout,
                                       compiled=compiled)
    record["losses"] = []
    for i, batch in enumerate(batches):
        graphed(batch)
        scheduler.step()
        record["losses"].append(step.total(SINCE_CONSOLE_LINE))  # a sync of this run's stream only
        step.reset(SINCE_CONSOLE_LINE)
        if i == 0:
            record["grads"] = [g.detach().cpu().clone() for g in step.kept]
        yield
    record["weights"] = [v.detach().cpu().clone() for v in step.model.state_dict().values()]


@contextlib.contextmanager
def exact_fp32():
    """fp32 arithmetic as fp32: TF32 and bf16 reduced-precision reductions off inside, the flags as they were
    after (the production precision, which the bf16 runs of a check keep)."""
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
         torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction) = flags


def largest(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b, strict=True))


def compare(alone: dict, other: dict) -> dict:
    """The largest differences of two trajectories (`trajectory`'s records; the step-0 gradients where both
    kept them)."""
    grads = {"step0_grads": largest(alone["grads"], other["grads"])} if "grads" in alone and "grads" in other else {}
    return {"step0_loss": abs(alone["losses"][0] - other["losses"][0]), **grads,
            "losses": float(np.max(np.abs(np.subtract(alone["losses"], other["losses"])))),
            "weights": largest(alone["weights"], other["weights"])}


def part_streams_check(b: Bench) -> None:
    """Runs side by side against the same runs alone (see the module docstring)."""
    from transformers import AutoConfig

    head = head_for(tasks.get_task("sst2"))
    k = 4 if b.cuda else 2
    width = 128 if b.cuda else 32
    vocab = AutoConfig.from_pretrained(b.path).vocab_size
    rng = np.random.default_rng(1)
    batches = [random_batch(rng, vocab, b.hp.batch_size, width) for _ in range(8)]
    base = models_for(b, head, range(k))
    b.rec.lines(f"## Runs side by side against the same runs alone ({k} runs, 8 steps of {b.hp.batch_size} x {width}, "
                f"{'CUDA streams, graphed' if b.cuda else 'interleaved on CPU, eager'})", "",
                "| check | step-0 loss | step-0 gradients | 8 steps' losses | weights after 8 steps |",
                "|---|---|---|---|---|")

    def runs(fp32: bool, dropout: bool) -> tuple[list[dict], list[dict], dict]:
        alone = []
        for seed in range(k):
            torch.manual_seed(seed)  # dropout's draws: the run's seed, as the loop seeds them
            alone.append({})
            run_to_end(trajectory(b, base[seed], batches, alone[-1], fp32=fp32, dropout=dropout))
        torch.manual_seed(0)
        again: dict = {}
        run_to_end(trajectory(b, base[0], batches, again, fp32=fp32, dropout=dropout))
        together = [{} for _ in range(k)]

        def start(lane, seed):
            torch.manual_seed(seed)  # in its lane: seeds the run's own generator states
            yield from trajectory(b, base[seed], batches, together[seed], fp32=fp32, dropout=dropout, lane=lane)

        raise_failure(side_by_side([lambda lane, seed=seed: start(lane, seed) for seed in range(k)],
                                   lanes_for(b.device), [str(seed) for seed in range(k)], log=quiet))
        return alone, together, again

    def row(name: str, diffs: dict) -> None:
        b.rec.lines(f"| {name} | " + " | ".join(f"{diffs[key]:.2e}" for key in ("step0_loss", "step0_grads", "losses",
                                                                                 "weights")) + " |")

    def worst(pairs) -> dict:
        diffs = [compare(a, t) for a, t in pairs]
        return {key: max(d[key] for d in diffs) for key in diffs[0]}

    fp32 = {}
    with exact_fp32():
        for dropout in (False, True):
            name = f"fp32, dropout {'on' if dropout else 'off'}"
            alone, together, again = runs(True, dropout)
            fp32[dropout] = together
            side = worst(zip(alone, together))
            floor = compare(alone[0], again)
            b.rec.put("streams-check", name, {"side_by_side_vs_alone": side, "alone_twice": floor,
                                              "exact": all(v == 0 for v in side.values())})
            row(f"{name}: side by side vs alone (largest of {k} runs)", side)
            row(f"{name}: one run alone twice (the device's floor)", floor)
    name = "bf16, dropout off" if b.cuda else "autocast (fp32 on CPU), dropout off"
    alone, together, again = runs(False, False)
    side = worst(zip(alone, together))
    against_fp32 = [float(np.max(np.abs(np.subtract(t["losses"], f["losses"])))) for t, f in zip(together, fp32[False])]
    b.rec.put("streams-check", name, {"side_by_side_vs_alone": side, "alone_twice": compare(alone[0], again),
                                      "exact": all(v == 0 for v in side.values()),
                                      "losses_vs_fp32_per_run": against_fp32})
    row(f"{name}: side by side vs alone (largest of {k} runs)", side)
    b.rec.lines(f"| {name}: each run's 8 losses against its fp32 ones (side by side) | | | "
                f"{max(against_fp32):.2e} (per run: {', '.join(f'{v:.1e}' for v in against_fp32)}) | |")
    exact = all(v.get("exact") for v in b.rec.figures["streams-check"].values() if isinstance(v, dict))
    b.rec.put("streams-check", "all_exact", exact)
    b.rec.lines("", (f"{'Every' if exact else 'Not every'} run side by side ended exactly as alone. Largest absolute "
                     "differences; gradients are taken before clipping, of every parameter; 'alone twice' is what "
                     "the device's kernels give one run twice, against which a nonzero side-by-side difference is "
                     "read."), "")


def part_compiled_check(b: Bench) -> None:
    """A compiled run against the same run not compiled, both alone and graphed, dropout off (inductor draws
    its own random numbers): in fp32 with TF32 and bf16 reduced-precision reductions off, the step-0 loss and
    gradients and 8 steps' losses and weights; then in bf16 (the production precision), each trajectory
    against its fp32 one, so that the compiled run's bf16 difference is read against bf16's own noise."""
    from transformers import AutoConfig

    head = head_for(tasks.get_task("sst2"))
    width = 128 if b.cuda else 32
    vocab = AutoConfig.from_pretrained(b.path).vocab_size
    rng = np.random.default_rng(2)
    batches = [random_batch(rng, vocab, b.hp.batch_size, width) for _ in range(8)]
    base = models_for(b, head, [0])[0]
    b.rec.lines(f"## A compiled run against the same run not compiled (8 steps of {b.hp.batch_size} x {width}, "
                f"dropout off, {'graphed' if b.cuda else 'eager on CPU'})", "",
                "| check | step-0 loss | step-0 gradients | 8 steps' losses | weights after 8 steps |",
                "|---|---|---|---|---|")
    runs: dict[tuple[bool, bool], dict] = {}
    for fp32 in (True, False):
        with exact_fp32() if fp32 else contextlib.nullcontext():
            for compiled in (False, True):
                runs[fp32, compiled] = {}
                run_to_end(trajectory(b, base, batches, runs[fp32, compiled], fp32=fp32, dropout=False,
                                      compiled=compiled))
    rows = {"fp32: compiled vs not": compare(runs[True, False], runs[True, True]),
            "bf16: compiled vs not": compare(runs[False, False], runs[False, True]),
            "not compiled: bf16 vs fp32": compare(runs[True, False], runs[False, False]),
            "compiled: bf16 vs fp32": compare(runs[True, True], runs[False, True])}
    for name, diffs in rows.items():
        b.rec.put("compiled-check", name, diffs)
        b.rec.lines(f"| {name} | " + " | ".join(f"{diffs[key]:.2e}" for key in ("step0_loss", "step0_grads", "losses",
                                                                                 "weights")) + " |")
    if not b.cuda:  # autocast is off on CPU: its "bf16" runs are fp32 runs again
        b.rec.lines("", "On CPU the loop does not autocast: the bf16 rows are fp32 runs again. Largest absolute "
                        "differences; gradients before clipping, of every parameter.", "")
        return
    within = rows["bf16: compiled vs not"]["losses"] <= 2 * rows["not compiled: bf16 vs fp32"]["losses"]
    b.rec.put("compiled-check", "bf16_within_noise", within)
    b.rec.lines("", (f"The compiled run's bf16 losses are {'within' if within else 'beyond'} twice bf16's own noise "
                     "(the uncompiled run's bf16 losses against its fp32 ones). Largest absolute differences; "
                     "gradients before clipping, of every parameter."), "")
