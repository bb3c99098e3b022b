"""How English a tokenizer and a corpus are: the vocabulary analysis of the monolingual-pretraining
report (§4.1, Table 2).

The report's definitions, implemented literally:

- A word-piece is *English-like* when the whole piece matches `(##)?[A-Za-z]+` (ASCII letters only, an
  optional continuation prefix). On bert-base-uncased this gives the report's 26,503 of 30,522.
- A model's *overlap* with English BERT is how many of the model's English-like pieces are also
  pieces of the English vocabulary ("shared with EN BERT" in Table 2); its share is relative to the
  model's English-like count. Pieces are compared as strings (`case="exact"`), as a set intersection of
  two vocabularies does; `case="fold"` compares them lower-cased, i.e. counts a cased model's "Haus"
  as shared when the uncased English vocabulary has "haus".
- A *context* is a 10-word-piece window of the tokenized corpus, English-like when more than 5 of its
  pieces are English-like. The report does not say how windows are laid out; here the corpus is one
  stream (lines tokenized without special tokens and concatenated in order, as BERT's pre-training
  data is a stream of documents) cut into consecutive non-overlapping windows (`stride=10`), so every
  word-piece belongs to exactly one context and the share is a share "of the data"; a trailing partial
  window is dropped. Per-line windows would silently drop every line shorter than 10 pieces (most
  XNLI hypotheses). `stride=1` gives the fully sliding variant; on a long stream the two agree closely,
  since the sliding share averages the ten phase-shifted partitions.

Everything here is pure: functions take a tokenizer (any fast WordPiece tokenizer) or vocabularies and
return counts. Corpora are encoded in batches by the Rust tokenizer and counted with NumPy.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from bertology.errors import BadInput, choices

ENGLISH_LIKE = re.compile(r"(##)?[A-Za-z]+")
WINDOW = 10  # word-pieces per context (the report)
MIN_ENGLISH = 6  # "more than 5 English-like word-pieces"
CASES = ("exact", "fold")
BATCH_LINES = 4096  # lines encoded per call: bounds memory on large corpora


def is_english_like(piece: str) -> bool:
    return ENGLISH_LIKE.fullmatch(piece) is not None


def english_like_pieces(vocab: Iterable[str]) -> set[str]:
    return {piece for piece in vocab if is_english_like(piece)}


@dataclass(frozen=True)
class VocabOverlap:
    vocab_size: int
    english_like: int
    overlap: int  # the model's English-like pieces that the reference vocabulary also has

    @property
    def english_like_share(self) -> float | None:
        return self.english_like / self.vocab_size if self.vocab_size else None

    @property
    def overlap_share(self) -> float | None:
        return self.overlap / self.english_like if self.english_like else None


def vocab_overlap(vocab: Iterable[str], reference: Iterable[str], case: str = "exact") -> VocabOverlap:
    """Table 2 for one model: its size, its English-like pieces, and how many of those the reference has."""
    if case not in CASES:
        raise BadInput(f"case {case!r} is unknown; {choices(case, CASES, 'allowed')}")
    pieces = set(vocab)
    english = english_like_pieces(pieces)
    if case == "fold":
        ref = {piece.lower() for piece in reference}
        shared = sum(piece.lower() in ref for piece in english)
    else:
        shared = len(english & set(reference))
    return VocabOverlap(len(pieces), len(english), shared)


def english_like_ids(vocab: Mapping[str, int]) -> np.ndarray:
    """A boolean lookup table over token ids: `table[ids]` marks the English-like pieces of a sequence."""
    table = np.zeros(max(vocab.values(), default=-1) + 1, dtype=bool)
    ids = [i for piece, i in vocab.items() if is_english_like(piece)]
    table[np.asarray(ids, dtype=np.int64)] = True
    return table


@dataclass(frozen=True)
class ContextCounts:
    pieces: int  # word-pieces in the stream
    windows: int
    english_windows: int

    @property
    def english_window_share(self) -> float | None:
        return self.english_windows / self.windows if self.windows else None


def count_contexts(mask: np.ndarray, window: int = WINDOW, stride: int = WINDOW,
                   min_english: int = MIN_ENGLISH) -> tuple[int, int, int]:
    """(windows, English-like windows, start of the first window not counted) over one stream.

    `mask[i]` says whether piece i is English-like; windows start at 0, stride, 2*stride, … and must
    fit whole. The third value is where the next chunk of a longer stream has to continue from.
    """
    if mask.size < window:
        return 0, 0, 0
    n = (mask.size - window) // stride + 1
    sums = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
    starts = np.arange(n, dtype=np.int64) * stride
    english = int(np.count_nonzero(sums[starts + window] - sums[starts] >= min_english))
    return n, english, n * stride


def _wordpiece_encoder(tokenizer):
    """The tokenizer's Rust backend, copied without truncation or padding (a saved tokenizer.json may
    carry both, e.g. MiniLM's truncates at 128): every piece of every line has to be counted."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise BadInput(f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer; allowed: fast "
                       "WordPiece (BERT) tokenizers")
    if not isinstance(backend.model, WordPiece):
        raise BadInput(f"tokenizer model {type(backend.model).__name__} is not WordPiece; the English-like "
                       "RegEx is defined on BERT word-pieces")
    encoder = Tokenizer.from_str(backend.to_str())
    encoder.no_truncation()
    encoder.no_padding()
    return encoder


def english_contexts(tokenizer, lines: Iterable[str], window: int = WINDOW, stride: int = WINDOW,
                     min_english: int = MIN_ENGLISH, batch_lines: int = BATCH_LINES) -> ContextCounts:
    """Count English-like contexts in a corpus read as one stream of word-pieces (no special tokens).

    Lines are encoded `batch_lines` at a time; the pieces a batch leaves after its last counted window
    carry over to the next, so the result does not depend on the batch size.
    """
    if not 1 <= stride <= window:
        raise BadInput(f"stride {stride} is out of range; allowed: 1 to {window} (the window)")
    encoder = _wordpiece_encoder(tokenizer)
    table = english_like_ids(encoder.get_vocab(with_added_tokens=True))
    carry = np.zeros(0, dtype=bool)
    pieces = windows = english = 0
    lines = iter(lines)
    while batch := list(itertools.islice(lines, batch_lines)):
        encodings = encoder.encode_batch(batch, add_special_tokens=False)
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int64)
        pieces += ids.size
        stream = np.concatenate((carry, table[ids]))
        n, e, next_start = count_contexts(stream, window, stride, min_english)
        windows, english = windows + n, english + e
        carry = stream[next_start:]
    return ContextCounts(pieces, windows, english)
