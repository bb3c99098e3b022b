"""Task heads: what differs between task kinds when training and evaluating, and nothing else.

The fine-tuning loop is the same for every kind; a head says which model class to load, how a batch of
prepared rows becomes model inputs, and how an evaluation split is scored:

- `SequenceHead` (sequence): AutoModelForSequenceClassification, one label per row (a float for
  regression); metrics from scikit-learn/scipy on (labels, predictions).
- `SpanHead` (span): AutoModelForQuestionAnswering over SQuAD windows (doc stride); the start/end logits
  of all windows of a question are post-processed into one answer or "no answer", and scored with the
  official SQuAD 2.0 logic (bertology.squad_eval).
- `MaskedLMHead` (mlm): AutoModelForMaskedLM; training batches are masked on the fly from a seed that is a
  pure function of (run seed, epoch, batch) so that a resumed run masks exactly as an uninterrupted one,
  and evaluation splits carry fixed masks, so perplexities compare across steps and checkpoints.

A sequential run (fine-tuning after an intermediate task) starts from the intermediate run's model with
either head: `new_head=True` loads its encoder and gives it a freshly initialised task head, whatever head
the checkpoint had (even one of the same shape); `carry_head=True` keeps the intermediate run's head, and
refuses a head that does not fit the final task rather than silently drawing one.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    BertForMaskedLM,
)

from bertology import metrics
from bertology.data import Encoded, eval_batches
from bertology.errors import BadInput
from bertology.tasks import Task
from bertology.tasks.corpora import IGNORE, mask_tokens
from bertology.train.device import autocast, pad_multiple, pick_device, to_device

# One schema for every kind, so a study's predictions are one table: `text` is the answer of span tasks.
PREDICTION_COLUMNS = ("idx", "label", "prediction", "score", "text")


def pad_id(model) -> int:
    # Padded positions are masked out of attention, so the id only has to be a valid embedding row.
    return model.config.pad_token_id if model.config.pad_token_id is not None else 0


def _predictions(idx, label, prediction, score, text=None) -> pa.Table:
    n = len(idx)
    return pa.table({
        "idx": pa.array(np.asarray(idx, dtype=np.int64)),
        "label": pa.array(np.asarray(label, dtype=np.float64)),
        "prediction": pa.array(np.asarray(prediction, dtype=np.float64)),
        "score": pa.array(np.asarray(score, dtype=np.float64)),
        "text": pa.array(text if text is not None else [None] * n, pa.string()),
    }).sort_by("idx")


def _drop_token_types(module, args, kwargs):
    kwargs.pop("token_type_ids", None)
    return args, kwargs


class Head:
    """The kind-specific half of training and evaluation (see the module docstring)."""

    model_class = AutoModelForSequenceClassification
    head_names: tuple[str, ...] = ()  # the modules a new head re-initialises

    def __init__(self, task: Task, tokenizer=None, pad_multiple: int = 0):
        self.task = task
        self.tokenizer = tokenizer
        self.pad_multiple = pad_multiple  # batch widths round up to a multiple of this; 0: the model's device's

    def batch(self, examples: Encoded, indices, model, pad: dict[str, int] | None = None) -> dict[str, np.ndarray]:
        """Rows `indices` padded for `model`: its pad id, widths rounded up to `pad_multiple` (by default
        that of the model's device, device.pad_multiple)."""
        multiple = self.pad_multiple or pad_multiple(next(model.parameters()).device)
        return examples.batch(indices, {"input_ids": pad_id(model), **(pad or {})}, multiple=multiple,
                              limit=getattr(model.config, "max_position_embeddings", None))

    def model_kwargs(self) -> dict:
        return {}

    def load(self, model_dir: str | Path, *, new_head: bool = False, carry_head: bool = False,
             device=None) -> torch.nn.Module:
        """The model in `model_dir` with this kind's head, fp32 master weights whatever the checkpoint's
        dtype (bf16 is only the autocast compute type), SDPA attention."""
        if (new_head or carry_head) and not self.head_names:
            raise BadInput(f"task {self.task.name} ({self.task.kind}) cannot start from another task's model "
                           "(sequential fine-tuning needs a sequence or span final task)")
        if new_head and carry_head:
            raise BadInput("a sequential run's head is new or carried, not both")
        if carry_head:
            model, loading = self.model_class.from_pretrained(
                model_dir, attn_implementation="sdpa", dtype=torch.float32, trust_remote_code=False,
                ignore_mismatched_sizes=True, output_loading_info=True, **self.model_kwargs())
            drawn = [key for key in (*loading["missing_keys"], *(m[0] for m in loading["mismatched_keys"]))
                     if key.split(".")[0] in self.head_names]
            if drawn:
                raise BadInput(f"task {self.task.name} cannot carry the head of the model in {model_dir}: its "
                               f"{', '.join(sorted(drawn))} does not fit or is missing (allowed: final_head=new)")
        else:
            model = self.model_class.from_pretrained(
                model_dir, attn_implementation="sdpa", dtype=torch.float32, trust_remote_code=False,
                ignore_mismatched_sizes=new_head, **self.model_kwargs())
        if new_head:
            std = model.config.initializer_range
            for name in self.head_names:
                for module in getattr(model, name).modules():
                    if isinstance(module, torch.nn.Linear):
                        with torch.no_grad():
                            module.weight.normal_(0.0, std)
                            module.bias.zero_()
        if "token_type_ids" not in inspect.signature(model.forward).parameters:  # DistilBERT has no segments
            model.register_forward_pre_hook(_drop_token_types, with_kwargs=True)
        return model.to(pick_device(device))

    def read_split(self, data_dir: str | Path, split: str):
        """One prepared evaluation split, as `evaluate` takes it."""
        return pq.read_table(Path(data_dir) / f"{split}.parquet")

    def train_inputs(self, examples: Encoded, indices, model, key: tuple[int, ...]) -> dict[str, np.ndarray]:
        """Model inputs (with the loss's targets) for training rows `indices`; `key` seeds any randomness."""
        raise NotImplementedError

    def evaluate(self, model, data, *, batch_size: int, device) -> tuple[dict[str, float], pa.Table | None]:
        """Metrics of the task on one evaluation split, and per-example predictions (None when the kind has
        none)."""
        raise NotImplementedError

    def _outputs(self, model, examples: Encoded, batch_size: int, device, names: tuple[str, ...], *,
                 per_token: bool) -> list[np.ndarray]:
        """Run `model` over `examples` in length-sorted batches without gradients; the named outputs of every
        example in row order (per-token outputs padded with -1e4 to the longest row). One host sync."""
        batches = eval_batches(examples.lengths, batch_size)
        was_training = model.training
        model.eval()
        collected = []
        with torch.inference_mode(), autocast(device):
            for rows in batches:
                batch = self.batch(examples, rows, model)
                inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
                out = model(**to_device(inputs, device))
                collected.append([getattr(out, name).to(torch.float32, copy=True) for name in names])
        model.train(was_training)
        results = []
        for j in range(len(names)):
            parts = [c[j].cpu().numpy() for c in collected]
            if per_token:
                full = np.full((len(examples), int(examples.lengths.max())), -1e4, dtype=np.float32)
                for rows, part in zip(batches, parts):
                    width = int(examples.lengths[rows].max())  # a bucketed batch is wider: drop its extra pads
                    full[rows, :width] = part[:, :width]
            else:
                full = np.empty((len(examples), *parts[0].shape[1:]), dtype=np.float32)
                full[np.concatenate(batches)] = np.concatenate(parts)
            results.append(full)
        return results


class SequenceHead(Head):
    model_class = AutoModelForSequenceClassification
    head_names = ("classifier",)

    def model_kwargs(self) -> dict:
        # Explicit, so a sequential run's checkpoint (say STS-B's regression config) cannot decide the loss.
        problem = "regression" if self.task.is_regression else "single_label_classification"
        return {"num_labels": self.task.num_labels, "problem_type": problem}

    def train_inputs(self, examples, indices, model, key):
        batch = self.batch(examples, indices, model)
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                "token_type_ids": batch["token_type_ids"], "labels": batch["label"]}

    def evaluate(self, model, data, *, batch_size, device):
        if len(data) == 0:
            raise BadInput(f"cannot evaluate {self.task.name} on an empty split (it has 0 rows)")
        examples = Encoded.from_table(data)
        (logits,) = self._outputs(model, examples, batch_size, device, ("logits",), per_token=False)
        if self.task.is_regression:
            prediction = score = logits[:, 0]
        else:
            probs = torch.softmax(torch.from_numpy(logits), dim=-1).numpy()
            prediction = probs.argmax(axis=1)
            score = probs[np.arange(len(probs)), prediction]
        values = metrics.compute(self.task.metrics, examples.labels, prediction)
        return values, _predictions(data.column("idx").to_numpy(), examples.labels, prediction, score)


