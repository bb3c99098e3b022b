"""evaluate: score the best fine-tuned weights on every evaluation split of the task.

Writes `runs/<run-id>/evaluate/{metrics.parquet, predictions.parquet}` and publishes the `runs` row(s)
and the per-example predictions for the study (masked-LM corpora have perplexities, not predictions).
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.parquet as pq

import bertology
from bertology.results.tables import publish
from bertology.spec import Cell
from bertology.steps.common import dataset_key, run_key
from bertology.steps.harness import require_spec
from bertology.store import Store

log = logging.getLogger("bertology")


def evaluate(store: Store, cell: Cell) -> str:
    run = cell.run
    key = run_key(run.id, "evaluate")
    if store.is_done(key):
        log.info("run %s: evaluate cached", run.id)
    else:
        from bertology import tasks
        from bertology.train import head_for, load_finetuned
        from bertology.train.device import pick_device

        task = tasks.get_task(run.dataset.task)
        head = head_for(task)
        trained = store.read_json(f"{run_key(run.id, 'finetune')}/result.json")
        model_dir = store.local_dir(run_key(run.id, "finetune")) / "model"
        data_dir = store.local_dir(dataset_key(run.dataset.id))
        device = pick_device(None)
        model = load_finetuned(model_dir, task, device)
        metric_rows, prediction_tables = [], []
        for split in task.eval_splits:
            metrics, predictions = head.evaluate(model, head.read_split(data_dir, split),
                                                 batch_size=run.regime.eval_batch_size, device=device)
            for metric, value in metrics.items():
                metric_rows.append({
                    "split": split, "metric": metric, "value": float(value),
                    # every eval split has its own table row (MNLI-m and MNLI-mm)
                    "primary": metric == task.primary_metric,
                    "best_epoch": trained["best_epoch"], "epochs": trained["epochs"],
                    "num_train": trained["num_train"], "train_seconds": trained["wall_seconds"],
                    "throughput": trained["throughput"], "device": trained["device"],
                    "code_version": bertology.__version__})
            if predictions is not None:
                prediction_tables.append(predictions.append_column("split", pa.array([split] * predictions.num_rows)))
            log.info("run %s: %s %s", run.id, split, {k: round(v, 4) for k, v in metrics.items()})
        with store.artifact(key, {"spec": run.to_dict()}) as out:
            pq.write_table(pa.Table.from_pylist(metric_rows), out / "metrics.parquet")
            if prediction_tables:
                pq.write_table(pa.concat_tables(prediction_tables), out / "predictions.parquet")
    publish(store, "runs", cell, store.read_parquet(f"{key}/metrics.parquet"))
    if store.exists(f"{key}/predictions.parquet"):
        publish(store, "predictions", cell, store.read_parquet(f"{key}/predictions.parquet"))
    return key


def run(store: Store, args) -> None:
    evaluate(store, Cell.from_dict(require_spec(args, "evaluate")))
