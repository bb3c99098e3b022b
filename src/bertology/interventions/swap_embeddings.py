"""swap-embeddings: replace the tokenizer and word embeddings with a donor model's.

The monolingual report's "english" variant: a non-English BERT gets English word-piece
embeddings and tokenizer, so its encoder reads English through another model's vocabulary. `donor` is a
model reference as `models.parse_model_ref` reads it (hub id, dir:PATH or ./path, package:…, tiny:bert;
not a store URI: materialise it into a directory first). Validation reads only the donor's config: its
hidden size must equal the model's, else BadInput naming both.

What changes: the word-embedding table (a copy of the donor's, in the model's dtype and device, its
padding_idx the donor tokenizer's pad id), config.vocab_size and config.pad_token_id, and the tokenizer
(the donor's, its model_max_length capped at the model's max_position_embeddings). What stays: position
and token-type embeddings, the embedding LayerNorm, the encoder, the pooler. A tied MLM decoder is rebuilt
tied to the new table, with a zero output bias (the old one was per old token).
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology import models
from bertology.errors import BadInput
from bertology.interventions import parts

# each parameter's (type, allowed values), as `bertology interventions` lists them
ALLOWED: dict[str, tuple[str, str]] = {
    "donor": ("str", ("required: a model reference (hub id, dir:PATH or ./path, package:..., tiny:bert; not a store "
                     "URI) of the model's hidden size")),
}


def check(params: dict, config: PretrainedConfig) -> None:
    donor = donor_ref(params)
    size = models.load_config(donor).hidden_size
    if size != config.hidden_size:
        raise BadInput(f"swap-embeddings donor {str(donor)!r} has hidden size {size} but the model has "
                       f"{config.hidden_size}; allowed: a donor of hidden size {config.hidden_size}")


def config_after(params: dict, config: PretrainedConfig) -> PretrainedConfig:
    """The config the next intervention of a chain sees: the donor's vocabulary size and pad id."""
    donor = models.load_config(donor_ref(params))
    after = copy.deepcopy(config)
    after.vocab_size, after.pad_token_id = donor.vocab_size, donor.pad_token_id
    return after


def donor_ref(params: dict) -> models.ModelRef:
    donor = params["donor"]
    if not isinstance(donor, str):
        raise BadInput(f"swap-embeddings donor {donor!r} is required; allowed: a model reference "
                       "(hub id, dir:PATH, package:NAME, tiny:bert)")
    ref = models.parse_model_ref(donor)
    if ref.kind == "store":
        raise BadInput(f"swap-embeddings donor {donor!r} is a store URI; allowed: a hub id, dir:PATH, "
                       "package:NAME or tiny:bert")
    return ref


def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    donor = donor_ref(params)
    weight, donor_tokenizer, donor_config = models.load_word_embeddings(donor)
    if weight.shape[1] != model.config.hidden_size:
        raise BadInput(f"swap-embeddings donor {str(donor)!r} has hidden size {weight.shape[1]} but the "
                       f"model has {model.config.hidden_size}")
    pad = donor_tokenizer.pad_token_id
    swap_word_embeddings(model, weight, donor_config.pad_token_id if pad is None else pad)
    donor_tokenizer.model_max_length = min(
        donor_tokenizer.model_max_length, model.config.max_position_embeddings
    )
    return model, donor_tokenizer


@torch.no_grad()
def swap_word_embeddings(model: nn.Module, weight: torch.Tensor, pad_token_id: int | None) -> nn.Module:
    """Install a copy of `weight` as the word-embedding table; keep config and a tied decoder consistent."""
    old = parts.word_embeddings(model)
    copy = weight.to(device=old.weight.device, dtype=old.weight.dtype, copy=True)
    table = nn.Embedding(*weight.shape, padding_idx=pad_token_id, _weight=copy)  # _weight: no random init
    table.weight.requires_grad_(old.weight.requires_grad)
    model.set_input_embeddings(table)
    model.config.vocab_size = weight.shape[0]
    model.config.pad_token_id = pad_token_id
    decoder = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if decoder is not None:
        if decoder.weight is not old.weight:
            raise TypeError(f"{type(model).__name__} has an untied output decoder; swap cannot re-map it")
        new = nn.Linear(weight.shape[1], weight.shape[0], device="meta")  # meta: no random init
        new.weight = table.weight
        new.bias = nn.Parameter(torch.zeros(weight.shape[0], device=copy.device, dtype=copy.dtype))
        model.set_output_embeddings(new)
    return model
