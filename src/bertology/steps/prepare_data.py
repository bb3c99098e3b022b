"""prepare-data: a task's examples, subset and tokenized once per (task, source, tokenizer, length, subset).

Writes `data/<dataset-id>/{train,validation}.parquet` (token ids without padding; batches pad
dynamically) and `meta.json`; every run on that dataset reuses it.
"""

from __future__ import annotations

import json
import logging

import pyarrow.parquet as pq

from bertology import tasks
from bertology.data import subset_indices, tokenize_split
from bertology.spec import DatasetSpec
from bertology.steps.common import dataset_key, local_model_ref
from bertology.steps.harness import require_spec
from bertology.store import Store

log = logging.getLogger("bertology")


def prepare(store: Store, spec: DatasetSpec) -> str:
    key = dataset_key(spec.id)
    if store.is_done(key):
        log.info("dataset %s (%s): cached", spec.id, spec.task)
        return key
    task = tasks.get_task(spec.task)
    tasks.check_source(task, spec.source)
    from bertology import models  # heavy import only when there is work

    tokenizer = models.load_tokenizer(local_model_ref(spec.tokenizer))
    meta = {"spec": spec.to_dict(), "task": task.name, "splits": {}}
    with store.artifact(key, {"spec": spec.to_dict()}) as out:
        for split in ("train", *task.eval_splits):
            examples = tasks.load_split(task, spec.source, split)
            total = len(examples)
            if split == "train" and (spec.fraction is not None or spec.count is not None):
                keep = subset_indices(examples["label"], fraction=spec.fraction, count=spec.count,
                                      seed=spec.subset_seed)
                examples = examples.select(keep)
            table = tokenize_split(examples, task, tokenizer, spec.max_length)
            pq.write_table(table, out / f"{split}.parquet", compression="zstd")
            lengths = table.column("length").to_pylist()
            meta["splits"][split] = {"rows": table.num_rows, "of": total,
                                     "max_length": max(lengths, default=0),
                                     "mean_length": sum(lengths) / max(len(lengths), 1)}
            log.info("dataset %s %s/%s: %d of %d examples, mean length %.1f", spec.id, task.name, split,
                     table.num_rows, total, meta["splits"][split]["mean_length"])
        (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return key


def run(store: Store, args) -> None:
    prepare(store, DatasetSpec.from_dict(require_spec(args, "prepare-data")))
