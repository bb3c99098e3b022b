"""prepare-data: a task's examples, subset and tokenized once per (task, source, tokenizer, length, subset).

Writes `data/<dataset-id>/<split>.parquet` for every split (token ids without padding; batches pad
dynamically), `meta.json`, and per kind:
- span (SQuAD): one row per window of `max_length` tokens sliding by `doc_stride`, plus
  `<split>.examples.parquet` for evaluation splits (the questions and gold answers the windows map back to);
- mlm: evaluation splits carry fixed masks (seed 0 and the row: the same sentence is masked the same way
  in every run and at every step), training splits are masked on the fly;
- `probe.json`: the first 16 texts of the first evaluation split, the fixed batch on which the activation
  distance to a native model is measured.
Training subsets (fraction/count) and evaluation caps (eval_count) are seeded and stratified: by label,
by answerable or not for SQuAD. Every run on the dataset reuses it.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow.parquet as pq

from bertology import tasks
from bertology.data import subset_indices, tokenize_split
from bertology.spec import DatasetSpec
from bertology.steps.common import dataset_key, local_model_ref
from bertology.steps.harness import require_one
from bertology.store import Store

log = logging.getLogger("bertology")

PROBE_SIZE = 16  # the cross-lingual report's single batch of 16 sentences
PROBE_FIELD = {"sequence": "text_a", "span": "context", "mlm": "text"}


def _strata(task, examples) -> np.ndarray:
    """What subsets are stratified by."""
    if task.kind == "sequence":
        return np.asarray(examples["label"])
    if task.kind == "span":
        return np.array([bool(a) for a in examples["answer_texts"]], dtype=np.int64)
    return np.zeros(len(examples), dtype=np.int64)


def _tokenize(task, spec: DatasetSpec, examples, tokenizer, split: str):
    if task.kind == "sequence":
        return tokenize_split(examples, task, tokenizer, spec.max_length)
    if task.kind == "span":
        from bertology.tasks.squad import tokenize_squad

        return tokenize_squad(examples.with_format("arrow")[:], tokenizer, spec.max_length,
                              spec.doc_stride or spec.max_length // 3)  # 128 at 384, as HF's examples
    from bertology.tasks.corpora import fixed_eval_masks, tokenize_corpus

    table = tokenize_corpus(examples["text"], tokenizer, spec.max_length)
    return table if split == "train" else fixed_eval_masks(table, tokenizer, seed=0)


def prepare(store: Store, spec: DatasetSpec) -> str:
    key = dataset_key(spec.id)
    if store.is_done(key):
        log.info("dataset %s (%s): cached", spec.id, spec.task)
        return key
    task = tasks.get_task(spec.task)
    tasks.check_source(task, spec.source)
    from bertology import models  # heavy import only when there is work

    tokenizer = models.load_tokenizer(local_model_ref(spec.tokenizer))
    meta = {"spec": spec.to_dict(), "task": task.name, "kind": task.kind, "splits": {}}
    with store.artifact(key, {"spec": spec.to_dict()}) as out:
        for split in task.splits:
            examples = tasks.load_split(task, spec.source, split)
            total = len(examples)
            if split == "train" and (spec.fraction is not None or spec.count is not None):
                examples = examples.select(subset_indices(_strata(task, examples), fraction=spec.fraction,
                                                          count=spec.count, seed=spec.subset_seed))
            elif split != "train" and spec.eval_count is not None and spec.eval_count < total:
                examples = examples.select(subset_indices(_strata(task, examples), count=spec.eval_count, seed=0))
            if split == task.eval_splits[0]:
                probe = examples[PROBE_FIELD[task.kind]][:PROBE_SIZE]
                (out / "probe.json").write_text(json.dumps(probe, ensure_ascii=False, indent=1))
            table = _tokenize(task, spec, examples, tokenizer, split)
            pq.write_table(table, out / f"{split}.parquet", compression="zstd")
            if task.kind == "span" and split != "train":
                pq.write_table(examples.with_format("arrow")[:], out / f"{split}.examples.parquet",
                               compression="zstd")
            lengths = table.column("length").to_numpy()
            meta["splits"][split] = {"rows": len(examples), "of": total, "sequences": table.num_rows,
                                     "max_length": int(lengths.max(initial=0)),
                                     "mean_length": float(lengths.mean()) if len(lengths) else 0.0}
            log.info("dataset %s %s/%s: %d of %d examples, %d sequences, mean length %.1f", spec.id, task.name,
                     split, len(examples), total, table.num_rows, meta["splits"][split]["mean_length"])
        (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return key


def run(store: Store, args) -> None:
    prepare(store, require_one(store, args, "prepare-data", "dataset"))
