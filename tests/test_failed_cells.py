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


def _library_with_faulty_finetune(tmp_path: Path) -> Path:
    templates = tmp_path / "templates"
    shutil.copytree(REPO / "workflows" / "templates", templates)
    steps = yaml.safe_load((templates / "steps.yaml").read_text())
    (finetune,) = [t for t in steps["spec"]["templates"] if t["name"] == "finetune"]
    finetune["container"]["command"] = ["python", "-m", "tests.faulty_finetune"]
    (templates / "steps.yaml").write_text(yaml.safe_dump(json.loads(json.dumps(steps)), sort_keys=False))
    return templates


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
