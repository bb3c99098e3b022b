"""Fine-tuned weights (~440 MB a run at BERT-base size) are kept only where something needs them later: the
study's keep_weights=true, or a sequential run's intermediate run. Otherwise finetune evaluates and analyzes
them itself and publishes the run without them; a rerun still finds it finished."""

from __future__ import annotations

import pytest

from bertology.results import scan
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec
from bertology.steps import analyze, build_checkpoint, evaluate, finetune, prepare_data
from bertology.steps.common import run_key
from bertology.store import LocalStore
from bertology.study import StudySpec

RUN = RunSpec(CheckpointSpec("tiny:bert"), DatasetSpec("rte", "synthetic", "tiny:bert", 32, count=32),
              Regime(lr=1e-3, batch_size=16, epochs=1), seed=1)


def _steps(store, cell):
    for step in (finetune.finetune, evaluate.evaluate, analyze.analyze):
        step(store, cell)


def test_weights_are_dropped_unless_kept_and_a_rerun_finds_the_run_finished(tmp_path, caplog):
    store = LocalStore(tmp_path)
    prepare_data.prepare(store, RUN.dataset)
    build_checkpoint.build(store, RUN.checkpoint)
    cell = Cell("keep", "pre-trained", "tiny:bert", RUN)
    _steps(store, cell)
    assert not list((tmp_path / "runs").rglob("*.safetensors"))  # no fine-tuned weights left in the store
    assert store.is_done(run_key(RUN.id, "finetune")) and store.marker(run_key(RUN.id, "finetune"))["weights"] is False
    for table in ("runs", "curves", "weight_distance", "predictions", "model_profile"):  # results complete
        assert scan(str(tmp_path), table, study="keep").collect()["run_id"].unique().to_list() == [RUN.id], table

    caplog.clear()
    with caplog.at_level("INFO", logger="bertology"):
        _steps(store, cell)  # a rerun: everything cached, nothing trained again
    assert [m for m in caplog.messages if "cached" in m] == [
        f"run {RUN.id}: {s} cached" for s in ("finetune", "evaluate", "analyze")]

    kept = Cell("keep", "pre-trained", "tiny:bert", RUN, keep_weights=True)
    with caplog.at_level("INFO", logger="bertology"):
        finetune.finetune(store, kept)  # needed now: trained again, this time keeping them
    assert "training it again" in caplog.text
    assert (tmp_path / run_key(RUN.id, "finetune") / "model" / "model.safetensors").is_file()
    assert store.marker(run_key(RUN.id, "finetune"))["weights"] is True


@pytest.mark.parametrize("keep", ["true", "false"])
def test_which_cells_keep_their_weights(keep):
    spec, _ = StudySpec.from_params("s", {"tasks": '["rte", "cola"]', "intermediates": '["cola"]', "seeds": "[1]",
                                          "keep_weights": keep})
    cells = spec.cells()
    after = {c.run.after.id for c in cells if c.run.after is not None}
    assert after and {c.run.id for c in cells if c.run.dataset.task == "cola" and c.run.after is None} == after
    for c in cells:  # the direct cola run is also rte's intermediate run: it keeps its weights
        assert c.keep_weights == (keep == "true" or c.run.id in after), c.run.dataset.task
    assert Cell.from_dict(cells[0].to_dict()) == cells[0]
    default, _ = StudySpec.from_params("s", {"tasks": '["rte", "cola"]', "intermediates": '["cola"]', "seeds": "[1]"})
    assert (spec.id == default.id) == (keep == "false")  # left out of the id at its default: old ids hold
