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


@pytest.mark.parametrize("kept", [True, False])
def test_an_analysis_stored_before_the_output_projection_rows(tmp_path, caplog, kept):
    """Weight distances without `layer.N.output.dense.weight` (the partial-reinitialization report's measure) were
    made by older code: analyze measures them again from kept weights; without weights it publishes them
    as they are (training the run again for one row is not worth it) and says so."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    store = LocalStore(tmp_path)
    prepare_data.prepare(store, RUN.dataset)
    build_checkpoint.build(store, RUN.checkpoint)
    cell = Cell("old", "pre-trained", "tiny:bert", RUN, keep_weights=kept)
    _steps(store, cell)
    key = run_key(RUN.id, "analyze")
    table = pq.read_table(tmp_path / key / "weight_distance.parquet")
    old = table.filter(pc.invert(pc.ends_with(table["module"], ".output.dense.weight")))
    assert old.num_rows == table.num_rows - 4  # tiny: 4 layers, one projection row each
    store.delete_prefix(key)
    with store.artifact(key, {"spec": RUN.to_dict()}) as out:  # what the older analyze stored
        pq.write_table(old, out / "weight_distance.parquet")
    with caplog.at_level("INFO", logger="bertology"):
        analyze.analyze(store, cell)
    assert "training it again" not in caplog.text
    published = scan(str(tmp_path), "weight_distance", study="old").collect()
    projections = published.filter(published["module"].str.ends_with(".output.dense.weight")).height
    if kept:
        assert f"run {RUN.id}: its weight distances predate the output-projection rows; measuring again" in caplog.messages
        assert projections == 4
    else:
        assert (f"run {RUN.id}: its weight distances predate the output-projection rows and its weights were not "
                "kept; published as they are") in caplog.messages
        assert projections == 0 and published.height == old.num_rows
        from bertology.results.analysis import runs_without_projection

        assert runs_without_projection(published) == 1


def test_weights_not_kept_are_scored_and_measured_in_memory_as_kept_ones_are_from_their_files(tmp_path, monkeypatch):
    """A run whose weights are not kept is scored and measured from the model in memory, never saved and read
    back; its metrics, predictions and weight distances are exactly those the evaluate and analyze steps
    compute from the same run's kept weights."""
    import pyarrow.parquet as pq
    from transformers import PreTrainedModel

    saved, original = [], PreTrainedModel.save_pretrained

    def save_pretrained(self, directory, *args, **kwargs):
        saved.append(directory)
        return original(self, directory, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", save_pretrained)
    tables = {}
    for keep in (True, False):
        store = LocalStore(tmp_path / str(keep))
        prepare_data.prepare(store, RUN.dataset)
        build_checkpoint.build(store, RUN.checkpoint)
        saved.clear()
        _steps(store, Cell("memory", "pre-trained", "tiny:bert", RUN, keep_weights=keep))
        assert len(saved) == (1 if keep else 0), saved  # kept: saved once; not kept: never written
        root = tmp_path / str(keep)
        tables[keep] = {name: pq.read_table(root / run_key(RUN.id, step) / name)
                        for step, name in (("evaluate", "metrics.parquet"), ("evaluate", "predictions.parquet"),
                                           ("analyze", "weight_distance.parquet"))}
    for name, kept in tables[True].items():
        other = tables[False][name]
        if name == "metrics.parquet":  # the rest (train seconds, throughput) is each run's own timing
            kept, other = (t.select(["split", "metric", "value", "primary", "best_epoch"]) for t in (kept, other))
        assert kept.num_rows > 0 and kept.equals(other), name
