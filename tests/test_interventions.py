"""Interventions on tiny BERTs: exactly which tensors change, to what, and what is left alone."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel, BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel

from bertology.errors import BadInput
from bertology.interventions import REGISTRY, Intervention, apply_chain, validate_chain
from bertology.interventions.reinit import reinit_all
from bertology.interventions.reverse_layers import encoder_layers, reverse_encoder_layers
from bertology.models import save_checkpoint, tiny_bert

TRUNC_STD_FACTOR = 0.8796  # std of a standard normal truncated at ±2


def tiny_config(layers: int = 3, vocab: int = 50, hidden: int = 16) -> BertConfig:
    return BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        pad_token_id=0,
    )


def perturbed(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Move every parameter away from its init values (LayerNorms off 1/0, biases off 0, pad row off 0),
    so that a reset to them is observable."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    return model.eval()


def tiny_model(layers: int = 3, seed: int = 0, cls=BertModel, **kwargs) -> torch.nn.Module:
    torch.manual_seed(seed)
    return perturbed(cls(tiny_config(layers, **kwargs)), seed)


def state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def layer_tensors(
    sd: dict[str, torch.Tensor], i: int, prefix: str = "encoder.layer"
) -> dict[str, torch.Tensor]:
    head = f"{prefix}.{i}."
    return {k[len(head) :]: v for k, v in sd.items() if k.startswith(head)}


def forward(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.tensor([[2, 7, 11, 13, 5, 3], [2, 9, 4, 3, 0, 0]])
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=(ids != 0).long()).last_hidden_state


# ---------------------------------------------------------------- registry and validation


def test_registry_entries_have_names_docs_and_defaults():
    assert set(REGISTRY) == {"reverse-layers", "reinit"}
    for name, entry in REGISTRY.items():
        assert isinstance(entry, Intervention) and entry.name == name and entry.doc
    assert REGISTRY["reinit"].defaults == {"scope": "all", "std": 0.02}
    assert REGISTRY["reverse-layers"].defaults == {}


def test_validate_chain_fills_defaults():
    chain = validate_chain(
        [{"name": "reverse-layers"}, {"name": "reinit", "params": {"std": 0.05}}], tiny_config()
    )
    assert chain == [
        {"name": "reverse-layers", "params": {}},
        {"name": "reinit", "params": {"scope": "all", "std": 0.05}},
    ]
    assert validate_chain([], tiny_config()) == []


@pytest.mark.parametrize(
    "chain, fragment",
    [
        (
            [{"name": "shuffle-everything"}],
            "'shuffle-everything' is unknown; allowed: reverse-layers, reinit",
        ),
        (
            [{"name": "reinit", "params": {"scope": "layers"}}],
            "reinit scope 'layers' is not supported; allowed: all",
        ),
        ([{"name": "reinit", "params": {"std": -1}}], "reinit std -1"),
        ([{"name": "reinit", "params": {"std": True}}], "reinit std True"),
        ([{"name": "reinit", "params": {"std": "0.02"}}], "reinit std '0.02'"),
        ([{"name": "reinit", "params": {"std": float("nan")}}], "reinit std nan"),
        (
            [{"name": "reinit", "params": {"sigma": 0.1}}],
            "reinit has no parameter 'sigma'; allowed: scope, std",
        ),
        ([{"name": "reverse-layers", "params": {"k": 1}}], "no parameter 'k'; allowed: none"),
        ([{"name": "reinit", "params": [1]}], "must be a mapping"),
        ([{"name": "reinit", "extra": 1}], "must be a mapping with 'name'"),
        (["reinit"], "must be a mapping with 'name'"),
        ({"name": "reinit"}, "must be a list"),
    ],
)
def test_validate_chain_refuses_with_one_line(chain, fragment):
    with pytest.raises(BadInput) as info:
        validate_chain(chain, tiny_config())
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_apply_chain_validates_before_touching_the_model():
    model = tiny_model()
    before = state(model)
    with pytest.raises(BadInput):
        apply_chain(
            model, None, [{"name": "reverse-layers"}, {"name": "reinit", "params": {"scope": "x"}}], 0
        )
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# ---------------------------------------------------------------- reverse-layers


@pytest.mark.parametrize("layers", [3, 4])
def test_reverse_layers_moves_whole_layers_bit_for_bit(layers):
    model = tiny_model(layers)
    before, out_before = state(model), forward(model)
    model, _, manifest = apply_chain(model, None, [{"name": "reverse-layers"}], seed=0)
    after = model.state_dict()
    for i in range(layers):
        new, old = layer_tensors(after, i), layer_tensors(before, layers - 1 - i)
        assert new.keys() == old.keys() and len(new) == 16
        assert all(torch.equal(new[k], old[k]) for k in new)
    untouched = [k for k in before if not k.startswith("encoder.layer.")]
    assert any(k.startswith("embeddings.") for k in untouched) and any(
        k.startswith("pooler.") for k in untouched
    )
    assert all(torch.equal(before[k], after[k]) for k in untouched)
    assert not torch.allclose(forward(model), out_before)
    # layer_idx keeps naming the position, as in a freshly built model
    assert [layer.attention.self.layer_idx for layer in encoder_layers(model)] == list(range(layers))
    # the manifest says exactly this: only encoder layers changed, and the middle one of an odd stack did not
    changed = {row["name"] for row in manifest["tensors"] if row["changed"]}
    middle = {f"encoder.layer.{layers // 2}."} if layers % 2 else set()
    expected = {k for k in before if k.startswith("encoder.layer.") and not k.startswith(tuple(middle))}
    assert changed == expected
    assert manifest["parameters"]["before"] == manifest["parameters"]["after"]


def test_reverse_twice_is_the_identity():
    model = tiny_model(4)
    before = state(model)
    reverse_encoder_layers(reverse_encoder_layers(model))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_reverse_layers_works_on_task_models_and_leaves_the_head():
    model = tiny_model(3, cls=BertForSequenceClassification)
    before = state(model)
    model, _, manifest = apply_chain(model, None, [{"name": "reverse-layers"}], seed=0)
    after = model.state_dict()
    for i in range(3):
        new, old = (
            layer_tensors(after, i, "bert.encoder.layer"),
            layer_tensors(before, 2 - i, "bert.encoder.layer"),
        )
        assert all(torch.equal(new[k], old[k]) for k in new)
    assert torch.equal(after["classifier.weight"], before["classifier.weight"])
    assert {r["name"] for r in manifest["tensors"] if r["changed"]} == {
        k for k in before if k.startswith(("bert.encoder.layer.0.", "bert.encoder.layer.2."))
    }


def test_reversed_checkpoint_round_trips_through_from_pretrained(tmp_path):
    model = tiny_model(4)
    original = state(model)
    model, tokenizer, _ = apply_chain(model, _NoTokenizer(), [{"name": "reverse-layers"}], seed=0)
    save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    reloaded = AutoModel.from_pretrained(tmp_path / "ckpt", use_safetensors=True).eval()
    saved, loaded = model.state_dict(), reloaded.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    assert torch.equal(
        layer_tensors(loaded, 0)["output.dense.weight"], layer_tensors(original, 3)["output.dense.weight"]
    )
    assert torch.equal(forward(reloaded), forward(model))


class _NoTokenizer:
    """Stands in for a tokenizer where only save_pretrained is needed."""

    def save_pretrained(self, directory):
        (directory / "vocab.txt").write_text("[PAD]\n")


# ---------------------------------------------------------------- reinit


def test_reinit_all_resets_every_tensor_to_the_clean_init():
    model = tiny_model(3)
    ln = model.encoder.layer[1].attention.output.LayerNorm
    with torch.no_grad():  # one LayerNorm already at its init values: reinit cannot change it
        ln.weight.fill_(1.0)
        ln.bias.zero_()
    at_init = {
        "encoder.layer.1.attention.output.LayerNorm.weight",
        "encoder.layer.1.attention.output.LayerNorm.bias",
    }
    before = state(model)
    model, _, manifest = apply_chain(model, None, [{"name": "reinit"}], seed=3)
    after = model.state_dict()
    std = 0.02
    for name, tensor in after.items():
        if name.endswith("LayerNorm.weight"):
            assert torch.equal(tensor, torch.ones_like(tensor)), name
        elif name.endswith(".bias"):
            assert torch.equal(tensor, torch.zeros_like(tensor)), name
        else:  # Linear weights and the word, position and token-type embeddings
            assert name.endswith(".weight") and tensor.dim() == 2, name
            assert tensor.abs().max() <= 2 * std and tensor.std() > 0.5 * std * TRUNC_STD_FACTOR, name
    assert torch.equal(after["embeddings.word_embeddings.weight"][0], torch.zeros(16))  # the [PAD] row
    assert after["embeddings.word_embeddings.weight"][1:].abs().min() > 0
    assert "pooler.dense.weight" in after
    changed = {row["name"]: row["changed"] for row in manifest["tensors"]}
    assert changed.keys() == before.keys()
    assert {name for name, flag in changed.items() if not flag} == at_init
    assert all(not torch.equal(before[k], after[k]) for k in before if k not in at_init)
    json.dumps(manifest)


def test_reinit_draws_a_truncated_normal_of_the_right_width():
    model = tiny_model(1, vocab=4000, hidden=32)  # a 4000 x 32 word embedding: 128k draws
    model, _, _ = apply_chain(model, None, [{"name": "reinit", "params": {"std": 0.02}}], seed=0)
    weights = model.embeddings.word_embeddings.weight[1:]
    assert weights.abs().max() <= 0.04
    assert abs(weights.mean().item()) < 0.02 * 0.02
    assert weights.std().item() == pytest.approx(0.02 * TRUNC_STD_FACTOR, rel=0.02)
    assert (weights.abs() > 0.038).any()  # the draws reach out to the cut, not a narrower distribution


def test_reinit_std_parameter_scales_the_draws():
    model = tiny_model(1, vocab=2000, hidden=32)
    model, _, _ = apply_chain(model, None, [{"name": "reinit", "params": {"std": 0.1}}], seed=0)
    weights = model.embeddings.word_embeddings.weight[1:]
    assert weights.abs().max() <= 0.2
    assert weights.std().item() == pytest.approx(0.1 * TRUNC_STD_FACTOR, rel=0.03)


def test_reinit_same_seed_same_bytes_different_seed_different():
    first = apply_chain(tiny_model(seed=1), None, [{"name": "reinit"}], seed=7)[0].state_dict()
    again = apply_chain(tiny_model(seed=2), None, [{"name": "reinit"}], seed=7)[0].state_dict()
    other = apply_chain(tiny_model(seed=1), None, [{"name": "reinit"}], seed=8)[0].state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)  # independent of the weights it replaces
    weights = [k for k in first if k.endswith("weight") and "LayerNorm" not in k]
    assert all(not torch.equal(first[k], other[k]) for k in weights)


def test_reinit_covers_task_heads_and_keeps_tied_decoder_tied():
    model = tiny_model(2, cls=BertForMaskedLM)
    decoder, words = model.cls.predictions.decoder, model.bert.embeddings.word_embeddings
    assert decoder.weight is words.weight
    model, _, manifest = apply_chain(model, None, [{"name": "reinit"}], seed=0)
    assert decoder.weight is words.weight
    assert torch.equal(words.weight[0], torch.zeros(16))
    assert torch.equal(model.cls.predictions.bias, torch.zeros_like(model.cls.predictions.bias))
    transform = model.cls.predictions.transform
    assert torch.equal(transform.LayerNorm.weight, torch.ones(16))
    assert transform.dense.weight.abs().max() <= 0.04
    assert all(row["changed"] for row in manifest["tensors"])


def test_reinit_refuses_parameters_it_cannot_initialise():
    model = tiny_model(1)
    model.embeddings.register_parameter("scale", torch.nn.Parameter(torch.ones(3)))
    with pytest.raises(TypeError, match="BertEmbeddings.scale"):
        reinit_all(model, 0.02, torch.Generator().manual_seed(0))


# ---------------------------------------------------------------- chains and manifests


def test_chain_reverse_then_reinit_is_the_clean_model_and_the_manifest_is_json():
    chain = [{"name": "reverse-layers"}, {"name": "reinit"}]
    model, _, manifest = apply_chain(tiny_model(3), None, chain, seed=5)
    clean = apply_chain(tiny_model(3, seed=9), None, [{"name": "reinit"}], seed=5)[0].state_dict()
    # reinit draws position by position and ignores the old values, so nothing of the reversal survives
    assert all(torch.equal(clean[k], v) for k, v in model.state_dict().items())
    assert manifest["chain"] == [
        {"name": "reverse-layers", "params": {}},
        {"name": "reinit", "params": {"scope": "all", "std": 0.02}},
    ]
    assert manifest["seed"] == 5
    assert set(manifest["tensors"][0]) == {"name", "shape", "changed", "norm_before", "norm_after"}
    assert json.loads(json.dumps(manifest)) == manifest


def test_manifest_norms_match_the_tensors():
    model = tiny_model(2)
    before = state(model)
    model, _, manifest = apply_chain(model, None, [{"name": "reinit"}], seed=0)
    for row in manifest["tensors"]:
        assert row["shape"] == list(before[row["name"]].shape)
        assert row["norm_before"] == pytest.approx(before[row["name"]].norm().item(), rel=1e-5)
        assert row["norm_after"] == pytest.approx(
            model.state_dict()[row["name"]].norm().item(), rel=1e-5, abs=1e-9
        )


def test_empty_chain_changes_nothing():
    model = tiny_model(2)
    _, _, manifest = apply_chain(model, None, [], seed=0)
    assert manifest["chain"] == [] and not any(row["changed"] for row in manifest["tensors"])


def test_tiny_bert_is_a_clean_model():
    model, _ = tiny_bert(seed=0)
    for name, tensor in model.state_dict().items():
        if name.endswith("LayerNorm.weight"):
            assert torch.equal(tensor, torch.ones_like(tensor))
        elif name.endswith(".bias"):
            assert torch.equal(tensor, torch.zeros_like(tensor))
        else:
            assert tensor.abs().max() <= 0.04
