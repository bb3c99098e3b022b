"""Which parameter tensors a `tensors` parameter selects: a list of fnmatch globs over parameter names.

Names are those of `model.named_parameters()` for the model being built (a BertModel here:
"encoder.layer.*.attention.self.query.weight", "embeddings.word_embeddings.weight", "*.bias", …); a tied
tensor is listed once, under its first name. Every glob must match something: at plan time that is
checked against a BertModel built from the config on the meta device (no memory, no weights, ~0.1 s), at
apply time against the real model, so a typo is a one-line BadInput rather than a silent no-op.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import torch
from torch import nn
from transformers import BertModel, PretrainedConfig

from bertology.errors import BadInput


def check(globs: object, config: PretrainedConfig, what: str, matrices_only: bool = False) -> None:
    """BadInput unless `globs` is a non-empty list of strings each matching a parameter of the config's
    BertModel (with matrices_only: a parameter of two or more dimensions)."""
    if not isinstance(globs, list) or not globs or not all(isinstance(g, str) and g for g in globs):
        raise BadInput(f"{what} {globs!r} is not allowed; allowed: a non-empty list of parameter-name globs "
                       'such as ["*"] or ["encoder.layer.*.weight"]')
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        skeleton = BertModel(config)
    names = [n for n, p in skeleton.named_parameters() if not matrices_only or p.dim() >= 2]
    names += [f"{BertModel.base_model_prefix}.{n}" for n in names]
    for glob in globs:
        if not any(fnmatchcase(name, glob) for name in names):
            raise BadInput(_no_match(what, glob, matrices_only, "BertModel", names[0]))


def select(
    model: nn.Module, globs: list[str], what: str, matrices_only: bool = False
) -> list[tuple[str, nn.Parameter]]:
    """The model's (name, parameter) pairs matched by any glob, in model order, each tensor once."""
    params = [(n, p) for n, p in model.named_parameters() if not matrices_only or p.dim() >= 2]
    for glob in globs:
        if not any(fnmatchcase(name, glob) for name, _ in params):
            raise BadInput(_no_match(what, glob, matrices_only, type(model).__name__, params[0][0]))
    return [(n, p) for n, p in params if any(fnmatchcase(n, g) for g in globs)]


def _no_match(what: str, glob: str, matrices_only: bool, model: str, example: str) -> str:
    kind = "weight matrix" if matrices_only else "parameter"
    return f"{what} glob {glob!r} matches no {kind} of {model}; allowed: globs over names like {example!r}"
