"""Damaged artifacts are detected and rebuilt, never used; racing writers of one key; a full disk.

One cell of the tiny reversed-layers study (the reversed checkpoint, rte, seed 1) runs through the real
step functions into a store; copies of that store are then damaged in the ways seen in the field (an
emptied results Parquet; a truncated metrics, dataset, checkpoint or fine-tuned safetensors file; 4 KB
flipped inside a checkpoint; a truncated or deleted marker) and the run is redone. Every damage must be
named in one log line, the artifact rebuilt, and the results must equal the undamaged run's.
"""

from __future__ import annotations

import errno
import json
import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pytest
import yaml
from conftest import ForkedStep

from bertology.results.tables import results_key
from bertology.steps import analyze, build_checkpoint, evaluate, finetune, prepare_data
from bertology.steps.common import checkpoint_key, dataset_key, run_key
from bertology.steps.harness import main
from bertology.steps.plan import plan_study
from bertology.store import MARKER, Damaged, open_store
from bertology.store import base as store_base
from bertology.store import local as local_store
from bertology.study import StudySpec

REPO = Path(__file__).resolve().parent.parent
# results columns that are measurements of time or place, not of the model
TIMING = {"train_seconds", "throughput", "device", "seconds", "inference_seconds", "examples_per_second",
          "intervention_cpu_seconds"}


def tiny_spec(keep_weights: str = "true") -> StudySpec:
    """keep_weights: the fine-tuned safetensors stay in the store, so their damage can be tried too."""
    doc = yaml.safe_load((REPO / "workflows" / "reversed-layers.yaml").read_text())
    params = {p["name"]: str(p["value"]) for p in doc["spec"]["arguments"]["parameters"]}
    params.pop("study")
    params.update(preset="tiny", tasks='["rte"]', seeds="[1]", keep_weights=keep_weights)
    return StudySpec.from_params("reversed-layers", params)[0]


SPEC = tiny_spec()
CELL = next(c for c in SPEC.cells() if c.run.checkpoint.interventions)  # the reversed checkpoint


def run_cell(store, cell=CELL) -> None:
    """The cell's steps in workflow order, as their pods run them."""
    prepare_data.prepare(store, cell.run.dataset)
    build_checkpoint.build(store, cell.run.checkpoint)
    finetune.finetune(store, cell)
    evaluate.evaluate(store, cell)
    analyze.analyze(store, cell)


def results(store) -> dict[str, list]:
    """The cell's published rows, timing columns left out."""
    out = {}
    for table in ("runs", "curves", "weight_distance"):
        frame = pl.from_arrow(store.read_parquet(results_key(table, CELL.study, CELL.run.id)))
        out[table] = frame.drop([c for c in frame.columns if c in TIMING]).to_dicts()
    return out


def every_marker_verifies(store, root: Path) -> int:
    markers = [p.parent.relative_to(root) for p in root.rglob(MARKER)]
    store_base._VERIFIED.clear()
    for prefix in markers:
        assert "files" in store.verify(str(prefix)), prefix
    return len(markers)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("baseline") / "store"
    store = open_store(str(root))
    plan_study(store, SPEC)
    run_cell(store)
    return root, results(store)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_4k(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4096] = bytes(b ^ 0xFF for b in data[middle:middle + 4096])
    path.write_bytes(bytes(data))


