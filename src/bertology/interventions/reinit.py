"""reinit: re-draw weights the way BERT was initialised before pre-training.

With scope `all` this is the papers' "clean" model, the baseline that shows how much of a result is owed
to pre-training at all: every Linear weight and every embedding (word, position, token type) drawn from
a normal with mean 0 and std `std` (0.02, BERT's initializer_range) truncated at ±2 std, every bias 0,
every LayerNorm weight 1 and bias 0. As in Hugging Face's own init, the word embedding's padding_idx row
is zeroed, so [PAD] starts as the zero vector. The pooler and any task head are included.

The init is written here rather than borrowed from `model._init_weights`: in transformers 5 that skips
every tensor flagged as loaded from a checkpoint (`_is_hf_initialized`), so on a pre-trained model it
silently changes nothing, and it draws an untruncated normal from the global RNG. All draws come from
one CPU generator in float32 and are then copied to the tensor's device and dtype, so a seed gives the
same weights on CPU and GPU.

Scopes select modules; each selected module is reset as a whole. Further scopes (word-embeddings, layers,
pooler) are selectors added to SCOPES; heads, which reset slices of tensors, add their own initialiser.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.errors import BadInput

DEFAULTS: dict = {"scope": "all", "std": 0.02}


def _everything(model: nn.Module) -> list[nn.Module]:
    return list(model.modules())


SCOPES: dict[str, Callable[[nn.Module], list[nn.Module]]] = {"all": _everything}


def check(params: dict, config: PretrainedConfig) -> None:
    scope, std = params["scope"], params["std"]
    if scope not in SCOPES:
        raise BadInput(f"reinit scope {scope!r} is not supported; allowed: {', '.join(SCOPES)}")
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std <= 0:
        raise BadInput(f"reinit std {std!r} is not allowed; allowed: a finite number > 0 (BERT uses 0.02)")


def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    modules = SCOPES[params["scope"]](model)
    reinit_modules(modules, float(params["std"]), generator)
    return model, tokenizer


def reinit_all(model: nn.Module, std: float, generator: torch.Generator) -> nn.Module:
    """Scope `all`: the whole model as if freshly built (used for the clean model and for tiny models)."""
    reinit_modules(_everything(model), std, generator)
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
                _trunc_normal_(module.weight, std, generator)
                if module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.Linear):
            if _first_time(module.weight, done):
                _trunc_normal_(module.weight, std, generator)
            if module.bias is not None and _first_time(module.bias, done):
                module.bias.zero_()
        elif isinstance(module, nn.LayerNorm):
            if module.weight is not None and _first_time(module.weight, done):
                module.weight.fill_(1.0)
            if module.bias is not None and _first_time(module.bias, done):
                module.bias.zero_()
    for module in modules:
        for name, param in module.named_parameters(recurse=False):
            if id(param) not in done:
                raise TypeError(f"reinit does not know how to initialise {type(module).__name__}.{name}")


def _first_time(param: torch.Tensor, done: set[int]) -> bool:
    if id(param) in done:
        return False
    done.add(id(param))
    return True


def _trunc_normal_(tensor: torch.Tensor, std: float, generator: torch.Generator) -> None:
    draw = torch.empty(tensor.shape, dtype=torch.float32)
    nn.init.trunc_normal_(draw, mean=0.0, std=std, a=-2 * std, b=2 * std, generator=generator)
    tensor.copy_(draw)