@dataclass(frozen=True)
class SpanSplit:
    """A prepared SQuAD evaluation split: the windows the model reads and the questions they belong to."""

    features: pa.Table
    examples: pa.Table


class SpanHead(Head):
    model_class = AutoModelForQuestionAnswering
    head_names = ("qa_outputs",)

    def read_split(self, data_dir, split):
        return SpanSplit(pq.read_table(Path(data_dir) / f"{split}.parquet"),
                         pq.read_table(Path(data_dir) / f"{split}.examples.parquet"))

    def train_inputs(self, examples, indices, model, key):
        batch = self.batch(examples, indices, model)
        return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids", "start_positions",
                                      "end_positions")}

    def evaluate(self, model, data: SpanSplit, *, batch_size, device):
        from bertology import squad_eval
        from bertology.tasks import squad

        features = data.features.select(["input_ids", "token_type_ids", "length"])
        if len(features) == 0:
            raise BadInput(f"cannot evaluate {self.task.name} on an empty split (it has 0 windows)")
        start, end = self._outputs(model, Encoded.from_table(features), batch_size, device,
                                   ("start_logits", "end_logits"), per_token=True)
        answers, na_scores = squad.postprocess(data.examples, data.features, start, end)
        ids = data.examples.column("id").to_pylist()
        gold = dict(zip(ids, data.examples.column("answer_texts").to_pylist()))
        values = squad_eval.evaluate(gold, answers, na_scores)
        answered = [na_scores[i] <= 0.0 for i in ids]  # the threshold `exact` and `f1` use
        return values, _predictions(
            np.arange(len(ids)), [bool(gold[i]) for i in ids], answered, [na_scores[i] for i in ids],
            [answers[i] if a else "" for i, a in zip(ids, answered)])


