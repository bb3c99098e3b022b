"""A failed cell does not stop a study (Argo starts every other cell anyway: dag.go, upstream #10312), and
the study says so loudly: aggregate still writes the report, which lists the failed runs, then exits 1, so
the Workflow ends Failed. A rerun reruns only what failed.

The real workflow and step library run through the local runner, two pods at a time; only the finetune
container is replaced (tests/faulty_finetune.py) so that the pod holding the plan's smallest run id exits 1
until the fault is "healed".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from bertology.argo.runner import run_workflow

REPO = Path(__file__).resolve().parent.parent


def _library_with(tmp_path: Path, step: str, command: list[str]) -> Path:
    templates = tmp_path / "templates"
    shutil.copytree(REPO / "workflows" / "templates", templates)
    steps = yaml.safe_load((templates / "steps.yaml").read_text())
    (template,) = [t for t in steps["spec"]["templates"] if t["name"] == step]
    template["container"]["command"] = command
    (templates / "steps.yaml").write_text(yaml.safe_dump(json.loads(json.dumps(steps)), sort_keys=False))
    return templates


def _library_with_faulty_finetune(tmp_path: Path) -> Path:
    return _library_with(tmp_path, "finetune", ["python", "-m", "tests.faulty_finetune"])


def _run(tmp_path: Path, templates: Path, store: Path, tag: str):
    return run_workflow(REPO / "workflows" / "reversed-layers.yaml",
                        params={"preset": "tiny", "store": str(store), "tasks": '["rte"]'},
                        templates_dir=templates, workdir=tmp_path / f"work-{tag}", project_root=REPO,
                        log=lambda _: None, fork_server=True, max_backoff_s=0, parallelism=2,
                        semaphores={"bertology-semaphores/gpu": 2})


def test_failed_cells_leave_the_others_running_and_the_report_lists_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("BERTOLOGY_TEST_HEAL", raising=False)
    templates, store = _library_with_faulty_finetune(tmp_path), tmp_path / "store"
    result = _run(tmp_path, templates, store, "faulty")

    cells = {name: node for name, node in result.nodes.items() if name.startswith("cell(") and "." not in name}
    failed = {n for n, node in cells.items() if node.phase == "Failed"}
    passed = {n for n, node in cells.items() if node.phase == "Succeeded"}
    assert len(failed) == 1 and passed and failed | passed == set(cells)  # one failure stopped no other cell
    assert result.nodes["cell"].phase == "Failed"
    assert result.nodes["aggregate"].phase == "Failed" and result.nodes["aggregate"].exit_code == 1
    assert result.nodes["aggregate"].attempts == 1  # exit 1 is not retried
    assert (result.phase, result.exit_code) == ("Failed", 1)
    (report,) = store.glob("studies/reversed-layers/*/report.md")
    text = report.read_text()
    missing = [n.split(":")[1].rstrip(")") for n in failed]
    assert all(run_id in text for run_id in missing)  # the report lists each failed run

    monkeypatch.setenv("BERTOLOGY_TEST_HEAL", "1")  # the fault is gone: a rerun heals the study
    again = _run(tmp_path, templates, store, "healed")
    assert (again.phase, again.exit_code) == ("Succeeded", 0)
    rerun = [n for n in again.nodes if n.startswith("cell(") and n.endswith(".finetune")]
    assert len(rerun) == len(failed)  # only what failed ran again


def test_a_step_that_fails_after_its_retries_fails_the_study_though_aggregate_succeeds(tmp_path, monkeypatch):
    """Argo judges a DAG by its targets (dag.go assessDAGPhase): aggregate, whose completeness check finds
    every result (the failing analyze published its own before it failed). Only the exit handler sees the
    analyze that failed after its 3 retries: the Workflow ends Failed, its message naming the step and why."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    templates = _library_with(tmp_path, "analyze", ["python", "-m", "tests.publish_then_fail", "analyze"])
    result = _run(tmp_path, templates, tmp_path / "store", "late")

    analyses = {n: node for n, node in result.nodes.items() if n.startswith("cell(") and n.endswith(".analyze")}
    (bad,) = [node for node in analyses.values() if node.phase == "Failed"]
    assert (bad.attempts, bad.exit_code, bad.message) == (4, 75, "No more retries left")  # exit 75 is retried
    assert result.nodes["aggregate"].phase == "Succeeded"  # the study's own check found nothing missing
    run_id = bad.name.split(":")[1].split(")")[0]
    assert result.nodes["onExit"].phase == "Failed"
    assert (result.phase, result.exit_code) == ("Failed", 75)  # the failed step's code, not the verdict's
    assert result.message == ("main: Error (exit code 1): analyze failed: injected failure after publishing run "
                              f"{run_id}")
