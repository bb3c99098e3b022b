"""From a split's examples to model batches: training subsets, tokenization, batching and padding.

- `subset_indices` picks the training subset: seeded, stratified by label, and nested (the 1% subset is
  inside the 10% subset for the same seed), so a learning curve over fractions adds data rather than
  swapping it.
- `tokenize_split` tokenizes once, without padding, into an Arrow table that is cached per tokenizer.
- `length_grouped_batches` / `eval_batches` group examples of similar length, and `collate` pads each
  batch only to its own longest example (the rows come from `Encoded`, the table as flat arrays): far
  fewer pad tokens than padding everything to max_length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from bertology.errors import BadInput
from bertology.tasks import Task


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
    """A tokenized split as flat NumPy arrays. A batch's rows are views made when the batch is, so a
    400k-example split costs a few arrays, not 400k Python lists."""

    input_ids: np.ndarray  # every row's ids, concatenated; row i is [offsets[i], offsets[i + 1])
    token_type_ids: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray
    lengths: np.ndarray

    @classmethod
    def from_table(cls, table: pa.Table) -> Encoded:
        ids = table.column("input_ids").combine_chunks()
        offsets = ids.offsets.to_numpy()
        return cls(input_ids=ids.flatten().to_numpy(),
                   token_type_ids=table.column("token_type_ids").combine_chunks().flatten().to_numpy(),
                   offsets=offsets - offsets[0], labels=table.column("label").to_numpy(),
                   lengths=table.column("length").to_numpy())

    def __len__(self) -> int:
        return len(self.labels)

    def rows(self, indices) -> list[dict]:
        """The rows `collate` takes: input_ids, token_type_ids and label of each index."""
        return [{"input_ids": self.input_ids[self.offsets[i]:self.offsets[i + 1]],
                 "token_type_ids": self.token_type_ids[self.offsets[i]:self.offsets[i + 1]],
                 "label": self.labels[i]} for i in indices]


def length_grouped_batches(lengths, batch_size: int, *, seed: int | Sequence[int],
                           mega_batches: int = 50) -> list[np.ndarray]:
    """Training batches of similar-length examples, every index exactly once (as HF's
    LengthGroupedSampler): shuffle, cut into mega-batches of `mega_batches` batches, sort each by length,
    split into batches, shuffle the batch order. The batch with the most padded tokens goes first, so an
    out-of-memory error shows up on the first step rather than hours in."""
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


def collate(rows: Sequence[Mapping], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad `rows` (dicts with input_ids, token_type_ids, label) to the longest of them."""
    width = max(len(row["input_ids"]) for row in rows)
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    token_type_ids = np.zeros((len(rows), width), dtype=np.int64)
    attention_mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        n = len(row["input_ids"])
        input_ids[i, :n] = row["input_ids"]
        token_type_ids[i, :n] = row["token_type_ids"]
        attention_mask[i, :n] = 1
    labels = np.array([row["label"] for row in rows])
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(attention_mask),
        "token_type_ids": torch.from_numpy(token_type_ids),
        "labels": torch.from_numpy(labels.astype(np.float32 if labels.dtype.kind == "f" else np.int64)),
    }
