"""finetune: train one cell's checkpoint on its dataset; keep the best point's weights and the curves.

Writes `runs/<run-id>/finetune/{model/, curves.parquet, result.json}` (`model/` only when the run keeps its
weights: weights nobody keeps are scored and measured here from the model in memory, never written; and
`activations.parquet` when the regime names a native `reference` model) and publishes the curves (and
activation distances) to `results/<table>/study=<study>/`. A sequential run (`after`: the intermediate
run) starts from the intermediate run's fine-tuned weights with the task head its `final_head` names
(new, or the intermediate run's); the intermediate run is trained first, in this process, if it is not
finished yet. While it trains, the resume state lives in `runs/<run-id>/finetune-state/` (two slots, see
bertology.train.state): a killed or preempted run started again goes on from there and ends with the same
result; the state is deleted once the run is published.

`--spec` is one cell or a JSON list of cells (a bundle), run in order in one process so that start-up and
imports are paid once, and a run of the same architecture as the one before trains on its model, optimizer
and CUDA graphs (bertology.train.engine); each cell is still its own idempotent, published artifact. With the study's
`gpu_concurrency` K > 1 (or `--param gpu_concurrency=K`), a bundle's cells train up to K at once side by
side in this process instead, each on its own CUDA stream on a GPU (bertology.train.side_by_side), each
ending as it ends alone and published as it ends; intermediate runs are trained first, the same way. With
BERTOLOGY_GPU_CONCURRENCY=processes in the environment they run K at a time each in its own process
sharing the GPU, as the setting ran before (bertology.steps.shared_gpu), until a GPU has measured which is
faster (bench/gpu.py's concurrency part).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bertology import tracking
from bertology.errors import BadInput
from bertology.results.tables import TABLES, publish
from bertology.spec import Cell, RunSpec, canonical_json
from bertology.steps import scoring, weight_distance
from bertology.steps.common import fusable, local_model_ref, read_or_rebuild, read_table, run_key
from bertology.steps.harness import require_cells
from bertology.steps.inputs import checkpoint_dir, dataset_dir
from bertology.store import Store

log = logging.getLogger("bertology")
# `processes`: gpu_concurrency's K runs each in its own process sharing the GPU (bertology.steps.shared_gpu),
# as the setting ran before runs trained side by side in one process; kept until a GPU has measured both.
CONCURRENCY_ENV = "BERTOLOGY_GPU_CONCURRENCY"


def curves_table(curves: list[dict], losses: list[dict] = ()) -> pa.Table:
    """Training curves in long form: one row per (evaluation point, split, metric), kind "eval"; then the
    training-loss series, one row per point, kind "train" (split "train", metric "loss", value = the
    mean training loss since the point before)."""
    rows = []
    for point in curves:
        for name, value in point.items():
            if "/" in name:
                split, metric = name.split("/", 1)
                rows.append({"epoch": point["epoch"], "step": point["step"], "train_loss": point["train_loss"],
                             "lr": point["lr"], "seconds": point["seconds"], "split": split, "metric": metric,
                             "value": float(value), "kind": "eval"})
    rows += [{**point, "split": "train", "metric": "loss", "value": point["train_loss"], "kind": "train"}
             for point in losses]
    return pa.Table.from_pylist(rows, schema=TABLES["curves"])


def finished(store: Store, cell: Cell) -> bool:
    """Whether the cell's run is published as it is needed; one published without the weights it now needs
    is deleted (training is deterministic: the same result, this time with its weights)."""
    key = run_key(cell.run.id, "finetune")
    done = store.is_done(key)
    if done and cell.keep_weights and not store.exists(f"{key}/model/config.json"):
        log.info("run %s: finished without its weights, which are needed now: training it again", cell.run.id)
        store.delete_prefix(key)
        done = False
    return done


def finetune(store: Store, cell: Cell) -> str:
    run = cell.run
    key = run_key(run.id, "finetune")
    state_key = run_key(run.id, "finetune-state")
    if finished(store, cell):  # a finished run is never resumed
        log.info("run %s: finetune cached", run.id)
        if store.list(state_key):  # killed after publishing, before the state was deleted
            store.delete_prefix(state_key)
    else:
        train_run(store, cell)
    tables = read_or_rebuild(store, key, lambda: _outputs(store, cell), lambda: train_run(store, cell))
    for table, rows in tables.items():
        publish(store, table, cell, rows)
    return key


def _outputs(store: Store, cell: Cell) -> dict:
    """The run's published tables, read from its artifact (verified)."""
    key = run_key(cell.run.id, "finetune")
    tables = {"curves": read_table(store, key, "curves.parquet")}
    if cell.run.regime.reference is not None:
        tables["activation_distance"] = read_table(store, key, "activations.parquet")
    return tables


