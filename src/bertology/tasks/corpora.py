"""Text corpora for masked-LM fine-tuning and perplexity (the cross-lingual "forgetting curve").

- Readers turn a source into a list of sentences: plain text (`read_lines`), XNLI files in the XTREME or
  the original XNLI 1.0 layout (`read_xnli_tsv`), or hub tables the caller loaded (`from_hub_*`).
- `tokenize_corpus` makes one unpadded [CLS] … [SEP] sequence per sentence, as an Arrow table.
- `mask_tokens` is BERT's masking, seeded and in NumPy, so a training step's masks are a pure function of
  the batch and the RNG state (which is what makes a resumed run bit-identical).
- `fixed_eval_masks` fixes every evaluation sentence's mask once, keyed by (seed, row), and
  `bertology.train.heads.perplexity` scores a masked-LM on those masks: values compare across steps,
  checkpoints and subsets of rows.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bertology.errors import BadInput

IGNORE = -100  # the label of a position that is not scored (torch's cross-entropy ignore_index)
XNLI_LABELS = ("entailment", "neutral", "contradiction", "contradictory")
XNLI_COLUMNS = ("language", "sentence1", "sentence2")
_TOKENIZE_CHUNK = 20_000


# --- readers ----------------------------------------------------------------------------------------------

def read_lines(path: str | os.PathLike) -> list[str]:
    """The sentences of a UTF-8 text file, one per line, stripped; blank lines dropped."""
    lines = [line.strip() for line in _read_text(path).split("\n")]
    lines = [line for line in lines if line]
    if not lines:
        raise BadInput(f"{os.fspath(path)}: no sentences (expected UTF-8 text, one sentence per line)")
    return lines


def read_xnli_tsv(path: str | os.PathLike, language: str | None = None) -> list[str]:
    """The distinct sentences of an XNLI file, premise then hypothesis of every row, in order of first
    appearance (a premise recurs in several rows).

    Two layouts: XTREME's (no header; premise, hypothesis, label; one language per file) and the original
    XNLI 1.0 (a header naming language, sentence1, sentence2 among other columns; `language` picks the
    rows and must be given when the file holds several). Quotes are literal text.
    """
    where = os.fspath(path)
    rows = csv.reader(io.StringIO(_read_text(path), newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    first = next(rows, None)
    if first is None:
        raise BadInput(f"{where}: no sentences (expected XNLI rows: premise, hypothesis, label)")
    if "sentence1" in first:
        pairs = _xnli10_pairs(where, first, rows, language)
    else:
        if language is not None:
            raise BadInput(f"{where}: language={language!r} cannot be selected: the file has no header, so "
                           "it is one language in the XTREME layout (pass language=None)")
        pairs = _xtreme_pairs(where, first, rows)
    sentences = _xnli_sentences(pairs)
    if not sentences:
        raise BadInput(f"{where}: no sentences (expected XNLI rows: premise, hypothesis, label)")
    return sentences


def _xtreme_pairs(where: str, first: list[str], rows) -> list[tuple[str, str]]:
    pairs = [_xtreme_pair(where, 1, first)] if first else []
    return pairs + [_xtreme_pair(where, rows.line_num, row) for row in rows if row]


def _xtreme_pair(where: str, line: int, row: list[str]) -> tuple[str, str]:
    if len(row) != 3:
        raise BadInput(f"{where}:{line}: expected 3 tab-separated fields (premise, hypothesis, label), "
                       f"found {len(row)}")
    if row[2] not in XNLI_LABELS:
        raise BadInput(f"{where}:{line}: bad label {row[2]!r} (allowed: {', '.join(XNLI_LABELS)})")
    return row[0], row[1]


def _xnli10_pairs(where: str, header: list[str], rows, language: str | None) -> list[tuple[str, str]]:
    missing = [c for c in XNLI_COLUMNS if c not in header]
    if missing:
        raise BadInput(f"{where}:1: header has no column {missing[0]!r} (expected the XNLI 1.0 columns "
                       f"{', '.join(XNLI_COLUMNS)}, …)")
    lang, premise, hypothesis = (header.index(c) for c in XNLI_COLUMNS)
    by_language: dict[str, list[tuple[str, str]]] = {}
    for row in rows:
        if not row:
            continue
        if len(row) != len(header):
            raise BadInput(f"{where}:{rows.line_num}: expected {len(header)} tab-separated fields (as the "
                           f"header), found {len(row)}")
        by_language.setdefault(row[lang], []).append((row[premise], row[hypothesis]))
    found = ", ".join(sorted(by_language)) or "none"
    if language is None:
        if len(by_language) > 1:
            raise BadInput(f"{where}: holds several languages ({found}); pass language= one of them")
        return next(iter(by_language.values()), [])
    if language not in by_language:
        raise BadInput(f"{where}: no rows of language {language!r} (languages in the file: {found})")
    return by_language[language]


def from_hub_text(table: pa.Table, column: str) -> list[str]:
    """The sentences of one text column of a hub dataset's table, stripped; blank or null rows dropped."""
    _require_columns(table, (column,), "hub text table")
    return [text.strip() for text in table.column(column).to_pylist() if text and text.strip()]


