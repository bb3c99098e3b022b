"""BERT's initialisation of a whole model or some of its modules: truncated normal weights (σ the config's
initializer_range, cut at ±2σ), zero biases, LayerNorms 1 and 0, drawn from the caller's generator.

Why below the models and the interventions: the random tiny BERT (bertology.models) and the clean
model (the `reinit` intervention, scope `all`) are the same draw, so both use this one function.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.bert.modeling_bert import BertLMPredictionHead

from bertology.sampling import trunc_normal_


def reinit_all(model: nn.Module, std: float, generator: torch.Generator) -> nn.Module:
    """Scope `all`: the whole model as if freshly built (used for the clean model and for tiny models)."""
    reinit_modules(list(model.modules()), std, generator)
    return model


@torch.no_grad()
def reinit_modules(modules: list[nn.Module], std: float, generator: torch.Generator) -> None:
    """Reset every Embedding, Linear and LayerNorm among `modules`, each tensor once.

    Embeddings go first: a decoder tied to the word embeddings then finds its weight already drawn and
    leaves it (and its zeroed padding row) alone. Any parameter directly owned by a module this does
    not know how to initialise is an error, never a silent partial reset.
    """
    done: set[int] = set()
    ordered = [m for m in modules if isinstance(m, nn.Embedding)]
    ordered += [m for m in modules if not isinstance(m, nn.Embedding)]
    for module in ordered:
        if isinstance(module, nn.Embedding):
            if _first_time(module.weight, done):
                trunc_normal_(module.weight, std, generator)
                if module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.Linear):
            if _first_time(module.weight, done):
                trunc_normal_(module.weight, std, generator)
            if module.bias is not None and _first_time(module.bias, done):
                module.bias.zero_()
        elif isinstance(module, nn.LayerNorm):
            if module.weight is not None and _first_time(module.weight, done):
                module.weight.fill_(1.0)
            if module.bias is not None and _first_time(module.bias, done):
                module.bias.zero_()
        elif isinstance(module, BertLMPredictionHead) and _first_time(module.bias, done):
            module.bias.zero_()  # the masked-LM head's per-token output bias (its decoder's, when tied)
    for module in modules:
        for name, param in module.named_parameters(recurse=False):
            if id(param) not in done:
                raise TypeError(f"reinit does not know how to initialise {type(module).__name__}.{name}")


def _first_time(param: torch.Tensor, done: set[int]) -> bool:
    if id(param) in done:
        return False
    done.add(id(param))
    return True
