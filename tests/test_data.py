"""Subsets, tokenization, length-grouped batching and dynamic padding."""

from __future__ import annotations

import datasets
import numpy as np
import pyarrow as pa
import pytest
import torch
from transformers import BertTokenizerFast

from bertology.data import (
    Encoded,
    eval_batches,
    length_grouped_batches,
    random_batches,
    subset_indices,
    tokenize_split,
)
from bertology.errors import BadInput
from bertology.tasks import get_task, load_split, synthetic
from bertology.train.device import to_device

# 70% / 30% labels, so stratification is visible.
LABELS = np.array([0] * 700 + [1] * 300)


# --- subsets ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.37, 1.0])
def test_subset_is_stratified(fraction):
    idx = subset_indices(LABELS, fraction=fraction, seed=0)
    assert len(idx) == round(fraction * len(LABELS))
    assert len(np.unique(idx)) == len(idx) and np.all(np.diff(idx) > 0)
    assert abs((LABELS[idx] == 1).sum() - 0.3 * len(idx)) <= 1


def test_subsets_are_nested_and_reproducible():
    small, medium, full = (subset_indices(LABELS, fraction=f, seed=3) for f in (0.01, 0.1, 1.0))
    assert set(small) < set(medium) < set(full) == set(range(len(LABELS)))
    counts = [subset_indices(LABELS, count=c, seed=3) for c in (5, 50, 500)]
    assert set(counts[0]) < set(counts[1]) < set(counts[2])
    assert np.array_equal(subset_indices(LABELS, fraction=0.1, seed=3), medium)
    assert not np.array_equal(subset_indices(LABELS, fraction=0.1, seed=4), medium)
    # a count and the fraction of the same size pick the same rows
    assert np.array_equal(subset_indices(LABELS, count=100, seed=3), medium)


def test_subset_count_and_all():
    idx = subset_indices(LABELS, count=37, seed=0)
    assert len(idx) == 37 and abs((LABELS[idx] == 1).sum() - 0.3 * 37) <= 1
    assert np.array_equal(subset_indices(LABELS, seed=0), np.arange(len(LABELS)))
    assert len(subset_indices(LABELS, fraction=0.0001, seed=0)) == 1


def test_subset_of_regression_targets_is_stratified_by_decile():
    targets = np.linspace(0.0, 5.0, 1000) ** 2 / 5.0
    idx = subset_indices(targets, fraction=0.1, seed=0)
    assert len(idx) == 100
    deciles = np.quantile(targets, np.linspace(0, 1, 11))
    assert np.histogram(targets[idx], bins=deciles)[0].tolist() == [10] * 10


@pytest.mark.parametrize("kwargs,message", [
    ({"fraction": 0.5, "count": 10}, "not both"),
    ({"fraction": 0.0}, r"fraction must be a number in \(0, 1\], got 0.0"),
    ({"fraction": 1.5}, "got 1.5"),
    ({"fraction": "0.5"}, "got '0.5'"),
    ({"count": 0}, r"count must be an integer in 1..1000 .*got 0"),
    ({"count": 1001}, "got 1001"),
    ({"count": 2.5}, "got 2.5"),
])
def test_subset_rejects(kwargs, message):
    with pytest.raises(BadInput, match=message):
        subset_indices(LABELS, seed=0, **kwargs)


# --- tokenization -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer():
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "film", "was", "great", "awful", ".", "a",
             "premise", "hypothesis", "very", "long", "sentence"]
    return BertTokenizerFast(vocab={w: i for i, w in enumerate(words)})


def test_tokenize_single_sentences(tokenizer):
    task = get_task("sst2")
    ds = datasets.Dataset.from_dict({"text_a": ["the film was great .", "awful", "very " * 40],
                                     "label": [1, 0, 1]})
    table = tokenize_split(ds, task, tokenizer, max_length=16)
    assert table.column_names == ["idx", "input_ids", "token_type_ids", "label", "length"]
    assert table.schema.field("input_ids").type == pa.list_(pa.int32())
    assert table.schema.field("token_type_ids").type == pa.list_(pa.int8())
    assert table.schema.field("idx").type == pa.int64() and table.schema.field("label").type == pa.int64()
    assert table.schema.field("length").type == pa.int32()
    rows = table.to_pylist()
    assert rows[0]["input_ids"] == [2, 5, 6, 7, 8, 10, 3] and rows[0]["length"] == 7  # no padding
    assert rows[1]["length"] == 3 and rows[2]["length"] == 16  # truncated to max_length
    assert [r["idx"] for r in rows] == [0, 1, 2] and [r["label"] for r in rows] == [1, 0, 1]
    assert all(len(r["input_ids"]) == len(r["token_type_ids"]) == r["length"] for r in rows)


