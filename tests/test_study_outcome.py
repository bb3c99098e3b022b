"""A study Workflow ends as the study did, through the local runner as under Argo: a failed analyze fails it,
plan fixes the store for every later step, and a value passed with -p survives the preset.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from bertology.argo.runner import run_workflow
from bertology.results.tables import publish_rows
from bertology.steps.aggregate import IncompleteStudy, aggregate
from bertology.store import open_store

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "workflows" / "reversed-layers.yaml"
ONE_CELL = {"preset": "tiny", "tasks": '["sst2"]', "seeds": "[1]",
            "variants": '[{"name": "pre-trained", "interventions": []}]'}


def _run(tmp_path: Path, params: dict, **kwargs):
    """The study through the runner as `bertology run` runs it: steps fork from a warm interpreter (each
    step is still its own process; a fresh one per step imported torch and transformers ten times here)."""
    store = tmp_path / "store"
    result = run_workflow(STUDY, params={**params, "store": str(store)}, templates_dir=ROOT / "workflows" / "templates",
                          workdir=tmp_path / "work", project_root=ROOT, log=lambda _: None, fork_server=True,
                          **kwargs)
    return result, open_store(str(store))


def _plan(store) -> dict:
    (key,) = [k for k in store.list("studies/reversed-layers") if k.endswith("/plan.json")]
    return store.read_json(key)


def test_a_failed_analyze_fails_the_study_after_its_report(tmp_path, monkeypatch):
    """The issue's reproduction, on one cell: analyze killed on every attempt (exit 137, retried 3 times);
    aggregate still runs, writes the report listing the run as incomplete, and fails, so the run exits 1."""
    monkeypatch.setenv("BERTOLOGY_CHAOS", "analyze:start:kill")
    result, store = _run(tmp_path, ONE_CELL, parallelism=2)
    (analyze,) = [n for n in result.nodes.values() if n.name.endswith(".analyze")]
    assert (analyze.phase, analyze.attempts, analyze.message) == ("Failed", 4, "No more retries left")
    assert {a.exit_code for a in analyze.tries} == {137}
    aggregate_node = result.nodes["aggregate"]
    assert aggregate_node.phase == "Failed" and aggregate_node.exit_code == 1
    assert aggregate_node.message == "retryStrategy.expression evaluated to false"  # the Retry node's: exit 1
    assert "1 of 1 runs incomplete (no weight_distance: analyze failed)" in aggregate_node.tries[-1].message
    assert (result.phase, result.exit_code) == ("Failed", 1)
    (report,) = [k for k in store.list("studies/reversed-layers") if k.endswith("/report.md")]
    assert "## Incomplete runs (1 of 1)" in store.read_bytes(report).decode()


def test_plan_fixes_the_store_for_every_later_step(tmp_path):
    """Every pod after plan gets the store plan handed on (its `store` output), not the Workflow's `store`
    parameter, which Argo reads from the ConfigMap again on every reconcile (setGlobalParameters)."""
    result, store = _run(tmp_path, ONE_CELL, dry_run=True)
    assert result.nodes["plan"].outputs["store"] == store.uri
    later = [p for p in result.pods if p.template not in ("plan", "verdict")]  # verdict reads no store
    assert later and all(p.argv[p.argv.index("--store") + 1] == store.uri for p in later)
    for name in ("study.yaml", "vocab-overlap.yaml", "nightly-regression.yaml"):
        import yaml

        (doc,) = [d for d in yaml.safe_load_all((ROOT / "workflows/templates" / name).read_text())
                  if d.get("kind") == "WorkflowTemplate"]
        main = next(t for t in doc["spec"]["templates"] if t["name"] == doc["spec"]["entrypoint"])
        after_plan = [t for t in main["dag"]["tasks"] if t["name"] != "plan"]
        assert "workflow.parameters.store" not in json.dumps(after_plan), name
        assert "workflow.parameters.platform_store" not in json.dumps(after_plan), name


@pytest.mark.parametrize(("given", "trained_at"), [({}, 2e-3), ({"lr": "1e-4"}, 1e-4), ({"lr": "2e-5"}, 2e-5)])
def test_a_value_passed_with_p_survives_the_preset(tmp_path, given, trained_at):
    """`argo submit workflows/reversed-layers.yaml -p preset=tiny -p lr=1e-4` hands plan lr=1e-4 where the
    Workflow's own default reads `default:2e-5` (Argo passes only the final values: workflow/util/util.go
    overrideParameters), so plan keeps it, as `bertology run` does: the same parameters reach the same plan.
    Without -p the preset's lr (2e-3) replaces the study's default; a -p equal to that default is kept too."""
    _, store = _run(tmp_path, {**ONE_CELL, **given}, dry_run=True)
    spec = _plan(store)["spec"]
    assert spec["regime"]["lr"] == trained_at
    assert spec["max_length"] == 32  # not passed: the preset's


def test_a_vocabulary_study_with_a_model_not_measured_fails_after_its_report(tmp_path):
    store = open_store(str(tmp_path))
    spec = {"kind": "vocab-overlap", "preset": "paper", "models": ["de", "zh"], "reference": "en", "case": "exact"}
    store.write_json("studies/vocab/v1/plan.json", {"study": "vocab", "study_id": "v1", "spec": spec, "cells": [],
                                                    "analyses": {"a": {"model": "de"}, "b": {"model": "zh"}}})
    row = {"reference": "en", "case": "exact", "vocab_size": 30_000, "english_like": 25_266, "english_like_share": 0.84,
           "overlap": 5_775, "overlap_share": 0.19, "corpus": None, "max_lines": None, "stride": 10, "pieces": 0,
           "windows": 0, "english_windows": 0, "english_window_share": None}
    publish_rows(store, "vocab_overlap", "vocab", "de-en", {"study": "vocab", "model": "de"}, pa.Table.from_pylist([row]))
    with pytest.raises(IncompleteStudy, match=r"1 of 2 models not measured \(zh\)"):
        aggregate(store, "vocab", "v1", echo=False, require_complete=True)
    text = store.read_bytes("studies/vocab/v1/report.md").decode()
    assert "## Models not measured (1 of 2)" in text
