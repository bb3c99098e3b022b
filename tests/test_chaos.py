"""Whole-study kills heal: a tiny study SIGKILLed at named points, then rerun, equals a run never killed.

A baseline run, and beside it a chain of runs of the same study into a second store, each killed at the
next kill point (bertology.chaos: deterministic points in the step harness and Store.artifact, no timers),
and a last run that completes. Kill points cover plan, prepare-data, build-checkpoint, finetune,
evaluate, analyze and aggregate, and "between a step's files and its marker" (`published`). Single-step
kills (SIGKILL as an OOM kill, SIGTERM as an eviction) with the runner alive are retried by the YAML's
retryStrategy within the same run. Afterwards: every results row and study table equals the baseline's
(less the wall-clock columns in VOLATILE), every model and dataset file has the baseline's sha256, the
store holds exactly the baseline's keys (no staged or temporary object), and $TMPDIR holds no stage
directory of a killed run.

The runs fork their steps from the test process's shared server (conftest.shared_fork_server), which
outlives every killed runner: each step dies through its waiter, which watches the runner's connection.
tests/test_zygote.py kills a runner that started a server of its own, and tests/test_cli_signals.py
signals one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import process_alive

REPO = Path(__file__).resolve().parent.parent
# keep_weights: every step does its own work in its own pod (without it, finetune evaluates and analyzes in
# its pod and the evaluate and analyze pods only publish), so each step's kill points are reached
STUDY = ["workflows/reversed-layers.yaml", "-p", "preset=tiny", "-p", 'tasks=["rte"]', "-p", "seeds=[1]",
         "-p", "keep_weights=true"]

# Columns that hold wall-clock measurements, which differ between any two runs, killed or not.
VOLATILE = {
    "results/runs": ("train_seconds", "throughput"),  # fine-tuning seconds and examples per second
    "results/curves": ("seconds",),  # when each curve point was logged, from the start of training
    "results/model_profile": ("intervention_cpu_seconds", "inference_seconds", "examples_per_second"),
    # the study's speed table: mean / sd of examples per second, and their ratio to the baseline's
    "tables/model_profile": ("intervention_cpu_seconds", "inference_seconds", "mean", "sd", "speedup"),
}

# The chain: each run's BERTOLOGY_CHAOS entries (STEP:POINT[:HOW]); a run ends at its `tree` or `runner` kill.
CHAIN = [
    ["plan:end"],  # the plan is written; killed before the step exits
    ["prepare-data:staged"],
    ["prepare-data:published"],  # files published, no marker
    ["build-checkpoint:published:runner"],  # only the runner's group: the step must die with it
    ["build-checkpoint:marked"],
    ["finetune:staged:kill", "finetune:published"],  # an OOM-killed finetune is retried, then the tree dies
    # an evicted evaluate is retried, then the tree dies; analyze runs beside evaluate (both depend on finetune
    # only), so either may reach its kill first: the entry runs until both have fired (two runs)
    ["evaluate:staged:term", "evaluate:published", "analyze:marked"],
    ["aggregate:start"],
    ["aggregate:end"],  # the study tables are written; killed before the step exits
]
LAST = ["aggregate:start:kill", "aggregate:end:term"]  # the run that completes: one step killed twice


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", BERTOLOGY_CACHE=str(tmp / "cache"), TMPDIR=str(tmp / "tmp"),
               OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
    env.pop("BERTOLOGY_CHAOS", None)
    (tmp / "tmp").mkdir(exist_ok=True)
    return env


def _start(store: Path, env: dict[str, str], chaos: list[str] = (), once: Path | None = None) -> subprocess.Popen:
    """`bertology run` of the study in a session of its own (its pid is its process group)."""
    env = dict(env)
    if chaos:
        env.update(BERTOLOGY_CHAOS=",".join(chaos), BERTOLOGY_CHAOS_ONCE=str(once))
    return subprocess.Popen([sys.executable, "-m", "bertology.cli", "run", *STUDY, "--store", str(store),
                             "--max-backoff", "0"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _finish(process: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        out, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(process.args, process.returncode, out, "")


def _run(store: Path, env: dict[str, str], chaos: list[str] = (), once: Path | None = None) -> subprocess.CompletedProcess:
    return _finish(_start(store, env, chaos, once))


def _snapshot(store: Path) -> dict:
    """Every key, the sorted rows of every Parquet table less VOLATILE, the sha256 of models and data."""
    keys = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    tables, hashes = {}, {}
    # a result's receipt is named by its bytes, whose timing columns differ from run to run
    keys = [re.sub(r"^(results/_receipts/.*)/\d+\.[0-9a-f]{64}$", r"\1/SIZE.SHA256", k) for k in keys]
    for key in keys:
        path = store / key
        if key.startswith(("results/", "studies/")) and key.endswith(".parquet"):
            frame = pl.read_parquet(path)
            drop = [c for where, cols in VOLATILE.items() if where in key for c in cols]
            frame = frame.drop(drop)
            tables[key] = frame.sort(frame.columns).to_dicts()
        elif key.endswith((".safetensors", ".parquet")) and key.startswith(("checkpoints/", "data/", "runs/")) \
                and "/evaluate/" not in key and not key.endswith("curves.parquet"):
            hashes[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"keys": keys, "tables": tables, "hashes": hashes}


def test_whole_study_kills_heal_to_the_baseline(tmp_path):
    env, store, once = _env(tmp_path), tmp_path / "store", tmp_path / "once"
    once.mkdir()
    started = time.monotonic()
    # the baseline runs beside the chain (a second core), in a directory of its own
    (tmp_path / "baseline").mkdir()
    base_run = _start(tmp_path / "baseline" / "store", _env(tmp_path / "baseline"))
    try:
        for chaos in CHAIN:
            kills = sum(1 for c in chaos if c.count(":") == 1 or c.endswith((":tree", ":runner")))
            for _ in range(kills):  # a run ends at the first kill of the tree or the runner it reaches
                killed = _run(store, env, chaos, once)
                fired = {p.name: int(p.read_text() or 0) for p in once.iterdir()}
                if all(c in fired for c in chaos):
                    break
            assert all(c in fired for c in chaos), (chaos, sorted(fired), killed.stdout[-2000:])
            assert killed.returncode == -signal.SIGKILL, (chaos, killed.returncode, killed.stdout[-2000:])
            # the killer, and with it every step, is gone at once: nothing lives on to publish later
            unfinished = [d for d in store.glob("*/*") if d.is_dir() and not (d / "_SUCCESS.json").exists()]
            time.sleep(1.0)
            assert not process_alive(fired[chaos[-1]]), f"{chaos[-1]}: the step outlived its runner"
            if chaos[-1].endswith(":runner"):
                assert unfinished, "the runner died between a checkpoint's files and its marker"
                time.sleep(3.0)
                assert not any((d / "_SUCCESS.json").exists() for d in unfinished), "a step published after its runner died"
        done = _run(store, env, LAST, once)
        assert done.returncode == 0, done.stdout[-3000:]
        assert all(c in {p.name for p in once.iterdir()} for c in LAST)
        workdir = Path(done.stdout.split("step logs in ", 1)[1].split(")", 1)[0])
        aggregate = json.loads((workdir / "status.json").read_text())["nodes"]["aggregate"]
        assert aggregate["attempts"] == 3, aggregate  # SIGKILL (137), then SIGTERM (75), each retried
    except BaseException:  # a failure above must not leave the baseline running (its steps die with it)
        os.killpg(base_run.pid, signal.SIGKILL)
        base_run.wait()
        raise
    base_done = _finish(base_run)
    assert base_done.returncode == 0, base_done.stdout[-3000:]
    baseline, healed = _snapshot(tmp_path / "baseline" / "store"), _snapshot(store)
    assert healed["keys"] == baseline["keys"]  # no staged, temporary or unfinished object anywhere
    assert healed["hashes"] == baseline["hashes"]  # every model and dataset, byte for byte
    assert healed["tables"].keys() == baseline["tables"].keys()
    for key, rows in baseline["tables"].items():
        assert healed["tables"][key] == rows, key
    left = sorted(p.name for p in (tmp_path / "tmp").glob("bertology-*") if not p.name.startswith("bertology-run-"))
    assert not left, left  # stage and fork-server directories of killed runs were swept
    print(f"{len(CHAIN)} whole-tree kills + {sum(':kill' in c or ':term' in c for r in CHAIN + [LAST] for c in r)} "
          f"single-step kills healed in {time.monotonic() - started:.0f}s")


# -- the runner's own behaviour, with host steps (sh): seconds, no model ------------------------------------

WORKFLOW = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: chaos-
spec:
  entrypoint: main
  arguments:
    parameters:
      - name: store
  templates:
    - name: main
      dag:
        tasks:
          - {name: step, template: step}
    - name: step
      retryStrategy:
        limit: "1"
        retryPolicy: Always
        expression: asInt(lastRetry.exitCode) == 75 || asInt(lastRetry.exitCode) == 137
      container:
        image: example/sh:0.1
        command: [sh, -c, %s]
"""