def test_encoded_rows_match_the_table_even_when_sliced(tokenizer):
    task = get_task("sst2")
    ds = datasets.Dataset.from_dict({"text_a": ["the film", "was great .", "awful", "a very long sentence"],
                                     "label": [1, 0, 1, 0]})
    table = tokenize_split(ds, task, tokenizer, max_length=16)
    for part in (table, table.slice(1, 3), pa.concat_tables([table.slice(0, 2), table.slice(2)])):
        encoded = Encoded.from_table(part)
        assert len(encoded) == len(part) and encoded.lengths.tolist() == part.column("length").to_pylist()
        batch = encoded.batch(np.arange(len(part)), {"input_ids": 0})
        for i, row in enumerate(part.to_pylist()):
            n = row["length"]
            assert batch["input_ids"][i, :n].tolist() == row["input_ids"] and not batch["input_ids"][i, n:].any()
            assert batch["token_type_ids"][i, :n].tolist() == row["token_type_ids"]
            assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (batch["input_ids"].shape[1] - n)
            assert batch["label"][i] == row["label"]


def test_tokenize_pairs_sets_token_types(tokenizer):
    task = get_task("rte")
    ds = datasets.Dataset.from_dict({"text_a": ["a premise"], "text_b": ["a hypothesis"], "label": [0]})
    row = tokenize_split(ds, task, tokenizer, max_length=32).to_pylist()[0]
    assert row["input_ids"] == [2, 11, 12, 3, 11, 13, 3]
    assert row["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]


def test_tokenize_rejects_bad_max_length(tokenizer):
    task = get_task("sst2")
    with pytest.raises(BadInput, match="max_length must be an integer >= 2, got 0"):
        tokenize_split(load_split(task, "synthetic", "validation"), task, tokenizer, max_length=0)


# --- batching ---------------------------------------------------------------------------------------------

def test_length_grouped_batches_cover_everything_and_group_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 120, size=5003)
    batches = length_grouped_batches(lengths, 16, seed=1, mega_batches=50)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))  # every index exactly once
    assert all(1 <= len(b) <= 16 for b in batches) and sum(len(b) == 16 for b in batches) >= len(batches) - 7
    # the biggest batch comes first
    assert max(len(b) * lengths[b].max() for b in batches) == len(batches[0]) * lengths[batches[0]].max()
    # near-sorted: within a batch lengths are close, far closer than in a random batch
    spread = np.mean([lengths[b].max() - lengths[b].min() for b in batches])
    random_spread = np.mean([np.ptp(lengths[rng.permutation(len(lengths))[:16]]) for _ in range(100)])
    assert spread < 0.1 * random_spread
    # padding waste vs. padding each random batch to its max
    assert sum(len(b) * lengths[b].max() for b in batches) < 1.05 * lengths.sum()


