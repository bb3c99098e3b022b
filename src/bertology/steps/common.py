"""Small pieces several steps share: where artifacts live, and model references that point into a store."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

from bertology import models
from bertology.errors import BadInput
from bertology.spec import Cell, canonical_json
from bertology.store import Damaged, Store, open_store, parse_parquet

log = logging.getLogger("bertology")
T = TypeVar("T")


def checkpoint_key(checkpoint_id: str) -> str:
    return f"checkpoints/{checkpoint_id}"


def dataset_key(dataset_id: str) -> str:
    return f"data/{dataset_id}"


def run_key(run_id: str, step: str) -> str:
    return f"runs/{run_id}/{step}"


def fusable(cell: Cell) -> tuple[str, str, int]:
    """What runs trained as one model share (bertology.train.fused): the dataset (and so the batches, a pure
    function of the seed and epoch), the regime (learning rate, schedule, weight decay, clipping) and the seed."""
    return cell.run.dataset.id, canonical_json(cell.run.regime), cell.run.seed


def read_or_rebuild(store: Store, prefix: str, read: Callable[[], T], rebuild: Callable[[], object]) -> T:
    """`read()` what a step needs from the artifact at `prefix` (verified against its marker); if it is
    damaged, say so in one line, treat the artifact as missing (discard it), rebuild it and read again."""
    try:
        return read()
    except Damaged as e:
        log.warning("%s; treated as missing and rebuilt", e)
        store.discard(prefix, e.marker)
    rebuild()
    return read()


def read_table(store: Store, prefix: str, name: str) -> pa.Table:
    """A Parquet file of a finished artifact, verified against the marker."""
    return parse_parquet(store.read_member(prefix, name), store.url(f"{prefix}/{name}"))


def model_config(text: str):
    """A model's config without its weights (plan validates against it); store URIs read config.json only."""
    ref = models.parse_model_ref(text)
    if ref.kind != "store":
        models.check_model_ref(ref)
        return models.load_config(ref)
    from transformers import AutoConfig

    store = open_store(ref.location)
    if not store.is_done(""):
        raise BadInput(f"model '{text}' is not a finished checkpoint in the store (no _SUCCESS.json)")
    config = store.read_json("config.json")
    if "model_type" not in config:
        raise BadInput(f"model '{text}' has no model_type in its config.json (only BERT-family models are supported)")
    return models.require_bert(AutoConfig.for_model(**config), text)


def local_model_ref(text: str) -> models.ModelRef:
    """A model reference whose files are readable here: store URIs are fetched into the local cache."""
    ref = models.parse_model_ref(text)
    if ref.kind != "store":
        return ref
    return models.parse_model_ref("dir:" + str(open_store(ref.location).local_dir("")))