def from_hub_xnli(table: pa.Table) -> list[str]:
    """The distinct sentences of a `facebook/xnli` per-language table (columns premise, hypothesis,
    label), premise then hypothesis of every row, as `read_xnli_tsv`."""
    _require_columns(table, ("premise", "hypothesis"), "hub XNLI table (a per-language config)")
    return _xnli_sentences(zip(table.column("premise").to_pylist(), table.column("hypothesis").to_pylist()))


def _xnli_sentences(pairs: Iterable[tuple[str, str]]) -> list[str]:
    stripped = (text.strip() for pair in pairs for text in pair if text)
    return list(dict.fromkeys(text for text in stripped if text))


def _require_columns(table: pa.Table, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise BadInput(f"{what} has no column {missing[0]!r} (has: {', '.join(table.column_names)})")


def _read_text(path: str | os.PathLike) -> str:
    """A file's text, strictly UTF-8 (a leading BOM dropped); BadInput naming the first bad byte."""
    where = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise BadInput(f"{where}: no such file (expected a UTF-8 text file)") from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise BadInput(f"{where}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}); "
                       "expected UTF-8 text") from None


# --- subsets and tokenization -----------------------------------------------------------------------------

def tokenize_corpus(lines: Sequence[str], tokenizer, max_length: int) -> pa.Table:
    """Columns idx (position in `lines`), input_ids, token_type_ids, length: every sentence its own
    [CLS] … [SEP] sequence, truncated to `max_length`, unpadded."""
    if not getattr(tokenizer, "is_fast", False):
        raise BadInput(f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer (a Rust-backed "
                       "PreTrainedTokenizerFast is required)")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise BadInput(f"max_length must be an integer >= 2, got {max_length!r}")
    input_ids, token_type_ids = [], []
    for start in range(0, len(lines), _TOKENIZE_CHUNK):  # bounded memory for large corpora
        enc = tokenizer(list(lines[start:start + _TOKENIZE_CHUNK]), truncation=True, max_length=max_length,
                        padding=False, return_token_type_ids=True, return_attention_mask=False)
        input_ids.append(pa.array(enc["input_ids"], type=pa.list_(pa.int32())))
        token_type_ids.append(pa.array(enc["token_type_ids"], type=pa.list_(pa.int8())))
    input_ids = pa.chunked_array(input_ids, type=pa.list_(pa.int32()))
    return pa.table({
        "idx": pa.array(np.arange(len(lines), dtype=np.int64)),
        "input_ids": input_ids,
        "token_type_ids": pa.chunked_array(token_type_ids, type=pa.list_(pa.int8())),
        "length": pc.list_value_length(input_ids).cast(pa.int32()),
    })


# --- masking ----------------------------------------------------------------------------------------------

def mask_tokens(input_ids: np.ndarray, special: np.ndarray, *, mask_id: int, vocab_size: int,
                rng: np.random.Generator, probability: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """BERT's masking of a padded (batch, width) array: (masked ids, labels).

    Each position that is not `special` ([CLS], [SEP], [PAD], …) is chosen with `probability`; a chosen
    token becomes `mask_id` (80%), a random id in [0, vocab_size) (10%) or stays (10%). Labels hold the
    original id at chosen positions and -100 elsewhere. A row with a maskable token but no chosen one gets
    one chosen at random, so no sentence drops out of a perplexity. Same semantics as HF's
    DataCollatorForLanguageModeling; the result depends only on the arguments and the RNG state.
    """
    input_ids, special = np.asarray(input_ids), np.asarray(special, dtype=bool)
    if input_ids.ndim != 2 or special.shape != input_ids.shape:
        raise BadInput(f"mask_tokens needs input_ids and special of one (batch, width) shape, got "
                       f"{input_ids.shape} and {special.shape}")
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 < probability <= 1:
        raise BadInput(f"mask probability must be a number in (0, 1], got {probability!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise BadInput(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
    maskable = ~special
    chosen = (rng.random(input_ids.shape) < probability) & maskable
    unlucky = np.flatnonzero(maskable.any(axis=1) & ~chosen.any(axis=1))
    if len(unlucky):
        scores = np.where(maskable[unlucky], rng.random((len(unlucky), input_ids.shape[1])), -1.0)
        chosen[unlucky, scores.argmax(axis=1)] = True
    action = rng.random(input_ids.shape)
    to_mask = chosen & (action < 0.8)
    to_random = chosen & (action >= 0.8) & (action < 0.9)
    masked = input_ids.copy()
    masked[to_mask] = mask_id
    masked[to_random] = rng.integers(0, vocab_size, size=int(to_random.sum()))
    return masked, np.where(chosen, input_ids, IGNORE).astype(input_ids.dtype)


def fixed_eval_masks(table: pa.Table, tokenizer, seed: int, probability: float = 0.15) -> pa.Table:
    """`table` (from `tokenize_corpus`) with input_ids masked and a `labels` column, for perplexity.

    Each row's mask is drawn from `default_rng((seed, idx))`, so a sentence keeps its mask whichever other
    rows are present: a subset of a corpus is scored on the same masks as in the whole.
    """
    if "labels" in table.column_names:
        raise BadInput("table already has a labels column (fixed_eval_masks takes an unmasked table)")
    _require_columns(table, ("idx", "input_ids"), "tokenized corpus table")
    if tokenizer.mask_token_id is None:
        raise BadInput(f"tokenizer {type(tokenizer).__name__} has no mask token (a masked-LM tokenizer "
                       "is required)")
    _check_seed(seed, "mask")
    ids, offsets = _flatten(table.column("input_ids"))
    special = np.isin(ids, tokenizer.all_special_ids)
    masked, labels = ids.copy(), np.full_like(ids, IGNORE)
    for row, idx in enumerate(table.column("idx").to_numpy()):
        span = slice(offsets[row], offsets[row + 1])
        row_masked, row_labels = mask_tokens(
            ids[None, span], special[None, span], mask_id=tokenizer.mask_token_id,
            vocab_size=len(tokenizer), rng=np.random.default_rng((seed, int(idx))), probability=probability)
        masked[span], labels[span] = row_masked[0], row_labels[0]
    list_offsets = pa.array(offsets, type=pa.int32())
    return table.set_column(
        table.column_names.index("input_ids"), "input_ids",
        pa.ListArray.from_arrays(list_offsets, pa.array(masked, type=pa.int32())),
    ).append_column("labels", pa.ListArray.from_arrays(list_offsets, pa.array(labels, type=pa.int32())))


def _check_seed(seed, what: str) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise BadInput(f"{what} seed must be an integer >= 0, got {seed!r}")


def _flatten(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (all values concatenated, offsets from 0): row i is values[offsets[i]:offsets[i+1]]."""
    lists = column.combine_chunks()
    offsets = lists.offsets.to_numpy()
    return lists.flatten().to_numpy(zero_copy_only=False), offsets - offsets[0]
