"""The record of what an intervention chain did to a checkpoint: which tensors changed, and their norms.

It is computed by comparison (a snapshot before, the state_dict after), not by trusting each intervention
to report itself, so a tensor changed by accident shows up and one left alone by mistake does too. Beside
it, `facts` holds what a comparison of whole tensors cannot say, from the interventions that give it (how
many word-embedding rows of each kind shuffle-embeddings moved and kept); a chain without any has no
`facts` key, so its manifest reads as before.
"""

from __future__ import annotations

import torch
from torch import nn


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the state_dict, taken before the chain runs (in-place interventions would alias it)."""
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}


def parameter_count(model: nn.Module) -> int:
    """Parameters counted once each (tied weights are one parameter)."""
    return sum(p.numel() for p in model.parameters())


def tensor_changes(before: dict[str, torch.Tensor], model: nn.Module) -> list[dict]:
    """One row per state_dict tensor: changed = not bit-identical (shape, dtype and values), and norms.

    A tensor that only exists on one side (a removed layer, say) is changed, with a norm of None there.
    """
    after = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    rows = []
    for name in [*before, *(name for name in after if name not in before)]:
        old, new = before.get(name), after.get(name)
        changed = old is None or new is None or old.dtype != new.dtype or not torch.equal(old, new)
        rows.append(
            {
                "name": name,
                "shape": list((new if new is not None else old).shape),
                "changed": changed,
                "norm_before": _norm(old),
                "norm_after": _norm(new),
            }
        )
    return rows


def build_manifest(
    chain: list[dict], seed: int, before: dict[str, torch.Tensor], count_before: int, model: nn.Module,
    facts: list[dict] | None = None,
) -> dict:
    """The JSON-serialisable manifest written next to a built checkpoint."""
    record = {
        "chain": chain,
        "seed": seed,
        "parameters": {"before": count_before, "after": parameter_count(model)},
        "tensors": tensor_changes(before, model),
    }
    if facts:
        record["facts"] = facts
    return record


def _norm(tensor: torch.Tensor | None) -> float | None:
    return None if tensor is None else float(tensor.double().norm())
