"""Optional experiment tracking (bertology.tracking): one tiny fine-tune per tracker, through the real finetune
step, with each library in its own offline mode (MLflow's file store, W&B offline, TensorBoard event files);
what each tracker holds is read back with the library's own reader and must equal the results Parquet's
`curves` rows. A tracker is an execution setting: never part of a run id. (That `--tracker` reaches the
plan through the workflow YAML is checked by tests/test_cli_contract.py's dry run, to run plan once.)"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from bertology import tracking
from bertology.errors import BadInput
from bertology.results import scan
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec
from bertology.steps import build_checkpoint, finetune, prepare_data
from bertology.study import StudySpec

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]
# 40 rows / batch 8 = 5 steps an epoch, 2 epochs; a loss point every 2 steps, an evaluation every 4 and at
# each epoch's end (and one before the first step)
REGIME = {"lr": 1e-3, "batch_size": 8, "epochs": 2, "log_every": 2, "eval_every": 4}


def _cell(tracker: str) -> Cell:
    dataset = DatasetSpec("sst2", "synthetic", "tiny:bert", max_length=24, count=40, eval_count=16)
    return Cell("tracked", "pre-trained", "tiny:bert",
                RunSpec(CheckpointSpec("tiny:bert"), dataset, Regime(**REGIME, tracker=tracker), seed=3))


def _finetune(tmp_path: Path, tracker: str) -> tuple[Cell, dict[str, list[tuple[int, float]]]]:
    """Fine-tune one tracked cell; the results Parquet's curves as metric -> [(step, value)]."""
    from bertology.store import LocalStore

    store = LocalStore(tmp_path / "store")
    cell = _cell(tracker)
    prepare_data.prepare(store, cell.run.dataset)
    build_checkpoint.build(store, cell.run.checkpoint)
    finetune.finetune(store, cell)
    curves = scan(str(store.root), "curves", study="tracked").collect().sort("step")
    expected: dict[str, list[tuple[int, float]]] = {}
    for row in curves.iter_rows(named=True):
        expected.setdefault(f"{row['split']}/{row['metric']}", []).append((row["step"], row["value"]))
    assert set(expected) >= {"train/loss", "validation/accuracy"} and len(expected["train/loss"]) == 5
    assert [s for s, _ in expected["validation/accuracy"]] == [0, 4, 5, 8, 10]
    return cell, expected


def _close(got: dict, expected: dict, rel: float = 1e-9) -> None:
    assert set(got) >= set(expected)
    for key, points in expected.items():
        assert [s for s, _ in got[key]] == [s for s, _ in points], key
        assert [v for _, v in got[key]] == pytest.approx([v for _, v in points], rel=rel), key


def test_mlflow_file_store_holds_the_curves(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3: the file store is opt-in
    cell, expected = _finetune(tmp_path, "mlflow")

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tracked")  # the study's name
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["bertology.run_id"] == cell.run.id and run.data.tags["bertology.variant"] == "pre-trained"
    assert run.data.params["spec.regime.lr"] == "0.001" and "spec.regime.tracker" not in run.data.params
    got = {key: [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key),
                                                    key=lambda m: m.step)] for key in expected}
    _close(got, expected)


def _wandb_records(path: Path):
    """The records of a W&B offline run file (`run-ID.wandb`): LevelDB's log format (32 KiB blocks of
    chunks: crc32c, length, type FULL/FIRST/MIDDLE/LAST) after a 7-byte W&B header; each record a protobuf."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_run_holds_the_curves(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    import json

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cell, expected = _finetune(tmp_path, "wandb")

    (run_file,) = (tmp_path / "wandb-dir").glob("wandb/offline-run-*/run-*.wandb")
    got: dict[str, list[tuple[int, float]]] = {}
    config = {}
    for record in _wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            step = record.history.step.num
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    got.setdefault(key, []).append((step, json.loads(item.value_json)))
        elif kind == "run":  # the run's config comes with the run record
            config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
    assert config["run_id"] == cell.run.id and config["spec"]["regime"]["lr"] == 0.001
    _close(got, expected)


def test_tensorboard_event_files_hold_the_curves(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv(tracking.DIR_ENV, raising=False)
    cell, expected = _finetune(tmp_path, "tensorboard")

    # by default under the local store: tracking/tensorboard/<study>/<run id>
    events = EventAccumulator(str(tmp_path / "store" / "tracking" / "tensorboard" / "tracked" / cell.run.id))
    events.Reload()
    got = {key: [(e.step, e.value) for e in events.Scalars(key)] for key in events.Tags()["scalars"]}
    _close(got, expected, rel=1e-6)  # TensorBoard keeps float32


def test_a_tracker_is_outside_run_ids_and_reaches_every_cell():
    assert _cell("mlflow").run.id == _cell("").run.id == _cell("tensorboard").run.id
    assert "tracker" not in _cell("").run.to_dict()["regime"]
    assert _cell("wandb").run.to_dict()["regime"]["tracker"] == "wandb"  # what the plan hands finetune
    spec, _ = StudySpec.from_params("reversed-layers", {"preset": "tiny", "tracker": "tensorboard"})
    plain, _ = StudySpec.from_params("reversed-layers", {"preset": "tiny"})
    assert {c.run.regime.tracker for c in spec.cells()} == {"tensorboard"}
    assert [c.run.id for c in spec.cells()] == [c.run.id for c in plain.cells()]
    assert spec.id == plain.id  # one study, its tables and report, tracked or not
    with pytest.raises(BadInput, match=r"unknown tracker 'neptune' \(known: wandb, mlflow, tensorboard"):
        StudySpec.from_params("reversed-layers", {"tracker": "neptune"})


def test_a_missing_library_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BadInput) as e:
        tracking.check("mlflow")
    assert str(e.value) == "tracker 'mlflow' needs the mlflow package: pip install 'bertology[mlflow]'"


def test_run_tracker_flag_checks_the_tracker_before_anything_runs(tmp_path, subprocess_env):
    done = subprocess.run([sys.executable, "-m", "bertology.cli", "run", "workflows/reversed-layers.yaml",
                           "-p", "preset=tiny", "--tracker", "neptune", "--store", str(tmp_path / "store")],
                          cwd=REPO, env=subprocess_env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: unknown tracker 'neptune' (known: wandb, mlflow, tensorboard; empty: none)"]
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.parquet"))



def test_tensorboard_with_an_s3_store_copies_its_event_files_into_the_store(s3_bucket, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from bertology.store import open_store

    monkeypatch.delenv(tracking.DIR_ENV, raising=False)
    store = open_store(f"s3://{s3_bucket}/store")
    cell = _cell("tensorboard")
    tracker = tracking.start("tensorboard", store, cell)
    losses = [{"step": 2, "train_loss": 0.75, "lr": 1e-3}, {"step": 4, "train_loss": 0.5, "lr": 5e-4}]
    with tracking.running(tracker):
        tracker.update(losses[:1], [{"epoch": 1, "step": 0, "validation/accuracy": 0.25}])
        tracker.update(losses, [{"epoch": 1, "step": 0, "validation/accuracy": 0.25}])  # only the new point
    keys = store.list(f"tracking/tensorboard/tracked/{cell.run.id}")
    assert keys and all(k.rsplit("/", 1)[1].startswith("events.out.tfevents.") for k in keys)
    for key in keys:
        (tmp_path / key.rsplit("/", 1)[1]).write_bytes(store.read_bytes(key))
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(2, 0.75), (4, 0.5)]
    assert [(e.step, e.value) for e in events.Scalars("validation/accuracy")] == [(0, 0.25)]
