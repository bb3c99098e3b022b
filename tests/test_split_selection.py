"""Each reported split at its own best epoch: MNLI-m and MNLI-mm are each read at their own best epoch under
selection `best` (bertology.train.loop.select_points for a run, bertology.results.selection.per_split for a
study's runs table), while the weights a run keeps stay the first split's best."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from bertology.results.study_results import load_study_results
from bertology.results.tables import publish
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec
from bertology.store import open_store
from bertology.tasks import get_task
from bertology.train.loop import select_points

PAPERS = Path(__file__).resolve().parents[2] / "shared" / "papers"
EN = "google-bert/bert-base-uncased"
M, MM = "validation_matched", "validation_mismatched"
# matched peaks at epoch 1, mismatched at epoch 2
ACCURACY = {M: (0.8125, 0.7875, 0.8), MM: (0.75, 0.78125, 0.7625)}


def quoted(paper: str, words: str) -> str:
    """The words, after checking that the report says them (whitespace-insensitive), where its text is here."""
    path = PAPERS / f"{paper}.txt"
    if path.exists():
        assert re.sub(r"\s+", " ", words) in re.sub(r"\s+", " ", path.read_text()), f"{paper} does not say: {words!r}"
    return words


def curves() -> list[dict]:
    """A run's evaluation points as the loop records them: one per epoch, every split's metrics."""
    return [{"epoch": e + 1, "step": 100 * (e + 1), "train_loss": 0.5, "lr": 1e-5, "seconds": 1.0,
             **{f"{split}/accuracy": values[e] for split, values in ACCURACY.items()}} for e in range(3)]


def test_the_monolingual_report_prints_each_number_at_its_best_epoch_so_mnli_mm_is_read_at_its_own():
    quoted("monolingual-pretraining-benefits",
           "Each experiment in section 3 and section 4 is performed three times with no fixed random seed and the "
           "best epoch of the best run is reported. Each experiment in section 5 and section 6 is performed once "
           "and the best epoch is reported.")
    quoted("monolingual-pretraining-benefits", "| MNLI-m | 0.76 | 0.81 | 0.66 | 0.65 | 0.32 |")
    quoted("monolingual-pretraining-benefits", "| MNLI-mm | 0.75 | 0.82 | 0.69 | 0.66 | 0.32 |")
    assert get_task("mnli").eval_splits == (M, MM) and get_task("mnli").own_best_splits == (MM,)
    # a test set and a monitored corpus are read where validation's best point is (the cross-lingual study:
    # "the test perplexity is that point's"); a single-split task has nothing else to select on
    assert get_task("mlm-nl").own_best_splits == () and get_task("sst2").own_best_splits == ()
    points = [{"epoch": 1, "step": 50, "validation/perplexity": 9.0, "test/perplexity": 9.5, "xnli/perplexity": 30},
              {"epoch": 1, "step": 100, "validation/perplexity": 8.0, "test/perplexity": 9.9, "xnli/perplexity": 40}]
    assert select_points(points, get_task("mlm-nl"), ["validation", "test", "xnli"], "best") == {
        "validation": 1, "test": 1, "xnli": 1}


def test_a_run_reads_each_mnli_split_at_its_own_peak():
    points = curves()
    assert select_points(points, get_task("mnli"), [M, MM], "best") == {M: 0, MM: 1}
    read = {split: points[i][f"{split}/accuracy"] for split, i in select_points(points, get_task("mnli"), [M, MM],
                                                                                 "best").items()}
    assert read == {M: 0.8125, MM: 0.78125}  # each split's own peak, exactly
    assert select_points(points, get_task("mnli"), [M, MM], "last") == {M: 2, MM: 2}  # `last` as it was
    # a split the task does not read at its own best point is read at the first split's
    assert select_points(points, get_task("sst2"), [M, MM], "best") == {M: 0, MM: 0}


def test_the_point_before_training_and_later_equal_points_are_never_chosen():
    points = curves()
    before = {**points[0], "epoch": 1, "step": 0, M + "/accuracy": 0.9, MM + "/accuracy": 0.9}
    tie = {**points[1], "epoch": 3, "step": 250, MM + "/accuracy": 0.78125}
    assert select_points([before, *points[:2], tie], get_task("mnli"), [M, MM], "best") == {M: 1, MM: 2}
    assert select_points([before], get_task("mnli"), [M, MM], "best") == {M: 0, MM: 0}  # regime none: its only point


def _study(root: Path, study_id: str = "00000000000000ee"):
    """A reversed-layers plan of two MNLI runs (the study's `best`, and a variant with `last`) and a CoLA run,
    published as the fine-tune and evaluate steps publish them: the runs rows score the kept weights (matched's
    best epoch for `best`, the last for `last`) on both splits; the curves hold every epoch."""
    store = open_store(f"file://{root}")
    mnli, cola = DatasetSpec("mnli", "glue-dir:x", EN), DatasetSpec("cola", "glue-dir:x", EN)
    cells = [Cell("reversed-layers", "pre-trained", EN, RunSpec(CheckpointSpec(EN), mnli, seed=1)),
             Cell("reversed-layers", "last", EN, RunSpec(CheckpointSpec(EN), mnli, Regime(selection="last"), seed=1)),
             Cell("reversed-layers", "pre-trained", EN, RunSpec(CheckpointSpec(EN), cola, seed=1))]
    spec = {"preset": "paper", "models": [EN], "seeds": [1], "source": "glue-dir:x", "max_length": 128,
            "tasks": ["mnli", "cola"], "regime": {"name": "full", "lr": 2e-5, "batch_size": 32, "epochs": 3},
            "variants": [{"name": "pre-trained"}, {"name": "last", "regime": {"selection": "last"}}]}
    store.write_json(f"studies/reversed-layers/{study_id}/plan.json", {
        "study": "reversed-layers", "study_id": study_id, "spec": spec, "cells": [c.to_dict() for c in cells]})
    common = {"primary": True, "epochs": 3, "num_train": 10, "train_seconds": 1.0, "throughput": 1.0,
              "device": "cpu", "code_version": "t"}
    for cell, epoch in zip(cells[:2], (1, 3)):
        publish(store, "runs", cell, pa.Table.from_pylist([
            {"split": split, "metric": "accuracy", "value": ACCURACY[split][epoch - 1], "best_epoch": epoch, **common}
            for split in (M, MM)]))
        publish(store, "curves", cell, pa.Table.from_pylist([
            {"epoch": e + 1, "step": 100 * (e + 1), "train_loss": 0.5, "lr": 1e-5, "seconds": 1.0, "split": split,
             "metric": "accuracy", "value": values[e], "kind": "eval"} for split, values in ACCURACY.items()
            for e in range(3)]))
    publish(store, "runs", cells[2], pa.Table.from_pylist([
        {"split": "validation", "metric": "matthews_corrcoef", "value": 0.5, "best_epoch": 2, **common}]))
    return store, study_id, cells


def test_a_studys_runs_read_mnli_mm_at_its_own_best_epoch(tmp_path):
    store, study_id, cells = _study(tmp_path)
    runs = load_study_results(store, "reversed-layers", study_id).tables["runs"].collect()
    read = {(r["variant"], r["split"]): (r["value"], r["best_epoch"]) for r in runs.iter_rows(named=True)}
    assert read == {
        ("pre-trained", M): (0.8125, 1),  # matched at its own peak, epoch 1 (the kept weights' point)
        ("pre-trained", MM): (0.78125, 2),  # mismatched at its own peak, epoch 2, not matched's 0.75
        ("last", M): (0.8, 3), ("last", MM): (0.7625, 3),  # `last`: both at the last epoch, as published
        ("pre-trained", "validation"): (0.5, 2),  # a task with one dev split: as published
    }
    assert runs["run_id"].to_list() == [cells[0].run.id] * 2 + [cells[1].run.id] * 2 + [cells[2].run.id]


def test_a_report_says_which_splits_were_chosen_on_themselves(tmp_path):
    from bertology.results.report import build_report, markdown

    store, study_id, _ = _study(tmp_path)
    text = markdown(build_report(load_study_results(store, "reversed-layers", study_id)))
    assert ("Under `selection=best`, mnli validation_mismatched is read at its own best epoch (by its own "
            "accuracy), not at validation_matched's") in text
    assert "reports for mnli validation_matched, mnli validation_mismatched, cola validation:" in text


@pytest.mark.parametrize("kind", [None, "eval"])
def test_runs_without_curves_or_from_before_kind_are_read_as_published(tmp_path, kind):
    store, study_id, cells = _study(tmp_path)
    if kind is None:  # curves written before `kind` existed read it as null: evaluation points
        key = f"results/curves/study=reversed-layers/{cells[0].run.id}.parquet"
        path = Path(store.url(key).removeprefix("file://"))
        pl.read_parquet(path).with_columns(pl.lit(None, pl.String).alias("kind")).write_parquet(path)
        runs = load_study_results(store, "reversed-layers", study_id).tables["runs"].collect()
        assert runs.filter(pl.col("split") == MM)["best_epoch"].to_list() == [2, 3]
    else:
        for cell in cells[:2]:
            store.delete_prefix(f"results/curves/study=reversed-layers/{cell.run.id}.parquet")
        runs = load_study_results(store, "reversed-layers", study_id).tables["runs"].collect()
        assert runs.filter(pl.col("split") == MM)["value"].to_list() == [0.75, 0.7625]
