"""finetune: train one cell's checkpoint on its dataset; record the curves, and the best point's weights
where they are needed later.

Fine-tuned weights are ~440 MB a run at BERT-base size, so they are kept only where something needs them
later (`Cell.keep_weights`: the study's `keep_weights=true`, or the intermediate run of a sequential run).
Otherwise this step evaluates and analyzes the best weights itself, from its staging directory, and
publishes the run without them; the evaluate and analyze steps then find their results done. A run
finished without its weights that is needed with them later is trained again (the same result).

Writes `runs/<run-id>/finetune/{model/, curves.parquet, result.json}` (and `activations.parquet` when the
regime names a native `reference` model) and publishes the curves (and activation distances) to
`results/<table>/study=<study>/`. A sequential run (`after`: the intermediate run) starts from the
intermediate run's fine-tuned weights with a new task head; the intermediate run is trained first, in
this process, if it is not finished yet. While it trains, the resume state lives in `runs/<run-id>/finetune-state/`
(two slots, see bertology.train.state): a killed or preempted run started again goes on from there and
ends with the same result; the state is deleted once the run is published.

`--spec` is one cell or a JSON list of cells (a bundle), run in order in one process so that start-up and
imports are paid once; each cell is still its own idempotent, published artifact.
"""

from __future__ import annotations

import json
import logging
import shutil

import pyarrow as pa
import pyarrow.parquet as pq

from bertology.results.tables import TABLES, publish
from bertology.spec import Cell
from bertology.steps.analyze import analyze
from bertology.steps.common import checkpoint_key, dataset_key, local_model_ref, run_key
from bertology.steps.evaluate import evaluate
from bertology.steps.harness import require_cells
from bertology.store import Store

log = logging.getLogger("bertology")


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


def finetune(store: Store, cell: Cell) -> str:
    run = cell.run
    key = run_key(run.id, "finetune")
    state_key = run_key(run.id, "finetune-state")
    done = store.is_done(key)
    if done and cell.keep_weights and not store.exists(f"{key}/model/config.json"):
        log.info("run %s: finished without its weights, which are needed now: training it again", run.id)
        done = False  # training is deterministic: the same result, this time with its weights
    if done:  # a finished run is never resumed
        log.info("run %s: finetune cached", run.id)
        if store.list(state_key):  # killed after publishing, before the state was deleted
            store.delete_prefix(state_key)
    else:
        from bertology import tasks
        from bertology.train import Hyper, head_for
        from bertology.train import finetune as train
        from bertology.train.regimes import Schedule
        from bertology.train.state import StoreSlots

        task = tasks.get_task(run.dataset.task)
        if run.after is not None:
            intermediate = Cell(cell.study, cell.variant, cell.model, run.after, keep_weights=True)
            if not store.is_done(run_key(run.after.id, "finetune")):
                log.info("run %s: training its intermediate run %s (%s) first", run.id, run.after.id,
                         run.after.dataset.task)
            finetune(store, intermediate)
            start_dir = store.local_dir(run_key(run.after.id, "finetune")) / "model"
        else:
            start_dir = store.local_dir(checkpoint_key(run.checkpoint.id))
        data_dir = store.local_dir(dataset_key(run.dataset.id))
        train_table = pq.read_table(data_dir / "train.parquet")
        head = head_for(task)
        evals = {s: head.read_split(data_dir, s) for s in task.eval_splits}
        r = run.regime
        hp = Hyper(lr=r.lr, batch_size=r.batch_size, epochs=r.epochs, warmup_ratio=r.warmup_ratio,
                   weight_decay=r.weight_decay, max_grad_norm=r.max_grad_norm, eval_batch_size=r.eval_batch_size,
                   eval_every=r.eval_every, checkpoint_every=r.checkpoint_every, log_every=r.log_every,
                   compile=r.compile,
                   schedule=Schedule.of(r))
        monitor = None
        if r.reference is not None:
            from bertology import models
            from bertology.train.activation_distance import ActivationDistance

            start = models.parse_model_ref(f"dir:{start_dir}")
            monitor = ActivationDistance(local_model_ref(r.reference), json.loads((data_dir / "probe.json").read_text()),
                                         tokenizer=models.load_tokenizer(start), max_length=run.dataset.max_length)
            monitor.check(models.load_config(start))
        state = StoreSlots(store, state_key, log=log.info)
        log.info("run %s: %s %s on %s, seed %d (%d training rows)", run.id, cell.variant, cell.model,
                 task.name, run.seed, train_table.num_rows)
        with store.artifact(key, {"spec": run.to_dict(), "weights": cell.keep_weights}) as out:
            result = train(start_dir, task, train_table, evals, hp, run.seed, out / "model", log=log.info,
                           state=state, new_head=run.after is not None, monitor=monitor)
            pq.write_table(curves_table(result.curves, result.losses), out / "curves.parquet")
            if monitor is not None:
                rows = [{"reference": r.reference, **row} for row in result.monitor]
                pq.write_table(pa.Table.from_pylist(rows), out / "activations.parquet")
            (out / "result.json").write_text(json.dumps({
                "best_epoch": result.best_epoch, "best_step": result.best_step, "best_metrics": result.best_metrics,
                "wall_seconds": result.wall_seconds, "device": result.device, "num_train": result.num_train,
                "throughput": result.throughput, "epochs": r.epochs}, indent=2))
            if not cell.keep_weights:  # used here, before they leave the pod, then dropped
                evaluate(store, cell, finetuned=out)
                analyze(store, cell, finetuned=out)
                shutil.rmtree(out / "model")
        state.clear()
    publish(store, "curves", cell, store.read_parquet(f"{key}/curves.parquet"))
    if run.regime.reference is not None:
        publish(store, "activation_distance", cell, store.read_parquet(f"{key}/activations.parquet"))
    return key


def run(store: Store, args) -> None:
    for cell in require_cells(store, args, "finetune"):
        finetune(store, cell)
