"""The CLI as the ecosystem expects it: --version, `studies`, Argo's `-f`, `-o json`, $BERTOLOGY_STORE,
one set of exit codes, --templates for a study outside the checkout, and the run's console (progress line,
-q / -v)."""

from __future__ import annotations

import io
import itertools
import json
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from bertology import cli
from bertology.argo.runner import RunEvent
from bertology.cli.locations import STORE_ENV
from bertology.cli.run_inputs import PARALLELISM_ENV, SEMAPHORES_ENV, local_limits
from bertology.console import NORMAL, QUIET, Console, Progress
from bertology.errors import BadInput, Transient

REPO = Path(__file__).resolve().parent.parent

# A host step that shows what it was given; `store` is declared because `bertology run` always passes it.
ECHO = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: echo-
spec:
  entrypoint: main
  arguments:
    parameters:
      - {name: count, value: "1"}
      - {name: label, value: default}
      - {name: tags, value: "[]"}
      - name: store
  templates:
    - name: main
      dag:
        tasks:
          - {name: say, template: say}
    - name: say
      container:
        image: example/echo:0.1
        command: [sh, -c, "echo count={{workflow.parameters.count}} label={{workflow.parameters.label}} tags={{workflow.parameters.tags}} store={{workflow.parameters.store}}"]
