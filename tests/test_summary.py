"""What `bertology run` and `bertology report` end with (bertology.results.summary): the study's main table
and the report's orderings, read from the tables the aggregate step wrote; checked line for line on a small
study whose values are known."""

from __future__ import annotations

import pyarrow as pa

from bertology.cli import main
from bertology.results import summary
from bertology.results.tables import publish
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Intervention, RunSpec
from bertology.steps.aggregate import aggregate
from bertology.store import open_store

EN = "google-bert/bert-base-uncased"
CHAINS = {"pre-trained": (), "reversed": (Intervention("reverse-layers"),),
          "clean": (Intervention("reinit", (("scope", "all"),)),)}
LEVEL = {"pre-trained": 0.58, "reversed": 0.15, "clean": 0.01}


def _study(root, variants=tuple(CHAINS), seeds=(1, 2, 3), skip=(), name="reversed-layers",
           study_id="00000000000000cc"):
    """A study of the reversed-layers report on CoLA: each variant's MCC is its LEVEL + 0.01 × seed (mean
    LEVEL + 0.02, sd 0.01 over three seeds); `skip` leaves (variant, seed) runs unpublished."""
    store = open_store(f"file://{root}")
    chains = {v: CHAINS.get(v, (Intervention("reinit", (("scope", "all"), ("std", 0.001 * (i + 1)))),))
              for i, v in enumerate(variants)}
    cells = [Cell(name, v, EN, RunSpec(CheckpointSpec(EN, chain), DatasetSpec("cola", "glue-dir:x", EN), seed=s))
             for v, chain in chains.items() for s in seeds]
    spec = {"preset": "paper", "models": [EN], "seeds": list(seeds), "source": "glue-dir:x", "max_length": 128,
            "tasks": ["cola"], "regime": {"name": "full", "lr": 2e-5, "batch_size": 32, "epochs": 3},
            "variants": [{"name": v} for v in chains]}
    store.write_json(f"studies/{name}/{study_id}/plan.json", {
        "study": name, "study_id": study_id, "spec": spec, "cells": [c.to_dict() for c in cells]})
    for c in cells:
        if (c.variant, c.run.seed) in skip:
            continue
        publish(store, "runs", c, pa.Table.from_pylist([{
            "split": "validation", "metric": "matthews_corrcoef", "value": LEVEL.get(c.variant, 0.3) + 0.01 * c.run.seed,
            "primary": True, "best_epoch": 1, "epochs": 3, "num_train": 10, "train_seconds": 1.0, "throughput": 1.0,
            "device": "cpu", "code_version": "t"}]))
    return store


def test_report_ends_with_the_main_table_and_the_reports_orderings(tmp_path, capsys):
    _study(tmp_path)
    assert main(["report", "reversed-layers", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("")
    assert out[start:start + 13] == [
        "",
        "reversed-layers 00000000000000cc: the primary metric, mean ± sd over training seeds (n runs)",
        ("| model                         | task | split      | metric            | pre-trained         | reversed  "
        "          | clean               |"),
        ("|-------------------------------|------|------------|-------------------|---------------------|-----------"
        "----------|---------------------|"),
        ("| google-bert/bert-base-uncased | cola | validation | matthews_corrcoef | 0.600 ± 0.010 (n=3) | 0.170 ± 0."
        "010 (n=3) | 0.030 ± 0.010 (n=3) |"),
        "",
        # Table 1's 27 asserted orderings, 3 of them on CoLA (the 2 pairs of WNLI, 2 points apart, are not asserted)
        "the report vs this run: 3 of 3 asserted orderings hold (24 not run)",
        "| group        | ordering                      | ours                      | status |",
        "|--------------|-------------------------------|---------------------------|--------|",
        # Table 1 prints the best epoch of the best run: our best runs are LEVEL + 0.03
        "| Table 1/CoLA | Pre-trained > Layers Reversed | 0.610 vs 0.180 (best run) | holds  |",
        "| Table 1/CoLA | Pre-trained > Clean           | 0.610 vs 0.040 (best run) | holds  |",
        "| Table 1/CoLA | Layers Reversed > Clean       | 0.180 vs 0.040 (best run) | holds  |",
        f"file://{tmp_path}/studies/reversed-layers/00000000000000cc/report.md",
    ]


def test_a_missing_run_is_flagged_and_many_variants_take_a_row_each(tmp_path):
    store = _study(tmp_path, skip={("reversed", 3)})
    _run_aggregate(store, "reversed-layers", "00000000000000cc")
    lines = summary.study_result(store, "reversed-layers", "00000000000000cc")
    assert "| 0.165 ± 0.007 (n=2 of 3) |" in lines[4].replace("  ", "")  # its mean and sd over the two it has
    many = ("pre-trained", "reversed", "clean", "L1", "L2")
    store = _study(tmp_path / "many", variants=many, study_id="00000000000000dd")
    _run_aggregate(store, "reversed-layers", "00000000000000dd")
    lines = summary.study_result(store, "reversed-layers", "00000000000000dd")
    table = lines[2:lines.index("", 2)]
    assert [c.strip() for c in table[0].strip("|").split("|")] == [
        "model", "task", "split", "metric", "variant", "mean ± sd (n)"]
    assert [row.split("|")[5].strip() for row in table[2:]] == list(many)


def test_long_tables_are_cut_saying_how_many_rows_the_report_holds(tmp_path):
    variants = ("pre-trained", *(f"L{i}" for i in range(summary.MAX_ROWS + 4)))
    store = _study(tmp_path, variants=variants, seeds=(1,))
    _run_aggregate(store, "reversed-layers", "00000000000000cc")
    lines = summary.study_result(store, "reversed-layers", "00000000000000cc")
    table = lines[2:lines.index("", 2)]
    assert len(table) == 2 + summary.MAX_ROWS + 1 and table[-1] == "… 5 more rows in the report"


def test_no_tables_no_lines(tmp_path):
    store = open_store(f"file://{tmp_path}")
    assert summary.study_result(store, "reversed-layers", "00000000000000cc") == []


def _run_aggregate(store, name, study_id):
    aggregate(store, name, study_id, echo=False)


def test_the_summary_loads_neither_the_reports_plotting_nor_scipy_stats():
    """Every `bertology run` ends with the summary: importing it took 1.5 s of CPU when it pulled in the report
    package (matplotlib) and scipy.stats; now 0.7 s. A fresh interpreter, as the CLI is."""
    import subprocess
    import sys

    probe = ("import sys, bertology.results.summary; "
             "print(sorted(m for m in ('matplotlib', 'scipy.stats', 'bertology.results.report', 'jinja2') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
