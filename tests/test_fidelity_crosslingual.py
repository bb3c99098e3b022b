"""The cross-lingual study says where it decides what the cross-lingual report leaves open: its workflow's
header (and so its docs page) quotes the report's words, gives the line of the report's text they are on,
and marks each setting the report does not decide "assumed".

- the checkpoint: the report names "the pre-trained multi-lingual BERT from the HuggingFace library", not
  which one; the study uses google-bert/bert-base-multilingual-cased;
- the Dutch corpus: the first 100,000 sentences of the hub's Dutch Wikipedia in the order the articles
  stream, not a seeded random sample, split 80/10/10 by one fixed permutation;
- Table 1 and the embeddings: the appendix fine-tunes "the entire" model, §3.2 never trains the embedding
  layer; the study follows §3.2 and says so;
- the activation distance: eval mode (the report's runs kept dropout on, which it calls a fault), and
  positions compared one to one across the two models' tokenizers (the report is silent).

The quotes are checked against ../shared/papers/ where that is present (tests/test_fidelity.py's `quoted`);
the checks of line numbers read the report's text and are skipped where it is not here.
"""

from __future__ import annotations

import csv
import re
import sys
import types

import pytest
from test_fidelity import PAPERS, REPO, WORKFLOWS, quoted, study

PAPER = "crosslingual-finetuning-representations"
STUDY = "crosslingual-mlm"

# (the report's words, the line of its text they are on), as the header quotes them
CHECKPOINT = ("the pre-trained multi-lingual BERT from the HuggingFace library", 52)
CORPUS = (("Our corpus is obtained from Dutch Wikipedia articles and split into training, validation and "
           "test datasets"), 52)
CORPUS_SIZES = [("80,000 sentences", 176), ("10,000 sentences", 176)]
ENTIRE = ("we fine-tune the entire pre-trained multi-lingual BERT", 180)
NEVER_TRAINED = ("The initial embedding layer of multi-lingual BERT is never trained", 62)
WITHOUT_EMBEDDINGS = ("training all layers at once (without modifying the embedding layer)", 104)
DROPOUT = [("the dropout sub-layers were not disabled", 190), ("this fault on our side", 190)]
DISTANCE = ["the mean Euclidean distance of the computed activations per layer",
            "a single input batch of 16 sentences"]
ALL_QUOTES = [CHECKPOINT, CORPUS, *CORPUS_SIZES, ENTIRE, NEVER_TRAINED, WITHOUT_EMBEDDINGS, *DROPOUT]


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def header() -> str:
    """The workflow's header comment, re-flowed."""
    lines = [line.lstrip("# ") for line in (WORKFLOWS / f"{STUDY}.yaml").read_text().splitlines()
             if line.startswith("#")]
    return flat(" ".join(lines))


def part(start: str, end: str) -> str:
    """The header from `start` up to `end`: one setting's account."""
    text = header()
    assert start in text and end in text.split(start, 1)[1], (start, end)
    return start + text.split(start, 1)[1].split(end, 1)[0]


def says(text: str, quote: tuple[str, int]) -> None:
    """`text` quotes the report's words, checked against the report, and gives their line."""
    words, line = quote
    assert flat(quoted(PAPER, words)) in text, words
    assert f"text line {line}" in text, (words, line)


def page() -> str:
    """The study's docs page as docs/study_pages.py renders it, re-flowed (Markdown's escapes undone)."""
    sys.path.insert(0, str(REPO / "docs"))
    import study_pages

    return flat(study_pages.unescape(study_pages.page(WORKFLOWS / f"{STUDY}.yaml")))


@pytest.mark.skipif(not PAPERS.exists(), reason="the reports' text is not here")
@pytest.mark.parametrize("quote", ALL_QUOTES, ids=lambda q: q[0][:30])
def test_each_quote_is_on_the_line_the_header_gives(quote):
    words, line = quote
    lines = (PAPERS / f"{PAPER}.txt").read_text().splitlines()
    assert flat(words) in flat(lines[line - 1]), f"text line {line} does not say {words!r}"


def test_the_checkpoint_is_assumed_from_the_words_naming_multilingual_bert():
    text = part("Checkpoint, assumed:", "Dutch corpus")
    says(text, CHECKPOINT)
    assert "google-bert/bert-base-multilingual-cased" in text
    assert list(study(STUDY).models) == ["google-bert/bert-base-multilingual-cased"]