"""


@pytest.fixture
def echo_project(tmp_path, monkeypatch):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "templates").mkdir()
    (tmp_path / "echo.yaml").write_text(ECHO)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(STORE_ENV, raising=False)
    return tmp_path


def _run(*args) -> int:
    """`bertology run` of echo.yaml in-process; its exit code."""
    return cli.main(["run", "echo.yaml", "--templates", "templates", "--no-fork-server", *args])


def _say_log(capsys) -> str:
    out = capsys.readouterr().out
    workdir = Path(out.split("step logs in ", 1)[1].split(")", 1)[0])
    return (workdir / "say" / "log.txt").read_text()


def test_version_is_the_installed_package_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"bertology {version('bertology')}"


def test_studies_lists_each_workflow_with_its_report_and_parameters(capsys, monkeypatch):
    assert cli.main(["studies", "-o", "json"]) == 0
    entries = {e["study"]: e for e in json.loads(capsys.readouterr().out)}
    files = {p.stem for p in (REPO / "workflows").glob("*.yaml")}
    assert set(entries) == files  # every workflow (the nightly CronWorkflow too), no template
    reversed_ = entries["reversed-layers"]
    # the header comment: "# Layer reversal (monolingual report, Table 1): fine-tune ..."
    assert reversed_["title"] == "Layer reversal"
    assert reversed_["report"] == "monolingual report, Table 1"
    declared = yaml.safe_load((REPO / "workflows" / "reversed-layers.yaml").read_text())
    assert reversed_["parameters"] == {p["name"]: p.get("value", "") for p in declared["spec"]["arguments"]["parameters"]}
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: the row's cells unwrapped
    assert cli.main(["studies"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("reversed-layers "))
    assert "Layer reversal (monolingual report, Table 1)" in row
    assert "preset, models, variants" in row


def test_interventions_as_json_is_the_registry(capsys):
    from bertology.interventions import REGISTRY

    assert cli.main(["interventions", "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in listed] == list(REGISTRY)
    assert all(e["params"] == json.loads(json.dumps(REGISTRY[e["name"]].defaults, default=str)) for e in listed)


def test_parameter_file_is_argos_f_and_p_wins(echo_project, capsys):
    (echo_project / "params.yaml").write_text("count: 3\nlabel: from-file\ntags: [a, b]\n")
    assert _run("-f", "params.yaml", "-p", "label=from-p", "-q") == 0
    assert 'count=3 label=from-p tags=["a", "b"]' in _say_log(capsys)


@pytest.mark.parametrize("content", ["- a\n- b\n", "count: [unclosed\n"])
def test_a_bad_parameter_file_is_one_line_exit_2(echo_project, capsys, content):
    (echo_project / "params.yaml").write_text(content)
    assert _run("--parameter-file", "params.yaml") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: parameter file 'params.yaml'") and err.count("\n") == 1


def test_bertology_store_is_the_default_and_store_wins(echo_project, capsys, monkeypatch):
    monkeypatch.setenv(STORE_ENV, str(echo_project / "from-env"))
    assert _run("-q") == 0
    assert f"store=file://{echo_project / 'from-env'}" in _say_log(capsys)
    assert _run("-q", "--store", str(echo_project / "explicit")) == 0
    assert f"store=file://{echo_project / 'explicit'}" in _say_log(capsys)


def test_an_empty_store_is_an_error_naming_it(echo_project, capsys, monkeypatch):
    assert _run("--store", "") == 2
    assert "error: --store '' is empty" in capsys.readouterr().err
    assert cli.main(["report", "reversed-layers", "--store", " "]) == 2
    assert "error: --store ' ' is empty" in capsys.readouterr().err
    monkeypatch.setenv(STORE_ENV, "")
    assert _run() == 2
    assert f"error: {STORE_ENV}='' is empty" in capsys.readouterr().err


def test_report_reads_bertology_store(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "empty-store"))
    assert cli.main(["report", "reversed-layers"]) == 2
    assert str(tmp_path / "empty-store") in capsys.readouterr().err  # it looked in $BERTOLOGY_STORE


@pytest.mark.parametrize(("raised", "code"), [(Transient("store unreachable"), 75), (KeyboardInterrupt(), 130)])
def test_every_command_shares_the_exit_codes(monkeypatch, capsys, raised, code):
    def fails(args):
        raise raised

    monkeypatch.setattr(cli, "cmd_interventions", fails)
    assert cli.main(["interventions"]) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and (code == 130 or err == "error: store unreachable\n")


def test_a_study_outside_the_checkout_runs_with_templates(tmp_path, monkeypatch, capsys):
    study = tmp_path / "my-study.yaml"
    shutil.copy(REPO / "workflows" / "reversed-layers.yaml", study)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(STORE_ENV, raising=False)
    # without --templates: one line that says how to point at them
    assert cli.main(["run", str(study), "-p", "preset=tiny", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "pass --templates DIR" in err and err.count("\n") == 1
    # from a checkout's directory, the jobs/ package is found but the templates are not beside the study
    monkeypatch.chdir(REPO)
    assert cli.main(["run", str(study), "-p", "preset=tiny", "--dry-run", "--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "WorkflowTemplate 'bertology-study' not found" in err and "pass --templates DIR" in err
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", str(study), "-p", "preset=tiny", "--dry-run", "--store", str(tmp_path / "s"),
                     "--templates", str(REPO / "workflows" / "templates")]) == 0
    assert "pods; the argv of the first" in capsys.readouterr().out


# -- the console ------------------------------------------------------------------------------------


def test_progress_counts_cells_failures_running_steps_and_eta():
    now = [0.0]
    progress = Progress(clock=lambda: now[0])
    assert progress.line() == "starting"  # no count before the plan is known
    progress.feed(RunEvent("started", "plan", template="plan"))
    assert progress.line() == "running plan" and progress.fraction() is None
    progress.feed(RunEvent("planned", "cell", count=4))  # its items are plan's output: known as plan ends
    progress.feed(RunEvent("finished", "plan", "Succeeded"))
    assert progress.line() == "cells 0/4 · 0 steps running" and progress.fraction() == 0
    cells = tuple(f"cell({i}:c{i})" for i in range(4))
    progress.feed(RunEvent("fanout", "cell", count=4, children=cells))
    progress.feed(RunEvent("fanout", "cell(0:c0).inner", count=9, children=("x",)))  # nested: not a cell
    for cell in cells[:3]:
        progress.feed(RunEvent("started", f"{cell}.finetune"))
    now[0] = 10.0
    progress.feed(RunEvent("finished", f"{cells[0]}.finetune", "Succeeded"))
    progress.feed(RunEvent("finished", cells[0], "Succeeded"))
    progress.feed(RunEvent("finished", f"{cells[1]}.finetune", "Failed", message="exit code 1"))
    progress.feed(RunEvent("finished", cells[1], "Failed"))
    # 2 of 4 cells in 10 s point to 10 s more; the first alone pointed to 30 s, and the ETA moves from
    # there only to the edge of the new estimate's uncertainty (10 s x 0.5 / sqrt 2)
    assert progress.line() == "cells 2/4 · 1 failed · running cell #3.finetune · ETA 14s"
    assert [e.node for e in progress.failures] == ["cell(1:c1).finetune"]
    now[0] = 24.0
    assert progress.eta() is None  # overdue: no number rather than a wrong one


def test_the_eta_counts_down_while_a_step_runs_and_moves_only_within_its_uncertainty():
    """Twelve cells one after another, 10 s each give or take 3 s, redrawn every second: the ETA never
    rises while a cell runs (the old estimate, elapsed / done x left, rose 30 s during a cell and fell back
    at its end), and at a finished cell it moves by less than the estimate's spread."""
    now = [0.0]
    progress = Progress(clock=lambda: now[0])
    cells = tuple(f"cell({i}:c{i})" for i in range(12))
    progress.feed(RunEvent("fanout", "cell", count=12, children=cells))
    took = [10, 13, 7, 11, 9, 12, 8, 10, 13, 7, 11, 9]
    shown: list[tuple[bool, float | None]] = []  # (a cell finished just before, the ETA)
    naive: list[float] = []
    for cell, seconds in zip(cells, took):
        progress.feed(RunEvent("started", f"{cell}.finetune"))
        for second in range(seconds):
            now[0] += 1.0
            if second + 1 == seconds:
                progress.feed(RunEvent("finished", f"{cell}.finetune", "Succeeded"))
                progress.feed(RunEvent("finished", cell, "Succeeded"))
            shown.append((second + 1 == seconds, progress.eta()))
            done = progress.done.get("cell", 0)
            if done and done < 12:
                naive.append(now[0] / done * (12 - done))
    etas = [(finished, eta) for finished, eta in shown if eta is not None]
    for (_, before), (finished, after) in itertools.pairwise(etas):
        if not finished:
            assert after == pytest.approx(before - 1.0)  # counted down, second by second
    jumps = [after - (before - 1.0) for (_, before), (finished, after) in itertools.pairwise(etas) if finished]
    assert max(map(abs, jumps)) < 0.2 * max(eta for _, eta in etas), jumps
    assert max(b - a for a, b in itertools.pairwise(naive)) > 5  # what the old estimate did within one cell