def test_length_grouped_batches_seeded():
    lengths = np.arange(1000) % 37
    a = length_grouped_batches(lengths, 8, seed=(0, 1))
    b = length_grouped_batches(lengths, 8, seed=(0, 1))
    c = length_grouped_batches(lengths, 8, seed=(0, 2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_random_batches_are_a_seeded_permutation_whatever_the_lengths():
    """run_glue's batches (the study default, group_by_length=false): a permutation cut in order, the last
    batch the short one; a batch's lengths spread as a random draw's, not as a grouped batch's."""
    lengths = np.random.default_rng(0).integers(5, 120, size=1003)
    batches = random_batches(len(lengths), 16, seed=(1, 2))
    assert np.concatenate(batches).tolist() == np.random.default_rng((1, 2)).permutation(1003).tolist()
    assert [len(b) for b in batches] == [16] * 62 + [11]
    assert all(np.array_equal(a, b) for a, b in zip(batches, random_batches(len(lengths), 16, seed=(1, 2))))
    assert not np.array_equal(batches[0], random_batches(len(lengths), 16, seed=(1, 3))[0])
    grouped = length_grouped_batches(lengths, 16, seed=(1, 2))

    def spread(bs):
        return np.mean([np.ptp(lengths[b]) for b in bs])

    assert spread(batches) > 10 * spread(grouped)


def test_eval_batches_sorted_and_complete():
    lengths = np.array([3, 9, 1, 7, 7, 2, 8])
    batches = eval_batches(lengths, 3)
    assert [len(b) for b in batches] == [3, 3, 1]
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(7))
    assert lengths[flat].tolist() == sorted(lengths.tolist(), reverse=True)


def test_batch_pads_to_the_longest_in_batch_with_each_columns_pad_value():
    table = pa.table({"idx": [0, 1, 2], "input_ids": [[2, 5, 3], [2, 5, 6, 7, 3], [2, 3]],
                      "token_type_ids": [[0, 0, 0], [0, 0, 0, 1, 1], [0, 0]],
                      "labels": [[-100, 5, -100], [-100, -100, 6, -100, -100], [-100, -100]],
                      "label": [1, 0, 1], "length": pa.array([3, 5, 2], pa.int32())})
    encoded = Encoded.from_table(table)
    batch = encoded.batch([0, 1], {"input_ids": 9, "labels": -100})
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels", "label"}
    assert batch["input_ids"].tolist() == [[2, 5, 3, 9, 9], [2, 5, 6, 7, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]]
    assert batch["labels"].tolist() == [[-100, 5, -100, -100, -100], [-100, -100, 6, -100, -100]]
    assert batch["label"].tolist() == [1, 0]
    assert encoded.batch([2], {})["input_ids"].tolist() == [[2, 3]]  # padded to its own batch only
    tensors = to_device(batch, torch.device("cpu"))
    assert all(t.dtype == torch.int64 for t in tensors.values())
    regression = to_device({"labels": np.array([2.5], dtype=np.float32)}, torch.device("cpu"))
    assert regression["labels"].dtype == torch.float32 and regression["labels"].tolist() == [2.5]


def test_a_per_token_column_must_match_the_lengths():
    table = pa.table({"input_ids": [[2, 3]], "labels": [[1]], "length": pa.array([2], pa.int32())})
    with pytest.raises(BadInput, match="'labels'"):
        Encoded.from_table(table)


# --- every task: counts, regression labels through tokenization and batching ----------------------------

@pytest.mark.parametrize("name", synthetic.TASKS)
def test_count_works_for_every_task(name):
    """Absolute counts (the partial-reinitialisation report equalises tasks at ~670 examples)."""
    task = get_task(name)
    labels = np.asarray(load_split(task, "synthetic", "train")["label"])
    idx = subset_indices(labels, count=670, seed=2)
    assert len(idx) == 670 and len(np.unique(idx)) == 670
    assert set(idx) < set(subset_indices(labels, count=1000, seed=2))  # nested
    if task.is_regression:  # stratified by decile of the score
        deciles = np.quantile(labels, np.linspace(0, 1, 11))
        assert abs(labels[idx].mean() - labels.mean()) < 0.1 and len(np.unique(np.digitize(labels[idx], deciles))) >= 6
    else:
        counts = np.bincount(labels[idx], minlength=task.num_labels)
        assert counts.max() - counts.min() <= 1


def test_regression_labels_stay_float_through_tokenize_and_collate(tokenizer):
    task = get_task("stsb")
    ds = datasets.Dataset.from_dict({"text_a": ["the film", "a premise"], "text_b": ["the film", "hypothesis"],
                                     "label": [5.0, 1.25]}, features=datasets.Features({
                                         "text_a": datasets.Value("string"), "text_b": datasets.Value("string"),
                                         "label": datasets.Value("float32")}))
    table = tokenize_split(ds, task, tokenizer, max_length=16)
    assert table.schema.field("label").type == pa.float32()
    batch = to_device(Encoded.from_table(table).batch([0, 1], {}), torch.device("cpu"))
    assert batch["label"].dtype == torch.float32 and batch["label"].tolist() == [5.0, 1.25]
    # whole-number scores are still regression targets: the table's type decides, not the values
    whole = tokenize_split(ds.map(lambda r: {"label": 3.0}), task, tokenizer, max_length=16)
    assert to_device(Encoded.from_table(whole).batch([0], {}), torch.device("cpu"))["label"].dtype == torch.float32
    mnli = get_task("mnli")
    three = datasets.Dataset.from_dict({"text_a": ["a", "b", "c"], "text_b": ["a", "b", "c"], "label": [0, 1, 2]})
    batch = to_device(Encoded.from_table(tokenize_split(three, mnli, tokenizer, max_length=8)).batch([0, 1, 2], {}),
                      torch.device("cpu"))
    assert batch["label"].dtype == torch.int64 and batch["label"].tolist() == [0, 1, 2]
