"""evaluate: score the best fine-tuned weights on every evaluation split of the task.

Writes `runs/<run-id>/evaluate/{metrics.parquet, predictions.parquet, profile.parquet}` and publishes
the `runs` row(s), the per-example predictions (masked-LM corpora have perplexities, not predictions) and
the model's size and measured inference speed (`model_profile`, layer-removal's Table 7), measured here
because this step runs on the training device.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import bertology
from bertology.results.tables import publish
from bertology.spec import Cell
from bertology.steps import build_checkpoint
from bertology.steps.common import checkpoint_key, read_or_rebuild, read_table, run_key
from bertology.steps.finetune import dataset_dir, model_dir, redo_from_weights, train_run
from bertology.steps.harness import require_cells
from bertology.store import Store

log = logging.getLogger("bertology")


# the tables this step publishes, and the artifact file each comes from
OUTPUTS = {"runs": "metrics.parquet", "predictions": "predictions.parquet", "model_profile": "profile.parquet"}


def evaluate(store: Store, cell: Cell) -> str:
    run = cell.run
    key = run_key(run.id, "evaluate")
    if store.is_done(key):
        log.info("run %s: evaluate cached", run.id)
    else:
        redo_from_weights(store, cell, lambda: score(store, cell))
    tables = read_or_rebuild(store, key, lambda: {t: read_table(store, key, f) for t, f in OUTPUTS.items()
                                                  if t == "runs" or store.has_member(key, f)},
                             lambda: redo_from_weights(store, cell, lambda: score(store, cell)))
    for table, rows in tables.items():
        publish(store, table, cell, rows)
    return key


def score(store: Store, cell: Cell, finetuned: Path | None = None) -> None:
    """Evaluate the run's fine-tuned weights and publish the evaluate artifact. `finetuned`: the fine-tune
    step's own output directory before it is published (it evaluates there when the weights are not kept);
    by default the published run, verified."""
    run = cell.run
    key = run_key(run.id, "evaluate")
    from bertology import tasks
    from bertology.train import head_for, load_finetuned
    from bertology.train.device import pick_device

    task = tasks.get_task(run.dataset.task)
    head = head_for(task)
    if finetuned is not None:
        weights, trained = finetuned / "model", json.loads((finetuned / "result.json").read_text())
    else:
        weights = model_dir(store, cell)  # first: retraining damaged weights rewrites result.json too
        tuned = run_key(run.id, "finetune")
        trained = read_or_rebuild(store, tuned, lambda: json.loads(store.read_member(tuned, "result.json")),
                                  lambda: train_run(store, cell))
    data_dir = dataset_dir(store, run.dataset)
    device = pick_device(None)
    model = load_finetuned(weights, task, device)
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
    profile = model_profile(model, run, store, device)
    with store.artifact(key, {"spec": run.to_dict()}) as out:
        pq.write_table(pa.Table.from_pylist(metric_rows), out / "metrics.parquet")
        pq.write_table(pa.Table.from_pylist([profile]), out / "profile.parquet")
        if prediction_tables:
            pq.write_table(pa.concat_tables(prediction_tables), out / "predictions.parquet")


def model_profile(model, run, store: Store, device) -> dict:
    """Parameters, depth, the intervention's CPU seconds (the report's "cost to make") and inference speed
    at the run's evaluation batch size and the dataset's max length."""
    from bertology.train.profile import inference_speed, parameter_counts

    built = checkpoint_key(run.checkpoint.id)
    make_seconds = read_or_rebuild(
        store, built, lambda: json.loads(store.read_member(built, "build.json"))["intervention_cpu_seconds"]
        if store.has_member(built, "build.json") else None, lambda: build_checkpoint.build(store, run.checkpoint))
    return {**parameter_counts(model), "encoder_layers": model.config.num_hidden_layers,
            "intervention_cpu_seconds": make_seconds, "device": str(device),
            **inference_speed(model, batch_size=run.regime.eval_batch_size, seq_len=run.dataset.max_length,
                              device=device)}


def run(store: Store, args) -> None:
    for cell in require_cells(store, args, "evaluate"):
        evaluate(store, cell)