def test_the_bar_covers_the_known_work_never_falls_and_shows_no_empty_count():
    """A study's plan announces its three fan-outs at once: the bar is their children's share done, from 0
    to 1 without a step back, where it used to fall from full at `checkpoints 4/4` to a third at `cells
    0/12`; a rerun with nothing left to do says so rather than `datasets 0/0 · checkpoints 0/0 · cells 0/0`."""
    progress = Progress()
    fractions, lines = [], []

    def feed(*events: RunEvent) -> None:
        for event in events:
            progress.feed(event)
            fractions.append(progress.fraction())
            lines.append(progress.line())

    feed(RunEvent("started", "plan"), RunEvent("planned", "prepare-data", count=1),
         RunEvent("planned", "build-checkpoint", count=4), RunEvent("planned", "cell", count=12),
         RunEvent("finished", "plan", "Succeeded"))
    feed(RunEvent("fanout", "prepare-data", count=1, children=("prepare-data(0:d)",)),
         RunEvent("fanout", "build-checkpoint", count=4, children=tuple(f"build-checkpoint({i}:k{i})" for i in range(4))),
         RunEvent("finished", "prepare-data(0:d)", "Succeeded"),
         *[RunEvent("finished", f"build-checkpoint({i}:k{i})", "Succeeded") for i in range(4)])
    assert lines[-1] == "datasets 1/1 · checkpoints 4/4 · cells 0/12 · 0 steps running"
    feed(RunEvent("fanout", "cell", count=12, children=tuple(f"cell({i}:c{i})" for i in range(12))),
         *[RunEvent("finished", f"cell({i}:c{i})", "Succeeded") for i in range(12)])
    known = [f for f in fractions if f is not None]
    assert fractions[0] is None and known == sorted(known) and known[-1] == 1.0
    assert fractions[lines.index("datasets 1/1 · checkpoints 4/4 · cells 0/12 · 0 steps running")] == 5 / 17
    assert not any("0/0" in line or "(0:" in line for line in lines), lines

    rerun = Progress()
    for group in ("prepare-data", "build-checkpoint", "cell"):
        rerun.feed(RunEvent("planned", group, count=0))
    rerun.feed(RunEvent("started", "aggregate", template="aggregate"))
    assert rerun.line() == "nothing to run · running aggregate" and rerun.fraction() == 1.0
    # a fan-out that never runs (its upstream failed) leaves the work it was planned to be
    omitted = Progress()
    omitted.feed(RunEvent("planned", "prepare-data", count=1))
    omitted.feed(RunEvent("planned", "cell", count=3))
    omitted.feed(RunEvent("fanout", "prepare-data", count=1, children=("prepare-data(0:d)",)))
    omitted.feed(RunEvent("finished", "prepare-data(0:d)", "Failed"))
    omitted.feed(RunEvent("finished", "prepare-data", "Failed"))
    assert omitted.fraction() == 0.25
    omitted.feed(RunEvent("finished", "cell", "Omitted"))
    assert omitted.fraction() == 1.0 and omitted.line() == "datasets 1/1 · 1 failed · 0 steps running"


