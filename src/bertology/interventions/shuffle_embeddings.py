"""shuffle-embeddings: permute word-embedding rows among non-special tokens.

The monolingual report's "Shuffle word embeddings" (§4): "All components start with their
pre-trained values. The word-piece to embedding alignments (i.e., the word-piece indices into the
embedding matrix) are shuffled. Special token alignments are preserved, and we only map English tokens to
English embedding vectors." The model must re-learn which vector is which token.

Each row of the word-embedding table is of one kind:
- special: the tokenizer's special tokens (tokenizer.all_special_ids: [CLS], [SEP], [PAD], [MASK], [UNK]);
- reserved: BERT's placeholder pieces `[unusedN]`, never seen in text (their rows were never an input);
- english_like: the report's own "English-like" RegEx (§4.1, Table 2), `(##)?[A-Za-z]+` over the whole
  piece (bertology.vocab): 26,503 of bert-base-uncased's 30,522 pieces, as the report counts;
- other: every other piece (digits, punctuation, other scripts, letters outside A-Z such as ß or é);
- no_token: rows beyond the tokenizer's vocabulary (a padded table), which no token uses.

With `english_only: true` (the report's shuffle) English-like rows trade places among themselves, so an
English token only ever gets an English vector. A shuffle is a permutation, so the other pieces can then
only get each other's vectors: with `others: shuffle` (the default, the report's reading: it preserves
only the special tokens' alignments) they trade among themselves; `others: keep` keeps every one of them
in place (a milder shuffle, bit-for-bit what this intervention did before `others` existed). Special and
reserved rows stay; that reserved pieces count as special is assumed (the report does not say). With
`english_only: false` every special row stays and all the other token rows (reserved ones included) trade
places as one group. Rows without a token always stay. `facts` gives the counts the manifest records.

Rows are moved in place, so a tied MLM decoder (the same tensor) moves with them and stays tied; the MLM
head's per-token output bias stays with its token. Each group's permutation is uniform over its rows,
drawn from the chain's generator, English-like first.
"""

from __future__ import annotations

import re

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.errors import BadInput
from bertology.interventions import parts
from bertology.interventions.catalog import CATALOG
from bertology.sampling import permutation
from bertology.vocab import is_english_like

ENTRY = CATALOG["shuffle-embeddings"]  # its defaults, randomness and listed values: one source, torch-free
OTHERS = ENTRY.enums["others"]
# each parameter's (type, allowed values), as `bertology interventions` lists them
ALLOWED: dict[str, tuple[str, str]] = {
    "english_only": ("bool", ("true | false; true: English-like rows trade places only among themselves (the report's "
                             "shuffle)")),
    "others": ("str", " | ".join(OTHERS) + "; keep (the other rows stay in place) only with english_only true"),
}
KINDS = ("english_like", "other", "special", "reserved", "no_token")
RESERVED = re.compile(r"\[unused\d+\]")


def check(params: dict, config: PretrainedConfig) -> None:
    if not isinstance(params["english_only"], bool):
        raise BadInput(f"shuffle-embeddings english_only {params['english_only']!r} is not allowed; "
                       "allowed: true or false")
    if not isinstance(params["others"], str) or params["others"] not in OTHERS:
        raise BadInput(f"shuffle-embeddings others {params['others']!r} is not allowed; "
                       f"allowed: {', '.join(OTHERS)}")
    if params["others"] == "keep" and not params["english_only"]:
        raise BadInput("shuffle-embeddings others 'keep' applies only with english_only true; allowed with "
                       "english_only false: shuffle")


def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    weight = parts.word_embeddings(model).weight
    kinds = row_kinds(tokenizer, weight.shape[0])
    for group in shuffled_groups(params):
        rows = torch.tensor(sorted(i for kind in group for i in kinds[kind]), dtype=torch.int64)
        order = rows[permutation(len(rows), generator)]
        rows, order = rows.to(weight.device), order.to(weight.device)
        with torch.no_grad():
            weight[rows] = weight[order]
    return model, tokenizer


def facts(model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict) -> dict:
    """How many rows of each kind there are, which kinds trade places (each group among itself) and which
    stay: the manifest's record, so a reader sees what moved without the tokenizer at hand."""
    kinds = row_kinds(tokenizer, parts.word_embeddings(model).weight.shape[0])
    groups = shuffled_groups(params)
    moved = {kind for group in groups for kind in group}
    return {"rows": {kind: len(ids) for kind, ids in kinds.items()},
            "shuffled": [list(group) for group in groups],
            "kept": [kind for kind in KINDS if kind not in moved]}


def shuffled_groups(params: dict) -> list[tuple[str, ...]]:
    """The kinds whose rows trade places, one tuple per group: a row only ever gets a row of its group."""
    if not params["english_only"]:
        return [("english_like", "other", "reserved")]
    return [("english_like",), ("other",)] if params["others"] == "shuffle" else [("english_like",)]


def row_kinds(tokenizer: PreTrainedTokenizerBase, rows: int) -> dict[str, list[int]]:
    """Every row index of a `rows`-row word-embedding table, by kind (KINDS), in increasing order."""
    if tokenizer is None or not hasattr(tokenizer, "all_special_ids"):
        raise TypeError("shuffle-embeddings needs the model's tokenizer (to keep special tokens in place)")
    special = set(tokenizer.all_special_ids)
    kinds: dict[str, list[int]] = {kind: [] for kind in KINDS}
    size = min(rows, len(tokenizer))
    for i, token in enumerate(tokenizer.convert_ids_to_tokens(list(range(size)))):
        kinds[_kind(i, token, special)].append(i)
    kinds["no_token"] += range(size, rows)
    return kinds


def _kind(i: int, token: str | None, special: set[int]) -> str:
    if i in special:
        return "special"
    if token is None:
        return "no_token"
    if RESERVED.fullmatch(token):
        return "reserved"
    return "english_like" if is_english_like(token) else "other"
