"""A step's container imports torch, transformers, datasets and scikit-learn only when it uses them.

Each pod is a fresh interpreter, and importing those libraries costs 5-8 s of CPU: a step that only
publishes stored results (evaluate and analyze of a run whose weights were not kept, every step of a
finished study run again) or only prints its help must not pay it (docs/development.md, "Heavy libraries
are imported where they are used"). The steps run here as real `python -m jobs.<step>` processes, exactly
as a pod runs them, each reporting the modules it holds when it exits (`PROBE`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from bertology.spec import Cell

REPO = Path(__file__).resolve().parent.parent
STEPS = sorted(p.stem for p in (REPO / "jobs").glob("*.py") if p.stem != "__init__")  # every step's entry
MODEL_LIBRARIES = {"torch", "transformers", "datasets", "sklearn"}
# Runs `python -m MODULE ARGS` as runpy would, then prints the model libraries it holds: at the harness's
# os._exit (a step that ran) or at SystemExit (--help, bad arguments).
PROBE = f"""
import json, os, runpy, sys
LIBRARIES = {sorted(MODEL_LIBRARIES)!r}
exit_now = os._exit
def report(code):
    held = sorted(name for name in LIBRARIES if name in sys.modules)
    print("\\nheld:" + json.dumps(held), flush=True)
    exit_now(code if isinstance(code, int) else 1)
os._exit = report
module, *sys.argv[1:] = sys.argv[1:]
sys.argv[0] = module
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as e:
    report(0 if e.code is None else e.code)
"""


def step(name: str, *args: str, env: dict) -> tuple[int, set[str], str]:
    """(exit code, the model libraries the step's process held at its end, its output)."""
    done = subprocess.run([sys.executable, "-c", PROBE, f"jobs.{name}", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout + done.stderr
    held = [line for line in done.stdout.splitlines() if line.startswith("held:")]
    assert held, out[-3000:]
    return done.returncode, set(json.loads(held[-1].removeprefix("held:"))), out


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return dict(os.environ, HF_HUB_OFFLINE="1", BERTOLOGY_CACHE=str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def finished(env, tmp_path_factory):
    """A finished tiny reversed-layers study of three cells (SST-2, one seed), weights not kept: its
    store, plan reference, run ids, dataset id and checkpoint ids."""
    store = tmp_path_factory.mktemp("finished") / "store"
    done = subprocess.run(
        [sys.executable, "-m", "bertology.cli", "run", "workflows/reversed-layers.yaml", "-p", "preset=tiny",
         "-p", 'tasks=["sst2"]', "-p", "seeds=[1]", "--store", str(store)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (plan_file,) = (store / "studies" / "reversed-layers").glob("*/plan.json")
    plan = json.loads(plan_file.read_text())
    runs = [Cell.from_dict(c).run.id for c in plan["cells"]]
    assert len(runs) == 3 and not any((store / "runs").rglob("*.safetensors"))  # evaluated in finetune's pod
    return store, f"reversed-layers:{plan['study_id']}", runs, list(plan["datasets"]), list(plan["checkpoints"])


@pytest.mark.parametrize("name", STEPS)
def test_every_step_prints_its_help_without_the_model_libraries(name, env):
    code, held, out = step(name, "--help", env=env)
    assert code == 0 and "usage: python -m jobs." in out
    assert held == set(), f"jobs.{name} --help imported {sorted(held)}"


def test_a_finished_study_publishes_again_without_the_model_libraries(finished, env):
    """Every step of the finished study run again, as its pods would be (the argv the workflow gives them):
    each finds its work stored, and evaluate and analyze publish their stored tables again (deleted here
    first, so they are really written), none importing a model library."""
    store, plan, runs, datasets, checkpoints = finished
    results = store / "results"
    published = {table: pl.read_parquet(results / table / "study=reversed-layers" / f"{runs[0]}.parquet")
                 for table in ("runs", "predictions", "model_profile", "weight_distance")}
    for table in published:
        (results / table / "study=reversed-layers" / f"{runs[0]}.parquet").unlink()
    common = ("--store", str(store), "--plan", plan)
    pods = [("prepare_data", "--ids", datasets[0]), ("build_checkpoint", "--ids", checkpoints[0]),
            ("finetune", "--ids", ",".join(runs)), ("evaluate", "--ids", ",".join(runs)),
            ("analyze", "--ids", ",".join(runs)), ("aggregate",)]
    for name, *ids in pods:
        code, held, out = step(name, *common, *ids, env=env)
        assert code == 0, out[-3000:]
        assert held == set(), f"jobs.{name} imported {sorted(held)} with nothing to compute"
        if name in ("finetune", "evaluate", "analyze"):
            assert out.count(f"{name} cached") == len(runs), out[-3000:]
    for table, frame in published.items():  # published again, the same rows
        again = pl.read_parquet(results / table / "study=reversed-layers" / f"{runs[0]}.parquet")
        assert again.equals(frame), table


def test_a_step_with_a_model_to_load_still_imports_torch_and_transformers(finished, env):
    """The probe's control: building a checkpoint the store lacks loads the tiny BERT."""
    store, *_ = finished
    spec = json.dumps({"model": "tiny:bert", "interventions": [{"name": "remove-layers", "params": {"layers": [0]}}]})
    code, held, out = step("build_checkpoint", "--store", str(store), "--spec", spec, env=env)
    assert code == 0, out[-3000:]
    assert {"torch", "transformers"} <= held and "checkpoint" in out


LOAD_A_CLASSIFIER = """
import sys
{before}
from transformers import AutoModelForSequenceClassification
{after}
AutoModelForSequenceClassification.from_pretrained(sys.argv[1], num_labels=2)
"""
QUIET = "from bertology.steps.harness import quiet_libraries; quiet_libraries()"


@pytest.mark.parametrize("before, after, quiet", [
    ("", "", False),  # the control: transformers reports the new classifier head's weights
    (QUIET + "; assert 'transformers' not in sys.modules", "", True),  # a step: set before the import
    ("", QUIET, True),  # the zygote imported transformers before the step's harness ran
], ids=["not quieted", "quieted before the import", "quieted after the import"])
def test_library_load_reports_stay_out_of_a_steps_log(finished, env, before, after, quiet):
    store, *_ = finished
    checkpoint = next((store / "checkpoints").glob("*/config.json")).parent
    clean_env = {k: v for k, v in env.items() if k not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    done = subprocess.run([sys.executable, "-c", LOAD_A_CLASSIFIER.format(before=before, after=after), str(checkpoint)],
                          cwd=REPO, env=clean_env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("MISSING" in done.stdout + done.stderr) is not quiet, done.stdout + done.stderr
