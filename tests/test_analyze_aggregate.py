"""The analysis and aggregation steps against hand-computed values on small fixtures."""

import math

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import scipy.stats
import torch
from safetensors.torch import save_file

from bertology.results.analysis import primary_summary, weight_distance_by_size
from bertology.results.report.main_table import delta_table, main_table
from bertology.results.tables import publish, results_key
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Intervention, RunSpec
from bertology.steps.aggregate import aggregate
from bertology.steps.weight_distance import lacks_projection_rows, weight_distance
from bertology.store import open_store


def test_weight_distance_per_module_matches_hand_computation(tmp_path):
    before = {"embeddings.word_embeddings.weight": torch.ones(2, 2),
              "encoder.layer.0.attention.self.query.weight": torch.zeros(2, 2),
              "encoder.layer.0.attention.self.query.bias": torch.ones(2),
              "encoder.layer.1.output.dense.weight": torch.ones(3),
              "pooler.dense.weight": torch.ones(1)}
    after = {"bert." + k: v.clone() for k, v in before.items()}
    after["bert.encoder.layer.0.attention.self.query.weight"] += 3.0   # 4 entries moved by 3 -> l2 = 6
    after["bert.encoder.layer.1.output.dense.weight"][0] = 5.0          # one entry moved by 4 -> l2 = 4
    after["classifier.weight"] = torch.ones(2, 2)                       # the task head is not compared
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    save_file(before, tmp_path / "a" / "model.safetensors")
    save_file(after, tmp_path / "b" / "model.safetensors")
    rows = {r["module"]: r for r in weight_distance(tmp_path / "a", tmp_path / "b").to_pylist()}
    # per sub-layer, and the partial-reinitialization report's own measure: the output sub-layer's weight matrix
    assert list(rows) == ["embeddings", "layer.0.attention.self", "layer.1.output", "layer.1.output.dense.weight",
                          "pooler"]
    assert rows["embeddings"]["l2"] == 0.0 and rows["embeddings"]["layer"] == -1
    assert rows["layer.0.attention.self"]["l2"] == pytest.approx(6.0)
    assert rows["layer.0.attention.self"]["rel_l2"] == pytest.approx(6.0 / math.sqrt(2.0))  # base: the bias of ones
    assert rows["layer.0.attention.self"]["n_params"] == 6 and rows["layer.0.attention.self"]["layer"] == 0
    assert rows["layer.1.output"]["l2"] == pytest.approx(4.0)
    assert rows["layer.1.output"]["rel_l2"] == pytest.approx(4 / math.sqrt(3))
    assert rows["pooler"]["layer"] == 2
    assert rows["layer.1.output.dense.weight"]["l2"] == pytest.approx(4.0)
    assert rows["layer.1.output.dense.weight"]["n_params"] == 3 and rows["layer.1.output.dense.weight"]["layer"] == 1


def test_the_output_projection_is_its_weight_matrix_alone(tmp_path):
    """Partial-reinit report §4.5: "the euclidean distance between the weight matrices of the linear
    projections contained in the output sub-layer": the bias and the LayerNorm move the sub-layer, not it."""
    before = {"encoder.layer.0.output.dense.weight": torch.zeros(2, 2),
              "encoder.layer.0.output.dense.bias": torch.zeros(2),
              "encoder.layer.0.output.LayerNorm.weight": torch.ones(2),
              "encoder.layer.0.output.LayerNorm.bias": torch.zeros(2)}
    after = {k: v.clone() for k, v in before.items()}
    after["encoder.layer.0.output.dense.weight"] += 1.0      # 4 entries by 1: the matrix moves by 2
    after["encoder.layer.0.output.dense.bias"] += 3.0        # 2 by 3
    after["encoder.layer.0.output.LayerNorm.weight"] += 4.0  # 2 by 4
    for name, weights in (("a", before), ("b", after)):
        (tmp_path / name).mkdir()
        save_file(weights, tmp_path / name / "model.safetensors")
    table = weight_distance(tmp_path / "a", tmp_path / "b")
    rows = {r["module"]: r for r in table.to_pylist()}
    assert rows["layer.0.output.dense.weight"]["l2"] == pytest.approx(2.0)
    assert rows["layer.0.output"]["l2"] == pytest.approx(math.sqrt(4 + 18 + 32))  # the whole sub-layer
    by = {per: weight_distance_by_size(pl.from_arrow(table).with_columns(pl.lit(1).alias("seed")), per=per)
          for per in ("layer", "output-projection")}
    assert by["output-projection"]["mean"].to_list() == pytest.approx([2.0])
    assert by["layer"]["mean"].to_list() == pytest.approx([math.sqrt(54)])  # not the matrix counted twice
    assert not lacks_projection_rows(table)
    assert lacks_projection_rows(table.filter(pc.invert(pc.ends_with(table["module"], ".weight"))))


