"""Scoring fine-tuned weights: every evaluation split of the task, the per-example predictions, and the
model's size and measured inference speed (`model_profile`, layer-removal's Table 7), measured on the
training device.

Why apart from the evaluate step: the fine-tune step scores a run's weights in its own pod when they are
not kept, and the evaluate step scores kept ones; both call this, and neither imports the other.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import bertology
from bertology.spec import Cell
from bertology.steps import build_checkpoint
from bertology.steps.common import checkpoint_key, read_or_rebuild, run_key
from bertology.steps.inputs import dataset_dir
from bertology.store import Store

log = logging.getLogger("bertology")


def score(store: Store, cell: Cell, weights: Path, trained: dict) -> None:
    """Evaluate fine-tuned `weights` (a saved model's folder) on every eval split of the cell's task and
    publish the evaluate artifact; `trained` is the fine-tune step's result.json (best epoch, wall time,
    device, ...)."""
    from bertology import tasks
    from bertology.train import load_finetuned
    from bertology.train.device import pick_device

    device = pick_device(None)
    score_model(store, cell, load_finetuned(weights, tasks.get_task(cell.run.dataset.task), device), trained)


def score_model(store: Store, cell: Cell, model, trained: dict, evaluated: dict | None = None) -> None:
    """`score` of a fine-tuned model in memory, on the device it is on and as it is (a torch.compiled model
    evaluates compiled, as its training curves did): the fine-tune step's, for weights it does not keep
    (they are never written and read back). `evaluated`: split -> (metrics, predictions) that
    head.evaluate already returned for these weights (the training loop's, at the selected point); the
    splits it lacks are evaluated here. The model is left in eval mode."""
    run = cell.run
    key = run_key(run.id, "evaluate")
    from bertology import tasks
    from bertology.train import head_for

    task = tasks.get_task(run.dataset.task)
    head = head_for(task)
    data_dir = dataset_dir(store, run.dataset)
    device = next(model.parameters()).device
    model.eval()
    metric_rows, prediction_tables = [], []
    evaluated = evaluated or {}
    for split in task.eval_splits:
        metrics, predictions = evaluated.get(split) or head.evaluate(
            model, head.read_split(data_dir, split), batch_size=run.regime.eval_batch_size, device=device)
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
