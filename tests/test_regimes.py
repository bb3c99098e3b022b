"""Each regime trains exactly the parameters it should; frozen ones stay bit-identical after training."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from bertology.errors import BadInput
from bertology.train.regimes import Schedule, apply, layer_set

LAYERS = 4


def model():
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=LAYERS,
                                                    num_attention_heads=2, intermediate_size=32, num_labels=2))


def train_step(m):
    """One AdamW step (with weight decay) over every parameter, as the loop builds its optimizer."""
    before = {k: v.detach().clone() for k, v in m.named_parameters()}
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)
    out = m(input_ids=torch.randint(5, 50, (4, 7)), labels=torch.tensor([0, 1, 0, 1]))
    out.loss.backward()
    opt.step()
    return {k for k, v in m.named_parameters() if not torch.equal(v, before[k])}


def part(name):
    if name.startswith("classifier."):
        return "head"
    if name.startswith("bert.pooler."):
        return "pooler"
    if name.startswith("bert.embeddings."):
        return "embeddings"
    return f"layer{name.split('.')[3]}"


def trained_parts(schedule, epoch=1):
    m = model()
    apply(m, schedule, epoch)
    changed = train_step(m)
    every = {part(n) for n, _ in m.named_parameters()}
    parts = {part(n) for n in changed}
    # a part counts as trained only if every one of its tensors moved, frozen only if none did
    for p in every:
        names = [n for n, _ in m.named_parameters() if part(n) == p]
        moved = [n in changed for n in names]
        assert all(moved) or not any(moved), (p, names, moved)
    return parts


def test_full_trains_everything():
    assert trained_parts(Schedule("full")) == {"embeddings", "pooler", "head", "layer0", "layer1", "layer2", "layer3"}


def test_freeze_trains_only_the_listed_layers_pooler_and_head():
    assert trained_parts(Schedule("freeze", train_layers="from:2")) == {"layer2", "layer3", "pooler", "head"}
    assert trained_parts(Schedule("freeze", train_layers=(0,), train_embeddings=True)) == {
        "embeddings", "layer0", "pooler", "head"}


def test_gradual_unfreezing_opens_k_layers_from_the_top_per_epoch():
    s = Schedule("gradual-unfreeze", unfreeze_per_epoch=1)
    assert trained_parts(s, 1) == {"layer3", "pooler", "head"}
    assert trained_parts(s, 3) == {"layer1", "layer2", "layer3", "pooler", "head"}
    assert trained_parts(s, 9) == {"layer0", "layer1", "layer2", "layer3", "pooler", "head"}  # never embeddings


def test_probe_trains_only_the_classifier():
    assert trained_parts(Schedule("probe")) == {"head"}


@pytest.mark.parametrize("spec, layers", [("from:1", {1, 2, 3}), ("last:1", {3}), ([0, 2], {0, 2})])
def test_layer_sets(spec, layers):
    assert layer_set(spec, LAYERS) == layers


@pytest.mark.parametrize("schedule, message", [
    (Schedule("freeze"), "needs train_layers"),
    (Schedule("freeze", train_layers="from:4"), "K must be in 0..3"),
    (Schedule("freeze", train_layers="last:0"), "K must be in 1..4"),
    (Schedule("freeze", train_layers=(7,)), "layer indices in 0..3"),
    (Schedule("freeze", train_layers="top:2"), "malformed"),
    (Schedule("gradual-unfreeze", unfreeze_per_epoch=0), ">= 1"),
    (Schedule("distill"), "unknown regime 'distill'"),
])
def test_bad_regime_parameters_are_one_line_errors(schedule, message):
    with pytest.raises(BadInput, match=message):
        schedule.check(LAYERS)
