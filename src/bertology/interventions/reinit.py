"""reinit: re-draw as BERT's init.

Every re-drawn weight comes from a normal with mean 0 and std `std` (0.02, BERT's initializer_range)
truncated at ±2 std; biases become 0 (unless `biases: false`), LayerNorm weights 1 and biases 0. As in
Hugging Face's own init, a re-drawn word embedding's padding_idx row is zeroed, so [PAD] starts as the zero
vector. Scopes:

- `all`: the reports' "clean" model, the baseline that shows how much of a result is owed to pre-training
  at all: word, position and token-type embeddings, every LayerNorm, the encoder, the pooler, any task head.
- `word-embeddings`: the word-embedding table only (a decoder tied to it follows); "clean word embeddings".
- `layers` (param `layers`: a list of indices or "from:K", 0-based): per layer, the six linear projections
  Q, K, V, attention output, intermediate and output (partial-reinitialization's list; bert-goes-to-college
  re-initialises "layers ≥ k", which is `from:k-1`). `layer_norms: true` also resets the layer's two
  LayerNorms (partial-reinitialization keeps them, so the default does; bert-goes-to-college re-initialises
  "all pre-trained layers except the embeddings"). `biases: false` re-draws the six weight matrices only
  and leaves the projections' biases as they were (partial-reinitialization's Algorithm 1 sets each
  "weight" and nothing else); the draws are the same bytes either way, zeroing draws no numbers.
- `heads` (param `heads`: "layer:head" strings, 0-based): that head's rows of the Q, K and V weights and its
  entries of their biases; `output_columns: true` also re-draws its columns of the attention output
  projection (the attention output bias and LayerNorm are shared by all heads and stay).
- `pooler`: the pooler's dense layer (bert-goes-to-college's layer-wise chains follow `layers` with it:
  the pooler is one of its "pre-trained layers except the embeddings").

A scope's own parameters must be given with it and only with it (`layers` with scope `layers`, …); indices
are checked against the config by `selection`, before any weights load. Draws go layer by layer and head
by head in ascending order whatever order the list has, so a selection gives the same bytes however written.

The init is written here rather than borrowed from `model._init_weights`: in transformers 5 that skips
every tensor flagged as loaded from a checkpoint (`_is_hf_initialized`), so on a pre-trained model it
silently changes nothing, and it draws an untruncated normal from the global RNG.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.errors import BadInput
from bertology.interventions import parts, selection
from bertology.interventions.catalog import CATALOG
from bertology.sampling import trunc_normal_
from bertology.weight_init import reinit_modules

ENTRY = CATALOG["reinit"]  # its defaults, randomness and listed values: one source, torch-free
SCOPES = ENTRY.enums["scope"]
# each parameter's (type, allowed values), as `bertology interventions` lists them
ALLOWED: dict[str, tuple[str, str]] = {
    "scope": ("str", " | ".join(SCOPES)),
    "std": ("float", "a finite number > 0 (BERT's initializer_range is 0.02)"),
    "layers": ("list[int] | str", 'with scope layers, required: a list of 0-based layer indices or "from:K"'),
    "layer_norms": ("bool", "true | false; with scope layers: also reset the layers' LayerNorms"),
    "biases": ("bool", "true | false; with scope layers: false re-draws the weight matrices only"),
    "heads": ("list[str]", 'with scope heads, required: "layer:head" strings, 0-based, e.g. ["0:3", "11:7"]'),
    "output_columns": ("bool", ("true | false; with scope heads: also re-draw the heads' columns of the attention "
                               "output projection")),
}
# The parameters that belong to one scope, with the value they must keep under any other scope.
_SCOPE_PARAMS = {"layers": ("layers", "layer_norms", "biases"), "heads": ("heads", "output_columns")}


def check(params: dict, config: PretrainedConfig) -> None:
    scope, std = params["scope"], params["std"]
    if scope not in SCOPES:
        raise BadInput(f"reinit scope {scope!r} is not supported; allowed: {', '.join(SCOPES)}")
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std <= 0:
        raise BadInput(f"reinit std {std!r} is not allowed; allowed: a finite number > 0 (BERT uses 0.02)")
    for owner, names in _SCOPE_PARAMS.items():
        for name in names:
            if scope != owner and params[name] != ENTRY.defaults[name]:
                raise BadInput(f"reinit parameter {name!r} applies only to scope {owner!r}, not {scope!r}")
    for flag in ("layer_norms", "biases", "output_columns"):
        if not isinstance(params[flag], bool):
            raise BadInput(f"reinit {flag} {params[flag]!r} is not allowed; allowed: true or false")
    if scope == "layers":
        selection.layer_indices(params["layers"], config, "reinit layers", ("list", "from"))
    if scope == "heads":
        selection.head_indices(params["heads"], config, "reinit heads")


def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    scope, std = params["scope"], float(params["std"])
    if scope == "heads":
        heads = selection.head_indices(params["heads"], model.config, "reinit heads")
        reinit_heads(model, heads, std, params["output_columns"], generator)
    elif scope == "layers" and not params["biases"]:
        reinit_weights(_modules(model, params), std, generator)
    else:
        reinit_modules(_modules(model, params), std, generator)
    return model, tokenizer


def _modules(model: nn.Module, params: dict) -> list[nn.Module]:
    scope = params["scope"]
    if scope == "all":
        return list(model.modules())
    if scope == "word-embeddings":
        return [parts.word_embeddings(model)]
    if scope == "pooler":
        return [parts.pooler_dense(model)]
    names = parts.PROJECTIONS + (parts.LAYER_NORMS if params["layer_norms"] else ())
    layers = parts.encoder_layers(model)
    chosen = selection.layer_indices(params["layers"], model.config, "reinit layers", ("list", "from"))
    return [layers[i].get_submodule(name) for i in chosen for name in names]


@torch.no_grad()
def reinit_weights(modules: list[nn.Module], std: float, generator: torch.Generator) -> None:
    """As `reinit_modules`, in the same order and with the same draws, except that a Linear's bias keeps its
    bytes: only its weight matrix is re-drawn (a LayerNorm among `modules` is still reset whole)."""
    for module in modules:
        if isinstance(module, nn.Linear):
            trunc_normal_(module.weight, std, generator)
        else:
            reinit_modules([module], std, generator)


@torch.no_grad()
def reinit_heads(
    model: nn.Module,
    heads: list[tuple[int, int]],
    std: float,
    output_columns: bool,
    generator: torch.Generator,
) -> None:
    """Re-draw each (layer, head)'s rows of Q, K and V (their bias entries to 0), optionally its columns of
    the attention output projection; every other entry of those tensors keeps its bytes."""
    layers = parts.encoder_layers(model)
    size = model.config.hidden_size // model.config.num_attention_heads
    for layer, head in heads:
        block = slice(head * size, (head + 1) * size)
        for name in parts.PROJECTIONS[:3]:
            linear = layers[layer].get_submodule(name)
            trunc_normal_(linear.weight[block], std, generator)
            if linear.bias is not None:
                linear.bias[block].zero_()
        if output_columns:
            trunc_normal_(layers[layer].get_submodule(parts.PROJECTIONS[3]).weight[:, block], std, generator)
