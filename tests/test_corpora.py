"""Masked-LM corpora: readers, tokenization, BERT's masking, fixed evaluation masks,
perplexity, and the synthetic two-language corpus."""

from __future__ import annotations

import itertools
import math
import types

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from transformers import BertForMaskedLM

from bertology.errors import BadInput
from bertology.models import ModelRef, load_tokenizer, tiny_config
from bertology.tasks import corpora
from bertology.tasks.corpora import (
    fixed_eval_masks,
    from_hub_text,
    from_hub_xnli,
    mask_tokens,
    read_lines,
    read_xnli_tsv,
    tokenize_corpus,
)
from bertology.tasks.synthetic import corpus
from bertology.train.heads import perplexity

pytestmark = pytest.mark.usefixtures("one_thread")




@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(ModelRef("tiny", "bert"))


def one_line_bad_input(call, match: str) -> str:
    with pytest.raises(BadInput, match=match) as e:
        call()
    assert "\n" not in str(e.value)
    return str(e.value)


# --- plain text -------------------------------------------------------------------------------------------

def test_read_lines_strips_and_drops_blank_lines(tmp_path):
    path = tmp_path / "nl.txt"
    path.write_bytes('\ufeff  Eerste zin.  \r\n\r\n\tTweede "zin".\n   \nDerde zin, één.\r\n'.encode())
    assert read_lines(path) == ["Eerste zin.", 'Tweede "zin".', "Derde zin, één."]


def test_read_lines_refuses_missing_and_empty_files(tmp_path):
    one_line_bad_input(lambda: read_lines(tmp_path / "nope.txt"), f"{tmp_path / 'nope.txt'}: no such file")
    one_line_bad_input(lambda: read_lines(tmp_path), f"{tmp_path}: no such file")
    for content in (b"", b" \n\r\n\t\n"):
        (tmp_path / "empty.txt").write_bytes(content)
        one_line_bad_input(lambda: read_lines(tmp_path / "empty.txt"), f"{tmp_path / 'empty.txt'}: no sentences")


def test_read_lines_names_the_first_byte_that_is_not_utf8(tmp_path):
    data = "goed\nook goed, één\nslecht ".encode() + b"\xff hier\n"
    (tmp_path / "latin.txt").write_bytes(data)
    offset = data.index(b"\xff")
    one_line_bad_input(lambda: read_lines(tmp_path / "latin.txt"),
                       rf"latin.txt:3: not UTF-8 \(byte 0xff at offset {offset}\)")


# --- XNLI -------------------------------------------------------------------------------------------------

# Premise, hypothesis, label rows as XNLI has them: each premise recurs with three hypotheses.
XNLI_ROWS = [
    ('And he said, "Mama, I\'m home.', "He called his mom.", "neutral"),
    ('And he said, "Mama, I\'m home.', "He didn't say a word.", "contradiction"),
    ('And he said, "Mama, I\'m home.', "He told his mom he was home.", "entailment"),
    ("I didn't know what I was going for.", "I was not sure.", "entailment"),
    ("I didn't know what I was going for.", "He called his mom.", "neutral"),
]
XNLI_SENTENCES = ['And he said, "Mama, I\'m home.', "He called his mom.", "He didn't say a word.",
                  "He told his mom he was home.", "I didn't know what I was going for.", "I was not sure."]


def write(path, lines: list[str], newline: str = "\n"):
    path.write_text(newline.join(lines) + newline, encoding="utf-8", newline="")
    return path


def test_read_xtreme_xnli_with_crlf_literal_quotes_and_dedup(tmp_path):
    path = write(tmp_path / "dev-en.tsv", ["\t".join(row) for row in XNLI_ROWS] + [""], newline="\r\n")
    assert read_xnli_tsv(path) == XNLI_SENTENCES


@pytest.mark.parametrize("bad_row,message", [
    ("only a premise\tand a hypothesis", ":3: expected 3 tab-separated fields .*found 2"),
    ("p\th\tneutral\textra", ":3: expected 3 tab-separated fields .*found 4"),
    ("p\th\tmaybe", r":3: bad label 'maybe' \(allowed: entailment, neutral, contradiction"),
])
def test_read_xtreme_xnli_names_the_bad_row(tmp_path, bad_row, message):
    lines = ["\t".join(row) for row in XNLI_ROWS[:2]]
    path = write(tmp_path / "dev.tsv", [*lines, bad_row, *lines])
    one_line_bad_input(lambda: read_xnli_tsv(path), f"dev.tsv{message}")