def test_the_dutch_corpus_is_the_first_sentences_in_stream_order_and_says_so(monkeypatch):
    text = part("Dutch corpus, assumed:", "Table 1 and the embeddings")
    says(text, CORPUS)
    for quote in CORPUS_SIZES:
        says(text, quote)
    assert "first 100,000 sentences" in text and "not a seeded random sample" in text
    assert "in the order the articles stream" in text and "(seed 0)" in text

    # what the header says is what the hub source does: the first sentences, in the order they stream
    from bertology.tasks import sources
    from bertology.tasks.registry import get_task

    task = get_task("mlm-nl")
    assert task.hub == ("wikimedia/wikipedia", "20231101.nl")
    assert sources.HUB_CORPUS_LINES == 100_000
    articles = [{"text": f"Artikel {a} heeft hier zin nummer {s}."} for a in range(50) for s in range(3)]
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda *args, **kwargs: iter(articles)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.setattr(sources, "HUB_CORPUS_LINES", 40)
    lines = sources._hub_sentences(task)
    assert lines == [a["text"] for a in articles[:40]]
    # the split: a fixed 80/10/10 permutation, each part in corpus order, the same on every call
    parts = {s: sources._carve(lines, s) for s in ("train", "validation", "test")}
    assert [len(parts[s]) for s in ("train", "validation", "test")] == [32, 4, 4]
    assert sorted(line for p in parts.values() for line in p) == sorted(lines)
    assert all(p == sorted(p, key=lines.index) for p in parts.values())
    assert parts == {s: sources._carve(lines, s) for s in parts}


def test_table_1_names_the_reports_conflict_over_the_embeddings_and_the_choice():
    text = part("Table 1 and the embeddings", "Activation distance")
    says(text, ENTIRE)
    says(text, NEVER_TRAINED)
    says(text, WITHOUT_EMBEDDINGS)
    assert "a conflict in the report" in text and "The study follows §3.2" in text
    assert "That choice is assumed" in text and "`all layers`" in text

    # the choice as the study makes it: Table 1's numbers are compared with `all layers`, embeddings frozen
    with open(REPO / "src" / "bertology" / "results" / "paper_numbers.csv", newline="") as f:
        table1 = [r for r in csv.DictReader(f) if r["report"] == PAPER and r["table"] == "Table 1"]
    assert table1 and {r["variant"] for r in table1} == {"all layers"}
    spec = study(STUDY)
    regime = spec.regime_of(next(v for v in spec.variants if v.name == "all layers"))
    assert (regime.name, regime.train_layers, regime.train_embeddings) == ("freeze", "from:0", False)


def test_the_activation_distance_says_eval_mode_and_the_assumed_alignment():
    text = part("Activation distance (", "argo submit")
    for words in DISTANCE:
        assert flat(quoted(PAPER, words)) in text, words
    for quote in DROPOUT:
        says(text, quote)
    assert "eval mode, with dropout off" in text
    alignment = text.split("Assumed, because the report is silent:", 1)[1]
    assert "its own tokenizer" in alignment and "up to the shorter of the two tokenizations" in alignment


def test_the_activation_distance_runs_in_eval_mode_and_aligns_positions_across_tokenizers():
    from bertology.models import load_pretrained, parse_model_ref
    from bertology.train.activation_distance import ActivationDistance

    reference = parse_model_ref("tiny:bert")
    model, tokenizer = load_pretrained(reference)
    texts = ["een zin .", "nog een langere zin met meer woorden ."]
    monitor = ActivationDistance(reference, texts, tokenizer=tokenizer, max_length=128)
    model.train()  # as in the training loop: dropout is on until the monitor turns it off
    rows = monitor(model)
    assert model.training  # and the loop's mode is given back
    assert all(r["distance"] < 1e-5 for r in rows) and rows == monitor(model)

    def longer(texts, **kwargs):  # another tokenizer: every sentence reads as more tokens
        return tokenizer([t + " en nog meer woorden hier" for t in texts], **kwargs)

    lengths = [len(tokenizer(t)["input_ids"]) for t in texts]
    other = ActivationDistance(reference, texts, tokenizer=longer, max_length=128)
    rows = other(model)
    assert {r["tokens"] for r in rows} == {sum(lengths)}  # position by position, up to the shorter one
    assert rows[0]["distance"] > 0


def test_the_docs_page_carries_every_quote_and_assumption():
    text = page()
    for words, line in ALL_QUOTES:
        assert flat(words) in text and f"text line {line}" in text, words
    for marker in ("Checkpoint, assumed:", "Dutch corpus, assumed:", "That choice is assumed",
                   "Assumed, because the report is silent: mBERT and BERTje tokenize differently"):
        assert marker in text, marker