def test_steps_are_named_by_what_they_do_never_by_argo_ids():
    labels = {"prepare-data(0:30d53d4768f081ad)": "preparing sst2"}
    progress = Progress(label=labels.get)
    for node, template, shown in [
        ("prepare-data(0:30d53d4768f081ad)", "prepare-data", "preparing sst2"),
        ("build-checkpoint(1:214b9f8e5bc72e9d)", "build-checkpoint", "running build-checkpoint #2"),  # no plan
        ("onExit", "verdict", "running verdict"),  # the exit handler, by its template
    ]:
        progress.feed(RunEvent("started", node, template=template))
        assert progress.line() == shown
        progress.feed(RunEvent("finished", node, "Succeeded", template=template))


def test_a_step_waiting_for_another_run_names_it_and_how_to_run_beside_it():
    from bertology.argo.semaphores import Holder

    now, wall = [100.0], [5000.0]
    progress = Progress(clock=lambda: now[0], wall=lambda: wall[0],
                        label={"cell(0:c0).finetune": "finetune of clean · rte · seed 1"}.get)
    holder = Holder("reversed-layers-x7k2p", "finetune of pre-trained · sst2 · seed 1", 4242, 5000.0 - 962,
                    "/home/u/other-checkout", "file:///home/u/store")
    progress.feed(RunEvent("planned", "cell", count=12))
    progress.feed(RunEvent("waiting", "cell(0:c0).finetune", message="the GPU (bertology-semaphores/gpu)",
                           holders=(holder,)))
    now[0] += 65
    wall[0] += 65
    assert progress.line() == (
        "cells 0/12 · finetune of clean · rte · seed 1 waiting 1m05s for the GPU (bertology-semaphores/gpu), "
        "held 17m07s by reversed-layers-x7k2p (finetune of pre-trained · sst2 · seed 1, pid 4242, checkout "
        "/home/u/other-checkout, store file:///home/u/store) · to run beside it, set BERTOLOGY_SEMAPHORE_DIR to "
        "a directory of your own")
    assert "1m05s" not in progress.line(timed=False)  # a plain line is printed again only when more changed
    progress.feed(RunEvent("started", "cell(0:c0).finetune"))
    assert progress.line() == "cells 0/12 · finetune of clean · rte · seed 1"


def test_console_plain_lines_errors_and_verbosity():
    out, err = io.StringIO(), io.StringIO()
    console = Console(NORMAL, out=out, err=err, tty=False, interval_s=3600)
    console.log("[plan] planned 4 cells")  # the node log has it; not echoed by default
    console.event(RunEvent("started", "plan"))
    console.event(RunEvent("finished", "plan", "Failed", message="exit code 2"))
    console.close()
    assert "planned" not in out.getvalue()
    assert out.getvalue().splitlines()[-1] == "0 steps running"  # the last state, once; no count: no plan
    assert err.getvalue() == "plan: Failed (exit code 2)\n"
    quiet_out = io.StringIO()
    quiet = Console(QUIET, out=quiet_out, err=io.StringIO(), tty=False)
    quiet.event(RunEvent("started", "plan"))
    quiet.close()
    assert quiet_out.getvalue() == ""


