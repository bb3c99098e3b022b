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
from bertology.errors import BadInput
from bertology.results.tables import publish
from bertology.spec import Cell
from bertology.steps.common import checkpoint_key, dataset_key, run_key
from bertology.steps.harness import require_cells
from bertology.store import Store

log = logging.getLogger("bertology")


def evaluate(store: Store, cell: Cell, finetuned: Path | None = None) -> str:
    """`finetuned`: the fine-tune step's own output directory, before it is published (the finetune step
    evaluates there when the weights are not kept); by default the published run in the store."""
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
        if finetuned is None:
            finetuned = store.local_dir(run_key(run.id, "finetune"))
        trained = json.loads((finetuned / "result.json").read_text())
        model_dir = require_weights(finetuned, run.id)
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
        profile = model_profile(model, run, store, device)
        with store.artifact(key, {"spec": run.to_dict()}) as out:
            pq.write_table(pa.Table.from_pylist(metric_rows), out / "metrics.parquet")
            pq.write_table(pa.Table.from_pylist([profile]), out / "profile.parquet")
            if prediction_tables:
                pq.write_table(pa.concat_tables(prediction_tables), out / "predictions.parquet")
    publish(store, "runs", cell, store.read_parquet(f"{key}/metrics.parquet"))
    if store.exists(f"{key}/predictions.parquet"):
        publish(store, "predictions", cell, store.read_parquet(f"{key}/predictions.parquet"))
    if store.exists(f"{key}/profile.parquet"):
        publish(store, "model_profile", cell, store.read_parquet(f"{key}/profile.parquet"))
    return key


def require_weights(finetuned: Path, run_id: str) -> Path:
    """The run's fine-tuned model directory; a run published without its weights is named, not guessed at."""
    model_dir = finetuned / "model"
    if not (model_dir / "config.json").is_file():
        raise BadInput(f"run {run_id} was published without its fine-tuned weights (they are kept only with "
                       f"keep_weights=true); delete runs/{run_id}/finetune and run it again with keep_weights=true")
    return model_dir


def model_profile(model, run, store: Store, device) -> dict:
    """Parameters, depth, the intervention's CPU seconds (the report's "cost to make") and inference speed
    at the run's evaluation batch size and the dataset's max length."""
    from bertology.train.profile import inference_speed, parameter_counts

    build = f"{checkpoint_key(run.checkpoint.id)}/build.json"
    make_seconds = store.read_json(build)["intervention_cpu_seconds"] if store.exists(build) else None
    return {**parameter_counts(model), "encoder_layers": model.config.num_hidden_layers,
            "intervention_cpu_seconds": make_seconds, "device": str(device),
            **inference_speed(model, batch_size=run.regime.eval_batch_size, seq_len=run.dataset.max_length,
                              device=device)}


def run(store: Store, args) -> None:
    for cell in require_cells(store, args, "evaluate"):
        evaluate(store, cell)
