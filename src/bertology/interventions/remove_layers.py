"""remove-layers: drop encoder layers, keeping the rest in order with their weights.

The monolingual report's alternative to distillation: "BERT with its last 6 layers removed"
(`last:6`) and "every second of its layers removed" (`every:2`, which keeps layers 0, 2, 4, …). `layers` is
"last:K" (drop the last K), "every:N" (keep layers 0, N, 2N, …) or an explicit list of the 0-based indices
to remove. At least one layer must remain. The kept layers move as whole modules (bit for bit), are
renumbered 0 … k-1 in their original order, and config.num_hidden_layers becomes k, so a saved checkpoint
reloads with the shorter encoder.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.errors import BadInput
from bertology.interventions import parts, selection

# each parameter's (type, allowed values), as `bertology interventions` lists them
ALLOWED: dict[str, tuple[str, str]] = {
    "layers": ("str | list[int]", ('required: "last:K" (drop the last K), "every:N" (keep layers 0, N, 2N, ...) or '
                                  "a list of the 0-based layers to drop; at least one layer must remain")),
}
_FORMS = ("last", "every", "list")


def check(params: dict, config: PretrainedConfig) -> None:
    removed_layers(params, config)


def config_after(params: dict, config: PretrainedConfig) -> PretrainedConfig:
    """The config the next intervention of a chain sees: fewer layers."""
    after = copy.deepcopy(config)
    after.num_hidden_layers = config.num_hidden_layers - len(removed_layers(params, config))
    return after


def removed_layers(params: dict, config: PretrainedConfig) -> list[int]:
    removed = selection.layer_indices(params["layers"], config, "remove-layers layers", _FORMS)
    depth = config.num_hidden_layers
    if len(removed) == depth:
        raise BadInput(f"remove-layers layers {params['layers']!r} removes all {depth} layers; "
                       "allowed: at least one layer must remain")
    return removed


def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    removed = set(removed_layers(params, model.config))
    layers = parts.encoder_layers(model)
    kept = nn.ModuleList(layer for i, layer in enumerate(layers) if i not in removed)
    parts.renumber(kept)
    parts.body(model).encoder.layer = kept
    model.config.num_hidden_layers = len(kept)
    return model, tokenizer
