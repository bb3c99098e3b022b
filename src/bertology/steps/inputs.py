"""A run's inputs as files here, verified: its built checkpoint and its prepared dataset, each rebuilt first
(deterministically) when damaged.

Why a module of its own: fine-tuning, scoring and measuring all read them, and no step imports another
(the fine-tune step calls scoring and measuring on weights that never leave its pod).
"""

from __future__ import annotations

from pathlib import Path

from bertology.steps import build_checkpoint, prepare_data
from bertology.steps.common import checkpoint_key, dataset_key, read_or_rebuild
from bertology.store import Store


def checkpoint_dir(store: Store, spec) -> Path:
    """The built checkpoint's files, verified; a damaged checkpoint is rebuilt first (deterministic)."""
    key = checkpoint_key(spec.id)
    return read_or_rebuild(store, key, lambda: store.local_dir(key), lambda: build_checkpoint.build(store, spec))


def dataset_dir(store: Store, spec) -> Path:
    """The prepared dataset's files, verified; a damaged dataset is prepared again first."""
    key = dataset_key(spec.id)
    return read_or_rebuild(store, key, lambda: store.local_dir(key), lambda: prepare_data.prepare(store, spec))
