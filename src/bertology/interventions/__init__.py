"""Model surgery on BERT checkpoints: a registry of small, pure interventions that chain.

The registry (and torch, which its modules import) loads on first use of one of the names below, so that
`bertology.interventions.catalog`, the names and the checks that need no model, imports without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bertology.interventions.registry import (
        REGISTRY,
        Intervention,
        apply_chain,
        chain_config,
        is_random,
        validate_chain,
    )

__all__ = ["REGISTRY", "Intervention", "apply_chain", "chain_config", "is_random", "validate_chain"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("bertology.interventions.registry"), name)
    raise AttributeError(f"module 'bertology.interventions' has no attribute {name!r}")
