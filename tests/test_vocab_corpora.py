"""English-like contexts on each model's own pre-training corpus (monolingual report, Table 2's text):
"English-like contexts are 1.45% of the ZH pre-training data (Chinese Wikipedia) and 1.12% of the JA
pre-training data (Japanese Wikipedia). We do not perform this analysis for DE and ES"."""

from __future__ import annotations

import json
import logging

import pytest
from test_vocab import MODEL_VOCAB, REFERENCE_VOCAB, _tokenizer

from bertology.errors import BadInput
from bertology.results.report import build_report, markdown
from bertology.results.study_results import load_study_results
from bertology.steps import vocab_overlap
from bertology.steps.planned import load_plan
from bertology.store import open_store

ZH, JA, DE = "google-bert/bert-base-chinese", "tohoku-nlp/bert-base-japanese", "google-bert/bert-base-german-cased"


def test_the_hub_corpus_streams_the_languages_wikipedia_through_load_dataset(monkeypatch):
    calls = []

    def load_dataset(path, config, *, split, streaming):
        calls.append((path, config, split, streaming))
        return iter([{"text": "Erster Absatz.\n\nZweiter Absatz."}, {"text": "Dritter.\nVierter."}])

    import datasets

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    texts = list(vocab_overlap.corpus_texts("hub:wikimedia/wikipedia/20231101.de"))
    assert texts == ["Erster Absatz.", "Zweiter Absatz.", "Dritter.", "Vierter."]
    assert calls == [("wikimedia/wikipedia", "20231101.de", "train", True)]
    assert list(vocab_overlap.corpus_texts("hub:wikimedia/wikipedia/20231101.de", max_lines=3))[-1] == "Dritter."
    assert vocab_overlap.corpus_digest("hub:wikimedia/wikipedia/20231101.de") is None  # the dated name is its id
    with pytest.raises(BadInput, match="hub:OWNER/DATASET/CONFIG"):
        vocab_overlap.corpus_digest("hub:wikipedia")


def _plan(tmp_path, **raw):
    store = open_store(f"file://{tmp_path / 'store'}")
    out = vocab_overlap.plan_study(store, "vocab-overlap", raw)
    plan = load_plan(store, out["study"])  # the items are ids; the specs are in the stored plan
    return store, [plan.work("analyses", i) for i in out["specs"]]


def test_by_default_zh_and_ja_are_measured_on_their_wikipedia_and_de_es_not(tmp_path):
    _, specs = _plan(tmp_path)  # the paper preset: no stand-ins, nothing loaded while planning
    corpora = {s["model"]: s["corpus"] for s in specs}
    assert corpora[ZH] == "hub:wikimedia/wikipedia/20231101.zh"
    assert corpora[JA] == "hub:wikimedia/wikipedia/20231101.ja"
    assert corpora[DE] is None and corpora["dccuchile/bert-base-spanish-wwm-cased"] is None
    # one study corpus for the models without their own
    one = tmp_path / "x.txt"
    one.write_text("text\n", encoding="utf-8")
    _, specs = _plan(tmp_path, corpus=str(one), models=json.dumps([DE, ZH]))
    assert {s["model"]: s["corpus"] for s in specs} == {DE: str(one), ZH: "hub:wikimedia/wikipedia/20231101.zh"}


def test_offline_presets_replace_hub_corpora_and_keep_local_files(tmp_path, caplog):
    local = tmp_path / "ja.txt"
    local.write_text("日本語の文。\n", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="bertology"):
        _, specs = _plan(tmp_path, preset="tiny", models=json.dumps([ZH, JA]),
                         corpora=json.dumps({ZH: "hub:wikimedia/wikipedia/20231101.zh", JA: str(local)}))
    # both stand in as tiny:bert, each keeping its own corpus
    assert [(s["model"], s["corpus"]) for s in specs] == [("tiny:bert", "synthetic"), ("tiny:bert", str(local))]
    assert f"corpus of {ZH}: hub:wikimedia/wikipedia/20231101.zh -> synthetic" in caplog.text


def test_bad_corpora_are_refused_by_name(tmp_path):
    with pytest.raises(BadInput, match="parameter 'corpora' names 'typo/bert'"):
        _plan(tmp_path, models=json.dumps([DE]), corpora=json.dumps({"typo/bert": "/x.txt"}))
    with pytest.raises(BadInput, match="parameter 'corpora' must be a JSON object"):
        _plan(tmp_path, corpora='["/x.txt"]')
    with pytest.raises(BadInput, match="is not a file"):
        _plan(tmp_path, models=json.dumps([DE]), corpora=json.dumps({DE: str(tmp_path / "missing.txt")}))


def test_each_model_is_measured_on_its_own_local_corpus_and_reported(tmp_path):
    _, first = _tokenizer(tmp_path, MODEL_VOCAB, "first")
    _, second = _tokenizer(tmp_path, REFERENCE_VOCAB, "second")
    english, foreign = tmp_path / "en.txt", tmp_path / "xx.txt"
    english.write_text("the cat the cat the cat the cat the cat\n", encoding="utf-8")  # 10 English-like pieces
    foreign.write_text("1 . 1 . 1 . 1 . 1 .\n", encoding="utf-8")  # none English-like
    models = [f"dir:{first}", f"dir:{second}"]
    store, specs = _plan(tmp_path, models=json.dumps(models), reference=f"dir:{second}",
                         corpora=json.dumps({models[0]: str(english), models[1]: str(foreign)}))
    from bertology.steps.harness import main

    [study_id] = [k.split("/")[2] for k in store.list("studies/vocab-overlap") if k.endswith("plan.json")]
    plan = load_plan(store, f"vocab-overlap:{study_id}")
    for analysis_id in plan.doc["analyses"]:  # as the workflow's pods run it: --plan and --ids
        assert main("vocab-overlap", vocab_overlap.run,
                    ["--store", store.uri, "--plan", plan.ref, "--ids", analysis_id]) == 0
    assert len(specs) == 2
    results = load_study_results(store, "vocab-overlap", study_id)
    rows = {r["model"]: r for r in results.vocabulary.to_dicts()}
    assert rows[models[0]]["corpus"] == str(english) and rows[models[0]]["english_window_share"] == 1.0
    assert rows[models[1]]["corpus"] == str(foreign) and rows[models[1]]["english_window_share"] == 0.0
    text = markdown(build_report(results))
    assert str(english) in text and str(foreign) in text and "100.0%" in text and "0.0%" in text
