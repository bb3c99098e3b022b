"""Evaluate a sequence classifier on a tokenized split: metrics plus one prediction per example.

Batches are sorted by length (little padding, large batches, no shuffling); logits stay on the device
until the end, so the whole pass has a single host sync, and predictions are mapped back to row order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from transformers import AutoModelForSequenceClassification

from bertology import metrics
from bertology.data import Encoded, collate, eval_batches
from bertology.errors import BadInput
from bertology.tasks import Task


def pick_device(device: str | torch.device | None) -> torch.device:
    """`device`, or the GPU when there is one."""
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def autocast(device: torch.device):
    """bf16 autocast on CUDA (the loss and softmax stay fp32); plain fp32 on CPU."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    if device.type == "cuda":  # pinned memory lets the copy overlap the previous step's kernels
        return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}
    return {k: v.to(device) for k, v in batch.items()}


def pad_id(model) -> int:
    # Padded positions are masked out of attention, so the id only has to be a valid embedding row.
    return model.config.pad_token_id if model.config.pad_token_id is not None else 0


def evaluate(model, task: Task, table: pa.Table, *, batch_size: int,
             device: str | torch.device | None = None) -> tuple[dict[str, float], pa.Table]:
    """Metrics of `task` on `table`, and the predictions table: idx, label, prediction and `score` (the
    predicted class's probability; the predicted value itself for regression), sorted by idx."""
    if len(table) == 0:
        raise BadInput(f"cannot evaluate {task.name} on an empty split (it has 0 rows)")
    device = pick_device(device)
    examples = Encoded.from_table(table)
    batches = eval_batches(examples.lengths, batch_size)
    was_training = model.training
    model.eval()
    outputs = []
    with torch.inference_mode(), autocast(device):
        for batch_rows in batches:
            batch = to_device(collate(examples.rows(batch_rows), pad_id(model)), device)
            del batch["labels"]
            outputs.append(model(**batch).logits.float())
    model.train(was_training)
    logits = np.empty((len(examples), outputs[0].shape[1]), dtype=np.float32)
    logits[np.concatenate(batches)] = torch.cat(outputs).cpu().numpy()

    if task.is_regression:
        prediction = score = logits[:, 0]
    else:
        probs = torch.softmax(torch.from_numpy(logits), dim=-1).numpy()
        prediction = probs.argmax(axis=1)
        score = probs[np.arange(len(probs)), prediction]
    predictions = pa.table({
        "idx": table.column("idx"),
        "label": table.column("label"),
        "prediction": pa.array(prediction.astype(np.float32 if task.is_regression else np.int64)),
        "score": pa.array(score.astype(np.float32)),
    }).sort_by("idx")
    return metrics.compute(task.metrics, examples.labels, prediction), predictions


def load_finetuned(model_dir: str | Path, device: str | torch.device | None = None):
    """A fine-tuned classifier saved by `finetune`, on `device`, in eval mode."""
    if not (Path(model_dir) / "config.json").is_file():
        raise BadInput(f"no fine-tuned model in {model_dir} (expected config.json and model.safetensors)")
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, attn_implementation="sdpa", dtype=torch.float32, trust_remote_code=False)
    return model.to(pick_device(device)).eval()
