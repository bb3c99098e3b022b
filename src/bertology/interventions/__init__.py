"""Model surgery on BERT checkpoints: a registry of small, pure interventions that chain (DESIGN.md §5)."""

from bertology.interventions.registry import (
    REGISTRY,
    Intervention,
    apply_chain,
    chain_config,
    is_random,
    validate_chain,
)

__all__ = ["REGISTRY", "Intervention", "apply_chain", "chain_config", "is_random", "validate_chain"]