def train_run(store: Store, cell: Cell) -> None:
    """Fine-tune the cell's run and publish its artifact (resuming from its stored training state); a fused
    run (`regime.fused`) trains through the fused code, alone."""
    train_runs(store, [cell])


def train_runs(store: Store, cells: list[Cell]) -> None:
    """Fine-tune the cells' runs and publish each one's artifact: one run, or fused runs of one architecture,
    dataset, regime and seed trained as one model (bertology.train.fused), with one resume state, under the
    first run's `finetune-state/`."""
    from bertology.train.loop import run_to_end

    run_to_end(_training(store, cells))


def _training(store: Store, cells: list[Cell], lane=None):
    """`train_runs` as a generator that yields after every training step (bertology.train.loop.training);
    with a `lane`, one run trained side by side with others (bertology.train.side_by_side), its log lines
    named by its run id."""
    from bertology import tasks
    from bertology.train import Hyper, head_for
    from bertology.train.loop import training
    from bertology.train.regimes import Schedule
    from bertology.train.state import StoreSlots

    for cell in cells:
        check_tokenizer(cell.run)
    run = cells[0].run
    fused = run.regime.fused
    task = tasks.get_task(run.dataset.task)
    start_dirs = [_start_dir(store, cell) for cell in cells]
    data_dir = dataset_dir(store, run.dataset)
    train_table = pq.read_table(data_dir / "train.parquet")
    head = head_for(task)
    evals = {s: head.read_split(data_dir, s) for s in task.eval_splits}
    r = run.regime
    hp = Hyper(lr=r.lr, batch_size=r.batch_size, epochs=r.epochs, warmup_ratio=r.warmup_ratio,
               weight_decay=r.weight_decay, max_grad_norm=r.max_grad_norm, eval_batch_size=r.eval_batch_size,
               eval_every=r.eval_every, checkpoint_every=r.checkpoint_every, log_every=r.log_every,
               compile=r.compile, cuda_graph=r.cuda_graph, schedule=Schedule.of(r), selection=r.selection,
               group_by_length=r.group_by_length)
    monitor = None
    if r.reference is not None:
        from bertology import models
        from bertology.train.activation_distance import ActivationDistance

        start = models.parse_model_ref(f"dir:{start_dirs[0]}")
        monitor = ActivationDistance(local_model_ref(r.reference), json.loads((data_dir / "probe.json").read_text()),
                                     tokenizer=models.load_tokenizer(start), max_length=run.dataset.max_length)
        monitor.check(models.load_config(start))
    say = log.info if lane is None else (lambda line: log.info("run %s: %s", run.id, line))
    state = StoreSlots(store, run_key(run.id, "finetune-state"), log=say)
    for cell in cells:
        log.info("run %s: %s %s on %s, seed %d (%d training rows)%s", cell.run.id, cell.variant, cell.model,
                 task.name, cell.run.seed, train_table.num_rows, ", fused" if fused else "")
    trackers = [tracking.start(r.tracker, store, cell) for cell in cells]
    with contextlib.ExitStack() as stack:
        for tracker in trackers:
            stack.enter_context(tracking.running(tracker))
        outs = [stack.enter_context(store.artifact(run_key(cell.run.id, "finetune"),
                                                   {"spec": cell.run.to_dict(), "weights": cell.keep_weights}))
                for cell in cells]

        def finish(i: int, result, model) -> None:  # the run's weights are in `model` now
            _write_outputs(store, cells[i], outs[i], result, monitor is not None, model)

        results = yield from training(
            start_dirs, task, train_table, evals, hp, run.seed,
            [out / "model" if cell.keep_weights else None for cell, out in zip(cells, outs)], log=say,
            state=state, monitor=monitor, new_head=run.after is not None and run.final_head == "new",
            carry_head=run.final_head == "carried",  # only a sequential run carries a head
            tracks=[tracker and tracker.update for tracker in trackers], fused=fused,
            names=[cell.run.id for cell in cells], lane=lane,
            compile_cache=compile_cache(store) if r.compile else None, finish=finish)
        for tracker, result in zip(trackers, results):
            if tracker is not None:  # a run without steps (regime none) has only its evaluation point
                tracker.update(result.losses, result.curves)
    state.clear()