def _host_run(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    (tmp_path / "jobs").mkdir(exist_ok=True)
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "wf.yaml").write_text(WORKFLOW % json.dumps(script))
    process = subprocess.Popen([sys.executable, "-m", "bertology.cli", "run", "wf.yaml", "--templates", "templates",
                                "--store", "store", "--max-backoff", "0"], cwd=tmp_path, env=_env(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_a_host_step_dies_with_its_runner(tmp_path):
    # the step kills its runner's process group (not its own: steps lead their own groups, as pods), then
    # would write `late` 2 s on; it must die with the runner instead (PR_SET_PDEATHSIG)
    # with the step's own child (a pod's whole sandbox goes: the Reaper kills the step's group)
    done = _host_run(tmp_path, "sleep 30 & echo $! > child; echo $$ > pid; "
                               "kill -KILL -$(cut -d' ' -f5 /proc/$PPID/stat); sleep 2; touch late")
    assert done.returncode == -signal.SIGKILL, done
    step, child = (int((tmp_path / name).read_text()) for name in ("pid", "child"))
    deadline = time.monotonic() + 1.5  # the kernel delivers the death signal at once; a loaded machine schedules late
    while (process_alive(step) or process_alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(step), "the step outlived its runner"
    assert not process_alive(child), "the step's child outlived the runner"
    time.sleep(2.5)
    assert not (tmp_path / "late").exists(), "the step went on after its runner died"


def test_a_transient_failure_exits_75_and_says_why(tmp_path):
    done = _host_run(tmp_path, "echo working; echo 'transient error (will be retried): S3 unreachable for "
                               "s3://b/k: timed out' >&2; exit 75")
    assert done.returncode == 75, done
    cause = ("step: main: Error (exit code 75); No more retries left (2 attempts): transient error: S3 unreachable for "
             "s3://b/k: timed out")
    *_, step_line, last = done.stderr.strip().splitlines()
    assert step_line == cause, done.stderr
    assert last.startswith(f"workflow wf.yaml failed: {cause} (step logs in "), done.stderr  # a failed run ends saying so


@pytest.mark.parametrize("sig", ["KILL", "TERM"])
def test_a_signalled_host_step_is_retried(tmp_path, sig):
    # cmd/argoexec/commands/emissary.go exitCodeFromErr: a signalled process is 137, which the YAML retries
    done = _host_run(tmp_path, f"[ -e once ] || {{ touch once; kill -{sig} $$; }}; echo second attempt")
    assert done.returncode == 0, done
    assert "workflow wf.yaml: Succeeded" in done.stdout
