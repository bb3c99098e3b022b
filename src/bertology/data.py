"""From a split's examples to model batches: training subsets, tokenization, batching and padding.

- `subset_indices` picks the training subset: seeded, stratified by label, and nested (the 1% subset is
  inside the 10% subset for the same seed), so a learning curve over fractions adds data rather than
  swapping it.
- `tokenize_split` tokenizes once, without padding, into an Arrow table that is cached per tokenizer.
- `random_batches` cuts a seeded permutation into training batches, as Hugging Face's run_glue draws them
  (its default sampler); `length_grouped_batches` groups examples of similar length instead (run_glue's
  `--group_by_length`), the regime setting `group_by_length`. `eval_batches` sorts by length (the order of
  evaluation changes no number). `Encoded.batch` pads each batch only to its own longest example: far
  fewer pad tokens than padding everything to max_length. On a GPU the width is rounded up to a multiple
  of 8 (`padded_width`, `train.device.pad_multiple`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bertology.errors import BadInput
from bertology.tasks import Task

if TYPE_CHECKING:
    import datasets


def subset_indices(labels, *, fraction: float | None = None, count: int | None = None,
                   seed: int) -> np.ndarray:
    """Sorted row indices of a seeded, label-stratified subset: `fraction` of the rows, `count` rows, or
    (neither) all of them.

    All subset sizes for one seed are prefixes of one ordering, hence nested. The ordering interleaves the
    classes: each class is shuffled and its j-th member gets the key (j + 0.5) / class_size, and rows are
    sorted by key. Any prefix then holds every class within one example of its share.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if fraction is not None and count is not None:
        raise BadInput(f"give a training fraction or a count, not both (fraction={fraction}, count={count})")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise BadInput(f"training fraction must be a number in (0, 1], got {fraction!r}")
        size = max(1, round(fraction * n))
    elif count is not None:
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 1 <= count <= n:
            raise BadInput(f"training count must be an integer in 1..{n} (the split's size), got {count!r}")
        size = int(count)
    else:
        size = n
    return np.sort(_stratified_order(labels, seed)[:size])


def _stratified_order(labels: np.ndarray, seed: int) -> np.ndarray:
    if labels.dtype.kind == "f" and not np.array_equal(labels, np.round(labels)):
        # Regression targets (STS-B): stratify by decile of the target instead of by value.
        labels = np.argsort(np.argsort(labels, kind="stable")) * 10 // len(labels)
    _, strata = np.unique(labels, return_inverse=True)
    rng = np.random.default_rng(seed)
    keys = np.empty(len(labels))
    for stratum in range(strata.max() + 1 if len(labels) else 0):
        members = rng.permutation(np.flatnonzero(strata == stratum))
        keys[members] = (np.arange(len(members)) + 0.5) / len(members)
    return np.lexsort((strata, keys))


