"""Interventions on tiny BERTs: exactly which tensors change, to what, and what is left alone."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel, BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel

from bertology.errors import BadInput
from bertology.interventions import REGISTRY, Intervention, apply_chain, validate_chain
from bertology.interventions.reverse_layers import encoder_layers, reverse_encoder_layers
from bertology.models import save_checkpoint, tiny_bert
from bertology.weight_init import reinit_all

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


ALL_NAMES = [
    "reverse-layers",
    "remove-layers",
    "reinit",
    "shuffle-embeddings",
    "swap-embeddings",
    "permute-within",
    "match-moments",
]
REINIT_DEFAULTS = {
    "scope": "all",
    "std": 0.02,
    "layers": None,
    "layer_norms": False,
    "biases": True,
    "heads": None,
    "output_columns": False,
}


def test_registry_entries_have_names_docs_and_defaults():
    assert list(REGISTRY) == ALL_NAMES
    for name, entry in REGISTRY.items():
        assert isinstance(entry, Intervention) and entry.name == name
        assert entry.doc.startswith(f"{name}: ") and "\n" not in entry.doc
        # every parameter the module reads is listed (`bertology interventions` prints these) with its type and
        # allowed values, and the doc line says what the intervention does without repeating them
        assert set(entry.allowed) == set(entry.defaults), name
        assert "(param" not in entry.doc, name
    assert REGISTRY["reinit"].defaults == REINIT_DEFAULTS
    assert REGISTRY["reverse-layers"].defaults == {}
    assert REGISTRY["remove-layers"].defaults == {"layers": None}
    assert REGISTRY["shuffle-embeddings"].defaults == {"english_only": False, "others": "shuffle"}
    assert REGISTRY["swap-embeddings"].defaults == {"donor": None}
    assert REGISTRY["permute-within"].defaults == {"tensors": ["*"]}
    assert REGISTRY["match-moments"].defaults == {"match": None, "std": 0.02, "tensors": ["*"]}


def test_defaults_are_not_shared_between_validations():
    first = validate_chain([{"name": "permute-within"}], tiny_config())[0]["params"]
    first["tensors"].append("x")
    assert validate_chain([{"name": "permute-within"}], tiny_config())[0]["params"] == {"tensors": ["*"]}


def test_validate_chain_fills_defaults():
    chain = validate_chain(
        [{"name": "reverse-layers"}, {"name": "reinit", "params": {"std": 0.05}}], tiny_config()
    )
    assert chain == [
        {"name": "reverse-layers", "params": {}},
        {"name": "reinit", "params": {**REINIT_DEFAULTS, "std": 0.05}},
    ]
    assert validate_chain([], tiny_config()) == []


@pytest.mark.parametrize(
    "chain, fragment",
    [
        (
            [{"name": "shuffle-everything"}],
            "'shuffle-everything' is unknown; did you mean 'shuffle-embeddings'?; allowed: " + ", ".join(ALL_NAMES),
        ),
        (
            [{"name": "reinit", "params": {"scope": "encoder"}}],
            "reinit scope 'encoder' is not allowed; allowed: all, word-embeddings, layers, heads, pooler",
        ),
        ([{"name": "reinit", "params": {"std": -1}}], "reinit std -1"),
        ([{"name": "reinit", "params": {"std": True}}], "reinit std True"),
        ([{"name": "reinit", "params": {"std": "0.02"}}], "reinit std '0.02'"),
        ([{"name": "reinit", "params": {"std": float("nan")}}], "reinit std nan"),
        (
            [{"name": "reinit", "params": {"sigma": 0.1}}],
            "reinit has no parameter 'sigma'; allowed: biases, heads, layer_norms, layers, output_columns, scope,",
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
        {"name": "reinit", "params": REINIT_DEFAULTS},
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


# ---------------------------------------------------------------- shared helpers for the other files


def step(name: str, **params) -> dict:
    return {"name": name, "params": params}


def changed_names(manifest: dict) -> set[str]:
    return {row["name"] for row in manifest["tensors"] if row["changed"]}


def assert_identical_except(before: dict, after: dict, changed: set[str]) -> None:
    """Every tensor outside `changed` is bit-identical; every one inside differs."""
    for name, old in before.items():
        new = after.get(name)
        same = new is not None and old.shape == new.shape and torch.equal(old, new)
        assert same == (name not in changed), name


TINY_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "cat", "dog", "##s", "run", "##ning", "a", "is", "on", "mat", "big", "red", "##ed", "and", "it",
    "über", "straße", "日本", "##語", "123", "##4", "!", ",", "[unused0]", "café", "naïve", "##é", "x1", "ß",
    "we", "see", "tree", "blue", "sky", "##ly", "go", "no", "yes", "up", "hat", "sun", "moon", "star", "Zed",
    "##Q",
]  # 50 tokens: tiny_config's vocabulary; 5 special, 14 not English-like ("über", "123", "!", …), 31 English


def tiny_tokenizer(directory, vocab: list[str] = TINY_VOCAB):
    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers 5 reads the vocabulary from `vocab=`; a `vocab_file=` keyword is silently ignored
    tokenizer = BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=False)
    assert len(tokenizer) == len(vocab)
    return tokenizer


# ---------------------------------------------------------------- remove-layers


@pytest.mark.parametrize(
    "layers, kept",
    [("last:2", [0, 1, 2]), ("last:4", [0]), ("every:2", [0, 2, 4]), ("every:3", [0, 3]),
     ("every:5", [0]), ([1, 3], [0, 2, 4]), ([4, 0], [1, 2, 3])],
)
def test_remove_layers_keeps_the_right_layers_with_their_weights(layers, kept):
    model = tiny_model(5)
    before, originals = state(model), list(encoder_layers(model))
    model, _, manifest = apply_chain(model, None, [step("remove-layers", layers=layers)], 0)
    after = model.state_dict()
    assert model.config.num_hidden_layers == len(kept) == len(encoder_layers(model))
    assert list(encoder_layers(model)) == [originals[i] for i in kept]  # the same modules, in order
    for new, old in enumerate(kept):
        assert layer_tensors(after, new).keys() == layer_tensors(before, old).keys()
        old_tensors = layer_tensors(before, old)
        assert all(torch.equal(v, old_tensors[k]) for k, v in layer_tensors(after, new).items())
    assert [layer.attention.self.layer_idx for layer in encoder_layers(model)] == list(range(len(kept)))
    # renamed or dropped layer tensors are changed; embeddings, pooler and layers that stayed put are not
    stayed = {f"encoder.layer.{i}." for i, old in enumerate(kept) if i == old}
    expected = {k for k in before if k.startswith("encoder.layer.") and not k.startswith(tuple(stayed))}
    assert changed_names(manifest) == expected
    assert manifest["parameters"]["after"] < manifest["parameters"]["before"]
    forward(model)


def test_removed_layers_round_trip_through_from_pretrained(tmp_path):
    model = tiny_model(4)
    model, tokenizer, _ = apply_chain(model, _NoTokenizer(), [step("remove-layers", layers="every:2")], 0)
    save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    reloaded = AutoModel.from_pretrained(tmp_path / "ckpt", use_safetensors=True).eval()
    assert reloaded.config.num_hidden_layers == 2
    assert all(torch.equal(v, reloaded.state_dict()[k]) for k, v in model.state_dict().items())
    assert torch.equal(forward(reloaded), forward(model))


# ---------------------------------------------------------------- reinit scopes


def assert_clean_values(after: dict, names: set[str], std: float = 0.02) -> None:
    for name in names:
        tensor = after[name]
        if "LayerNorm.weight" in name:
            assert torch.equal(tensor, torch.ones_like(tensor)), name
        elif name.endswith(".bias"):
            assert torch.equal(tensor, torch.zeros_like(tensor)), name
        else:
            assert tensor.abs().max() <= 2 * std and tensor.std() > 0.5 * std * TRUNC_STD_FACTOR, name


PROJECTIONS = ["attention.self.query", "attention.self.key", "attention.self.value",
               "attention.output.dense", "intermediate.dense", "output.dense"]


@pytest.mark.parametrize(
    "layers, layer_norms, chosen",
    [([0, 2], False, [0, 2]), ([2], True, [2]), ("from:1", False, [1, 2]), ("from:0", True, [0, 1, 2])],
)
def test_reinit_layers_resets_exactly_the_six_projections(layers, layer_norms, chosen):
    model = tiny_model(3)
    before = state(model)
    params = {"scope": "layers", "layers": layers, "layer_norms": layer_norms}
    model, _, manifest = apply_chain(model, None, [{"name": "reinit", "params": params}], seed=1)
    modules = PROJECTIONS + (["attention.output.LayerNorm", "output.LayerNorm"] if layer_norms else [])
    expected = {f"encoder.layer.{i}.{m}.{t}" for i in chosen for m in modules for t in ("weight", "bias")}
    assert changed_names(manifest) == expected
    assert_identical_except(before, model.state_dict(), expected)
    assert_clean_values(model.state_dict(), expected)


@pytest.mark.parametrize("layer_norms", [False, True])
def test_reinit_layers_without_biases_redraws_only_the_six_weight_matrices(layer_norms):
    """`biases: false` (partial-reinitialization's Algorithm 1: each "weight" of the layer is re-drawn): the
    projections' biases keep their bytes, the weights are the very draws `biases: true` makes."""
    before = state(tiny_model(3))
    params = {"scope": "layers", "layers": "from:1", "biases": False, "layer_norms": layer_norms}
    model, _, manifest = apply_chain(tiny_model(3), None, [step("reinit", **params)], seed=5)
    after = model.state_dict()
    weights = {f"encoder.layer.{i}.{m}.weight" for i in (1, 2) for m in PROJECTIONS}
    norms = {f"encoder.layer.{i}.{m}.{t}" for i in (1, 2) for m in ("attention.output.LayerNorm", "output.LayerNorm")
             for t in ("weight", "bias")} if layer_norms else set()
    assert changed_names(manifest) == weights | norms
    assert_identical_except(before, after, weights | norms)  # every bias, layer 0, embeddings, pooler: same bytes
    assert_clean_values(after, weights | norms)
    zeroed = apply_chain(tiny_model(3), None, [step("reinit", **{**params, "biases": True})], seed=5)[0].state_dict()
    assert all(torch.equal(after[name], zeroed[name]) for name in weights | norms)
    biases = {f"encoder.layer.{i}.{m}.bias" for i in (1, 2) for m in PROJECTIONS}
    assert all(torch.equal(after[b], before[b]) and not torch.equal(zeroed[b], before[b]) for b in biases)


def test_reinit_layers_from_k_is_the_same_as_the_list():
    a = apply_chain(tiny_model(), None, [step("reinit", scope="layers", layers="from:1")], 4)
    b = apply_chain(tiny_model(), None, [step("reinit", scope="layers", layers=[2, 1])], 4)
    assert all(torch.equal(v, b[0].state_dict()[k]) for k, v in a[0].state_dict().items())


@pytest.mark.parametrize("output_columns", [False, True])
def test_reinit_heads_changes_only_that_heads_rows(output_columns):
    model = tiny_model(3)  # hidden 16, 2 heads: head 1 is rows (Q, K, V) / columns (output) 8..15
    before = state(model)
    params = {"scope": "heads", "heads": ["1:1"], "output_columns": output_columns}
    model, _, manifest = apply_chain(model, None, [{"name": "reinit", "params": params}], seed=2)
    after = model.state_dict()
    head, rest = slice(8, 16), slice(0, 8)
    expected = set()
    for m in PROJECTIONS[:3]:
        w, b = f"encoder.layer.1.{m}.weight", f"encoder.layer.1.{m}.bias"
        expected |= {w, b}
        assert torch.equal(after[w][rest], before[w][rest]) and torch.equal(after[b][rest], before[b][rest])
        assert (after[w][head] != before[w][head]).all() and after[w][head].abs().max() <= 0.04
        assert torch.equal(after[b][head], torch.zeros(8))
    out = "encoder.layer.1.attention.output.dense.weight"
    if output_columns:
        expected.add(out)
        assert torch.equal(after[out][:, rest], before[out][:, rest])
        assert (after[out][:, head] != before[out][:, head]).all() and after[out][:, head].abs().max() <= 0.04
    assert changed_names(manifest) == expected
    assert_identical_except(before, after, expected)


def test_reinit_heads_draw_order_does_not_depend_on_the_list_order():
    def run(heads):
        chain = [{"name": "reinit", "params": {"scope": "heads", "heads": heads, "output_columns": True}}]
        return apply_chain(tiny_model(), None, chain, seed=3)[0].state_dict()

    a, b = run(["2:0", "0:1"]), run(["0:1", "2:0"])
    assert all(torch.equal(v, b[k]) for k, v in a.items())


def test_reinit_pooler_and_word_embeddings():
    model = tiny_model(2)
    before = state(model)
    model, _, manifest = apply_chain(model, None, [{"name": "reinit", "params": {"scope": "pooler"}}], 0)
    assert changed_names(manifest) == {"pooler.dense.weight", "pooler.dense.bias"}
    assert_clean_values(model.state_dict(), {"pooler.dense.weight", "pooler.dense.bias"})
    model = tiny_model(2)
    model, _, manifest = apply_chain(model, None, [step("reinit", scope="word-embeddings")], 0)
    words = "embeddings.word_embeddings.weight"
    assert changed_names(manifest) == {words}
    assert_identical_except(before, model.state_dict(), {words})
    assert torch.equal(model.state_dict()[words][0], torch.zeros(16))  # [PAD]
    assert_clean_values({words: model.state_dict()[words][1:]}, {words})


def test_reinit_word_embeddings_keeps_a_tied_decoder_tied():
    model = tiny_model(2, cls=BertForMaskedLM)
    before = state(model)
    model, _, manifest = apply_chain(model, None, [step("reinit", scope="word-embeddings")], 0)
    words = model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.weight is words
    tied = {"bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"}
    assert changed_names(manifest) == tied & set(before)
    assert_identical_except(before, model.state_dict(), tied & set(before))


# ---------------------------------------------------------------- validation against the config


@pytest.mark.parametrize(
    "item, fragment",
    [
        (("remove-layers", {}), "remove-layers layers None is not a layer selection; allowed: \"last:K\""),
        (("remove-layers", {"layers": [3]}), "layer 3 is beyond the model's 3 layers; allowed: indices 0..2"),
        (("remove-layers", {"layers": [-1]}), "layer -1 is beyond the model's 3 layers"),
        (("remove-layers", {"layers": "last:3"}), ("K=3 must leave at least one of the model's 3 layers; "
                                                  "allowed: last:1..last:2")),
        (("remove-layers", {"layers": "last:0"}), "allowed: last:1..last:2"),
        (("remove-layers", {"layers": "every:1"}), ("N=1 is not allowed for a model of 3 layers; "
                                                   "allowed: every:2..every:3")),
        (("remove-layers", {"layers": "every:4"}), "allowed: every:2..every:3"),
        (("remove-layers", {"layers": [0, 1, 2]}), "removes all 3 layers"),
        (("remove-layers", {"layers": [1, 1]}), "names a layer twice"),
        (("remove-layers", {"layers": [True]}), "must be a non-empty list of layer indices"),
        (("remove-layers", {"layers": "from:1"}), "'from:1' is not a layer selection"),
        (("reinit", {"scope": "layers"}), "reinit layers None is not a layer selection"),
        (("reinit", {"scope": "layers", "layers": [3]}), ("layer 3 is beyond the model's 3 layers; "
                                                          "allowed: indices 0..2")),
        (("reinit", {"scope": "layers", "layers": "from:3"}), ("K=3 is outside the model's 3 layers; "
                                                               "allowed: from:0..from:2")),
        (("reinit", {"scope": "layers", "layers": "from:7"}), "K=7 is outside the model's 3 layers"),
        (("reinit", {"scope": "layers", "layers": "last:1"}), "'last:1' is not a layer selection"),
        (("reinit", {"scope": "layers", "layers": []}), "must be a non-empty list"),
        (("reinit", {"layers": [0]}), "reinit parameter 'layers' applies only to scope 'layers', not 'all'"),
        (("reinit", {"scope": "heads", "heads": ["0:0"], "layer_norms": True}), "'layer_norms' applies only"),
        (("reinit", {"scope": "layers", "layers": [0], "output_columns": True}), "'output_columns' applies"),
        (("reinit", {"scope": "layers", "layers": [0], "layer_norms": 1}), "reinit layer_norms 1"),
        (("reinit", {"scope": "layers", "layers": [0], "biases": "keep"}), "reinit biases 'keep' is not allowed"),
        (("reinit", {"scope": "heads", "heads": ["0:0"], "biases": False}), "'biases' applies only to scope 'layers'"),
        (("reinit", {"scope": "pooler", "biases": False}), "'biases' applies only to scope 'layers', not 'pooler'"),
        (("reinit", {"scope": "heads"}), "reinit heads None is not a head selection"),
        (("reinit", {"scope": "heads", "heads": ["3:0"]}), "'3:0': layer 3 is beyond the model's 3 layers"),
        (("reinit", {"scope": "heads", "heads": ["3:0"]}), "layers; allowed: layer 0..2"),
        (("reinit", {"scope": "heads", "heads": ["0:2"]}), "'0:2': head 2 is beyond the model's 2 heads"),
        (("reinit", {"scope": "heads", "heads": ["0:2"]}), "heads per layer; allowed: head 0..1"),
        (("reinit", {"scope": "heads", "heads": ["0-1"]}), "item '0-1' is not a head"),
        (("reinit", {"scope": "heads", "heads": [[0, 1]]}), "item [0, 1] is not a head"),
        (("reinit", {"scope": "heads", "heads": ["0:1", "0:1"]}), "names a head twice"),
        (("shuffle-embeddings", {"english_only": "yes"}), "english_only 'yes' is not allowed"),
        (("shuffle-embeddings", {"english_only": True, "others": "move"}), "'move' is not allowed; allowed: shuffle"),
        (("shuffle-embeddings", {"others": "keep"}), "others 'keep' applies only with english_only true"),
        (("swap-embeddings", {}), "swap-embeddings donor None is required"),
        (("swap-embeddings", {"donor": "s3://bucket/x"}), "is a store URI"),
        (("swap-embeddings", {"donor": "tiny:bert"}), ("donor 'tiny:bert' has hidden size 32 but the model "
                                                      "has 16; allowed: a donor of hidden size 16")),
        (("swap-embeddings", {"donor": "dir:/nonexistent/x"}), "model directory '/nonexistent/x' not found"),
        (("permute-within", {"tensors": "all"}), "permute-within tensors 'all' is not allowed"),
        (("permute-within", {"tensors": ["encoder.layers.*"]}), "glob 'encoder.layers.*' matches no param"),
        (("match-moments", {}), "match-moments match None is not allowed; allowed: norm, variance"),
        (("match-moments", {"match": "mean"}), "match-moments match 'mean' is not allowed"),
        (("match-moments", {"match": "norm", "std": 0}), "match-moments std 0 is not allowed"),
        (("match-moments", {"match": "norm", "tensors": ["*.bias"]}), "'*.bias' matches no weight matrix"),
    ],
)
def test_parameters_are_validated_against_the_config_in_one_line(item, fragment):
    name, params = item
    with pytest.raises(BadInput) as info:
        validate_chain([{"name": name, "params": params}], tiny_config())
    assert fragment in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_validation_accepts_the_reports_settings_on_bert_base():
    base = BertConfig()  # 12 layers, 12 heads
    chains = [[{"name": "remove-layers", "params": {"layers": "last:6"}}],
              [{"name": "remove-layers", "params": {"layers": "every:2"}}],
              [{"name": "reinit", "params": {"scope": "heads", "heads": [f"{layer}:{head}"
                                             for layer in (0, 1, 10, 11) for head in range(12)]}}],
              [{"name": "permute-within"}], [{"name": "match-moments", "params": {"match": "variance"}}]]
    chains += [[{"name": "reinit", "params": {"scope": "layers", "layers": f"from:{k}"}}] for k in range(12)]
    for chain in chains:
        validate_chain(chain, base)


def test_each_chain_item_is_validated_against_the_config_the_items_before_leave():
    chain = [step("remove-layers", layers="last:2"), step("reinit", scope="layers", layers=[0])]
    validate_chain(chain, tiny_config(3))
    with pytest.raises(BadInput, match=r"layer 1 is beyond the model's 1 layers; allowed: layer 0\.\.0"):
        validate_chain([chain[0], step("reinit", scope="heads", heads=["1:0"])], tiny_config(3))
    with pytest.raises(BadInput, match="K=2 must leave at least one of the model's 2 layers"):
        validate_chain([step("remove-layers", layers=[0]), step("remove-layers", layers="last:2")], tiny_config(3))
    config = tiny_config(3)
    validate_chain(chain, config)
    assert config.num_hidden_layers == 3  # the caller's config is not touched


def test_a_chain_that_changes_no_tensor_is_an_error_and_an_empty_one_is_not():
    # the random tiny BERT is reinit_all from its seed: the same draw again leaves every tensor bit-identical
    from bertology.interventions.registry import NoChange

    model, tokenizer = tiny_bert(0)
    before = state(model)
    with pytest.raises(NoChange, match=r"^intervention reinit \{'scope': 'all'.* \(seed 0\) changed 0 of 71 tensors"):
        apply_chain(model, tokenizer, [{"name": "reinit"}], seed=0)
    assert NoChange("x").exit_code == 1
    assert all(torch.equal(before[k], v) for k, v in state(model).items())  # it really was a no-op
    # another seed changes every tensor the reinit draws; the unmodified model (no chain) is exempt
    _, _, changed = apply_chain(*tiny_bert(0), [{"name": "reinit"}], seed=1)
    assert sum(t["changed"] for t in changed["tensors"]) > 0
    _, _, unmodified = apply_chain(*tiny_bert(0), [], seed=0)
    assert not any(t["changed"] for t in unmodified["tensors"])


def test_build_checkpoint_refuses_a_no_op_variant_with_one_line_and_exit_1(tmp_path, capsys):
    from bertology.spec import canonical_json
    from bertology.steps import build_checkpoint
    from bertology.steps.harness import main

    save_checkpoint(*tiny_bert(0), tmp_path / "random")  # drawn by reinit_all from seed 0
    spec = {"model": f"dir:{tmp_path / 'random'}", "interventions": [{"name": "reinit"}], "seed": 0}
    capsys.readouterr()
    code = main("build-checkpoint", build_checkpoint.run, ["--store", str(tmp_path / "store"), "--spec",
                                                           canonical_json(spec)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "changed 0 of 71 tensors" in err[0], err
    assert not (tmp_path / "store" / "checkpoints").exists() or not any((tmp_path / "store" / "checkpoints").rglob(
        "_SUCCESS.json"))  # nothing published
