"""Where the parts of a BERT live, for a BertModel and for any BertFor* model (whose body is `base_model`).

Interventions reach the model only through these accessors, so the module paths they rely on are written
down once, and a model that lacks a part fails with its name rather than an AttributeError deep inside.
"""

from __future__ import annotations

from torch import nn

# The six linear projections of an encoder layer (the partial-reinitialization report's list), in the order
# their weights are drawn, and the two LayerNorms that follow them.
PROJECTIONS = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
)
LAYER_NORMS = ("attention.output.LayerNorm", "output.LayerNorm")


def body(model: nn.Module) -> nn.Module:
    """The BertModel inside a task model, or the model itself."""
    return getattr(model, "base_model", model)


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The encoder's layer list of a BertModel or any BertFor* model (whose body is `model.base_model`)."""
    layers = getattr(getattr(body(model), "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(model).__name__} has no BERT encoder (expected base_model.encoder.layer)")
    return layers


def word_embeddings(model: nn.Module) -> nn.Embedding:
    embedding = model.get_input_embeddings()
    if not isinstance(embedding, nn.Embedding):
        kind = type(embedding).__name__
        raise TypeError(f"{type(model).__name__} has no word-embedding table (got {kind})")
    return embedding


def pooler_dense(model: nn.Module) -> nn.Linear:
    pooler = getattr(body(model), "pooler", None)
    if pooler is None or not isinstance(getattr(pooler, "dense", None), nn.Linear):
        raise TypeError(f"{type(model).__name__} has no pooler (built with add_pooling_layer=False?)")
    return pooler.dense


def renumber(layers: nn.ModuleList) -> None:
    """Attention modules carry a `layer_idx` (their slot in a key/value cache); make it name their position,
    as it would in a freshly built model."""
    for position, layer in enumerate(layers):
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = position