def _cell(variant, task, seed):
    chain = () if variant == "pre-trained" else (Intervention("reinit", (("scope", "all"),)),)
    run = RunSpec(CheckpointSpec("m", chain), DatasetSpec(task, "synthetic", "m"), seed=seed)
    return Cell("toy", variant, "m", run)


def _metrics(value):
    return pa.Table.from_pylist([{
        "split": "validation", "metric": "accuracy", "value": value, "primary": True, "best_epoch": 1,
        "epochs": 1, "num_train": 10, "train_seconds": 1.0, "throughput": 10.0, "device": "cpu",
        "code_version": "t"}])


def test_summary_and_layout_are_mean_sd_n_in_variant_order():
    runs = pl.DataFrame({"model": ["m"] * 4, "task": ["rte"] * 4, "variant": ["b", "b", "a", "a"],
                         "split": ["validation"] * 4, "metric": ["accuracy"] * 4, "primary": [True] * 4,
                         "value": [0.5, 0.7, 0.9, 0.9], "seed": [1, 2, 1, 2]})
    s = primary_summary(runs, baseline="a")
    b = s.filter(pl.col("variant") == "b").row(0, named=True)
    assert b["mean"] == pytest.approx(0.6) and b["sd"] == pytest.approx(math.sqrt(0.02)) and b["n"] == 2
    # paired by seed against a: differences -0.4 and -0.2, so t = -0.3 / (0.1414 / sqrt 2) = -3, 1 dof
    assert b["delta"] == pytest.approx(-0.3) and b["p_value"] == pytest.approx(scipy.stats.ttest_rel(
        [0.5, 0.7], [0.9, 0.9]).pvalue, rel=1e-12)
    assert b["ci_low"] is None and b["ci_high"] is None  # of 2 runs the percentile interval is the runs: none
    assert delta_table(s, ["a", "b"], "a").row(0) == ("m", "rte", "validation", "accuracy",
                                                          f"-0.300 (p={b['p_value']:.3g}; BH p={b['p_value']:.3g})")
    assert b["p_bh"] == b["p_value"]  # one comparison: nothing to adjust
    table = main_table(s, ["a", "b", "c"], expected_n=3)
    assert table.columns == ["model", "task", "split", "metric", "a", "b", "c"]
    assert table.row(0) == ("m", "rte", "validation", "accuracy", "0.900 (runs 0.900, 0.900; n=2 of 3)",
                            "0.600 (runs 0.500, 0.700; n=2 of 3)", "—")


def test_aggregate_reads_the_plan_and_lists_missing_runs(tmp_path, capsys):
    store = open_store(str(tmp_path))
    cells = [_cell(v, "rte", s) for v in ("pre-trained", "clean") for s in (1, 2)]
    store.write_json("studies/toy/abc/plan.json", {
        "study": "toy", "study_id": "abc", "cells": [c.to_dict() for c in cells],
        "spec": {"preset": "tiny", "models": ["m"], "seeds": [1, 2], "source": "synthetic", "max_length": 32,
                 "variants": [{"name": "pre-trained"}, {"name": "clean"}],
                 "regime": {"name": "full", "lr": 1e-3, "batch_size": 8, "epochs": 1}}})
    for c, v in zip(cells[:3], [0.8, 0.6, 0.5]):
        publish(store, "runs", c, _metrics(v))
    aggregate(store, "toy", "abc")
    out = capsys.readouterr().out
    assert "| m | rte | validation | accuracy | 0.700 (runs 0.600, 0.800; n=2) | 0.500 (n=1 of 2) |" in out
    assert "| m | rte | validation | accuracy | -0.200 |" in out  # one common seed: no p-value
    assert "Missing runs (1 of 4)" in out and cells[3].run.id in out
    long = pl.from_arrow(store.read_parquet("studies/toy/abc/tables/main.parquet"))
    assert long.filter(pl.col("variant") == "pre-trained")["mean"][0] == pytest.approx(0.7)
    assert store.exists(results_key("runs", "toy", cells[0].run.id))
