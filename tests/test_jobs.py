"""The job contract: `python -m jobs.<step> --store URI --spec JSON`, idempotent, exit codes 0 / 2 / 75."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertology.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT
from bertology.spec import CheckpointSpec, Intervention, canonical_json
from bertology.steps import build_checkpoint, prepare_data
from bertology.steps.harness import main

REPO = Path(__file__).resolve().parent.parent
REVERSED = CheckpointSpec("tiny:bert", (Intervention("reverse-layers"),))


def test_a_finished_step_returns_at_once_when_run_again(tmp_path, subprocess_env):
    argv = [sys.executable, "-m", "jobs.build_checkpoint", "--store", str(tmp_path), "--spec", canonical_json(REVERSED)]
    first = subprocess.run(argv, cwd=REPO, env=subprocess_env, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    marker = tmp_path / "checkpoints" / REVERSED.id / "_SUCCESS.json"
    written = marker.stat().st_mtime_ns
    second = subprocess.run(argv, cwd=REPO, env=subprocess_env, capture_output=True, text=True, check=False)
    assert second.returncode == 0 and f"checkpoint {REVERSED.id}: cached" in second.stdout
    assert marker.stat().st_mtime_ns == written  # nothing rewritten
    manifest = json.loads((marker.parent / "manifest.json").read_text())
    assert manifest["chain"][0]["name"] == "reverse-layers"


def _run(step_module, argv):
    return main(step_module.__name__.rsplit(".", 1)[1], step_module.run, argv)


@pytest.mark.parametrize("argv, message", [
    (["--spec", "{not json"], "--spec is not valid JSON"),
    (["--spec", json.dumps({"model": "tiny:bert", "interventions": [{"name": "fold"}]})],
     "intervention 'fold' is unknown"),
    (["--spec", json.dumps({"model": "./no/such/dir"})], "no/such/dir"),
    (["--spec", json.dumps({"model": "tiny:bert", "interventions": "x"})], "interventions must be a list"),
    (["--speck", "{}"], "unrecognized arguments: --speck"),
    ([], "build-checkpoint needs --spec JSON"),
])
def test_bad_input_is_exit_2_with_one_line_and_nothing_written(argv, message, tmp_path, capsys):
    code = _run(build_checkpoint, ["--store", str(tmp_path), *argv])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_BAD_INPUT
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert list(tmp_path.iterdir()) == []


def test_bad_dataset_source_is_exit_2(tmp_path, capsys):
    spec = {"task": "rte", "source": f"glue-dir:{tmp_path / 'nowhere'}", "tokenizer": "tiny:bert"}
    assert _run(prepare_data, ["--store", str(tmp_path / "store"), "--spec", json.dumps(spec)]) == EXIT_BAD_INPUT
    assert "nowhere" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_an_unreachable_store_is_transient_exit_75(monkeypatch, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    start = time.time()
    code = _run(build_checkpoint, ["--store", "s3://bucket/p", "--spec", canonical_json(REVERSED)])
    assert code == EXIT_TRANSIENT, capsys.readouterr().err
    assert "will be retried" in capsys.readouterr().err
    assert time.time() - start < 60


def test_sigterm_from_a_preempted_pod_is_transient_exit_75(tmp_path, capsys):
    import os
    import signal

    def preempted(store, args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
        raise AssertionError("SIGTERM did not stop the step")

    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert main("finetune", preempted, ["--store", str(tmp_path)]) == EXIT_TRANSIENT
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert "SIGTERM" in capsys.readouterr().err


def test_plan_refuses_a_regime_layer_beyond_the_depth_a_chain_leaves(tmp_path, capsys):
    from bertology.steps import plan

    variants = json.dumps([{"name": "half", "interventions": [{"name": "remove-layers", "params": {"layers": "last:2"}}]}])
    argv = ["--store", str(tmp_path), "--study", "s", "--outputs", str(tmp_path / "out"), "--param", "preset=tiny",
            "--param", f"variants={variants}", "--param", "regime=freeze", "--param", "train_layers=[3]"]
    assert main("plan", plan.run, argv) == EXIT_BAD_INPUT  # tiny:bert has 4 layers, 2 after the chain
    assert "layer indices in 0..1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
