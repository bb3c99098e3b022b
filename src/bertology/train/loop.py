"""Fine-tuning, for every task kind: the whole loop, readable in one sitting.

AdamW (no weight decay on biases and LayerNorm weights) with a linear schedule and warmup, gradient
clipping, bf16 autocast on CUDA (fp32 on CPU; Hugging Face's run_glue trains in fp32), batches padded per
batch (to multiples of 8 on CUDA, so a run meets few widths, each of which costs once:
`Hyper.pad_multiple`): random batches as run_glue draws them, or with `group_by_length` batches of
similar-length examples (bertology.data). The task's head (bertology.train.heads) turns rows into model
inputs and scores evaluation splits. The training seed decides the head's initialisation, dropout, MLM
masks and the data order. Every eval split is evaluated after every epoch, and also every `eval_every`
steps (and before the first step) when that is set, as the forgetting curve needs; a `monitor` (the
activation distance to a native model) runs at the same points.

Which point's weights are the result is the run's `selection`: `best`, the best point by the task's primary
metric on the first eval split (lower is better for perplexity), kept on the CPU as training goes (the
monolingual report's "best epoch", the cross-lingual report's early stopping); or `last`, the weights after
the last step (the college and partial-reinitialization reports evaluate after fine-tuning, as Hugging
Face's scripts do). Either way every evaluation point is recorded in the curves, so both are available; the
chosen weights are saved at the end, with the tokenizer, as an HF directory, and are what evaluation,
weight distances and a sequential run's second task start from (weights nobody keeps are not saved: the
caller scores and measures them in memory, `training`'s `finish`). Under `best` a split the task reads at its
own best point (`Task.own_best_splits`: MNLI-mm, which the monolingual report prints at its own best epoch)
has its numbers from that point (`select_points`), while the weights stay the first split's best: they are
one model, and early stopping and a sequential run's start follow the first split alone.

The step itself (forward, backward, clipping, AdamW, the loss sums) is one function,
bertology.train.step; on CUDA it replays as one CUDA graph per batch shape (bertology.train.graphs, with
batch widths in buckets of 32), eagerly elsewhere. With `compile` the model is torch.compiled first
(inductor's kernels inside the same graphs), and what was compiled is kept in the store for the next pods
(bertology.train.compile_cache). The loop never waits for the GPU between steps: the
loss is summed on the device and read only at logging points, so the host queues the next batch while the
GPU works.

The loop can be stepped: `training` is a generator that yields after every training step and returns the
results; `finetune_runs` steps it to its end, and bertology.train.side_by_side steps K runs in turn from
one host thread, each on its own CUDA stream, each ending as it ends trained alone.

Training loss: every `log_every` steps the loss averaged over those steps (and the learning rate) is
recorded as one point of a per-iteration series (the college report's Figures 1 and 4, loss against
iterations); it costs one host sync per point. Like `checkpoint_every` it changes what is recorded, not
what is computed, so it is an execution setting: not part of the resume identity or of a run id.

Resume: every `checkpoint_every` steps the whole training state (weights, optimizer, scheduler, position
in the epoch, loss so far, curves, best epoch, RNG states) goes to a `StateSink`, and a run that finds a
state there continues from it. A resumed run ends bit for bit where an uninterrupted one does, because
an epoch's batch order is a pure function of (seed, epoch) and dropout draws from the restored RNG.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import torch
from transformers import AutoTokenizer, get_linear_schedule_with_warmup

from bertology.data import Encoded, length_grouped_batches, random_batches
from bertology.errors import BadInput
from bertology.tasks import Task
from bertology.train import regimes
from bertology.train.compile_cache import CompileCache
from bertology.train.compile_cache import cache_key as compile_cache_key
from bertology.train.device import pad_multiple, pick_device, sync
from bertology.train.engine import load_optimizer_state, release, take
from bertology.train.fused import FusedStep
from bertology.train.graphs import WIDTH_BUCKET, GraphedStep, use_graphs
from bertology.train.heads import head_for
from bertology.train.state import StateSink, rng_state, set_rng_state, snapshot
from bertology.train.step import (
    SINCE_CONSOLE_LINE,
    SINCE_EVALUATION,
    SINCE_SERIES_POINT,
    current_lr,
)

# What a monitor returns at each evaluation point: rows that the loop stamps with epoch and step.
Monitor = Callable[[torch.nn.Module], list[dict]]
T = TypeVar("T")


@dataclass(frozen=True)
class Hyper:
    lr: float = 2e-5
    batch_size: int = 32
    epochs: int = 3
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    eval_batch_size: int = 128
    eval_every: int = 0  # steps between evaluations besides each epoch's end (and one before training); 0: none
    checkpoint_every: int = 1000  # steps between resume states (when a StateSink is given); 0: none
    log_every: int = 50  # steps per point of the training-loss series (mean loss of those steps); 0: none
    compile: bool = False  # torch.compile the model (device.compile_model): fused kernels, slow to start
    cuda_graph: bool = True  # on CUDA, the whole step as CUDA graphs (bertology.train.graphs); eager when off
    pad_multiple: int = 0  # batch widths round up to a multiple of this; 0: device.pad_multiple (8 on CUDA)
    schedule: regimes.Schedule = field(default_factory=regimes.Schedule)  # which parameters train when
    selection: str = "best"  # the result's weights: the best evaluation point ("best") or the last ("last")
    # Batches of similar-length examples (bertology.data.length_grouped_batches), or random ones as run_glue
    # draws them (False). True here, as the loop trained before the setting; a study's default is False.
    group_by_length: bool = True

    # How the loop runs, not what it computes (padding is masked out: it changes float noise only).
    EXECUTION = ("checkpoint_every", "log_every", "compile", "cuda_graph", "pad_multiple")
    SELECTIONS = ("best", "last")

    def __post_init__(self):
        for name, low in (("batch_size", 1), ("epochs", 1), ("eval_batch_size", 1), ("eval_every", 0),
                          ("checkpoint_every", 0), ("log_every", 0), ("pad_multiple", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise BadInput(f"{name} must be an integer >= {low}, got {value!r}")
        for name in ("compile", "cuda_graph", "group_by_length"):
            if not isinstance(getattr(self, name), bool):
                raise BadInput(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.selection not in self.SELECTIONS:
            raise BadInput(f"selection must be one of {', '.join(self.SELECTIONS)}, got {self.selection!r}")
        for name, ok, allowed in (("lr", self.lr > 0, "> 0"),
                                  ("warmup_ratio", 0 <= self.warmup_ratio < 1, "in [0, 1)"),
                                  ("weight_decay", self.weight_decay >= 0, ">= 0"),
                                  ("max_grad_norm", self.max_grad_norm > 0, "> 0")):
            if not (math.isfinite(getattr(self, name)) and ok):
                raise BadInput(f"{name} must be {allowed}, got {getattr(self, name)!r}")


@dataclass
class FinetuneResult:
    # The selected evaluation point (Hyper.selection): the best one, or the last one under `last`; its weights
    # are the saved model.
    best_epoch: int  # 1-based: the epoch of the selected evaluation point
    best_metrics: dict[str, float]  # "<split>/<metric>", each split at its own point (`selected_points`)
    curves: list[dict] = field(default_factory=list)  # one row per evaluation point
    losses: list[dict] = field(default_factory=list)  # the training-loss series: epoch, step, train_loss, lr, seconds
    monitor: list[dict] = field(default_factory=list)  # the monitor's rows, stamped with epoch and step
    best_step: int = 0
    wall_seconds: float = 0.0
    train_seconds: float = 0.0  # optimisation steps only, without evaluation
    eval_seconds: float = 0.0  # the evaluations after each epoch
    device: str = "cpu"
    num_train: int = 0
    throughput: float = 0.0  # training sequences per second
    step_kind: str = "eager"  # how the training step ran: eager or cuda-graph (train.graphs), ", compiled", ", fused xK"
    capture_seconds: float = 0.0  # of train_seconds, the CUDA graphs' warm-ups and captures (once per shape)
    # eval split -> {"epoch", "step"} of the point its best_metrics are from: the selected point, except for a
    # split read at its own best point (select_points)
    selected_points: dict[str, dict[str, int]] = field(default_factory=dict)
    # eval split -> (metrics, predictions) of the selected point's weights, as head.evaluate returned them at
    # that point (the step scores weights it does not keep without evaluating them again); None where the
    # point was evaluated before a resume, whose state does not hold them
    evaluated: dict[str, tuple] | None = None


def select_points(curves: list[dict], task: Task, splits, selection: str) -> dict[str, int]:
    """Eval split -> the index in `curves` of the point its numbers are read at. Under `last`, the last point.
    Under `best`, the best point by the primary metric on the first of `splits`, or, for a split in
    `task.own_best_splits`, on that split itself; the earliest of equal points, and never the point before
    the first step unless it is the only one (regime none). The weights a run keeps are the first split's
    best point whatever this picks for the other splits (early stopping follows the first split only)."""
    splits = list(splits)
    if selection == "last":
        return {split: len(curves) - 1 for split in splits}
    trained = [i for i, row in enumerate(curves) if row["step"] > 0] or list(range(len(curves)))

    def best_on(split: str) -> int:
        key, top = f"{split}/{task.primary_metric}", None
        for i in trained:
            if task.better(curves[i][key], None if top is None else curves[top][key]):
                top = i
        return top

    first = best_on(splits[0])
    return {split: best_on(split) if split in task.own_best_splits else first for split in splits}


def finetune(model_dir: str | Path, task: Task, train: pa.Table, evals: dict, hp: Hyper, seed: int,
             out_dir: str | Path, *, device: str | torch.device | None = None,
             log: Callable[[str], None] = print, state: StateSink | None = None, new_head: bool = False,
             carry_head: bool = False, monitor: Monitor | None = None,
             track: Callable[[list[dict], list[dict]], None] | None = None,
             compile_cache: CompileCache | None = None) -> FinetuneResult:
    """Fine-tune the model in `model_dir` on `train` (its task head freshly initialised with `new_head`, or
    with `carry_head` the one it has, which must fit the task), evaluate `evals` (split -> prepared split)
    at every evaluation point, save the selected point's model (`hp.selection`: the best point or the last)
    and tokenizer to `out_dir`. With `state`, resume from its newest state and save one every
    `hp.checkpoint_every` steps. `track(losses, curves)` is called after every step with the series so far
    (an experiment tracker, bertology.tracking, sends the new points). With `hp.compile`, `compile_cache`
    keeps what is compiled for the next processes (bertology.train.compile_cache)."""
    return finetune_runs([model_dir], task, train, evals, hp, seed, [out_dir], device=device, log=log, state=state,
                         new_head=new_head, carry_head=carry_head, monitor=monitor, tracks=[track],
                         compile_cache=compile_cache)[0]


def finetune_runs(model_dirs: list, task: Task, train: pa.Table, evals: dict, hp: Hyper, seed: int,
                  out_dirs: list, *, device: str | torch.device | None = None, log: Callable[[str], None] = print,
                  state: StateSink | None = None, new_head: bool = False, carry_head: bool = False,
                  monitor: Monitor | None = None, tracks: list | None = None, fused: bool = False,
                  names: list[str] | None = None, compile_cache: CompileCache | None = None) -> list[FinetuneResult]:
    """`finetune` for one run, or with `fused` for K runs of one architecture, task, data, seed and
    hyper-parameters trained as one stacked model (bertology.train.fused; K = 1 too): each model in
    `model_dirs` is trained, evaluated and saved to its `out_dirs` entry as `finetune` does, with one
    resume `state` for them all. `names` (the runs' ids) name the runs in the log and in the resume
    state's identity. Fused runs take no `monitor` and no `compile`."""
    return run_to_end(training(model_dirs, task, train, evals, hp, seed, out_dirs, device=device, log=log,
                               state=state, new_head=new_head, carry_head=carry_head, monitor=monitor,
                               tracks=tracks, fused=fused, names=names, compile_cache=compile_cache))


def run_to_end(steps: Generator[None, None, T]) -> T:
    """What a generator such as `training` returns, once it has been stepped to its end."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def training(model_dirs: list, task: Task, train: pa.Table, evals: dict, hp: Hyper, seed: int, out_dirs: list, *,
             device: str | torch.device | None = None, log: Callable[[str], None] = print,
             state: StateSink | None = None, new_head: bool = False, carry_head: bool = False,
             monitor: Monitor | None = None, tracks: list | None = None, fused: bool = False,
             names: list[str] | None = None, lane=None, compile_cache: CompileCache | None = None,
             finish: Callable[[int, FinetuneResult, torch.nn.Module], None] | None = None,
             ) -> Generator[None, None, list[FinetuneResult]]:
    """`finetune_runs` as a run that can be stepped: a generator that yields after every training step (the
    step with what follows it: its console line, loss-series point, evaluation point, resume state and
    trackers, when it has them) and returns the results. Nothing runs before the first `next`.
    `finetune_runs` steps it to its end; bertology.train.side_by_side steps several in turn, each in its own
    `lane` (a bertology.train.side_by_side.Lane): such a run trains on an engine of its own, never kept for
    another run, whose CUDA graphs go to the lane's memory pool. With `hp.compile`, `compile_cache` (the
    store's, bertology.train.compile_cache) gives what earlier pods compiled for this model and keeps what
    this run compiled. An `out_dirs` entry of None saves nothing: `finish(run, result, model)`, called for
    each run once its result is made, while `model` holds that run's selected weights (on the device, as
    trained), uses them in memory instead (the finetune step scores and measures weights it does not keep,
    without writing and reading them back)."""
    started = time.perf_counter()
    device = pick_device(device)
    k = len(model_dirs)
    names = names or [str(i) for i in range(k)]
    tracks = tracks or [None] * k
    if not evals:
        raise BadInput("finetune needs at least one eval split (got none)")
    if len(train) == 0:
        raise BadInput(f"the {task.name} training set is empty (0 rows)")
    if not (k == len(out_dirs) == len(names) == len(tracks) >= 1) or (k > 1 and not fused):
        raise BadInput(f"finetune trains one run, or K >= 1 fused runs with one output folder and name each "
                       f"(got {k} models, {len(out_dirs)} folders, {len(names)} names)")
    if fused and (monitor is not None or hp.compile):
        raise BadInput("fused runs take no activation monitor (reference) and no compile")
    if lane is not None and fused:
        raise BadInput("runs side by side are not fused (allowed: fused runs one at a time)")
    graphed = use_graphs(device, cuda_graph=hp.cuda_graph)
    tokenizer = AutoTokenizer.from_pretrained(model_dirs[0])
    head = head_for(task, tokenizer)
    head.pad_multiple = hp.pad_multiple or (WIDTH_BUCKET if graphed else pad_multiple(device))
    loaded = []
    for model_dir in model_dirs:
        torch.manual_seed(seed)  # the task head's initialisation, then dropout: as each run alone draws them
        loaded.append(head.load(model_dir, new_head=new_head, carry_head=carry_head, device="cpu"))
    hp.schedule.check(loaded[0].config.num_hidden_layers)
    if fused:  # K stacked runs; `model` is an eager model of their architecture: it evaluates and saves each
        release()
        model = loaded[0].to(device)
        train_step = FusedStep([m.to(device) for m in loaded], lr=hp.lr, weight_decay=hp.weight_decay,
                               max_grad_norm=hp.max_grad_norm)
        optimizer = train_step.optimizer
        if graphed:
            train_step = GraphedStep(train_step, log=log)
        log(f"fused: {k} run{'s' if k > 1 else ''} trained as one model ({', '.join(names)})")
    else:  # the model, AdamW and the step: the previous run's in this process when they fit (graphs too)
        if hp.compile and compile_cache is not None:  # what pods before compiled for this model
            cache_key = compile_cache_key(loaded[0], device)
            compile_cache.load(cache_key)
        engine = take(loaded[0], lr=hp.lr, weight_decay=hp.weight_decay, max_grad_norm=hp.max_grad_norm,
                      device=device, graphed=graphed, reuse=lane is None, log=log,
                      pool=None if lane is None else lane.pool, compiled=hp.compile)
        model, optimizer, train_step = engine.model, engine.optimizer, engine.step
    del loaded
    runs = _Runs(model, train_step.step if fused and graphed else train_step, fused, k)
    examples = Encoded.from_table(train)
    steps_per_epoch = math.ceil(len(examples) / hp.batch_size)
    total_steps = steps_per_epoch * hp.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, int(hp.warmup_ratio * total_steps), total_steps)
    log_every = max(1, steps_per_epoch // 4)
    primary = f"{next(iter(evals))}/{task.primary_metric}"
    log(f"finetune {task.name}: {len(examples)} examples, {hp.epochs} epochs x {steps_per_epoch} steps "
        f"on {device}")

    # What a resume state must have been made by: everything that decides the result.
    identity = {**{key: v for key, v in dataclasses.asdict(hp).items() if key not in Hyper.EXECUTION},
                "seed": seed, "num_train": len(examples), "task": task.name, "new_head": new_head,
                **({"carry_head": True} if carry_head else {}),
                "monitor": monitor is not None, **({"fused": names} if fused else {})}
    step, train_seconds, eval_seconds = 0, 0.0, 0.0
    curves, monitored, best_state, best = [[] for _ in names], [], [None] * k, [None] * k
    evaluated: list[dict | None] = [None] * k  # each run's evaluations at its selected point so far (or None)
    start_epoch, start_batch = 1, 0
    loss_steps, series_steps, losses = 0, 0, [[] for _ in names]  # steps since the last evaluation / series point
    saved = state.load() if state is not None else None
    if saved is not None and saved.get("identity") != identity:
        log(f"resume state was made by another configuration ({saved.get('identity')}); ignored")
        saved = None
    if saved is not None:
        runs.load_weights(saved["model"])
        load_optimizer_state(optimizer, saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        step, train_seconds, eval_seconds = saved["step"], saved["train_seconds"], saved["eval_seconds"]
        curves, best_state, best = runs.unpack(saved["curves"]), runs.unpack(saved["best_state"]), runs.unpack(saved["best"])
        monitored = saved["monitor"]
        start_epoch, start_batch = saved["epoch"], saved["batch"]
        loss_steps = saved["loss_steps"]
        train_step.sums[SINCE_EVALUATION] = saved["loss_sum"].to(device)
        if "losses" in saved:  # states saved before the series existed resume without its past points
            losses, series_steps = runs.unpack(saved["losses"]), saved["series_steps"]
            train_step.sums[SINCE_SERIES_POINT] = saved["series_sum"].to(device)
        started -= saved["elapsed"]
        set_rng_state(saved["rng"])
        log(f"resuming at step {step}/{total_steps} (epoch {start_epoch}, batch {start_batch})")

    untrained = hp.schedule.name == "none"  # the model as built is the result: one evaluation, no steps

    def evaluation_point(epoch: int) -> None:
        """Evaluate every split (and the monitor) now, for each run; keep a copy of a run's weights when this
        is its best point and the best point is the result (selection `best`: under `last` the weights at the
        end are)."""
        nonlocal eval_seconds, loss_steps
        eval_start = time.perf_counter()
        train_losses = runs.unpack(train_step.total(SINCE_EVALUATION)) if loss_steps else [None] * k
        lr = current_lr(scheduler)
        train_step.reset(SINCE_EVALUATION)
        for run in range(k):
            runs.use(run)
            row = {"epoch": epoch, "step": step,
                   "train_loss": train_losses[run] / loss_steps if loss_steps else None, "lr": lr}
            evaluations = {split: head.evaluate(model, data, batch_size=hp.eval_batch_size, device=device)
                           for split, data in evals.items()}
            for split, (split_metrics, _) in evaluations.items():
                row.update({f"{split}/{name}": value for name, value in split_metrics.items()})
            if monitor is not None:
                monitored.extend({"epoch": epoch, "step": step, **r} for r in monitor(model))
            row["seconds"] = time.perf_counter() - started
            curves[run].append(row)
            # The point before any training step is a reference on the curve, never the result (but with
            # regime `none` it is the only point).
            top = curves[run][best[run]][primary] if best[run] is not None else None
            improved = (step > 0 or untrained) and task.better(row[primary], top)
            if improved:
                best[run] = len(curves[run]) - 1
                if hp.selection == "best":
                    best_state[run], evaluated[run] = runs.weights(run), evaluations
            if hp.selection == "last":  # the last point's weights are the result
                evaluated[run] = evaluations
            loss = "" if row["train_loss"] is None else f"train_loss {row['train_loss']:.4f} "
            log(("" if not fused else f"run {names[run]}: ") + f"epoch {epoch} step {step}: {loss}"
                + " ".join(f"{key} {v:.4f}" for key, v in row.items() if "/" in key) + (" (best)" if improved else ""))
        loss_steps = 0
        eval_seconds += time.perf_counter() - eval_start

    if (hp.eval_every or untrained) and not curves[0]:
        evaluation_point(start_epoch)
    for epoch in range(start_epoch, (0 if untrained else hp.epochs) + 1):
        model.train()
        trainable = runs.apply_regime(hp.schedule, epoch)
        if hp.schedule.name != "full":
            log(f"epoch {epoch}: regime {hp.schedule.name} trains "
                + ", ".join(f"{key} {v:,}" for key, v in trainable.items()) + " parameters")
        epoch_start = time.perf_counter()
        first = start_batch if epoch == start_epoch else 0
        train_step.reset(SINCE_CONSOLE_LINE)
        window_steps, window_start, window_seqs = 0, epoch_start, 0
        if hp.group_by_length:
            batches = length_grouped_batches(examples.lengths, hp.batch_size, seed=(seed, epoch))
        else:
            batches = random_batches(len(examples), hp.batch_size, seed=(seed, epoch))
        for i, batch_rows in enumerate(batches[first:], start=first):
            # the step: forward, backward, clip, AdamW, loss sums (one CUDA graph when graphed)
            train_step(head.train_inputs(examples, batch_rows, model, key=(seed, epoch, i)))
            scheduler.step()
            step, loss_steps, series_steps = step + 1, loss_steps + 1, series_steps + 1
            window_steps, window_seqs = window_steps + 1, window_seqs + len(batch_rows)
            # the console line: a quarter of an epoch's mean loss (each run's) and speed (a host sync)
            if (i + 1) % log_every == 0 or i + 1 == steps_per_epoch:
                now = time.perf_counter()
                mean = " ".join(f"{v / window_steps:.4f}" for v in runs.unpack(train_step.total(SINCE_CONSOLE_LINE)))
                log(f"epoch {epoch}/{hp.epochs} step {step}/{total_steps} loss {mean} "
                    f"lr {current_lr(scheduler):.2e} {k * window_seqs / (now - window_start):.1f} seq/s")
                train_step.reset(SINCE_CONSOLE_LINE)
                window_steps, window_start, window_seqs = 0, now, 0
            # the training-loss series (a host sync per point)
            if hp.log_every and (step % hp.log_every == 0 or step == total_steps):
                lr, now = current_lr(scheduler), time.perf_counter()
                for run, total in enumerate(runs.unpack(train_step.total(SINCE_SERIES_POINT))):
                    losses[run].append({"epoch": epoch, "step": step, "train_loss": total / series_steps,
                                        "lr": lr, "seconds": now - started})
                train_step.reset(SINCE_SERIES_POINT)
                series_steps = 0
            # an evaluation point: each epoch's end, and every eval_every steps; training time excludes it
            if i + 1 == steps_per_epoch or (hp.eval_every and step % hp.eval_every == 0):
                sync(device)
                train_seconds += time.perf_counter() - epoch_start
                evaluation_point(epoch)
                model.train()
                epoch_start = time.perf_counter()
            # the resume state, written in the background
            if state is not None and hp.checkpoint_every and step % hp.checkpoint_every == 0:
                now = time.perf_counter()
                state.save({  # best_state is a CPU copy already, never modified in place
                    **snapshot({"model": runs.all_weights(), "optimizer": optimizer.state_dict(),
                                "scheduler": scheduler.state_dict(), "loss_sum": train_step.sums[SINCE_EVALUATION],
                                "rng": rng_state(), "curves": runs.pack(curves), "monitor": monitored,
                                "losses": runs.pack(losses), "series_sum": train_step.sums[SINCE_SERIES_POINT]}),
                    "identity": identity, "step": step, "epoch": epoch, "batch": i + 1, "loss_steps": loss_steps,
                    "series_steps": series_steps,
                    "best": runs.pack(best), "best_state": runs.pack(best_state),
                    "train_seconds": train_seconds + now - epoch_start, "eval_seconds": eval_seconds,
                    "elapsed": now - started})
            for run, track in enumerate(tracks):
                if track is not None:
                    track(losses[run], curves[run])
            yield  # a step is done: a scheduler may step another run now (bertology.train.side_by_side)

    results = []
    for run in range(k):
        if hp.selection == "best":  # the best point's weights
            runs.use(run, best_state[run])
            point = curves[run][best[run]]
        else:  # the weights as training left them, and the evaluation point made of them
            runs.use(run)
            point = curves[run][-1]
        if out_dirs[run] is not None:  # safetensors (the default since transformers 4.35, the only format in 5)
            model.save_pretrained(out_dirs[run])
            tokenizer.save_pretrained(out_dirs[run])
        points = select_points(curves[run], task, evals, hp.selection)
        read_at = {split: curves[run][i] for split, i in points.items()}
        results.append(FinetuneResult(
            best_epoch=point["epoch"],
            best_step=point["step"],
            best_metrics={key: v for split, row in read_at.items() for key, v in row.items()
                          if key.startswith(f"{split}/")},
            selected_points={split: {"epoch": r["epoch"], "step": r["step"]} for split, r in read_at.items()},
            curves=curves[run],
            losses=losses[run],
            monitor=monitored,
            wall_seconds=time.perf_counter() - started,
            train_seconds=train_seconds,
            eval_seconds=eval_seconds,
            device=str(device),
            num_train=len(examples),
            throughput=len(examples) * hp.epochs / train_seconds if train_seconds else 0.0,
            step_kind=train_step.kind + (", compiled" if hp.compile else "") + (f", fused x{k}" if fused else ""),
            capture_seconds=train_step.capture_seconds,
            evaluated=evaluated[run],
        ))
        if finish is not None:
            finish(run, results[-1], model)
    if hp.compile and compile_cache is not None:  # for the pods after this one
        compile_cache.save(cache_key)
    return results


class _Runs:
    """What the loop trains, seen run by run: one model, or K fused runs whose weights `model` takes in turn
    (`use`) to be evaluated and saved. Resume states keep a single run's format as it always was."""

    def __init__(self, model: torch.nn.Module, step, fused: bool, k: int):
        self.model, self.step, self.fused, self.k = model, step, fused, k

    def pack(self, per_run: list):
        return per_run if self.fused else per_run[0]

    def unpack(self, value) -> list:
        return value if self.fused else [value]

    def weights(self, run: int) -> dict:
        """Run `run`'s weights, as a CPU copy."""
        state = self.step.unstacked(run) if self.fused else self.model.state_dict()
        return {key: v.detach().to("cpu", copy=True) for key, v in state.items()}

    def all_weights(self) -> dict:
        return self.step.stacked() if self.fused else self.model.state_dict()

    def load_weights(self, saved: dict) -> None:
        if self.fused:
            self.step.load_stacked(saved)
        else:
            self.model.load_state_dict(saved)

    def use(self, run: int, weights: dict | None = None) -> None:
        """Put run `run`'s weights (or `weights`) into `model` (one run: only given weights)."""
        if self.fused or weights is not None:
            self.model.load_state_dict(weights if weights is not None else self.step.unstacked(run))

    def apply_regime(self, schedule, epoch: int) -> dict[str, int]:
        trainable = regimes.apply(self.model, schedule, epoch)
        if self.fused:
            self.step.set_trainable(self.model)
        return trainable
