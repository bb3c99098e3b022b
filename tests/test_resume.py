"""The finetune job survives SIGKILL: started again it resumes from the store and ends bit for bit where an
uninterrupted run ends. Also: corrupt or unfinished states are skipped with a log line, a finished run is
never resumed, and `--spec` takes a bundle (a list of cells) run in one process.

The runs are real `python -m jobs.finetune` processes on the tiny BERT, forked from the test process's
warm fork server (conftest.ForkedStep), one thread each, so every run executes the same kernels in the
same order (CPU results are deterministic for a fixed thread count).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import ForkedStep
from safetensors.torch import load_file

from bertology.errors import EXIT_BAD_INPUT
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec, canonical_json
from bertology.steps import build_checkpoint, finetune, prepare_data
from bertology.steps.harness import main
from bertology.store import LocalStore

REPO = Path(__file__).resolve().parent.parent
# one worker of `make test` (pytest-xdist, --dist loadgroup) runs them all: the module's runs are made once
pytestmark = pytest.mark.xdist_group("test_resume")
# 512 examples, batch 8, 2 epochs: 64 steps an epoch, a state every 8 steps.
RUN = RunSpec(CheckpointSpec("tiny:bert"), DatasetSpec("sst2", "synthetic", "tiny:bert", 32, count=512),
              Regime(lr=1e-3, batch_size=8, epochs=2, checkpoint_every=8), seed=5)
CELL = Cell("resume", "pre-trained", "tiny:bert", RUN, keep_weights=True)  # the weights are compared bit for bit
STEPS_PER_EPOCH, TOTAL = 64, 128
FINETUNE = f"runs/{RUN.id}/finetune"
STATE = f"runs/{RUN.id}/finetune-state"


@pytest.fixture(scope="module")
def base_store(tmp_path_factory):
    """Prepared data and the built checkpoint, copied into a fresh store by each run."""
    store = LocalStore(tmp_path_factory.mktemp("base"))
    prepare_data.prepare(store, RUN.dataset)
    build_checkpoint.build(store, RUN.checkpoint)
    return store.root


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                BERTOLOGY_CACHE=str(tmp_path_factory.mktemp("cache")))


def fresh_store(base_store, path) -> Path:
    shutil.copytree(base_store, path)
    return path


def job(store: Path, env, spec=CELL) -> ForkedStep:
    return ForkedStep("jobs.finetune", ["--store", str(store), "--spec", canonical_json(spec)], env)


def finish(store: Path, env, spec=CELL) -> str:
    done = job(store, env, spec)
    assert done.wait(timeout=600) == 0, done.output[-6000:]
    return done.output


def kill_when(proc: ForkedStep, ready) -> ForkedStep:
    """SIGKILL `proc` as soon as `ready()` holds (within 300 s, and before the job ends by itself)."""
    try:
        deadline = time.time() + 300
        while not ready():
            assert proc.poll() is None, f"the job ended (exit {proc.returncode}) before it could be killed"
            assert time.time() < deadline, "not ready to be killed after 300 s"
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return proc


def state_steps(store: Path) -> dict[str, int]:
    """The finished slots' steps."""
    steps = {}
    for slot in ("a", "b"):
        try:  # the running job may be replacing this slot right now: then it is not finished
            steps[slot] = json.loads((store / STATE / slot / "_SUCCESS.json").read_text())["step"]
        except FileNotFoundError:
            pass
    return steps


def outcome(store: Path) -> tuple[dict, list[dict], dict]:
    """result.json without timings, the curves without wall seconds, the best weights."""
    result = json.loads((store / FINETUNE / "result.json").read_text())
    result = {k: v for k, v in result.items() if k not in ("wall_seconds", "throughput")}
    import pyarrow.parquet as pq

    curves = pq.read_table(store / FINETUNE / "curves.parquet").drop(["seconds"]).to_pylist()
    return result, curves, load_file(store / FINETUNE / "model" / "model.safetensors")


def assert_same_outcome(store: Path, reference: Path) -> None:
    (result, curves, weights), (ref_result, ref_curves, ref_weights) = outcome(store), outcome(reference)
    assert result == ref_result and curves == ref_curves
    assert weights.keys() == ref_weights.keys()
    assert all(weights[k].equal(ref_weights[k]) for k in weights), "best weights differ"


