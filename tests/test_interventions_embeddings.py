"""shuffle-embeddings and swap-embeddings on tiny BERTs with real (tiny) WordPiece tokenizers."""

from __future__ import annotations

import re

import pytest
import torch
from test_interventions import (
    TINY_VOCAB,
    assert_identical_except,
    changed_names,
    forward,
    state,
    tiny_model,
    tiny_tokenizer,
)
from transformers import AutoModel, AutoTokenizer, BertForMaskedLM, BertModel

from bertology.errors import BadInput
from bertology.interventions import apply_chain, validate_chain
from bertology.models import load_word_embeddings, parse_model_ref, save_checkpoint

WORDS = "embeddings.word_embeddings.weight"
SPECIAL = {0, 1, 2, 3, 4}
ENGLISH = {i for i, t in enumerate(TINY_VOCAB) if i not in SPECIAL and re.fullmatch(r"(##)?[A-Za-z]+", t)}


def row_mapping(before: torch.Tensor, after: torch.Tensor) -> list[int]:
    """For each row of `after`, the row of `before` it equals (rows of a perturbed model are distinct)."""
    mapping = []
    for row in after:
        hits = [j for j in range(before.shape[0]) if torch.equal(before[j], row)]
        assert len(hits) == 1
        mapping.append(hits[0])
    return mapping


# ---------------------------------------------------------------- shuffle-embeddings


def test_the_tiny_vocabulary_has_all_three_kinds():
    assert len(TINY_VOCAB) == 50 and len(ENGLISH) == 31
    assert {"über", "日本", "123", "!", "[unused0]", "café", "x1"} <= {
        TINY_VOCAB[i] for i in set(range(50)) - SPECIAL - ENGLISH
    }


RESERVED = {TINY_VOCAB.index("[unused0]")}
OTHER = set(range(50)) - SPECIAL - ENGLISH - RESERVED


@pytest.mark.parametrize(("params", "groups"), [
    ({"english_only": False}, [ENGLISH | OTHER | RESERVED]),  # every non-special row, as one group
    ({"english_only": True}, [ENGLISH, OTHER]),  # the report's: English among English, the rest among the rest
    ({"english_only": True, "others": "keep"}, [ENGLISH]),  # English among English, every other row stays
])
def test_shuffle_is_a_permutation_that_fixes_special_tokens(tmp_path, params, groups):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    assert set(tokenizer.all_special_ids) == SPECIAL
    model = tiny_model(2)
    before = state(model)
    chain = [{"name": "shuffle-embeddings", "params": params}]
    model, returned, manifest = apply_chain(model, tokenizer, chain, seed=0)
    assert returned is tokenizer
    mapping = row_mapping(before[WORDS], model.state_dict()[WORDS])
    assert sorted(mapping) == list(range(50))  # a permutation of the rows
    movable = set().union(*groups)
    assert all(mapping[i] == i for i in set(range(50)) - movable)  # special (and kept) rows stay
    for group in groups:
        assert all(mapping[i] in group for i in group)  # a row only gets a row of its own group
        assert sum(mapping[i] != i for i in group) >= len(group) - 5  # and they really move
    assert changed_names(manifest) == {WORDS}
    assert_identical_except(before, model.state_dict(), {WORDS})


def test_shuffle_keeps_a_tied_decoder_tied_and_rows_beyond_the_tokenizer(tmp_path):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model(2, cls=BertForMaskedLM, vocab=56)  # a padded table: rows 50..55 have no token
    before = state(model)
    model, _, manifest = apply_chain(model, tokenizer, [{"name": "shuffle-embeddings"}], seed=1)
    words = model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.weight is words
    assert torch.equal(model.state_dict()["cls.predictions.decoder.weight"], words)
    mapping = row_mapping(before["bert." + WORDS], words.detach())
    assert mapping[50:] == list(range(50, 56)) and all(mapping[i] == i for i in SPECIAL)
    assert changed_names(manifest) == {"bert." + WORDS, "cls.predictions.decoder.weight"}
    assert torch.equal(model.cls.predictions.bias, before["cls.predictions.bias"])


def test_shuffle_needs_the_tokenizer():
    with pytest.raises(TypeError, match="needs the model's tokenizer"):
        apply_chain(tiny_model(1), None, [{"name": "shuffle-embeddings"}], seed=0)


# ---------------------------------------------------------------- swap-embeddings

