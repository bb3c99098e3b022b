"""match-moments: re-draw weight matrices, scaled to pre-trained norm or variance.

The monolingual report §5.1: "for each pre-trained weight matrix, we note its magnitude (or
variance), randomly re-initialize its values, and scale it to match pre-trained magnitude (or variance)".
Each selected tensor is drawn afresh from BERT's truncated normal (mean 0, `std`, cut at ±2 std; every
element, [PAD]'s row included) and multiplied by one factor so that:

- `match: norm`: its Frobenius norm equals the pre-trained tensor's;
- `match: variance`: its variance equals the pre-trained tensor's. Only scaled, as the report says, not
  shifted: the mean is not matched (it stays the draw's, ≈ 0; a pre-trained weight matrix's mean is ≈ 0
  too, so matching it would change little and is not what was run).

Both hit the target to float32 rounding (≪ 1e-5 relative); the factor is computed in float64. "Weight
matrices" are the parameters with two or more dimensions (Linear weights, the word, position and
token-type embeddings, a task head's weights); biases and LayerNorms keep their pre-trained values.
`tensors` (name globs, see tensor_globs) narrows the selection; each glob must match a matrix. A tied
tensor is drawn once.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.errors import BadInput
from bertology.interventions import tensor_globs
from bertology.interventions.catalog import CATALOG
from bertology.sampling import trunc_normal_

ENTRY = CATALOG["match-moments"]  # its defaults, randomness and listed values: one source, torch-free
MATCHES = ENTRY.enums["match"]
# each parameter's (type, allowed values), as `bertology interventions` lists them
ALLOWED: dict[str, tuple[str, str]] = {
    "match": ("str", "required: " + " | ".join(MATCHES)),
    "std": ("float", "a finite number > 0 (the draw's std before scaling)"),
    "tensors": ("list[str]", ('parameter-name globs, each matching a weight matrix (2 or more dimensions); ["*"]: '
                             "every weight matrix")),
}


def check(params: dict, config: PretrainedConfig) -> None:
    if params["match"] not in MATCHES:
        raise BadInput(f"match-moments match {params['match']!r} is not allowed; "
                       f"allowed: {', '.join(MATCHES)}")
    std = params["std"]
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std <= 0:
        raise BadInput(f"match-moments std {std!r} is not allowed; allowed: a finite number > 0")
    tensor_globs.check(params["tensors"], config, "match-moments tensors", matrices_only=True)


@torch.no_grad()
def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    chosen = tensor_globs.select(model, params["tensors"], "match-moments tensors", matrices_only=True)
    for _, param in chosen:
        target = moment(param, params["match"])
        trunc_normal_(param, float(params["std"]), generator)
        param.mul_(target / moment(param, params["match"]))
    return model, tokenizer


def moment(tensor: torch.Tensor, match: str) -> float:
    """The tensor's Frobenius norm or its standard deviation (so that one factor scales it), in float64."""
    if match == "norm":
        return float(torch.linalg.vector_norm(tensor, dtype=torch.float64))
    return float(tensor.double().std()) if tensor.numel() > 1 else 0.0