class MaskedLMHead(Head):
    model_class = AutoModelForMaskedLM

    def train_inputs(self, examples, indices, model, key):
        if self.tokenizer is None or self.tokenizer.mask_token_id is None:
            raise BadInput(f"masked-LM training needs a tokenizer with a mask token "
                           f"({type(self.tokenizer).__name__} has none)")
        batch = self.batch(examples, indices, model)
        special = np.isin(batch["input_ids"], self.tokenizer.all_special_ids) | (batch["attention_mask"] == 0)
        masked, labels = mask_tokens(batch["input_ids"], special, mask_id=self.tokenizer.mask_token_id,
                                     vocab_size=model.config.vocab_size, rng=np.random.default_rng(key))
        return {"input_ids": masked, "attention_mask": batch["attention_mask"],
                "token_type_ids": batch["token_type_ids"], "labels": labels}

    def evaluate(self, model, data, *, batch_size, device):
        if len(data) == 0:
            raise BadInput(f"cannot evaluate {self.task.name} on an empty split (it has 0 rows)")
        return perplexity(model, data, batch_size=batch_size, device=pick_device(device)), None


def perplexity(model: BertForMaskedLM, table: pa.Table, *, batch_size: int,
               device: str | torch.device) -> dict[str, float]:
    """Perplexity of a masked-LM (already on `device`) on the labelled positions of a table from
    `fixed_eval_masks`: exp of the mean token cross-entropy.

    Rows are batched by length and padded per batch; the summed loss stays on the device until one host
    sync at the end. The MLM head runs only at labelled positions: the vocabulary projection is about half
    of mBERT's compute per token, and 85% of positions are not scored. The model is scored in eval mode
    and left in the mode it came in.
    """
    if not isinstance(model, BertForMaskedLM):
        raise BadInput(f"perplexity needs a BertForMaskedLM, got {type(model).__name__}")
    if "labels" not in table.column_names:
        raise BadInput(f"masked corpus table has no column 'labels' (has: {', '.join(table.column_names)})")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BadInput(f"batch_size must be an integer >= 1, got {batch_size!r}")
    device = pick_device(device)
    examples = Encoded.from_table(table)
    labelled_before = np.concatenate([[0], np.cumsum(examples.tokens["labels"] != IGNORE)])
    scored = labelled_before[examples.offsets[1:]] - labelled_before[examples.offsets[:-1]]  # per row
    tokens = int(scored.sum())
    if tokens == 0:
        raise BadInput(f"no masked tokens to score in {len(table)} rows (expected a table from "
                       "fixed_eval_masks with at least one maskable token)")
    rows = np.flatnonzero(scored)
    total = torch.zeros((), dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), autocast(device):
            for batch_rows in eval_batches(examples.lengths[rows], batch_size):
                batch = examples.batch(rows[batch_rows], {"input_ids": pad_id(model), "labels": IGNORE},
                                       multiple=pad_multiple(device),
                                       limit=getattr(model.config, "max_position_embeddings", None))
                labels = batch["labels"].reshape(-1)
                positions = np.flatnonzero(labels != IGNORE)  # known on the host: no device sync
                inputs = to_device({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                                    "token_type_ids": batch["token_type_ids"], "positions": positions,
                                    "target": labels[positions]}, device)
                hidden = model.bert(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                    token_type_ids=inputs["token_type_ids"]).last_hidden_state
                hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, inputs["positions"])
                logits = model.cls(hidden)  # the vocabulary projection only where a label is scored
                total += F.cross_entropy(logits.float(), inputs["target"], reduction="sum")
    finally:
        model.train(was_training)
    loss = total.item() / tokens
    return {"perplexity": math.exp(loss), "loss": loss, "masked_tokens": tokens}


HEADS: dict[str, type[Head]] = {"sequence": SequenceHead, "span": SpanHead, "mlm": MaskedLMHead}


def head_for(task: Task, tokenizer=None) -> Head:
    return HEADS[task.kind](task, tokenizer)


def evaluate(model, task: Task, data, *, batch_size: int,
             device: str | torch.device | None = None) -> tuple[dict[str, float], pa.Table | None]:
    """Metrics of `task` on one prepared evaluation split, and its predictions table."""
    return head_for(task).evaluate(model, data, batch_size=batch_size, device=pick_device(device))


def load_finetuned(model_dir: str | Path, task: Task, device: str | torch.device | None = None):
    """A model saved by `finetune`, on `device`, in eval mode."""
    if not (Path(model_dir) / "config.json").is_file():
        raise BadInput(f"no fine-tuned model in {model_dir} (expected config.json and model.safetensors)")
    return head_for(task).load(model_dir, device=device).eval()