def test_run_limits_default_to_the_environment_and_a_flag_wins(monkeypatch):
    """$BERTOLOGY_PARALLELISM and $BERTOLOGY_SEMAPHORES (a comma-separated list) stand in for --parallelism
    and --semaphore; a flag given wins; a bad value is refused naming the variable."""
    parser = cli.build_parser()

    def limits(*flags):
        return local_limits(parser.parse_args(["run", "w.yaml", *flags]))

    monkeypatch.delenv(PARALLELISM_ENV, raising=False)
    monkeypatch.delenv(SEMAPHORES_ENV, raising=False)
    assert limits() == (1, {})
    monkeypatch.setenv(PARALLELISM_ENV, "3")
    monkeypatch.setenv(SEMAPHORES_ENV, "bertology-semaphores/gpu=2, other/x=1")
    assert limits() == (3, {"bertology-semaphores/gpu": 2, "other/x": 1})
    assert limits("--parallelism", "1", "--semaphore", "bertology-semaphores/gpu=4") == (
        1, {"bertology-semaphores/gpu": 4})
    monkeypatch.setenv(PARALLELISM_ENV, "two")
    with pytest.raises(BadInput, match=r"\$BERTOLOGY_PARALLELISM='two'"):
        limits()
    monkeypatch.setenv(PARALLELISM_ENV, "2")
    monkeypatch.setenv(SEMAPHORES_ENV, "gpu=2")
    with pytest.raises(BadInput, match=r"\$BERTOLOGY_SEMAPHORES 'gpu=2': expected CONFIGMAP/KEY=N"):
        limits()


def test_progress_counts_each_fan_out_under_its_own_name_and_never_goes_backwards():
    now = [0.0]
    progress = Progress(clock=lambda: now[0])
    progress.feed(RunEvent("fanout", "prepare-data", count=3, children=tuple(f"prepare-data({i}:d{i})" for i in range(3))))
    progress.feed(RunEvent("fanout", "build-checkpoint", count=6,
                           children=tuple(f"build-checkpoint({i}:k{i})" for i in range(6))))
    seen = []
    for i in range(3):
        now[0] += 1.0
        progress.feed(RunEvent("finished", f"prepare-data({i}:d{i})", "Succeeded"))
        seen.append(progress.counts()[0])
    for i in range(2):
        progress.feed(RunEvent("finished", f"build-checkpoint({i}:k{i})", "Succeeded"))
    # no ETA from the datasets: the cells, most of the work, are not planned into nodes yet
    assert progress.line() == "datasets 3/3 · checkpoints 2/6 · 0 steps running"
    progress.feed(RunEvent("fanout", "cell", count=12, children=tuple(f"cell({i}:c{i})" for i in range(12))))
    seen.append(progress.counts()[0])
    assert progress.line() == "datasets 3/3 · checkpoints 2/6 · cells 0/12 · 0 steps running"
    now[0] += 10.0
    for i in range(2):
        progress.feed(RunEvent("finished", f"cell({i}:c{i})", "Succeeded"))
        seen.append(progress.counts()[0])
    # the ETA from the cells alone: 2 of 12 in the 10 s since they expanded point to 50 s more, the first
    # alone to 110 s; the ETA moves from 110 s to the edge of the new estimate's spread (50 s x 0.5 / sqrt 2)
    assert progress.line() == "datasets 3/3 · checkpoints 2/6 · cells 2/12 · 0 steps running · ETA 1m08s"
    assert seen == sorted(seen) and progress.counts() == (7, 21, 0)
    other = Progress()
    other.feed(RunEvent("fanout", "shard", count=2, children=("shard(0:a)", "shard(1:b)")))
    assert other.line() == "shard 0/2 · 0 steps running"  # a fan-out of no study: its task name


def test_console_names_steps_by_label_and_tells_retries():
    labels = {"cell(2:c2).finetune": "finetune of pre-trained · sst2 · seed 1"}
    out, err = io.StringIO(), io.StringIO()
    console = Console(NORMAL, out=out, err=err, tty=False, interval_s=3600, label=labels.get)
    console.event(RunEvent("fanout", "cell", count=3, children=("cell(0:c0)", "cell(1:c1)", "cell(2:c2)")))
    console.event(RunEvent("started", "cell(2:c2).finetune"))
    assert console.progress.line() == "cells 0/3 · finetune of pre-trained · sst2 · seed 1"
    console.event(RunEvent("retry", "cell(2:c2).finetune", "Failed", count=1, exit_code=137, max_attempts=3))
    console.event(RunEvent("started", "cell(2:c2).finetune"))
    console.event(RunEvent("finished", "cell(2:c2).finetune", "Failed", message="exit code 1", exit_code=1))
    console.event(RunEvent("started", "cell(0:c0).finetune"))  # no label: its node name
    console.event(RunEvent("finished", "cell(0:c0).finetune", "Error", message="OOMKilled", exit_code=137))
    console.close()
    assert err.getvalue().splitlines() == [
        ("finetune of pre-trained · sst2 · seed 1 (cell(2:c2).finetune): attempt 1 of 3 Failed (exit code 137); "
         "retrying"),
        "finetune of pre-trained · sst2 · seed 1 (cell(2:c2).finetune): Failed (exit code 1)",
        "cell(0:c0).finetune: Error (OOMKilled)",
    ]