@pytest.fixture(scope="module")
def reference(base_store, env, tmp_path_factory):
    """The uninterrupted run (no resume states at all: they must not perturb the result either)."""
    store = fresh_store(base_store, tmp_path_factory.mktemp("ref") / "store")
    plain = Cell(CELL.study, CELL.variant, CELL.model,
                 RunSpec(RUN.checkpoint, RUN.dataset, Regime(lr=1e-3, batch_size=8, epochs=2, checkpoint_every=0),
                         RUN.seed), keep_weights=True)
    assert plain.run.id == RUN.id  # how often states are saved is not part of what a run is
    out = finish(store, env, plain)
    assert "resum" not in out and not (store / STATE).exists()
    return store


@pytest.fixture(scope="module")
def killed(base_store, env, tmp_path_factory):
    """A store whose run was SIGKILLed in epoch 2, after a state past epoch 1's evaluation was saved."""
    store = fresh_store(base_store, tmp_path_factory.mktemp("killed") / "store")
    kill_when(job(store, env), lambda: max(state_steps(store).values(), default=0) > STEPS_PER_EPOCH + 8)
    assert not (store / FINETUNE / "_SUCCESS.json").exists()
    return store


def test_a_sigkilled_run_resumes_and_ends_bit_for_bit_like_an_uninterrupted_one(killed, reference, env,
                                                                                   tmp_path):
    store = fresh_store(killed, tmp_path / "store")
    newest = max(state_steps(store).values())
    assert STEPS_PER_EPOCH < newest < TOTAL
    out = finish(store, env)
    assert f"resuming at step {newest}/{TOTAL}" in out
    assert_same_outcome(store, reference)
    assert not (store / STATE).exists()  # deleted once the run is published

    # A finished run is never resumed, even if a state is still there (killed before deleting it).
    shutil.copytree(killed / STATE, store / STATE)
    marker = (store / FINETUNE / "_SUCCESS.json").stat().st_mtime_ns
    again = finish(store, env)
    assert "finetune cached" in again and "resum" not in again
    assert (store / FINETUNE / "_SUCCESS.json").stat().st_mtime_ns == marker
    assert not (store / STATE).exists()


def test_an_unreadable_newest_state_falls_back_to_the_other_slot(killed, reference, env, tmp_path):
    store = fresh_store(killed, tmp_path / "store")
    steps = state_steps(store)
    newest, older = sorted(steps, key=steps.get, reverse=True)
    (store / STATE / newest / "state.pt").write_bytes(b"not a torch file")
    out = finish(store, env)
    assert f"(step {steps[newest]}) is unreadable" in out and "ignored" in out
    assert f"resuming at step {steps[older]}/{TOTAL}" in out
    assert_same_outcome(store, reference)


def test_unfinished_and_corrupt_states_are_ignored_and_the_run_starts_over(killed, reference, env, tmp_path):
    store = fresh_store(killed, tmp_path / "store")
    steps = state_steps(store)
    newest, older = sorted(steps, key=steps.get, reverse=True)
    (store / STATE / newest / "_SUCCESS.json").unlink()  # killed mid-publish: files but no marker
    state = store / STATE / older / "state.pt"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # truncated
    out = finish(store, env)
    assert f"{newest} is unfinished; ignored" in out
    assert f"(step {steps[older]}) is unreadable" in out
    assert "resuming" not in out
    assert_same_outcome(store, reference)


def test_a_bundle_killed_in_its_second_run_heals_to_each_runs_own_result(base_store, env, tmp_path):
    """One process trains a bundle's runs in turn on one kept model, optimizer and step (bertology.train.engine).
    SIGKILLed in the second run, the bundle run again skips the first (cached), resumes the second, trains the
    third on the second's engine, and every run ends bit for bit as it does alone in a process of its own."""
    short = Regime(lr=1e-3, batch_size=16, epochs=1, checkpoint_every=4)  # 32 steps, a state every 4
    cells = [Cell("bundle", "pre-trained", "tiny:bert", RunSpec(RUN.checkpoint, RUN.dataset, short, seed),
                  keep_weights=True) for seed in (11, 12, 13)]
    alone = fresh_store(base_store, tmp_path / "alone")
    for cell in cells:
        finish(alone, env, cell)
    store = fresh_store(base_store, tmp_path / "store")
    second = store / f"runs/{cells[1].run.id}/finetune-state"
    proc = kill_when(job(store, env, cells),
                     lambda: any((second / slot / "_SUCCESS.json").exists() for slot in ("a", "b")))
    assert "reusing the previous run's model and optimizer" in proc.output  # the second run, on the first's
    out = finish(store, env, cells)
    assert "finetune cached" in out and "resuming at step" in out
    assert out.count("reusing the previous run's model and optimizer") == 1  # the third, on the second's
    for cell in cells:
        run = f"runs/{cell.run.id}/finetune"
        a, b = load_file(store / run / "model" / "model.safetensors"), load_file(alone / run / "model" / "model.safetensors")
        assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a), cell.run.seed
        import pyarrow.parquet as pq

        assert (pq.read_table(store / run / "curves.parquet").drop(["seconds"]).to_pylist()
                == pq.read_table(alone / run / "curves.parquet").drop(["seconds"]).to_pylist())


