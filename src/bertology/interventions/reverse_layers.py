"""reverse-layers: encoder layer i takes the weights of layer L-1-i.

Tests whether pre-trained knowledge survives in the individual layers when their order is lost. The layers
are moved as whole modules, so each keeps its weights bit for bit; the state_dict keys follow the new
positions, which makes a saved checkpoint reload in the reversed order.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

DEFAULTS: dict = {}


def check(params: dict, config: PretrainedConfig) -> None:
    """No parameters; every depth can be reversed."""


def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    return reverse_encoder_layers(model), tokenizer


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The encoder's layer list of a BertModel or any BertFor* model (whose body is `model.base_model`)."""
    body = getattr(model, "base_model", model)
    layers = getattr(getattr(body, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(model).__name__} has no BERT encoder (expected base_model.encoder.layer)")
    return layers


def reverse_encoder_layers(model: nn.Module) -> nn.Module:
    """Reverse the encoder's layers in place and return the model.

    Attention modules carry a `layer_idx` (their slot in a key/value cache); it is renumbered so that it
    keeps naming the module's position, as it would in a freshly built model.
    """
    layers = encoder_layers(model)
    reordered = list(layers)[::-1]
    for position, layer in enumerate(reordered):
        layers[position] = layer
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = position
    return model