def test_the_progress_line_names_the_steps_running_longest_first_and_counts_the_rest():
    labels = {"prepare-data(0:d0)": "preparing sst2", "build-checkpoint(0:k0)": "building reversed",
              "build-checkpoint(1:k1)": "building pre-trained"}
    now = [0.0]
    progress = Progress(clock=lambda: now[0], label=labels.get)
    for node in ("build-checkpoint(0:k0)", "prepare-data(0:d0)"):
        now[0] += 1.0
        progress.feed(RunEvent("started", node))
    assert progress.line() == "building reversed, preparing sst2"
    progress.feed(RunEvent("started", "build-checkpoint(1:k1)"))
    progress.feed(RunEvent("started", "cell(0:c0).finetune"))
    assert progress.line() == "building reversed, preparing sst2 and 2 more steps"
    progress.feed(RunEvent("finished", "build-checkpoint(0:k0)", "Succeeded"))
    assert progress.line() == "preparing sst2, building pre-trained and 1 more step"


def test_plain_lines_print_only_what_changed():
    out = io.StringIO()
    console = Console(NORMAL, out=out, err=io.StringIO(), tty=False, interval_s=3600)
    console.event(RunEvent("fanout", "cell", count=2, children=("cell(0:a)", "cell(1:b)")))
    console.event(RunEvent("started", "cell(0:a).finetune"))
    console.event(RunEvent("finished", "cell(0:a).finetune", "Succeeded"))
    console._print_if_changed()
    console._print_if_changed()
    console.event(RunEvent("finished", "cell(0:a)", "Succeeded"))
    console.close()
    lines = [line.split(" · ETA")[0] for line in out.getvalue().splitlines()]  # the ETA runs on a real clock
    assert lines == ["cells 0/2 · 0 steps running", "cells 1/2 · 0 steps running"]


def test_a_study_on_a_terminal_fills_one_bar_names_its_steps_and_counts_its_eta_down(tmp_path, subprocess_env):
    """A tiny study run at a terminal (a pseudo-terminal), read redraw by redraw: the bar appears once the plan
    is known and only ever fills (it used to fall from full at `checkpoints 3/3` to a third at `cells 0/3`);
    no redraw shows an Argo node id (`prepare-data(0:30d53d…)`), the exit handler's `onExit`, a count before
    the plan (`cells 0/?`) or an empty one (`0/0`); each step is named by what it does; the ETA never rises
    while the same cells are done (it used to grow while a step ran and fall back when it ended)."""
    import re

    from terminal import Terminal

    # one step at a time: each is drawn alone, by its name, at least once
    run = Terminal([sys.executable, "-m", "bertology.cli", "run", "workflows/reversed-layers.yaml", "-p", "preset=tiny",
                    "-p", 'tasks=["rte"]', "-p", "seeds=[1]", "--store", str(tmp_path / "store"), "--parallelism", "1"],
                   REPO, subprocess_env)
    try:
        assert run.wait(600) == 0, run.text[-3000:]
    finally:
        run.close()
    screens = run.screens()
    drawn = screens[1:screens.index("workflow reversed-layers.yaml: Succeeded")]  # the progress, redraw by redraw
    bars = run.bars()
    percentages = [percent for _, percent in bars]
    assert percentages == sorted(percentages) and percentages[-1] == 100, percentages
    assert not any(re.search(r"\(\d+:", s) or "onExit" in s or "0/0" in s or "/?" in s for s in drawn), drawn
    for step in ("running plan", "preparing rte", "building pre-trained", "building reversed", "building clean",
                 "finetune of reversed · rte · seed 1", "running aggregate", "running verdict"):
        assert any(step in s for s in drawn), (step, drawn)
    etas = [(s.split(" · ETA ")[0].split("cells ")[1].split(" ")[0], s.split(" · ETA ")[1].split(" ")[0])
            for s, _ in bars if " · ETA " in s]

    def seconds(text: str) -> int:
        minutes, _, rest = text.rpartition("m")
        return int(minutes or 0) * 60 + int(rest.rstrip("s"))

    for (cells, before), (same, after) in itertools.pairwise(etas):
        if cells == same:
            assert seconds(after) <= seconds(before), etas


