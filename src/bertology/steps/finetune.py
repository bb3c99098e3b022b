"""finetune: train one cell's checkpoint on its dataset; keep the best epoch's weights and the curves.

Writes `runs/<run-id>/finetune/{model/, curves.parquet, result.json}` and publishes the curves to
`results/curves/study=<study>/`.
"""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq

from bertology.results.tables import publish
from bertology.spec import Cell
from bertology.steps.common import checkpoint_key, dataset_key, run_key
from bertology.steps.harness import require_spec
from bertology.store import Store

log = logging.getLogger("bertology")


def curves_table(curves: list[dict]) -> pa.Table:
    """Training curves in long form: one row per (evaluation point, split, metric)."""
    rows = []
    for point in curves:
        for name, value in point.items():
            if "/" in name:
                split, metric = name.split("/", 1)
                rows.append({"epoch": point["epoch"], "step": point["step"], "train_loss": point["train_loss"],
                             "lr": point["lr"], "seconds": point["seconds"], "split": split, "metric": metric,
                             "value": float(value)})
    return pa.Table.from_pylist(rows)


def finetune(store: Store, cell: Cell) -> str:
    run = cell.run
    key = run_key(run.id, "finetune")
    if store.is_done(key):
        log.info("run %s: finetune cached", run.id)
    else:
        from bertology import tasks
        from bertology.train import Hyper
        from bertology.train import finetune as train

        task = tasks.get_task(run.dataset.task)
        ckpt_dir = store.local_dir(checkpoint_key(run.checkpoint.id))
        data_dir = store.local_dir(dataset_key(run.dataset.id))
        train_table = pq.read_table(data_dir / "train.parquet")
        evals = {s: pq.read_table(data_dir / f"{s}.parquet") for s in task.eval_splits}
        r = run.regime
        hp = Hyper(lr=r.lr, batch_size=r.batch_size, epochs=r.epochs, warmup_ratio=r.warmup_ratio,
                   weight_decay=r.weight_decay, max_grad_norm=r.max_grad_norm, eval_batch_size=r.eval_batch_size)
        log.info("run %s: %s %s on %s, seed %d (%d training examples)", run.id, cell.variant, cell.model,
                 task.name, run.seed, train_table.num_rows)
        with store.artifact(key, {"spec": run.to_dict()}) as out:
            result = train(ckpt_dir, task, train_table, evals, hp, run.seed, out / "model", log=log.info)
            pq.write_table(curves_table(result.curves), out / "curves.parquet")
            (out / "result.json").write_text(json.dumps({
                "best_epoch": result.best_epoch, "best_metrics": result.best_metrics,
                "wall_seconds": result.wall_seconds, "device": result.device, "num_train": result.num_train,
                "throughput": result.throughput, "epochs": r.epochs}, indent=2))
    publish(store, "curves", cell, store.read_parquet(f"{key}/curves.parquet"))
    return key


def run(store: Store, args) -> None:
    finetune(store, Cell.from_dict(require_spec(args, "finetune")))
