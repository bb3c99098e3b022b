"""The draws (truncated normal, permutations), the initialisation studies (permute-within, match-moments),
and what holds for every intervention: chains are their parts in order, and a seed fixes the bytes."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import scipy.stats
import torch
from test_interventions import (
    TRUNC_STD_FACTOR,
    assert_identical_except,
    changed_names,
    state,
    step,
    tiny_model,
    tiny_tokenizer,
)
from transformers import BertForMaskedLM

from bertology.interventions import REGISTRY, apply_chain
from bertology.models import save_checkpoint
from bertology.sampling import child_seeds, permutation, trunc_normal_, truncated_normal

# ---------------------------------------------------------------- the truncated normal


@pytest.mark.parametrize("std", [0.02, 1.0, 3.5])
def test_trunc_normal_is_the_truncated_normal(std):
    draws = truncated_normal((400_000,), std, torch.Generator().manual_seed(0))
    assert draws.dtype == torch.float32
    assert draws.abs().max() <= 2 * std  # the bounds
    assert draws.abs().max() > 1.99 * std  # reached: the tails are not cut short
    assert draws.std().item() == pytest.approx(TRUNC_STD_FACTOR * std, rel=5e-3)  # 0.8796 std
    assert abs(draws.mean().item()) < 0.01 * std
    reference = scipy.stats.truncnorm(-2, 2, loc=0, scale=std)
    assert scipy.stats.kstest(draws.double().numpy(), reference.cdf).pvalue > 0.01


def test_trunc_normal_matches_torchs_inverse_cdf_sampler_in_distribution():
    ours = truncated_normal((200_000,), 0.02, torch.Generator().manual_seed(1))
    theirs = torch.empty(200_000)
    torch.nn.init.trunc_normal_(theirs, std=0.02, a=-0.04, b=0.04, generator=torch.Generator().manual_seed(2))
    assert scipy.stats.ks_2samp(ours.numpy(), theirs.numpy()).pvalue > 0.01


def test_trunc_normal_gives_the_same_values_in_any_layout_dtype_and_view():
    reference = truncated_normal((6, 8), 0.02, torch.Generator().manual_seed(3))
    as_bf16 = torch.empty(6, 8, dtype=torch.bfloat16)
    trunc_normal_(as_bf16, 0.02, torch.Generator().manual_seed(3))
    assert torch.equal(as_bf16, reference.to(torch.bfloat16))
    columns = torch.zeros(8, 6)
    trunc_normal_(columns.t(), 0.02, torch.Generator().manual_seed(3))  # a non-contiguous view
    assert torch.equal(columns.t(), reference)
    rows = torch.zeros(10, 8)
    trunc_normal_(rows[2:8], 0.02, torch.Generator().manual_seed(3))  # a contiguous slice, written in place
    assert torch.equal(rows[2:8], reference) and not rows[:2].any() and not rows[8:].any()


def test_trunc_normal_same_seed_same_bytes_on_any_thread_count():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = truncated_normal((300_000,), 0.02, torch.Generator().manual_seed(4))
        torch.set_num_threads(4)
        b = truncated_normal((300_000,), 0.02, torch.Generator().manual_seed(4))
    finally:
        torch.set_num_threads(threads)
    c = truncated_normal((300_000,), 0.02, torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_permutations_are_uniform():
    generator = torch.Generator().manual_seed(0)
    counts = Counter(tuple(permutation(3, generator).tolist()) for _ in range(6000))
    assert set(counts) == set(itertools.permutations(range(3)))
    assert scipy.stats.chisquare(list(counts.values())).pvalue > 0.001
    assert len(set(child_seeds(100, generator))) == 100


# ---------------------------------------------------------------- permute-within


def sorted_values(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).sort().values


def test_permute_within_keeps_every_tensors_values():
    model = tiny_model(2)
    before = state(model)
    model, _, manifest = apply_chain(model, None, [{"name": "permute-within"}], seed=0)
    after = model.state_dict()
    params = {name for name, _ in model.named_parameters()}
    for name in params:
        assert after[name].shape == before[name].shape
        assert torch.equal(sorted_values(after[name]), sorted_values(before[name])), name
    assert changed_names(manifest) == params  # every parameter, buffers (position ids) left alone
    assert_identical_except(before, after, params)


def test_permute_within_globs_select_tensors_and_tied_tensors_move_once():
    model = tiny_model(2, cls=BertForMaskedLM)
    before = state(model)
    tensors = ["bert.encoder.layer.1.*.weight", "bert.embeddings.word_embeddings.weight"]
    model, _, manifest = apply_chain(model, None, [step("permute-within", tensors=tensors)], 1)
    words = model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.weight is words
    expected = {k for k in before if k.startswith("bert.encoder.layer.1.") and k.endswith(".weight")}
    expected |= {"bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"}
    assert changed_names(manifest) == expected
    assert torch.equal(sorted_values(words), sorted_values(before["bert.embeddings.word_embeddings.weight"]))


def test_permute_within_does_not_depend_on_the_thread_count():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = apply_chain(tiny_model(3), None, [{"name": "permute-within"}], seed=9)[0].state_dict()
        torch.set_num_threads(3)
        three = apply_chain(tiny_model(3), None, [{"name": "permute-within"}], seed=9)[0].state_dict()
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(v, three[k]) for k, v in one.items())


# ---------------------------------------------------------------- match-moments


@pytest.mark.parametrize("match", ["norm", "variance"])
def test_match_moments_hits_the_pretrained_moment(match):
    model = tiny_model(2, vocab=400, hidden=32)
    before = state(model)
    model, _, manifest = apply_chain(model, None, [{"name": "match-moments", "params": {"match": match}}], 0)
    after = model.state_dict()
    matrices = {name for name, p in model.named_parameters() if p.dim() >= 2}
    assert len(matrices) == 16  # 3 embeddings, 6 projections x 2 layers, the pooler
    for name in matrices:
        new, old = after[name].double(), before[name].double()
        if match == "norm":
            assert new.norm().item() == pytest.approx(old.norm().item(), rel=1e-5), name
        else:
            assert new.var().item() == pytest.approx(old.var().item(), rel=1e-5), name
            assert new.var(correction=0).item() == pytest.approx(old.var(correction=0).item(), rel=1e-5)
        # a rescaled truncated normal: bounded at ±2 std of the draw, i.e. ±2/0.8796 of its own std (+ slack)
        assert new.abs().max() <= 2 / TRUNC_STD_FACTOR * 1.1 * new.std(), name
    assert changed_names(manifest) == matrices  # biases and LayerNorms keep their pre-trained values
    assert_identical_except(before, after, matrices)


def test_match_moments_is_a_fresh_draw_scaled():
    """Same seed, two different pre-trained models: the results differ only by one factor per tensor."""
    chain = [{"name": "match-moments", "params": {"match": "norm", "tensors": ["encoder.*"]}}]
    a = apply_chain(tiny_model(2, seed=1), None, chain, seed=4)[0].state_dict()
    b = apply_chain(tiny_model(2, seed=2), None, chain, seed=4)[0].state_dict()
    name = "encoder.layer.0.intermediate.dense.weight"
    ratio = a[name] / b[name]
    assert torch.allclose(ratio, ratio.flatten()[0].expand_as(ratio), rtol=1e-5)
    assert torch.equal(a["embeddings.word_embeddings.weight"] != b["embeddings.word_embeddings.weight"],
                       torch.ones_like(a["embeddings.word_embeddings.weight"], dtype=torch.bool))


# ---------------------------------------------------------------- every intervention: chains and bytes


def every_intervention(donor: str) -> list[dict]:
    return [
        {"name": "reverse-layers"},
        {"name": "remove-layers", "params": {"layers": [1]}},
        {"name": "reinit", "params": {"scope": "all"}},
        {"name": "reinit", "params": {"scope": "word-embeddings"}},
        {"name": "reinit", "params": {"scope": "layers", "layers": "from:1", "layer_norms": True}},
        {"name": "reinit", "params": {"scope": "layers", "layers": [0, 2], "biases": False}},
        {"name": "reinit", "params": {"scope": "heads", "heads": ["0:1", "2:0"], "output_columns": True}},
        {"name": "reinit", "params": {"scope": "pooler"}},
        {"name": "shuffle-embeddings", "params": {"english_only": True}},
        {"name": "swap-embeddings", "params": {"donor": donor}},
        {"name": "permute-within"},
        {"name": "match-moments", "params": {"match": "variance"}},
    ]


@pytest.fixture
def donor(tmp_path):
    tokenizer = tiny_tokenizer(tmp_path / "donor-tok")
    directory = save_checkpoint(tiny_model(1, seed=8), tokenizer, tmp_path / "donor")
    return f"dir:{directory}"


def test_every_intervention_same_seed_same_checkpoint_bytes(tmp_path, donor):
    assert {item["name"] for item in every_intervention(donor)} == set(REGISTRY)
    for n, item in enumerate(every_intervention(donor)):
        saved = []
        for attempt in range(2):
            tokenizer = tiny_tokenizer(tmp_path / "tok")
            model, tokenizer, _ = apply_chain(tiny_model(3), tokenizer, [item], seed=11)
            saved.append(save_checkpoint(model, tokenizer, tmp_path / f"{n}-{attempt}"))
        files = sorted(p.name for p in saved[0].iterdir())
        assert files == sorted(p.name for p in saved[1].iterdir()) and "model.safetensors" in files
        for name in files:
            assert (saved[0] / name).read_bytes() == (saved[1] / name).read_bytes(), (item, name)


def test_a_chain_equals_its_parts_applied_in_order(tmp_path, donor):
    chain = every_intervention(donor)[::-1]  # match-moments first … reverse-layers last
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    chained, chained_tokenizer, manifest = apply_chain(tiny_model(3), tokenizer, chain, seed=21)
    model, generator = tiny_model(3), torch.Generator().manual_seed(21)
    for item in chain:
        model, tokenizer = REGISTRY[item["name"]].apply(model, tokenizer, item.get("params", {}), generator)
    expected = model.state_dict()
    assert chained.state_dict().keys() == expected.keys()
    assert all(torch.equal(v, expected[k]) for k, v in chained.state_dict().items())
    assert chained_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert [item["name"] for item in manifest["chain"]] == [item["name"] for item in chain]