# damage -> (file, how, the artifact whose rebuild is logged, artifacts the redone run no longer has)
RUN = run_key(CELL.run.id, "finetune")
DAMAGES = {
    "emptied results parquet": (results_key("runs", CELL.study, CELL.run.id), lambda p: p.write_bytes(b""),
                                "results/runs", []),
    "truncated metrics": (f"{run_key(CELL.run.id, 'evaluate')}/metrics.parquet", _truncate, "evaluate", []),
    "truncated dataset": (f"{dataset_key(CELL.run.dataset.id)}/train.parquet", _truncate, "data/",
                          [RUN, run_key(CELL.run.id, "evaluate"), run_key(CELL.run.id, "analyze")]),
    "truncated checkpoint": (f"{checkpoint_key(CELL.run.checkpoint.id)}/model.safetensors", _truncate,
                             "checkpoints/", [RUN, run_key(CELL.run.id, "evaluate"), run_key(CELL.run.id, "analyze")]),
    "4 KB flipped in checkpoint": (f"{checkpoint_key(CELL.run.checkpoint.id)}/model.safetensors", _flip_4k,
                                   "checkpoints/", [RUN, run_key(CELL.run.id, "evaluate"),
                                                    run_key(CELL.run.id, "analyze")]),
    "truncated fine-tuned safetensors": (f"{RUN}/model/model.safetensors", _truncate, "finetune",
                                         [run_key(CELL.run.id, "evaluate"), run_key(CELL.run.id, "analyze")]),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_artifact_is_named_rebuilt_and_never_used(damage, baseline, tmp_path, caplog):
    """A rerun reads the damaged file (artifacts downstream of it are gone, as for a run a new study adds),
    says so in one line, rebuilds it and ends with the undamaged run's results: a checkpoint with 4 KB
    flipped once trained a run whose embedding weight distance was 8.1e22."""
    root = tmp_path / "store"
    shutil.copytree(baseline[0], root)
    rel, how, named, redo = DAMAGES[damage]
    how(root / rel)
    for prefix in redo:
        shutil.rmtree(root / prefix)
    store = open_store(str(root))
    store_base._VERIFIED.clear()  # a new process
    caplog.set_level(logging.INFO, logger="bertology")
    plan_study(store, SPEC)
    run_cell(store)
    lines = [r.getMessage() for r in caplog.records if " is damaged (" in r.getMessage()]
    assert len(lines) == 1 and named in lines[0], lines
    assert results(store) == baseline[1]
    every_marker_verifies(store, root)


def test_damaged_metrics_of_a_run_whose_weights_were_not_kept_retrain_it(tmp_path, one_thread, caplog):
    """Without keep_weights the run is evaluated in the finetune pod and published without its weights: a
    damaged evaluate artifact is then made again by training the run again (deterministic), not refused."""
    spec = tiny_spec(keep_weights="false")
    cell = next(c for c in spec.cells() if c.run.checkpoint.interventions)
    root = tmp_path / "store"
    store = open_store(str(root))
    plan_study(store, spec)
    run_cell(store, cell)
    assert not list((root / run_key(cell.run.id, "finetune")).rglob("*.safetensors"))
    before = pl.from_arrow(store.read_parquet(results_key("runs", cell.study, cell.run.id)))
    _truncate(root / run_key(cell.run.id, "evaluate") / "metrics.parquet")
    store_base._VERIFIED.clear()  # a new process
    caplog.set_level(logging.INFO, logger="bertology")
    evaluate.evaluate(store, cell)
    assert "is damaged (" in caplog.text and "training it again" in caplog.text
    after = pl.from_arrow(store.read_parquet(results_key("runs", cell.study, cell.run.id)))
    assert after.drop([c for c in after.columns if c in TIMING]).equals(
        before.drop([c for c in before.columns if c in TIMING]))
    every_marker_verifies(store, root)


def test_a_verified_reader_refuses_each_damage(baseline, tmp_path):
    """Without the step's rebuild, the reader raises Damaged (exit 75) for each kind of damage."""
    for damage, (rel, how, _, _) in DAMAGES.items():
        if rel.startswith("results/"):
            continue
        root = tmp_path / damage.replace(" ", "-")
        shutil.copytree(baseline[0], root)
        how(root / rel)
        store = open_store(str(root))
        store_base._VERIFIED.clear()
        prefix = rel.rsplit("/model/", 1)[0] if "/model/" in rel else rel.rsplit("/", 1)[0]
        with pytest.raises(Damaged, match="the marker says"):
            store.local_dir(prefix)


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_damaged_or_deleted_marker_is_an_unfinished_artifact_and_rebuilt(damage, baseline, tmp_path, caplog):
    root = tmp_path / "store"
    shutil.copytree(baseline[0], root)
    key = checkpoint_key(CELL.run.checkpoint.id)
    marker = root / key / MARKER
    _truncate(marker) if damage == "truncated" else marker.unlink()
    store = open_store(str(root))
    assert not store.is_done(key)
    caplog.set_level(logging.INFO, logger="bertology")
    build_checkpoint.build(store, CELL.run.checkpoint)
    assert store.is_done(key) and "files" in store.verify(key)
    assert ("unreadable _SUCCESS.json" in caplog.text) == (damage == "truncated")
    assert "cached" not in caplog.text


def _racers(store, prefix: str, n: int, replace: bool = False) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def write(i: int) -> None:
        try:
            start.wait()
            with store.artifact(prefix, {"writer": i}, replace=replace) as out:
                (out / "model").mkdir()
                (out / "model" / "w.bin").write_bytes(bytes([i]) * (1 << 16))
                (out / "meta.json").write_text(json.dumps({"writer": i}))
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_racing_writers_of_one_artifact_leave_one_whole_verified_copy(kind, tmp_path, request):
    store = open_store(str(tmp_path / "root")) if kind == "file" else \
        open_store(f"s3://{request.getfixturevalue('s3_bucket')}/p")
    for round_ in range(3):
        prefix = f"art/{round_}"
        assert _racers(store, prefix, 6) == []
        marker = store.verify(prefix)  # every file matches the marker: no mix of two writers
        local = store.local_dir(prefix)
        writer = marker["writer"]
        assert json.loads((local / "meta.json").read_text()) == {"writer": writer}
        assert (local / "model" / "w.bin").read_bytes() == bytes([writer]) * (1 << 16)
    assert _racers(store, "slot", 4, replace=True) == []  # rewritten on purpose (resume slots): still whole
    store.verify("slot")
    if kind == "file":
        assert not [p for p in (tmp_path / "root").rglob(".*")], "no staging leftovers"
    else:
        assert not [k for k in store.list("") if k.startswith("_locks/")], "publish locks released"


def test_s3_publish_lock_is_a_conditional_put(s3_bucket):
    """The server refuses a second `If-None-Match: *` create (moto does, as AWS S3 and MinIO do)."""
    store = open_store(f"s3://{s3_bucket}/p")
    assert store._try_lock("x") and not store._try_lock("x")


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_two_processes_running_one_cell_into_one_store_equal_the_baseline(kind, baseline, tmp_path, request,
                                                                          subprocess_env):
    """Two writers of the same run into one store at once (two `bertology run` of a study, or two
    Workflows): both exit 0, the results equal a run alone, and every marker verifies."""
    if kind == "file":
        uri = str(tmp_path / "store")
    else:
        bucket = request.getfixturevalue("s3_bucket")
        subprocess_env.update(request.getfixturevalue("s3_server"))
        uri = f"s3://{bucket}/p"
    plan_study(open_store(uri), SPEC)
    env = {**subprocess_env, "OMP_NUM_THREADS": "1"}
    # two processes (forked from the warm fork server: `python -m test_integrity URI`, run_cell below)
    procs = [ForkedStep("test_integrity", [uri], env, cwd=REPO / "tests") for _ in range(2)]
    assert [p.wait(timeout=600) for p in procs] == [0, 0], procs[0].output[-2000:] + procs[1].output[-2000:]
    store = open_store(uri)
    assert results(store) == baseline[1]
    store_base._VERIFIED.clear()
    prefixes = sorted({k.rsplit("/", 1)[0] for k in store.list("") if k.endswith(MARKER)})
    assert len(prefixes) >= 5
    for prefix in prefixes:
        assert "files" in store.verify(prefix), prefix


def test_a_full_disk_exits_75_with_one_line_and_no_marker(tmp_path, monkeypatch, capsys):
    """ENOSPC while the step's artifact is written: exit 75 (retried), one line, nothing published."""
    def full(src, dest):
        raise OSError(errno.ENOSPC, "No space left on device", str(dest))

    monkeypatch.setattr(local_store, "copy_digest", full)  # where LocalStore publishes
    root = tmp_path / "store"
    spec = json.dumps(CELL.run.checkpoint.to_dict())
    assert main("build-checkpoint", build_checkpoint.run, ["--store", str(root), "--spec", spec]) == 75
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "disk full" in err[0] and "No space left" in err[0], err
    assert not list(root.rglob(MARKER)) and not [p for p in root.rglob(".*")]


def test_two_bertology_runs_of_one_study_into_one_store_at_once_equal_a_run_alone(tmp_path, subprocess_env):
    """The whole study, twice at once (two `bertology run` into one store), against the same study run
    alone: both exit 0, every results row equals the lone run's (timing columns aside), every marker
    verifies and nothing staged or half-published is left in the store."""
    args = ["run", "workflows/reversed-layers.yaml", "-q", "-p", "preset=tiny", "-p", 'tasks=["rte"]',
            "-p", "seeds=[1]"]
    env = {**subprocess_env, "OMP_NUM_THREADS": "1"}

    def start(store: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "bertology.cli", *args, "--store", str(store)], cwd=REPO,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    alone, shared = tmp_path / "alone", tmp_path / "shared"
    procs = [start(alone)]
    assert procs[0].wait(timeout=900) == 0, procs[0].stdout.read()[-3000:]
    procs = [start(shared), start(shared)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]

    def rows(root: Path) -> dict[str, list]:
        out = {}
        for path in sorted((root / "results").rglob("*.parquet")):
            frame = pl.read_parquet(path)
            out[str(path.relative_to(root))] = frame.drop([c for c in frame.columns if c in TIMING]).to_dicts()
        return out

    expected = rows(alone)
    assert expected and rows(shared) == expected
    store = open_store(str(shared))
    assert every_marker_verifies(store, shared) >= 10
    assert not [p for p in shared.rglob(".*") if p.name.endswith((".publishing", ".old"))]


if __name__ == "__main__":  # one writer of the two-processes test: python -m test_integrity STORE-URI
    run_cell(open_store(sys.argv[1]))