DONOR_VOCAB = ["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(55)]  # 60, pad id 1


@pytest.fixture
def donor(tmp_path):
    """A 60-token donor (different tokenizer, pad id 1) of hidden size 16, saved as an HF directory."""
    tokenizer = tiny_tokenizer(tmp_path / "donor-tok", DONOR_VOCAB)
    model = tiny_model(1, seed=5, vocab=60)
    model.config.pad_token_id = 1
    directory = save_checkpoint(model, tokenizer, tmp_path / "donor")
    return {"ref": f"dir:{directory}", "weight": model.embeddings.word_embeddings.weight.detach().clone()}


def test_swap_gives_the_donors_rows_and_tokenizer(tmp_path, donor):
    model, tokenizer = tiny_model(2), tiny_tokenizer(tmp_path / "tok")
    before = state(model)
    chain = [{"name": "swap-embeddings", "params": {"donor": donor["ref"]}}]
    model, swapped, manifest = apply_chain(model, tokenizer, chain, seed=0)
    after = model.state_dict()
    assert torch.equal(after[WORDS], donor["weight"]) and after[WORDS].shape == (60, 16)
    assert swapped.get_vocab() == {t: i for i, t in enumerate(DONOR_VOCAB)}
    assert model.config.vocab_size == 60 and model.config.pad_token_id == 1 == swapped.pad_token_id
    assert model.embeddings.word_embeddings.padding_idx == 1
    assert swapped.model_max_length == model.config.max_position_embeddings
    assert changed_names(manifest) == {WORDS}  # position, token-type, LayerNorm, encoder, pooler stay
    assert_identical_except(before, after, {WORDS})
    ids = torch.tensor([swapped("w3 w54 w0")["input_ids"]])
    assert ids.max() == 59 and model(input_ids=ids).last_hidden_state.shape == (1, 5, 16)
    save_checkpoint(model, swapped, tmp_path / "ckpt")
    reloaded = AutoModel.from_pretrained(tmp_path / "ckpt", use_safetensors=True)
    assert reloaded.config.vocab_size == 60 and torch.equal(reloaded.state_dict()[WORDS], donor["weight"])
    assert AutoTokenizer.from_pretrained(tmp_path / "ckpt").get_vocab() == swapped.get_vocab()


def test_swap_rebuilds_a_tied_mlm_decoder(tmp_path, donor):
    model = tiny_model(2, cls=BertForMaskedLM)
    chain = [{"name": "swap-embeddings", "params": {"donor": donor["ref"]}}]
    model, _, _ = apply_chain(model, tiny_tokenizer(tmp_path / "tok"), chain, seed=0)
    words = model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.weight is words and torch.equal(words, donor["weight"])
    assert torch.equal(model.cls.predictions.bias, torch.zeros(60))
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
    logits = model(input_ids=torch.tensor([[2, 57, 3]])).logits
    assert logits.shape == (1, 3, 60)


def test_swap_then_shuffle_chain(tmp_path, donor):
    model = tiny_model(2)
    chain = [{"name": "swap-embeddings", "params": {"donor": donor["ref"]}}, {"name": "shuffle-embeddings"}]
    model, _, _ = apply_chain(model, tiny_tokenizer(tmp_path / "tok"), chain, seed=3)
    mapping = row_mapping(donor["weight"], model.state_dict()[WORDS])
    assert sorted(mapping) == list(range(60)) and all(mapping[i] == i for i in range(5))
    assert sum(mapping[i] != i for i in range(5, 60)) > 45


def test_swap_validates_hidden_size_from_the_config_alone(tmp_path):
    wide = tiny_model(1, hidden=32)
    directory = save_checkpoint(wide, tiny_tokenizer(tmp_path / "tok"), tmp_path / "wide")
    weights = directory / "model.safetensors"  # validation must not read them: keep the header, zero the data
    data = weights.read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")
    weights.write_bytes(data[:header] + bytes(len(data) - header))
    with pytest.raises(BadInput) as info:
        validate_chain([{"name": "swap-embeddings", "params": {"donor": f"dir:{directory}"}}],
                       tiny_model(1).config)
    message = str(info.value)
    assert "hidden size 32 but the model has 16" in message and "\n" not in message


def test_donor_word_embeddings_are_read_alone_from_any_bert_layout(tmp_path, donor):
    weight, tokenizer, config = load_word_embeddings(parse_model_ref(donor["ref"]))
    assert torch.equal(weight, donor["weight"]) and config.hidden_size == 16 and len(tokenizer) == 60
    mlm = tiny_model(1, seed=6, cls=BertForMaskedLM)  # keys carry a "bert." prefix
    directory = save_checkpoint(mlm, tiny_tokenizer(tmp_path / "tok"), tmp_path / "mlm")
    weight, _, _ = load_word_embeddings(parse_model_ref(f"dir:{directory}"))
    assert torch.equal(weight, mlm.bert.embeddings.word_embeddings.weight)
    assert isinstance(tiny_model(1), BertModel)
    forward(tiny_model(1))