# A study as `bertology run` sees one: a plan step whose outputs name the study and the pods' run ids, and a
# `cell` fan-out over them whose finetune fails (after a retry) for the run whose id is FAIL.
MINI_STUDY = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: mini-
spec:
  entrypoint: main
  arguments:
    parameters:
      - {name: study, value: s}
      - name: store
  templates:
    - name: main
      dag:
        tasks:
          - {name: plan, template: plan}
          - name: cell
            template: cell
            dependencies: [plan]
            withParam: "{{tasks.plan.outputs.parameters.runs}}"
            arguments: {parameters: [{name: ids, value: "{{item}}"}]}
    - name: plan
      container:
        image: example/plan:0.1
        command: [sh, -c]
        args:
          - |
            printf '%s' 'RUNS' > /tmp/outputs/runs; printf '%s' 'STUDY' > /tmp/outputs/study
      outputs:
        parameters:
          - {name: runs, valueFrom: {path: /tmp/outputs/runs}}
          - {name: study, valueFrom: {path: /tmp/outputs/study}}
    - name: cell
      inputs: {parameters: [{name: ids}]}
      dag:
        tasks:
          - {name: finetune, template: finetune, arguments: {parameters: [{name: ids, value: "{{inputs.parameters.ids}}"}]}}
    - name: finetune
      inputs: {parameters: [{name: ids}]}
      retryStrategy: {limit: 1}
      container:
        image: example/finetune:0.1
        command: [sh, -c, "case {{inputs.parameters.ids}} in FAIL*) echo 'error: no GPU left'; exit 1;; esac"]
"""


def test_a_study_run_labels_its_cells_counts_reuse_and_ends_saying_it_failed(echo_project, capsys):
    from bertology.steps.plan import plan_study
    from bertology.store import open_store
    from bertology.study import StudySpec

    store = echo_project / "store"
    spec, _ = StudySpec.from_params("s", {"tasks": '["rte", "cola"]', "intermediates": '["cola"]', "seeds": "[1]"})
    plan_study(open_store(str(store)), spec)
    cells = spec.cells()
    sequential = next(c for c in cells if c.run.after is not None)
    direct = next(c for c in cells if c.run.after is None and c.run.dataset.task == "rte")
    other = next(c for c in cells if c not in (sequential, direct))
    pods = [sequential.run.id, f"{direct.run.id},{other.run.id}"]  # 3 of the study's cells to run
    (echo_project / "study.yaml").write_text(
        MINI_STUDY.replace("RUNS", json.dumps(pods)).replace("STUDY", f"s:{spec.id}")
        .replace("FAIL", sequential.run.id))
    code = cli.main(["run", "study.yaml", "--templates", "templates", "--no-fork-server", "--store", str(store)])
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert f"cells: {len(cells)} in the study, {len(cells) - 3} reused from the store, 3 run" in out.splitlines()
    step = f"finetune of {sequential.variant} · rte · seed 1 · after cola (cell(0:{sequential.run.id}).finetune)"
    # the console's own lines (in one process, a logging handler an earlier in-process run left on a closed
    # stream may print Python's "--- Logging error ---" block before them)
    lines = [line for line in err.splitlines() if line.startswith((step, "study s failed"))]
    assert lines[0] == f"{step}: attempt 1 of 2 Failed (main: Error (exit code 1)); retrying"
    assert f"{step}: error: no GPU left" in lines
    workdir = out.split("step logs in ", 1)[1].split(")", 1)[0]
    assert lines[-1] == f"study s failed: {step}: error: no GPU left (step logs in {workdir})"
    # the pod of two runs is named by its first run's
    labels = __import__("bertology.cli.run", fromlist=["CellLabels"]).CellLabels(open_store(str(store)), "s")
    assert labels(f"cell(1:{direct.run.id},{other.run.id})") == f"{direct.variant} · rte · seed 1 +1 more"
    assert labels("plan") is None and labels("cell(9:0123456789abcdef)") is None  # no plan holds that run