def tokenize_split(ds: datasets.Dataset, task: Task, tokenizer, max_length: int) -> pa.Table:
    """Columns idx (row in the split), input_ids, token_type_ids, label, length; truncated to
    `max_length` (pairs: longest first), not padded."""
    if not getattr(tokenizer, "is_fast", False):
        raise BadInput(f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer (a Rust-backed "
                       "PreTrainedTokenizerFast is required)")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise BadInput(f"max_length must be an integer >= 2, got {max_length!r}")
    table = ds.with_format("arrow")[:]
    input_ids, token_type_ids = [], []
    for start in range(0, len(table), _TOKENIZE_CHUNK):  # bounded memory for QQP/MNLI-sized splits
        chunk = table.slice(start, _TOKENIZE_CHUNK)
        texts = [chunk.column(field).to_pylist() for field in task.text_fields]
        enc = tokenizer(*texts, truncation=True, max_length=max_length, padding=False,
                        return_token_type_ids=True, return_attention_mask=False)
        input_ids.append(pa.array(enc["input_ids"], type=pa.list_(pa.int32())))
        token_type_ids.append(pa.array(enc["token_type_ids"], type=pa.list_(pa.int8())))
    input_ids = pa.chunked_array(input_ids, type=pa.list_(pa.int32()))
    label_type = pa.float32() if task.is_regression else pa.int64()
    return pa.table({
        "idx": pa.array(np.arange(len(table), dtype=np.int64)),
        "input_ids": input_ids,
        "token_type_ids": pa.chunked_array(token_type_ids, type=pa.list_(pa.int8())),
        "label": table.column("label").cast(label_type),
        "length": pc.list_value_length(input_ids).cast(pa.int32()),
    })


_TOKENIZE_CHUNK = 20_000


@dataclass(frozen=True)
class Encoded:
    """A tokenized split as flat NumPy arrays, whatever the task kind: per-token columns (input_ids,
    token_type_ids, and e.g. an MLM split's fixed `labels` or a SQuAD split's offsets) concatenated with one
    shared `offsets` array, and per-row columns (label, start_positions, …). A batch is gathered and padded
    in a few vectorised operations, so a 400k-example split costs a few arrays, not 400k Python lists."""

    tokens: dict[str, np.ndarray]  # every row's values, concatenated; row i is [offsets[i], offsets[i + 1])
    offsets: np.ndarray
    rows: dict[str, np.ndarray]  # one value per row
    lengths: np.ndarray

    @classmethod
    def from_table(cls, table: pa.Table) -> Encoded:
        lengths = table.column("length").to_numpy()
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        tokens, rows = {}, {}
        for name in table.column_names:
            column = table.column(name).combine_chunks()
            if pa.types.is_list(column.type):
                if not np.array_equal(pc.list_value_length(column).to_numpy(zero_copy_only=False), lengths):
                    raise BadInput(f"per-token column {name!r} does not have `length` values in every row")
                tokens[name] = column.flatten().to_numpy()
            elif name not in ("idx", "length"):
                rows[name] = column.to_numpy(zero_copy_only=False)
        return cls(tokens=tokens, offsets=offsets, rows=rows, lengths=lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def labels(self) -> np.ndarray:
        return self.rows["label"]

    def batch(self, indices, pad: Mapping[str, int], *, multiple: int = 1,
              limit: int | None = None) -> dict[str, np.ndarray]:
        """Rows `indices`, every per-token column padded to the longest of them with `pad[name]` (0 when not
        given), plus `attention_mask` and the per-row columns. With `multiple`, the padded width is rounded
        up to a multiple of it (but not beyond `limit`, the model's positions): a few bucketed widths."""
        indices = np.asarray(indices)
        lengths = self.lengths[indices]
        positions = np.arange(padded_width(int(lengths.max()), multiple, limit))
        valid = positions[None, :] < lengths[:, None]
        where = np.where(valid, self.offsets[indices][:, None] + positions[None, :], 0)
        out = {name: np.where(valid, flat[where], pad.get(name, 0)) for name, flat in self.tokens.items()}
        out["attention_mask"] = valid.astype(np.int64)
        out.update({name: column[indices] for name, column in self.rows.items()})
        return out


def padded_width(longest: int, multiple: int = 1, limit: int | None = None) -> int:
    """The width a batch whose longest row is `longest` is padded to: the next multiple of `multiple`,
    capped at `limit` (never below `longest`)."""
    width = -(-longest // multiple) * multiple
    return max(longest, min(width, limit)) if limit else width


def random_batches(size: int, batch_size: int, *, seed: int | Sequence[int]) -> list[np.ndarray]:
    """Training batches of a seeded random permutation of `size` examples, every index exactly once, the last
    batch the short one: what run_glue's random sampler gives, so a batch's examples are a random draw
    whatever their lengths."""
    perm = np.random.default_rng(seed).permutation(size)
    return [perm[i:i + batch_size] for i in range(0, size, batch_size)]


def length_grouped_batches(lengths, batch_size: int, *, seed: int | Sequence[int],
                           mega_batches: int = 50) -> list[np.ndarray]:
    """Training batches of similar-length examples, every index exactly once (as HF's
    LengthGroupedSampler): shuffle, cut into mega-batches of `mega_batches` batches, sort each by length,
    split into batches, shuffle the batch order. The batch with the most padded tokens goes first, so an
    out-of-memory error shows up on the first step rather than hours in. Fewer pad tokens, but each batch
    holds examples of one length, which random batches do not: the regime setting `group_by_length`,
    off by default in a study (docs/training.md measures what it changes)."""
    lengths = np.asarray(lengths)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(lengths))
    mega = batch_size * mega_batches
    batches = []
    for start in range(0, len(perm), mega):
        chunk = perm[start:start + mega]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    batches = [batches[i] for i in rng.permutation(len(batches))]
    if batches:
        biggest = max(range(len(batches)), key=lambda i: len(batches[i]) * lengths[batches[i]].max())
        batches[0], batches[biggest] = batches[biggest], batches[0]
    return batches


def eval_batches(lengths, batch_size: int) -> list[np.ndarray]:
    """Evaluation batches: all examples sorted by length (longest first), no shuffling."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