_compile_caches: dict = {}  # store URL -> its CompileCache, for every run of this process


def compile_cache(store: Store):
    """The store's cache of compiled code (bertology.train.compile_cache), one per store in this process, so
    that a bundle's runs load what earlier pods compiled once."""
    from bertology.train.compile_cache import CompileCache

    url = store.url()
    if url not in _compile_caches:
        _compile_caches[url] = CompileCache(store, log=log.info)
    return _compile_caches[url]


def check_tokenizer(run: RunSpec) -> None:
    """Refuse a run whose data another tokenizer made: its ids would index unrelated rows of the checkpoint's
    word-embedding table (or past it). Plan never makes one; a hand-written plan could."""
    made_by, reads = run.dataset.tokenizer, run.checkpoint.tokenizer
    if made_by != reads:
        raise BadInput(f"run {run.id}: its data {run.dataset.id} were tokenized with {made_by}'s tokenizer, but its "
                       f"checkpoint reads {reads}'s word-pieces; allowed: data tokenized with {reads}'s tokenizer")


def _start_dir(store: Store, cell: Cell) -> Path:
    """The weights the cell's run starts from: its checkpoint, or (a sequential run) its intermediate run's
    fine-tuned weights, trained first if they are not yet."""
    run = cell.run
    if run.after is None:
        return checkpoint_dir(store, run.checkpoint)
    intermediate = Cell(cell.study, cell.variant, cell.model, run.after, keep_weights=True)
    if not store.is_done(run_key(run.after.id, "finetune")):
        log.info("run %s: training its intermediate run %s (%s) first", run.id, run.after.id, run.after.dataset.task)
    finetune(store, intermediate)
    after = run_key(run.after.id, "finetune")
    return read_or_rebuild(store, after, lambda: store.local_dir(after) / "model", lambda: finetune(store, intermediate))


def _write_outputs(store: Store, cell: Cell, out: Path, result, monitored: bool, model) -> None:
    """A trained run's curves, activation distances and result.json into its artifact (its weights are
    there already when they are kept); weights that are not kept are scored and measured here, from
    `model`, which holds them, and never written."""
    r = cell.run.regime
    pq.write_table(curves_table(result.curves, result.losses), out / "curves.parquet")
    if monitored:
        rows = [{"reference": r.reference, **row} for row in result.monitor]
        pq.write_table(pa.Table.from_pylist(rows), out / "activations.parquet")
    trained = {
        "best_epoch": result.best_epoch, "best_step": result.best_step, "best_metrics": result.best_metrics,
        "selected_points": result.selected_points,
        "wall_seconds": result.wall_seconds, "device": result.device, "num_train": result.num_train,
        "throughput": result.throughput, "step_kind": result.step_kind, "epochs": r.epochs}
    (out / "result.json").write_text(json.dumps(trained, indent=2))
    if not cell.keep_weights:  # used here, before they leave the pod
        scoring.score_model(store, cell, model, trained, result.evaluated)  # evaluated at its point already
        weight_distance.measure(store, cell, model.state_dict())


def redo_from_weights(store: Store, cell: Cell, redo: Callable[[], object]) -> None:
    """Make again an artifact computed from the run's fine-tuned weights (evaluate's, analyze's): from the
    kept weights when the run has them, else by training the run again (deterministic: the same weights),
    which evaluates and analyzes them in the pod as the first time."""
    key = run_key(cell.run.id, "finetune")
    if store.is_done(key) and not store.exists(f"{key}/model/config.json"):
        log.info("run %s: its weights were not kept; training it again to make them", cell.run.id)
        store.delete_prefix(key)
        train_run(store, cell)
    else:
        redo()


def model_dir(store: Store, cell: Cell) -> Path:
    """The fine-tuned weights of the cell's run, verified; damaged weights are trained again first. A run
    published without its weights (not `keep_weights`) is named, not guessed at."""
    key = run_key(cell.run.id, "finetune")
    weights = read_or_rebuild(store, key, lambda: store.local_dir(key) / "model", lambda: train_run(store, cell))
    if not (weights / "config.json").is_file():
        raise BadInput(f"run {cell.run.id} was published without its fine-tuned weights (they are kept only with "
                       f"keep_weights=true); run the study again with keep_weights=true")
    return weights


