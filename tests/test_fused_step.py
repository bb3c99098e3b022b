"""The finetune step on a pod of fused runs (`regime.fused`, the study parameter `fuse: K`): runs of one
architecture, dataset, regime and seed train as one model, K at a time; a variant of another architecture
trains alone through the same code; every run is published as a run of its own, and each ends as it does
trained alone (fused K = 1)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from safetensors.torch import load_file

from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Intervention, Regime, RunSpec, canonical_json
from bertology.steps import build_checkpoint, finetune, prepare_data
from bertology.steps.common import run_key
from bertology.steps.harness import main
from bertology.store import LocalStore

DATASET = DatasetSpec("sst2", "synthetic", "tiny:bert", 32, count=64)
FUSED = Regime(lr=1e-3, batch_size=16, epochs=1, checkpoint_every=2, fused=True)
CHECKPOINTS = {"pre-trained": CheckpointSpec("tiny:bert"),
               "clean": CheckpointSpec("tiny:bert", (Intervention("reinit", (("scope", "all"),)),), seed=1),
               "shuffled": CheckpointSpec("tiny:bert", (Intervention("reinit", (("scope", "all"),)),), seed=2),
               "shorter": CheckpointSpec("tiny:bert", (Intervention("remove-layers", (("layers", "last:1"),)),))}
CELLS = [Cell("fusion", variant, "tiny:bert", RunSpec(checkpoint, DATASET, FUSED, 7), keep_weights=True)
         for variant, checkpoint in CHECKPOINTS.items()]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    store = LocalStore(tmp_path_factory.mktemp("fused-base"))
    prepare_data.prepare(store, DATASET)
    for checkpoint in CHECKPOINTS.values():
        build_checkpoint.build(store, checkpoint)
    return store.root


def outcome(root, cell) -> tuple[list[dict], dict]:
    key = root / run_key(cell.run.id, "finetune")
    curves = pq.read_table(key / "curves.parquet").drop(["seconds"]).to_pylist()
    return curves, load_file(key / "model" / "model.safetensors")


def test_a_pod_of_fused_runs_trains_groups_of_k_and_each_run_ends_as_alone(base, tmp_path, capsys):
    import shutil

    together, alone = tmp_path / "together", tmp_path / "alone"
    shutil.copytree(base, together)
    shutil.copytree(base, alone)
    argv = ["--store", str(together), "--spec", canonical_json(CELLS), "--param", "fuse=2"]
    assert main("finetune", finetune.run, argv) == 0
    out = capsys.readouterr().out
    ids = {cell.variant: cell.run.id for cell in CELLS}
    assert f"fused: 2 runs trained as one model ({ids['pre-trained']}, {ids['clean']})" in out
    assert f"fused: 1 run trained as one model ({ids['shuffled']})" in out  # K = 2: the third of its group
    assert f"run {ids['shorter']} (shorter, tiny:bert): no other run of this pod shares its architecture" in out
    for cell in CELLS:
        assert (together / run_key(cell.run.id, "finetune") / "_SUCCESS.json").exists()
        assert json.loads((together / run_key(cell.run.id, "finetune") / "result.json").read_text())[
            "step_kind"].endswith(("fused x2", "fused x1"))
        assert not (together / run_key(cell.run.id, "finetune-state")).exists()  # cleared once published
    for cell in CELLS:  # each alone: the same results (dropout draws do not depend on the group)
        assert main("finetune", finetune.run, ["--store", str(alone), "--spec", canonical_json(cell)]) == 0
        (curves, weights), (ref_curves, ref_weights) = outcome(together, cell), outcome(alone, cell)
        for row, ref in zip(curves, ref_curves, strict=True):
            assert row.keys() == ref.keys()
            assert all(row[k] == pytest.approx(ref[k], abs=1e-6) if isinstance(row[k], float) else row[k] == ref[k]
                       for k in row)
        assert max(float((weights[k] - ref_weights[k]).abs().max()) for k in weights) < 1e-6
    capsys.readouterr()
    assert main("finetune", finetune.run, argv) == 0  # all published: nothing trains again
    assert capsys.readouterr().out.count("finetune cached") == len(CELLS)