def test_a_bundle_runs_every_cell_in_one_process_and_each_is_cached(base_store, tmp_path, capsys):
    store = fresh_store(base_store, tmp_path / "store")
    short = Regime(lr=1e-3, batch_size=16, epochs=1)
    cells = [Cell("bundle", "pre-trained", "tiny:bert", RunSpec(RUN.checkpoint, RUN.dataset, short, seed))
             for seed in (1, 2)]
    argv = ["--store", str(store), "--spec", canonical_json(cells)]
    assert main("finetune", finetune.run, argv) == 0
    out = capsys.readouterr().out
    assert "bundle: cell 1 of 2" in out and "bundle: cell 2 of 2" in out
    for cell in cells:
        assert (store / f"runs/{cell.run.id}/finetune/_SUCCESS.json").exists()
    assert main("finetune", finetune.run, argv) == 0
    assert capsys.readouterr().out.count("finetune cached") == 2


@pytest.mark.parametrize("spec, message", [
    ("[]", "empty list"),
    (json.dumps([CELL.to_dict(), {"study": "x"}]), "cell spec is missing 'variant'"),
])
def test_a_bad_bundle_is_exit_2_before_anything_runs(spec, message, tmp_path, capsys):
    assert main("finetune", finetune.run, ["--store", str(tmp_path), "--spec", spec]) == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_execution_settings_are_not_part_of_a_run_id_and_old_ids_still_hold():
    import dataclasses

    from bertology.spec import content_id

    base = RunSpec(RUN.checkpoint, RUN.dataset, Regime(lr=1e-3), seed=5)
    # The id as computed before the execution settings (checkpoint_every, log_every, compile) and the regime
    # schedule existed.
    assert set(Regime.EXECUTION) == {"checkpoint_every", "log_every", "compile", "cuda_graph", "tracker"}
    old_payload = {**base.to_dict(), "regime": {f.name: getattr(base.regime, f.name)
                                                for f in dataclasses.fields(Regime)
                                                if f.name not in (*Regime.EXECUTION, *Regime.SCHEDULE)}}
    assert base.id == content_id("run", old_payload)
    assert "checkpoint_every" not in base.to_dict()["regime"] and "compile" not in base.to_dict()["regime"]
    tuned = RunSpec(RUN.checkpoint, RUN.dataset, Regime(lr=1e-3, checkpoint_every=50, compile=True,
                                                        cuda_graph=False), seed=5)
    assert tuned.id == base.id
    assert tuned.to_dict()["regime"]["checkpoint_every"] == 50 and tuned.to_dict()["regime"]["compile"] is True
    assert tuned.to_dict()["regime"]["cuda_graph"] is False and "cuda_graph" not in base.to_dict()["regime"]
    assert RunSpec.from_dict(tuned.to_dict()) == tuned  # the job still gets them
    with pytest.raises(Exception, match="compile must be true or false"):
        Regime.from_dict({"compile": "yes"})
    with pytest.raises(Exception, match="checkpoint_every must be >= 0"):
        Regime.from_dict({"checkpoint_every": -1})


def test_store_slots_alternate_so_the_previous_state_survives_a_failed_save(tmp_path):
    import torch

    from bertology.train.state import StoreSlots

    store, lines = LocalStore(tmp_path), []
    slots = StoreSlots(store, "runs/r/finetune-state", log=lines.append)
    for step in (1, 2, 3):
        slots.save({"step": step, "epoch": 1, "w": torch.full((2,), float(step))})
    slots.flush()
    assert {s: store.marker(f"runs/r/finetune-state/{s}")["step"] for s in ("a", "b")} == {"a": 3, "b": 2}
    again = StoreSlots(store, "runs/r/finetune-state", log=lines.append)
    assert again.load()["w"].tolist() == [3.0, 3.0]
    # The next save goes to the other slot; a kill mid-publish leaves it without its marker.
    again.save({"step": 4, "epoch": 1, "w": torch.zeros(2)})
    again.flush()
    (tmp_path / "runs/r/finetune-state/b/_SUCCESS.json").unlink()
    assert StoreSlots(store, "runs/r/finetune-state", log=lines.append).load()["step"] == 3
    assert any("finetune-state/b is unfinished; ignored" in line for line in lines)
    again.clear()
    assert not (tmp_path / "runs/r/finetune-state").exists()