def test_read_xtreme_xnli_refuses_empty_non_utf8_and_a_language(tmp_path):
    one_line_bad_input(lambda: read_xnli_tsv(write(tmp_path / "e.tsv", [])), "e.tsv: no sentences")
    (tmp_path / "b.tsv").write_bytes(b"p\th\tneutral\r\np\xe9\th\tneutral\r\n")
    one_line_bad_input(lambda: read_xnli_tsv(tmp_path / "b.tsv"), r"b.tsv:2: not UTF-8 \(byte 0xe9")
    path = write(tmp_path / "dev-en.tsv", ["\t".join(row) for row in XNLI_ROWS])
    one_line_bad_input(lambda: read_xnli_tsv(path, language="en"), "language='en' cannot be selected")


def xnli10(tmp_path, languages: list[str], extra: str | None = None):
    """An XNLI 1.0 file: a header with more columns than we read, rows of `languages` (German rows get
    their sentences marked, so which language was read is visible)."""
    header = "language\tgold_label\tsentence1_binary_parse\tsentence1\tsentence2\tpairID"
    lines = [header]
    for lang in languages:
        for i, (p, h, label) in enumerate(XNLI_ROWS):
            mark = " (de)" if lang == "de" else ""
            lines.append(f"{lang}\t{label}\t( {p} )\t{p}{mark}\t{h}{mark}\t{i}")
    return write(tmp_path / "xnli.dev.tsv", lines + ([extra] if extra else []))


def test_read_xnli10_picks_one_language(tmp_path):
    path = xnli10(tmp_path, ["de", "en"])
    assert read_xnli_tsv(path, language="en") == XNLI_SENTENCES
    assert read_xnli_tsv(path, language="de") == [s + " (de)" for s in XNLI_SENTENCES]
    assert read_xnli_tsv(xnli10(tmp_path, ["en"])) == XNLI_SENTENCES


def test_read_xnli10_refuses_ambiguous_or_absent_language_and_bad_rows(tmp_path):
    path = xnli10(tmp_path, ["en", "de"])
    one_line_bad_input(lambda: read_xnli_tsv(path), r"holds several languages \(de, en\); pass language=")
    one_line_bad_input(lambda: read_xnli_tsv(path, language="fr"),
                       r"no rows of language 'fr' \(languages in the file: de, en\)")
    path = xnli10(tmp_path, ["en"], extra="en\tneutral\tp\th")
    one_line_bad_input(lambda: read_xnli_tsv(path, language="en"),
                       r"xnli.dev.tsv:7: expected 6 tab-separated fields \(as the header\), found 4")
    path = write(tmp_path / "no-language.tsv", ["sentence1\tsentence2\tlabel", "p\th\tneutral"])
    one_line_bad_input(lambda: read_xnli_tsv(path), "no-language.tsv:1: header has no column 'language'")


def test_hub_tables(tmp_path):
    text = pa.table({"text": ["  Een zin. ", "", None, "Nog een zin.", " "]})
    assert from_hub_text(text, "text") == ["Een zin.", "Nog een zin."]
    one_line_bad_input(lambda: from_hub_text(text, "sentence"), r"no column 'sentence' \(has: text\)")
    xnli = pa.table({"premise": [row[0] for row in XNLI_ROWS], "hypothesis": [row[1] for row in XNLI_ROWS],
                     "label": [1, 2, 0, 0, 1]})
    assert from_hub_xnli(xnli) == XNLI_SENTENCES
    one_line_bad_input(lambda: from_hub_xnli(text), "has no column 'premise'")


# --- subsets and tokenization -----------------------------------------------------------------------------

def test_tokenize_corpus_round_trip(tok):
    lines = ["the cat sat on the mat", "hello world", "a b c d e f g h"]
    table = tokenize_corpus(lines, tok, max_length=6)
    assert table.schema == pa.schema([("idx", pa.int64()), ("input_ids", pa.list_(pa.int32())),
                                      ("token_type_ids", pa.list_(pa.int8())), ("length", pa.int32())])
    assert table.column("idx").to_pylist() == [0, 1, 2]
    ids = table.column("input_ids").to_pylist()
    assert [len(row) for row in ids] == table.column("length").to_pylist() == [6, 4, 6]
    assert all(row[0] == tok.cls_token_id and row[-1] == tok.sep_token_id for row in ids)
    assert [tok.decode(row, skip_special_tokens=True) for row in ids] == ["the cat sat on", "hello world",
                                                                          "a b c d"]
    assert table.column("token_type_ids").to_pylist() == [[0] * len(row) for row in ids]


