"""The vocabulary analysis (report Table 2 and English-like contexts) on tiny hand-made vocabularies,
checked against hand-computed counts; the vocab-overlap job end to end; its bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from transformers import BertTokenizerFast

from bertology import vocab
from bertology.errors import EXIT_BAD_INPUT, BadInput
from bertology.results import SCHEMA_VERSION
from bertology.steps import vocab_overlap
from bertology.steps.harness import main

# Ids 0-13. English-like: the, cat, ##ing, Haus, a (5 of 14).
MODEL_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "1", ".", "##ing", "##1", "é",
               "Haus", "a"]
# Shares with the model: the, ##ing exactly (2); also haus ~ Haus when case-folded (3). "1", "." are
# shared but not English-like, so they do not count.
REFERENCE_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "haus", "##ing", "dog", "1", "."]

# E = English-like piece, N = not ("zzz" is out of vocabulary: [UNK]).
CORPUS = [
    "the cat 1 1 1 the",        # E E N N N E        pieces 0-5
    "cat cat zzz cat cat 1 1",  # E E N E E N N      pieces 6-12
    "",                         # nothing
    "1 . 1 the cat the",        # N N N E E E        pieces 13-18
    "cat",                      # E                  piece 19
]
# Windows of 10, stride 10: [0,10) has 6 E (> 5: English-like), [10,20) has exactly 5 (not).
# Stride 5 adds [5,15): 5 E (not).


def _tokenizer(tmp_path: Path, pieces: list[str], name: str) -> tuple[BertTokenizerFast, Path]:
    """A cased BERT tokenizer built from a vocab.txt, saved as an HF directory a `dir:` ref loads."""
    (tmp_path / f"{name}.txt").write_text("\n".join(pieces) + "\n", encoding="utf-8")
    # transformers 5 reads the vocabulary from `vocab=`; a `vocab_file=` keyword is silently ignored.
    tokenizer = BertTokenizerFast(vocab=str(tmp_path / f"{name}.txt"), do_lower_case=False)
    assert len(tokenizer.get_vocab()) == len(pieces)
    directory = tmp_path / name
    tokenizer.save_pretrained(directory)
    return tokenizer, directory


@pytest.mark.parametrize("piece, expected", [
    ("the", True), ("Haus", True), ("A", True), ("##ing", True), ("##S", True),
    ("##1", False), ("1", False), ("[CLS]", False), ("[UNK]", False), ("é", False), ("café", False),
    ("##", False), ("###a", False), ("a##", False), ("ab1", False), ("a-b", False), ("a\n", False),
    ("ａ", False), ("ß", False), ("", False), ("##ing##", False),
])
def test_english_like_is_the_reports_regex_on_the_whole_piece(piece, expected):
    assert vocab.is_english_like(piece) is expected


def test_vocab_overlap_counts_the_models_english_like_pieces_the_reference_has():
    exact = vocab.vocab_overlap(MODEL_VOCAB, REFERENCE_VOCAB)
    assert (exact.vocab_size, exact.english_like, exact.overlap) == (14, 5, 2)
    assert exact.english_like_share == pytest.approx(5 / 14) and exact.overlap_share == pytest.approx(2 / 5)
    fold = vocab.vocab_overlap(MODEL_VOCAB, REFERENCE_VOCAB, case="fold")
    assert (fold.english_like, fold.overlap) == (5, 3)
    assert vocab.vocab_overlap(["[PAD]", "1"], REFERENCE_VOCAB).overlap_share is None
    with pytest.raises(BadInput, match="case 'upper' is unknown"):
        vocab.vocab_overlap(MODEL_VOCAB, REFERENCE_VOCAB, case="upper")


def test_count_contexts_over_a_mask():
    mask = np.array([1] * 6 + [0] * 4 + [1] * 5 + [0] * 5 + [1] * 3, dtype=bool)  # 23 pieces
    assert vocab.count_contexts(mask) == (2, 1, 20)  # [0,10) 6 E; [10,20) exactly 5 E; 3 left over
    assert vocab.count_contexts(mask, stride=5) == (3, 2, 15)  # [5,15) has 6 E
    sliding = vocab.count_contexts(mask, stride=1)
    naive = sum(mask[i:i + 10].sum() > 5 for i in range(len(mask) - 9))
    assert sliding[:2] == (14, naive)
    assert vocab.count_contexts(mask[:9]) == (0, 0, 0)


def test_english_contexts_stream_the_corpus_without_special_tokens(tmp_path):
    tokenizer, _ = _tokenizer(tmp_path, MODEL_VOCAB, "model")
    counts = vocab.english_contexts(tokenizer, CORPUS)
    assert (counts.pieces, counts.windows, counts.english_windows) == (20, 2, 1)
    assert counts.english_window_share == 0.5
    assert vocab.english_contexts(tokenizer, CORPUS, batch_lines=1) == counts  # batches carry over
    strided = vocab.english_contexts(tokenizer, CORPUS, stride=5, batch_lines=2)
    assert (strided.windows, strided.english_windows) == (3, 1)
    assert vocab.english_contexts(tokenizer, []).english_window_share is None


def test_english_contexts_ignore_the_tokenizers_truncation_and_padding(tmp_path):
    tokenizer, _ = _tokenizer(tmp_path, MODEL_VOCAB, "model")
    tokenizer.backend_tokenizer.enable_truncation(max_length=4)  # as a saved tokenizer.json may carry
    tokenizer.backend_tokenizer.enable_padding(length=32)
    assert vocab.english_contexts(tokenizer, CORPUS).pieces == 20
    assert tokenizer.backend_tokenizer.truncation is not None  # the caller's tokenizer is left alone


def test_english_contexts_need_a_wordpiece_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    bpe = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(BPE()))
    with pytest.raises(BadInput, match="not WordPiece"):
        vocab.english_contexts(bpe, CORPUS)


def test_a_tsv_corpus_reads_texts_in_the_xnli_layout_without_labels_or_repeated_premises(tmp_path):
    corpus = tmp_path / "dev-xx.tsv"
    corpus.write_text("P one\tH one\tneutral\nP one\tH two\tentailment\nP two\tH three\tcontradiction\n"
                      "P three\tH four\tneutral\n", encoding="utf-8")
    texts = list(vocab_overlap.corpus_texts(str(corpus)))
    assert texts == ["P one", "H one", "H two", "P two", "H three", "P three", "H four"]
    assert list(vocab_overlap.corpus_texts(str(corpus), max_lines=2)) == ["P one", "H one", "H two"]


def _run(argv):
    return main("vocab-overlap", vocab_overlap.run, argv)


def test_the_job_writes_one_row_and_a_rerun_is_cached(tmp_path, capsys):
    _, model_dir = _tokenizer(tmp_path, MODEL_VOCAB, "model")
    _, reference_dir = _tokenizer(tmp_path, REFERENCE_VOCAB, "reference")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    spec = {"model": f"dir:{model_dir}", "reference": f"dir:{reference_dir}", "corpus": str(corpus)}
    store = tmp_path / "store"
    assert _run(["--store", str(store), "--spec", json.dumps(spec)]) == 0
    [artifact] = list((store / "analyses" / "vocab").iterdir())
    table = pq.read_table(artifact / "vocab_overlap.parquet")
    assert table.schema == vocab_overlap.VOCAB_OVERLAP_SCHEMA
    assert table.to_pylist() == [{
        "schema_version": SCHEMA_VERSION, "model": f"dir:{model_dir}", "reference": f"dir:{reference_dir}",
        "case": "exact",
        "vocab_size": 14, "english_like": 5, "english_like_share": 5 / 14, "overlap": 2, "overlap_share": 0.4,
        "corpus": str(corpus), "max_lines": None, "stride": 10, "pieces": 20, "windows": 2,
        "english_windows": 1, "english_window_share": 0.5,
    }]
    marker = artifact / "_SUCCESS.json"
    written = marker.stat().st_mtime_ns
    capsys.readouterr()
    assert _run(["--store", str(store), "--spec", json.dumps(spec)]) == 0
    assert "cached" in capsys.readouterr().out and marker.stat().st_mtime_ns == written

    corpus.write_text("cat\n", encoding="utf-8")  # an edited corpus is a new analysis
    assert _run(["--store", str(store), "--spec", json.dumps({**spec, "case": "fold"})]) == 0
    rows = pq.read_table(store / "analyses" / "vocab", schema=vocab_overlap.VOCAB_OVERLAP_SCHEMA).to_pylist()
    folded = next(r for r in rows if r["case"] == "fold")
    got = (folded["overlap"], folded["pieces"], folded["windows"], folded["english_window_share"])
    assert got == (3, 1, 0, None)


def test_without_a_corpus_the_context_columns_are_null(tmp_path):
    _, model_dir = _tokenizer(tmp_path, MODEL_VOCAB, "model")
    store = tmp_path / "store"
    spec = {"model": f"dir:{model_dir}", "reference": f"dir:{model_dir}"}
    assert _run(["--store", str(store), "--spec", json.dumps(spec)]) == 0
    [row] = pq.read_table(next((store / "analyses" / "vocab").glob("*/vocab_overlap.parquet"))).to_pylist()
    assert (row["overlap"], row["overlap_share"]) == (5, 1.0)
    assert row["corpus"] is None and row["windows"] is None and row["english_window_share"] is None


def test_the_artifact_row_conforms_to_the_published_results_table(tmp_path):
    from bertology.results.tables import with_labels
    from bertology.spec import Cell, CheckpointSpec, DatasetSpec, RunSpec

    _, model_dir = _tokenizer(tmp_path, MODEL_VOCAB, "model")
    row = vocab_overlap.measure(vocab_overlap.VocabSpec(f"dir:{model_dir}", f"dir:{model_dir}"))
    run = RunSpec(CheckpointSpec("tiny:bert"), DatasetSpec("sst2", tokenizer="tiny:bert"))
    published = with_labels("vocab_overlap", Cell("study", "base", "de", run).labels(), row)
    assert published.column("model").to_pylist() == ["de"]  # the study's model label replaces the ref
    assert published.column("english_like").to_pylist() == [5]


@pytest.mark.parametrize("spec, message", [
    ({"model": "DIR", "corpus": "MISSING"}, "corpus '{tmp}/missing.txt' is not a file"),
    ({"model": "package:nope"}, "packaged model 'nope' is unknown"),
    ({"model": "not a ref"}, "model reference 'not a ref' is empty or contains whitespace"),
    ({"model": "DIR", "reference": "dir:/no/such/dir"}, "model directory '/no/such/dir' has no tokenizer"),
    ({"model": "DIR", "case": "upper"}, "case 'upper' is unknown; allowed: exact, fold"),
    ({"model": "DIR", "stride": 11}, "stride must be <= 10"),
    ({"model": "DIR", "max_lines": 0}, "max_lines must be >= 1"),
    ({"model": "DIR", "corpora": "x"}, "unknown key 'corpora' in vocab spec"),
    ({"reference": "DIR"}, "vocab spec is missing 'model'"),
])
def test_bad_input_is_exit_2_with_one_line_and_nothing_written(spec, message, tmp_path, capsys):
    _, model_dir = _tokenizer(tmp_path, MODEL_VOCAB, "model")
    subs = {"DIR": f"dir:{model_dir}", "MISSING": str(tmp_path / "missing.txt")}
    spec = {k: subs.get(v, v) for k, v in spec.items()}
    store = tmp_path / "store"
    assert _run(["--store", str(store), "--spec", json.dumps(spec)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message.format(tmp=tmp_path) in err and "\n" not in err
    assert not store.exists()


ENGLISH = vocab_overlap.ENGLISH_REFERENCE


def test_the_default_reference_is_the_bert_base_uncased_vocabulary():
    """The report's caption: English BERT has 30,522 word-pieces, 26,503 of them English-like."""
    tokenizer = vocab_overlap.load_tokenizer(ENGLISH)
    overlap = vocab.vocab_overlap(tokenizer.get_vocab(), tokenizer.get_vocab())
    assert (overlap.vocab_size, overlap.english_like, overlap.overlap) == (30522, 26503, 26503)


DUTCH = Path("/work/shared/data/nl-text/alpino_news.txt")


@pytest.mark.skipif(not DUTCH.is_file(), reason="the shared Dutch corpus is not on this machine")
def test_real_dutch_text_through_the_english_tokenizer_is_mostly_english_like_contexts(tmp_path):
    spec = vocab_overlap.VocabSpec(ENGLISH, corpus=str(DUTCH), max_lines=300)
    [row] = vocab_overlap.measure(spec).to_pylist()
    assert row["windows"] > 100 and 0.5 < row["english_window_share"] < 1.0
