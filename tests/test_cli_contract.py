"""The exit-code contract of every command (0 done, 1 failed, 2 bad input with one line naming the bad value,
75 transient), a study YAML outside the checkout (`--templates DIR`), and the one-line errors of
`bertology.results.scan` and of `bertology validate`'s file reading."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pyarrow as pa
import pytest

from bertology.cli import main
from bertology.errors import BadInput
from bertology.results import scan
from bertology.store import LocalStore

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "workflows" / "reversed-layers.yaml"
TEMPLATES = REPO / "workflows" / "templates"


def _cli(capsys, *args: str) -> tuple[int, str, list[str]]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


# command -> (arguments, the bad value its one-line error must name); {tmp} is the test's tmp_path
BAD_INPUT = {
    "run": (["run", "{tmp}/missing.yaml"], "workflow file '{tmp}/missing.yaml' not found"),
    "run --semaphore": (["run", str(WORKFLOW), "--semaphore", "gpu=two"], "--semaphore 'gpu=two'"),
    "validate": (["validate", "{tmp}/missing.yaml"], "workflow file '{tmp}/missing.yaml' not found"),
    "studies": (["studies", "--dir", "{tmp}/nowhere"], "workflows directory '{tmp}/nowhere' not found"),
    "studies (not UTF-8)": (["studies", "--dir", "{tmp}/latin1"], "{tmp}/latin1/x.yaml: not UTF-8 text (byte 0xe9"),
    "interventions": (["interventions", "-o", "xml"], "invalid choice: 'xml' (choose from 'text', 'json')"),
    "interventions (misspelt)": (["interventions", "-o", "jsno"],
                                 "invalid choice: 'jsno' (did you mean 'json'?; choose from 'text', 'json')"),
    "checkpoint": (["checkpoint", "tiny:bert", "--apply", "flip-layers", "--out", "{tmp}/out"],
                   "intervention 'flip-layers' is unknown; allowed: reverse-layers"),
    "report": (["report", "no-such-study", "--store", "{tmp}/store"], "no study 'no-such-study'"),
    "report --store": (["report", "reversed-layers", "--store", "ftp://host/x"], "unsupported store URI scheme 'ftp'"),
    "submit": (["submit", str(WORKFLOW), "-p", "sead=1"], (f"unknown parameter 'sead' for {WORKFLOW} "
                                                           "(did you mean 'seeds'?")),
    "watch": (["watch", "reversed-layers-x", "--kubeconfig", "{tmp}/missing"], "kubeconfig '{tmp}/missing' not found"),
    "results": (["results", "reversed-layers-x", "--kubeconfig", "{tmp}/missing"],
                "kubeconfig '{tmp}/missing' not found"),
    "unknown command": (["frobnicate"], "invalid choice: 'frobnicate'"),
    "no command": ([], ("no command given (commands: run, validate, checkpoint, interventions, studies, report, "
                        "submit, watch, results; `bertology --help` says what each does")),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_every_command_exits_2_with_one_line_naming_the_bad_value(case, tmp_path, capsys):
    args, named = BAD_INPUT[case]
    (tmp_path / "latin1").mkdir()
    (tmp_path / "latin1" / "x.yaml").write_bytes("kind: Workflow # caf\xe9\n".encode("latin-1"))
    code, _, err = _cli(capsys, *[a.format(tmp=tmp_path) for a in args])
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and named.format(tmp=tmp_path) in err[0], err
    assert not (tmp_path / "store").exists() and not (tmp_path / "out").exists()  # nothing written


# `python -m bertology.cli ARGS` with an atexit handler that says when the interpreter's finalisation runs
FINALISATION = ("import atexit, runpy, sys; atexit.register(lambda: print('finalised', flush=True)); "
                "sys.argv = ['bertology', *sys.argv[1:]]; runpy.run_module('bertology.cli', run_name='__main__')")


@pytest.mark.parametrize("args, code, shown", [(["studies"], 0, "reversed-layers"),
                                               (["validate", "missing.yaml"], 2, "error: workflow file")])
def test_the_command_ends_with_its_code_and_output_but_without_the_interpreters_finalisation(args, code, shown):
    """bertology.process_exit: a native thread pool (torch, pyarrow, polars) can abort the interpreter's
    finalisation (SIGABRT, exit -6) after a study's result was printed, as `bertology run` once did in the
    suite. The command (console script and `python -m`) flushes its output and ends with os._exit."""
    done = subprocess.run([sys.executable, "-c", FINALISATION, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == code, done.stderr
    assert shown in done.stdout + done.stderr  # flushed to a pipe
    assert "finalised" not in done.stdout
    assert [e.value for e in entry_points(group="console_scripts", name="bertology")] == ["bertology.cli:entry"]


def test_done_is_0_and_a_failed_validation_is_1(tmp_path, capsys):
    assert _cli(capsys, "interventions")[0] == 0
    assert _cli(capsys, "studies", "-o", "json")[0] == 0
    assert _cli(capsys, "validate", WORKFLOW)[0] == 0
    (tmp_path / "bad.yaml").write_text("kind: Workflow\nspec: [unclosed\n")
    code, out, _ = _cli(capsys, "validate", tmp_path / "bad.yaml")
    assert code == 1 and out.splitlines()[-1] == "1 file(s), 1 error(s)"


def test_validate_names_a_file_that_is_not_yaml_or_not_utf8_in_one_line(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("kind: Workflow\nspec: [unclosed\n")
    (tmp_path / "latin1.yaml").write_bytes("kind: Workflow # caf\xe9\n".encode("latin-1"))
    code, out, _ = _cli(capsys, "validate", tmp_path / "bad.yaml", tmp_path / "latin1.yaml")
    expected = "expected UTF-8 YAML: Argo Workflow, CronWorkflow or WorkflowTemplate documents"
    assert code == 1 and out.splitlines() == [
        (f"{tmp_path}/bad.yaml: invalid YAML at line 3, column 1: expected ',' or ']', but got '<stream end>' "
        f"({expected})"),
        f"{tmp_path}/latin1.yaml: not UTF-8 text (byte 0xe9 at offset 20; {expected})",
        "2 file(s), 2 error(s)"]
    code, _, err = _cli(capsys, "validate", "--templates", tmp_path / "nowhere", WORKFLOW)
    assert code == 2 and err == [(f"error: --templates '{tmp_path}/nowhere' is not a directory "
                                 "(the WorkflowTemplates' directory)")]


def test_a_study_yaml_outside_the_checkout_runs_with_templates(tmp_path, capsys, monkeypatch):
    study = tmp_path / "my-study.yaml"
    shutil.copy(WORKFLOW, study)
    store = tmp_path / "store"
    # validate: the missing WorkflowTemplate's error says where it looked and suggests --templates
    code, out, _ = _cli(capsys, "validate", study)
    assert code == 1
    assert (f"WorkflowTemplate 'bertology-study' not found (known: none); looked in {tmp_path}/templates: "
            "pass --templates DIR") in out
    assert _cli(capsys, "validate", "--templates", TEMPLATES, study)[0] == 0
    # run, from outside the checkout: neither the jobs/ package nor the templates can be found
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli(capsys, "run", study, "--dry-run", "-p", "preset=tiny", "--store", store)
    assert code == 2 and len(err) == 1 and "pass --templates DIR" in err[0], err
    # run, from inside the checkout: the templates are still not beside the study
    monkeypatch.chdir(REPO)
    code, _, err = _cli(capsys, "run", study, "--dry-run", "-p", "preset=tiny", "--store", store)
    assert code == 2 and len(err) == 1
    assert "WorkflowTemplate 'bertology-study' not found" in err[0] and "pass --templates DIR" in err[0]
    assert not store.exists()  # nothing ran
    # with --templates it plans (a dry run: plan runs for real, writing nothing, the rest is printed); --tracker
    # (bertology.tracking) reaches plan as -p tracker=… through the study and step templates, and plan puts it
    # into every cell finetune reads
    monkeypatch.chdir(tmp_path)
    code, out, _ = _cli(capsys, "run", study, "--templates", TEMPLATES, "--dry-run", "-p", "preset=tiny",
                        "--tracker", "tensorboard", "--store", store)
    assert code == 0 and "python -m jobs.finetune" in out
    assert "--param tracker=tensorboard" in out and not list(store.glob("**/plan.json"))
    from bertology.study import StudySpec

    cells = StudySpec.from_params("reversed-layers", {"preset": "tiny", "tracker": "tensorboard"})[0].cells()
    assert cells and {c.run.regime.tracker for c in cells} == {"tensorboard"}


def test_scan_errors_name_the_bad_value_and_what_is_allowed(tmp_path):
    store = LocalStore(tmp_path / "store")
    with pytest.raises(BadInput) as e:
        scan(str(store.root), "run")
    assert str(e.value).startswith("unknown results table 'run' (did you mean 'runs'?; known: runs, ")
    with pytest.raises(BadInput, match=r"^unsupported store URI scheme 'ftp' in 'ftp://h/x' \(allowed: file://PATH"):
        scan("ftp://h/x", "runs")
    with pytest.raises(BadInput) as e:
        scan(str(store.root), "runs")
    assert str(e.value).startswith(f"no results in table 'runs' of store {store.uri} (none written there yet")
    store.write_parquet("results/runs/study=reversed-layers/0123456789abcdef.parquet", pa.table({"x": [1]}))
    store.write_parquet("results/runs/study=head-reinit/0123456789abcdef.parquet", pa.table({"x": [2]}))
    with pytest.raises(BadInput) as e:
        scan(str(store.root), "runs", study="reversed-layer")
    assert str(e.value) == (f"no study 'reversed-layer' in table 'runs' of store {store.uri} "
                            "(studies there: head-reinit, reversed-layers)")
    assert scan(str(store.root), "runs", study="head-reinit").collect()["x"].to_list() == [2]
    assert sorted(scan(str(store.root), "runs").collect()["x"].to_list()) == [1, 2]