def trained_result(store: Store, cell: Cell) -> dict:
    """The run's result.json (best epoch, wall time, device, ...), verified; a damaged one is trained again."""
    tuned = run_key(cell.run.id, "finetune")
    return read_or_rebuild(store, tuned, lambda: json.loads(store.read_member(tuned, "result.json")),
                           lambda: train_run(store, cell))


def fused_groups(store: Store, cells: list[Cell], k: int) -> list[list[Cell]]:
    """The cells as groups of at most `k` runs that can train as one model: what plan groups them by
    (`fusable`: dataset, regime, seed), and checkpoints of one architecture (their configs, less what only names them). A run
    whose architecture no other run of the pod shares (a variant that removes layers) is a group of one."""
    from bertology.train.engine import DESCRIPTIVE

    groups: dict[tuple, list[Cell]] = {}
    for cell in cells:
        config = json.loads((checkpoint_dir(store, cell.run.checkpoint) / "config.json").read_text())
        architecture = canonical_json({key: v for key, v in config.items() if key not in DESCRIPTIVE})
        groups.setdefault((*fusable(cell), architecture), []).append(cell)
    for group in groups.values():
        if len(group) == 1 and len(cells) > 1:
            log.info("run %s (%s, %s): no other run of this pod shares its architecture, data, regime and seed; "
                     "fused alone (K = 1)", group[0].run.id, group[0].variant, group[0].model)
    return [group[i:i + k] for group in groups.values() for i in range(0, len(group), k)]


def train_side_by_side(store: Store, cells: list[Cell], k: int) -> None:
    """Fine-tune the cells' runs in this process, up to `k` at once side by side (bertology.train.side_by_side:
    on a GPU each run on its own CUDA stream), each published as it ends, as `train_run` publishes it. A
    failed run fails the step once the others have ended (and no waiting run starts after it)."""
    from bertology.train.device import pick_device
    from bertology.train.side_by_side import lanes_for, raise_failure, side_by_side

    starts = [functools.partial(_training, store, [cell]) for cell in cells]  # each called with its lane
    outcomes = side_by_side(starts, lanes_for(pick_device(None)), [cell.run.id for cell in cells], at_once=k,
                            log=log.info)
    raise_failure(outcomes)


def run_side_by_side(store: Store, cells: list[Cell], k: int) -> None:
    """The study's gpu_concurrency K > 1: a bundle's unfinished runs trained K at a time side by side in this
    process; first, in waves, the unfinished intermediate runs its sequential runs start from (each trained
    once, keeping its weights), deepest first. Then every cell publishes its tables, as a cached run does."""
    from bertology.steps import shared_gpu

    waves = shared_gpu.waves(cells)
    for i, wave in enumerate(waves):
        last = i == len(waves) - 1
        todo = [cell if last else dataclasses.replace(cell, keep_weights=True) for cell in wave]
        todo = [cell for cell in todo if not finished(store, cell)]
        if todo:
            log.info("gpu_concurrency %d: %s %d runs, up to %d side by side in this process", k,
                     "fine-tuning" if last else "first the intermediate runs,", len(todo), min(k, len(todo)))
            train_side_by_side(store, todo, k)
    for cell in cells:  # each finished now: publishes its tables (`finetune` as for any cached run)
        finetune(store, cell)


def run(store: Store, args) -> None:
    from bertology.steps import shared_gpu

    cells = require_cells(store, args, "finetune")
    if any(cell.run.regime.fused for cell in cells):  # the study's fuse K: groups of runs as one model each
        for group in fused_groups(store, cells, shared_gpu.execution_setting(store, args, "fuse")):
            todo = [cell for cell in group if not finished(store, cell)]
            if todo:
                train_runs(store, todo)
            for cell in group:  # each finished now: publishes its tables (`finetune` as for any cached run)
                finetune(store, cell)
        return
    k = shared_gpu.concurrency(store, args)
    if k > 1 and len(cells) > 1:  # the study's gpu_concurrency: K runs at once on the pod's GPU
        if os.environ.get(CONCURRENCY_ENV, "").strip() == "processes":  # each its own process
            shared_gpu.run_cells(store, cells, k, finetune)
        else:  # side by side in this process (on a GPU: each on its own CUDA stream)
            run_side_by_side(store, cells, k)
        return
    for cell in cells:
        finetune(store, cell)
