"""shuffle-embeddings: permute word-embedding rows among non-special tokens (param: english_only).

The monolingual-pretraining report's "shuffled word-piece embeddings": every component keeps its
pre-trained values but the word-piece → embedding-row alignment is shuffled, so the model must re-learn
which vector is which token. Special tokens (tokenizer.all_special_ids: [CLS], [SEP], [PAD], [MASK],
[UNK], …) keep their rows. With `english_only: true` (what the report did: "we only map English tokens to
English embedding vectors") only tokens matching `(##)?[A-Za-z]+` trade rows, among themselves; every
other row stays. Rows beyond the tokenizer's vocabulary (a padded table) have no token and stay.

Rows are moved in place, so a tied MLM decoder (the same tensor) moves with them and stays tied; the MLM
head's per-token output bias stays with its token. The permutation is uniform over the candidates, drawn
from the chain's generator.
"""

from __future__ import annotations

import re

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.errors import BadInput
from bertology.interventions import parts
from bertology.sampling import permutation

RANDOM = True  # draws from the chain's generator: a new seed gives a new checkpoint
DEFAULTS: dict = {"english_only": False}
ENGLISH = re.compile(r"(##)?[A-Za-z]+")


def check(params: dict, config: PretrainedConfig) -> None:
    if not isinstance(params["english_only"], bool):
        raise BadInput(f"shuffle-embeddings english_only {params['english_only']!r} is not allowed; "
                       "allowed: true or false")


def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    weight = parts.word_embeddings(model).weight
    rows = shuffled_rows(tokenizer, weight.shape[0], params["english_only"])
    order = rows[permutation(len(rows), generator)]
    rows, order = rows.to(weight.device), order.to(weight.device)
    with torch.no_grad():
        weight[rows] = weight[order]
    return model, tokenizer


def shuffled_rows(tokenizer: PreTrainedTokenizerBase, rows: int, english_only: bool) -> torch.Tensor:
    """The row indices that trade places: the tokenizer's ids below `rows`, minus the special tokens (and,
    with english_only, minus every token that is not English-like)."""
    if tokenizer is None or not hasattr(tokenizer, "all_special_ids"):
        raise TypeError("shuffle-embeddings needs the model's tokenizer (to keep special tokens in place)")
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(min(rows, len(tokenizer))) if i not in special]
    if english_only:
        tokens = tokenizer.convert_ids_to_tokens(ids)
        ids = [i for i, token in zip(ids, tokens) if ENGLISH.fullmatch(token)]
    return torch.tensor(ids, dtype=torch.int64)
