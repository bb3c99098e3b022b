"""reverse-layers: encoder layer i takes the weights of layer L-1-i.

Tests whether pre-trained knowledge survives in the individual layers when their order is lost. The layers
are moved as whole modules, so each keeps its weights bit for bit; the state_dict keys follow the new
positions, which makes a saved checkpoint reload in the reversed order.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.interventions.parts import encoder_layers, renumber

__all__ = ["ALLOWED", "apply", "check", "encoder_layers", "reverse_encoder_layers"]

# each parameter's (type, allowed values), as `bertology interventions` lists them
ALLOWED: dict[str, tuple[str, str]] = {}


def check(params: dict, config: PretrainedConfig) -> None:
    """No parameters; every depth can be reversed."""


def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    return reverse_encoder_layers(model), tokenizer


def reverse_encoder_layers(model: nn.Module) -> nn.Module:
    """Reverse the encoder's layers in place (layer_idx renumbered to the new positions); return the model."""
    layers = encoder_layers(model)
    for position, layer in enumerate(list(layers)[::-1]):
        layers[position] = layer
    renumber(layers)
    return model