def test_tokenize_corpus_in_chunks_equals_one_pass(tok, monkeypatch):
    lines = corpus.generate("nl", "train", 7)
    whole = tokenize_corpus(lines, tok, max_length=32)
    monkeypatch.setattr(corpora, "_TOKENIZE_CHUNK", 2)
    chunked = tokenize_corpus(lines, tok, max_length=32)
    assert chunked.column("input_ids").num_chunks == 4
    assert chunked.to_pylist() == whole.to_pylist()


def test_tokenize_corpus_refuses_slow_tokenizers_and_bad_lengths(tok):
    one_line_bad_input(lambda: tokenize_corpus(["x"], types.SimpleNamespace(is_fast=False), 8),
                       "tokenizer SimpleNamespace is not a fast tokenizer")
    one_line_bad_input(lambda: tokenize_corpus(["x"], tok, 1), "max_length must be an integer >= 2, got 1")


# --- masking ----------------------------------------------------------------------------------------------

MASK_ID, VOCAB = 103, 30522


def padded_batch(rng, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Random ids framed as [CLS] … [SEP] [PAD]…, and the special-position mask."""
    ids = rng.integers(1000, VOCAB, size=(rows, width))
    lengths = rng.integers(3, width + 1, size=rows)
    ids[:, 0] = 101
    ids[np.arange(rows), lengths - 1] = 102
    ids[np.arange(width) >= lengths[:, None]] = 0
    special = np.isin(ids, (0, 101, 102))
    return ids, special


def within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def test_mask_tokens_proportions_and_labels():
    ids, special = padded_batch(np.random.default_rng(1), rows=400, width=256)
    before = ids.copy()
    masked, labels = mask_tokens(ids, special, mask_id=MASK_ID, vocab_size=VOCAB,
                                 rng=np.random.default_rng(0))
    assert np.array_equal(ids, before) and masked.shape == labels.shape == ids.shape
    chosen = labels != -100
    assert not (chosen & special).any() and np.array_equal(masked[special], ids[special])
    assert np.array_equal(labels[chosen], ids[chosen])
    assert np.array_equal(masked[~chosen], ids[~chosen])
    n = int((~special).sum())
    k = int(chosen.sum())
    assert within(k, n, 0.15)
    to_mask = chosen & (masked == MASK_ID)
    kept = chosen & (masked == ids)
    to_random = chosen & ~to_mask & ~kept
    assert within(int(to_mask.sum()), k, 0.8)
    assert within(int(kept.sum()), k, 0.1 + 0.1 / VOCAB)  # a random id may equal the original
    assert within(int(to_random.sum()), k, 0.1 - 0.1 / VOCAB)
    random_ids = masked[to_random]
    assert random_ids.min() >= 0 and random_ids.max() < VOCAB
    assert random_ids.min() < VOCAB // 10 and random_ids.max() > VOCAB * 9 // 10  # not only the input range


def test_mask_tokens_is_a_pure_function_of_the_rng_state():
    ids, special = padded_batch(np.random.default_rng(1), rows=8, width=40)
    kwargs = {"mask_id": MASK_ID, "vocab_size": VOCAB}
    first = mask_tokens(ids, special, rng=np.random.default_rng(5), **kwargs)
    again = mask_tokens(ids, special, rng=np.random.default_rng(5), **kwargs)
    other = mask_tokens(ids, special, rng=np.random.default_rng(6), **kwargs)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[1], other[1])


def test_mask_tokens_chooses_at_least_one_token_per_maskable_row():
    rows, width = 600, 8
    ids = np.full((rows, width), 2000)
    special = np.zeros((rows, width), dtype=bool)
    special[:, [0, 1, 7]] = True  # five maskable positions, 2..6
    special[::10] = True  # and every tenth row has none
    _, labels = mask_tokens(ids, special, mask_id=MASK_ID, vocab_size=VOCAB, rng=np.random.default_rng(0),
                            probability=1e-9)
    chosen = labels != -100
    assert chosen[::10].sum() == 0
    maskable_rows = np.setdiff1d(np.arange(rows), np.arange(0, rows, 10))
    assert chosen[maskable_rows].sum(axis=1).tolist() == [1] * len(maskable_rows)
    picked = chosen[maskable_rows].argmax(axis=1)
    assert set(picked.tolist()) == {2, 3, 4, 5, 6}  # one at random among the maskable positions


def test_mask_tokens_refuses_bad_arguments():
    ids, special = padded_batch(np.random.default_rng(1), rows=2, width=5)
    rng = np.random.default_rng(0)
    for p in (0, 1.5, -0.1):
        one_line_bad_input(lambda p=p: mask_tokens(ids, special, mask_id=MASK_ID, vocab_size=VOCAB, rng=rng,
                                                   probability=p), rf"mask probability must be .*, got {p}")
    one_line_bad_input(lambda: mask_tokens(ids, special[:, :3], mask_id=MASK_ID, vocab_size=VOCAB, rng=rng),
                       r"one \(batch, width\) shape, got \(2, 5\) and \(2, 3\)")
    one_line_bad_input(lambda: mask_tokens(ids, special, mask_id=MASK_ID, vocab_size=0, rng=rng),
                       "vocab_size must be an integer >= 1, got 0")


# --- fixed evaluation masks -------------------------------------------------------------------------------

def test_fixed_eval_masks_do_not_depend_on_the_other_rows(tok):
    table = tokenize_corpus(corpus.generate("nl", "validation", 40), tok, max_length=64)
    masked = fixed_eval_masks(table, tok, seed=7)
    assert masked.column_names == [*table.column_names, "labels"]
    assert masked.schema.field("input_ids").type == masked.schema.field("labels").type == pa.list_(pa.int32())
    for name in ("idx", "token_type_ids", "length"):
        assert masked.column(name).equals(table.column(name))
    rows = [3, 17, 30]
    assert fixed_eval_masks(table.take(rows), tok, seed=7).to_pylist() == masked.take(rows).to_pylist()
    assert fixed_eval_masks(table, tok, seed=7).equals(masked)
    assert fixed_eval_masks(table, tok, seed=8).column("labels") != masked.column("labels")

    special_ids = set(tok.all_special_ids)
    for original, ids, labels in zip(table.column("input_ids").to_pylist(),
                                     masked.column("input_ids").to_pylist(),
                                     masked.column("labels").to_pylist()):
        scored = [i for i, label in enumerate(labels) if label != -100]
        assert scored, "every sentence has at least one scored token"
        assert all(labels[i] == original[i] and original[i] not in special_ids for i in scored)
        assert all(ids[i] == original[i] for i in range(len(ids)) if labels[i] == -100)


def test_fixed_eval_masks_refuses_masked_tables_and_bad_seeds(tok):
    table = tokenize_corpus(["een zin"], tok, max_length=16)
    one_line_bad_input(lambda: fixed_eval_masks(fixed_eval_masks(table, tok, 0), tok, 0),
                       "already has a labels column")
    one_line_bad_input(lambda: fixed_eval_masks(table, tok, -1), "mask seed must be an integer >= 0, got -1")


# --- perplexity -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlm():
    config = tiny_config()
    config.initializer_range = 0.5  # peaked predictions, so a misplaced label shows in the loss
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return BertForMaskedLM(config)


def reference_nll(model, table: pa.Table) -> tuple[float, int]:
    """Summed cross-entropy over labelled positions, one unpadded row at a time, through the whole model."""
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for row in table.to_pylist():
            logits = model(input_ids=torch.tensor([row["input_ids"]]),
                           token_type_ids=torch.tensor([row["token_type_ids"]])).logits[0]
            labels = torch.tensor(row["labels"])
            scored = labels != -100
            total += F.cross_entropy(logits[scored], labels[scored], reduction="sum").item()
            tokens += int(scored.sum())
    return total, tokens


def test_perplexity_matches_an_unbatched_loop_for_every_batch_size(tok, mlm):
    lines = corpus.generate("nl", "validation", 24) + corpus.generate("en", "validation", 6)
    table = fixed_eval_masks(tokenize_corpus(lines, tok, max_length=64), tok, seed=0)
    total, tokens = reference_nll(mlm, table)
    mlm.train()
    for batch_size in (1, 4, 64):
        result = perplexity(mlm, table, batch_size=batch_size, device="cpu")
        assert mlm.training  # the mode it came in
        assert result["masked_tokens"] == tokens
        assert result["loss"] == pytest.approx(total / tokens, rel=1e-5)
        assert result["perplexity"] == pytest.approx(math.exp(total / tokens), rel=1e-5)
    mlm.eval()
    assert perplexity(mlm, table, batch_size=8, device=torch.device("cpu"))["loss"] == pytest.approx(
        total / tokens, rel=1e-5)
    assert not mlm.training


def test_perplexity_refuses_unmasked_tables_and_other_models(tok, mlm):
    table = tokenize_corpus(["een zin"], tok, max_length=16)
    one_line_bad_input(lambda: perplexity(mlm, table, batch_size=4, device="cpu"), "has no column 'labels'")
    masked = fixed_eval_masks(table, tok, 0)
    one_line_bad_input(lambda: perplexity(mlm, masked, batch_size=0, device="cpu"),
                       "batch_size must be an integer >= 1, got 0")
    one_line_bad_input(lambda: perplexity(mlm.bert, masked, batch_size=4, device="cpu"),
                       "needs a BertForMaskedLM, got BertModel")


# --- synthetic corpus -------------------------------------------------------------------------------------

def test_synthetic_corpus_is_deterministic_and_distinct():
    first = corpus.generate("nl", "train", 300, seed=1)
    assert first == corpus.generate("nl", "train", 300, seed=1)
    assert len(first) == len(set(first)) == 300
    assert set(first) != set(corpus.generate("nl", "train", 300, seed=2))
    assert all(s[0].isupper() and s.endswith(".") for s in first)


def test_synthetic_splits_are_disjoint_whatever_the_seed():
    splits = {(split, seed): set(corpus.generate("en", split, 400 if split == "train" else 200, seed=seed))
              for split in corpus.SPLITS for seed in (0, 1)}
    for (split_a, seed_a), a in splits.items():
        for (split_b, _), b in splits.items():
            if split_a != split_b:
                assert not a & b
    assert splits["validation", 0] != splits["validation", 1]


def test_synthetic_languages_follow_their_grammar():
    nl = corpus.generate("nl", "train", 500)
    en = corpus.generate("en", "train", 500)
    assert not set(nl) & set(en)
    nl_words = {w for s in nl for w in s.lower().rstrip(".").replace(",", "").split()}
    en_words = {w for s in en for w in s.lower().rstrip(".").replace(",", "").split()}
    assert {"de", "het", "een", "omdat"} <= nl_words and not {"the", "because"} & nl_words
    assert {"the", "a", "an", "because"} <= en_words and not {"het", "omdat"} & en_words
    # Dutch gender agreement: "het" before a singular neuter noun, "de" never; after "een" the adjective is
    # bare exactly when the noun is neuter ("een groot huis", "een grote hond").
    neuter = {n[2] for n in corpus.AGENTS + corpus.THINGS if n[4]}
    bare, inflected = ({a[1] for a in corpus.ADJECTIVES}, {a[2] for a in corpus.ADJECTIVES})
    checked = 0
    for sentence in nl:
        words = sentence.lower().rstrip(".").replace(",", "").split()
        for article, adjective, noun in zip(words, words[1:], words[2:]):
            if adjective not in bare | inflected:
                continue
            checked += 1
            if article == "het":
                assert adjective in inflected and noun in neuter, sentence
            if article == "de":
                assert adjective in inflected and noun not in neuter, sentence
            if article == "een":
                assert (adjective in bare) == (noun in neuter), sentence
        for article, noun in itertools.pairwise(words):
            if article in ("de", "het") and noun not in bare | inflected:
                assert (article == "het") == (noun in neuter), sentence
    assert checked > 100


@pytest.mark.parametrize("args,message", [
    (("fr", "train", 5), r"no synthetic corpus for language 'fr' \(allowed: nl, en\)"),
    (("nl", "dev", 5), r"no synthetic corpus split 'dev' \(allowed: train, validation, test\)"),
    (("nl", "train", 0), "synthetic corpus size must be an integer >= 1, got 0"),
])
def test_synthetic_corpus_refuses_bad_arguments(args, message):
    one_line_bad_input(lambda: corpus.generate(*args), message)
