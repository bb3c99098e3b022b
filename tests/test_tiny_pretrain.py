"""The tiny preset's pre-trained BERT: deterministic masked-LM, content-addressed in the store, built once,
and what `tiny:bert` loads inside a study step (issue: under tiny, clean was bit-identical to pre-trained)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from bertology import models, tiny_pretrain, tiny_recipe
from bertology.interventions import apply_chain
from bertology.store import LocalStore


def test_pretraining_is_deterministic_cached_by_id_and_is_what_tiny_bert_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(tiny_recipe, "STEPS", 4)  # the recipe, and so the id, follows the steps
    first, second = LocalStore(tmp_path / "a"), LocalStore(tmp_path / "b")
    key = tiny_recipe.key()
    assert key.startswith("pretrained/tiny-bert-")  # content-addressed by the recipe
    a, b = tiny_pretrain.ensure(first), tiny_pretrain.ensure(second)
    assert first.is_done(key) and first.marker(key)["recipe"]["steps"] == 4
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)  # the same bytes, twice
    stamp = (a / "_SUCCESS.json").stat().st_mtime_ns
    assert tiny_pretrain.ensure(first) == a and (a / "_SUCCESS.json").stat().st_mtime_ns == stamp  # built once
    monkeypatch.setattr(tiny_recipe, "STEPS", 5)
    assert tiny_recipe.key() != key

    random_bert, _ = models.tiny_bert(0)
    try:
        monkeypatch.setattr(tiny_recipe, "STEPS", 4)
        tiny_pretrain.use_store(first)
        pretrained, _ = models.load_pretrained(models.parse_model_ref("tiny:bert"))
    finally:
        tiny_pretrain.use_store(None)
    trained = {k.removeprefix("bert."): v for k, v in wa.items()}
    state = pretrained.state_dict()
    assert "cls.predictions.transform.dense.weight" in state  # the masked-LM head survives
    assert all(torch.equal(state[k], v) for k, v in wa.items())
    # pre-training moved the weights off the random draw, so the clean variant (reinit, seed 0) differs from it
    random_state = random_bert.state_dict()
    assert not torch.equal(random_state["encoder.layer.0.output.dense.weight"],
                           trained["encoder.layer.0.output.dense.weight"])
    _, _, manifest = apply_chain(pretrained, None, [{"name": "reinit"}], seed=0)
    changed = [t for t in manifest["tensors"] if t["changed"]]
    assert len(changed) > 60, len(changed)


def test_a_store_is_seeded_from_another_that_has_the_same_recipe(tmp_path, monkeypatch):
    """$BERTOLOGY_TINY_PRETRAINED (the test suite's one build): copied, verified, the same bytes, no
    training; a seed store without this recipe's artifact is ignored and the model is trained."""
    monkeypatch.setattr(tiny_recipe, "STEPS", 3)
    source = LocalStore(tmp_path / "seed")
    built = tiny_pretrain.ensure(source)
    monkeypatch.setenv("BERTOLOGY_TINY_PRETRAINED", str(source.root))

    def no_training(out):
        raise AssertionError("trained although the seed store has this recipe")

    monkeypatch.setattr(tiny_pretrain, "pretrain", no_training)
    target = LocalStore(tmp_path / "target")
    copied = tiny_pretrain.ensure(target)
    assert target.verify(tiny_recipe.key())["recipe"]["steps"] == 3
    assert (copied / "model.safetensors").read_bytes() == (built / "model.safetensors").read_bytes()
    monkeypatch.setattr(tiny_recipe, "STEPS", 2)  # another recipe: the seed store lacks it
    with pytest.raises(AssertionError, match="trained although"):
        tiny_pretrain.ensure(LocalStore(tmp_path / "other"))


def _polarity_probe(model, tokenizer) -> float:
    """Share of the held-out sentiment words (the synthetic SST-2's validation words, never in its
    training split) that a nearest-centroid rule on the input embeddings, fit on the training words, puts
    on their own polarity's side."""
    from bertology.tasks.synthetic import SENTIMENT_WORDS

    table = model.get_input_embeddings().weight.detach()

    def rows(split, polarity):
        return table[tokenizer.convert_tokens_to_ids(list(SENTIMENT_WORDS[split][polarity]))]

    positive, negative = rows("train", "positive").mean(0), rows("train", "negative").mean(0)
    direction, middle = positive - negative, (positive + negative) / 2
    right = ((rows("validation", "positive") - middle) @ direction > 0).sum() + (
        (rows("validation", "negative") - middle) @ direction < 0).sum()
    return right.item() / sum(len(w) for w in SENTIMENT_WORDS["validation"].values())


def test_pretraining_places_the_held_out_sentiment_words_by_polarity(tiny_pretrained):
    """What the recipe is for (issue: tiny studies showed no pre-trained > clean): masked-LM puts every
    held-out evaluation word on its polarity's side, which a random draw does not; fine-tuned on the
    training words, the model then generalises to them (tests/test_e2e.py checks the accuracies)."""
    from transformers import AutoModel

    pretrained = AutoModel.from_pretrained(LocalStore(tiny_pretrained).local_dir(tiny_recipe.key()))
    random_bert, tokenizer = models.tiny_bert(0)
    assert _polarity_probe(pretrained, tokenizer) == 1.0
    assert _polarity_probe(random_bert, tokenizer) <= 0.75


def test_every_id_that_names_tiny_bert_hashes_the_pretraining_recipe(monkeypatch):
    """`tiny:bert` names the weights a recipe makes: another recipe must not reuse a store's checkpoints,
    runs or studies made from the old weights. Datasets need the tokenizer only, and other models are
    unaffected."""
    from bertology.spec import CheckpointSpec, DatasetSpec, Regime, RunSpec

    def ids():
        run = RunSpec(CheckpointSpec("tiny:bert"), DatasetSpec("sst2", "synthetic", "tiny:bert", 32, count=8),
                      Regime(lr=1e-3), seed=1)
        return {"checkpoint": run.checkpoint.id, "run": run.id, "dataset": run.dataset.id,
                "hub": CheckpointSpec("google-bert/bert-base-uncased").id}

    before = ids()
    monkeypatch.setattr(tiny_recipe, "STEPS", tiny_recipe.STEPS + 1)
    after = ids()
    assert after["checkpoint"] != before["checkpoint"] and after["run"] != before["run"]
    assert after["dataset"] == before["dataset"] and after["hub"] == before["hub"]
