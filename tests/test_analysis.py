"""Each analysis table against hand-computed numbers on small hand-built frames (bertology.results.analysis)."""

from __future__ import annotations

import math

import pandas as pd
import polars as pl
import pytest

from bertology.results import analysis

# The college report's Figure 5 (CoLA, baseline MCC 0.526): layers 1, 2, 11 and 12, heads 1–12.
FIGURE_5 = {1: [0.008, -0.023, -0.005, -0.015, 0.01, -0.018, -0.015, -0.014, -0.026, -0.005, 0.011, -0.007],
            2: [-0.016, -0.007, -0.004, -0.045, -0.015, -0.031, -0.018, -0.043, -0.047, 0, -0.016, -0.017],
            11: [0.002, 0.013, 0.002, -0.013, 0.02, 0, 0.002, 0.007, 0.002, 0.013, 0.013, 0.015],
            12: [0.008, -0.002, -0.002, -0.002, 0.002, 0.002, 0, 0.005, 0.005, 0.016, 0.002, 0.005]}


def _runs(rows: list[dict], **constant) -> pl.DataFrame:
    """A runs-like frame: one primary row per dict, with the constant labels filled in."""
    base = {"model": "m", "task": "rte", "intermediate": None, "fraction": None, "count": None,
            "split": "validation", "metric": "accuracy", "primary": True, **constant}
    return pl.DataFrame([{**base, **r} for r in rows], infer_schema_length=None,
                        schema_overrides={"intermediate": pl.String, "fraction": pl.Float64, "count": pl.Int64,
                                          "value": pl.Float64})


def test_head_deltas_and_their_summary_reproduce_the_college_reports_figures_5_and_7():
    variants = [{"name": "baseline", "interventions": []}] + [
        {"name": f"L{layer}H{head}", "levels": {"layer": layer, "head": head}}
        for layer in FIGURE_5 for head in range(1, 13)]
    levels = analysis.variant_levels(variants)
    runs = _runs([{"variant": "baseline", "seed": s, "value": 0.526} for s in (1, 2)] + [
        {"variant": f"L{layer}H{head}", "seed": s, "value": 0.526 + delta}
        for layer, deltas in FIGURE_5.items() for head, delta in enumerate(deltas, 1) for s in (1, 2)],
        task="cola", metric="matthews_corrcoef")
    deltas = analysis.head_deltas(analysis.primary_summary(runs, "baseline"), levels)
    assert deltas["baseline_mean"].to_list() == pytest.approx([0.526] * 48)
    by_cell = {(r["layer"], r["head"]): r["delta"] for r in deltas.iter_rows(named=True)}
    assert by_cell == {(layer, head): pytest.approx(d, abs=1e-12) for layer, ds in FIGURE_5.items()
                       for head, d in enumerate(ds, 1)}

    summary = analysis.head_delta_summary(deltas)
    assert summary.columns == ["model", "task", "intermediate", "fraction", "count", "split", "metric", "over", "index",
                               "n", "mean", "std", "min", "25%", "50%", "75%", "max"]
    assert summary["over"].to_list() == ["layer"] * 4 + ["head"] * 12 + ["all"]
    stats = ["n", "mean", "std", "min", "25%", "50%", "75%", "max"]
    frame = pd.DataFrame([(layer, head, d) for layer, ds in FIGURE_5.items() for head, d in enumerate(ds, 1)],
                         columns=["layer", "head", "delta"])
    for over, index, values in ([("layer", k, frame[frame["layer"] == k]["delta"]) for k in FIGURE_5]
                                + [("head", k, frame[frame["head"] == k]["delta"]) for k in range(1, 13)]
                                + [("all", None, frame["delta"])]):
        row = summary.filter(pl.col("over") == over, pl.col("index").eq_missing(index)).row(0, named=True)
        expected = values.describe()  # pandas: count, mean, std, min, 25%, 50%, 75%, max
        assert [row[s] for s in stats] == pytest.approx(expected.to_list(), abs=1e-12), (over, index)
    # Figure 7, "Layer 1": what the report prints (its median and 75% came from unrounded deltas)
    layer_1 = summary.filter(pl.col("over") == "layer", pl.col("index") == 1).row(0, named=True)
    assert [round(layer_1[s], 3) for s in ("n", "mean", "std", "min", "25%", "max")] == [
        12, -0.008, 0.013, -0.026, -0.016, 0.011]


def test_level_curves_by_k_per_data_fraction():
    levels = analysis.variant_levels([{"name": "base"}, {"name": "k1", "levels": {"k": 1}},
                                      {"name": "k2", "levels": {"k": 2}}])
    values = {("k2", 0.1): [0.6, 0.7, 0.8], ("k1", 0.1): [0.5, 0.6, 0.7], ("k1", 1.0): [0.8, 0.9, None],
              ("k2", 1.0): [0.9, 0.9, 0.9], ("base", 0.1): [1.0, 1.0, 1.0]}
    runs = _runs([{"variant": v, "fraction": f, "seed": s, "value": x}
                  for (v, f), xs in values.items() for s, x in enumerate(xs, 1)])
    curves = analysis.level_curves(runs, levels, "k")
    assert curves.columns == ["model", "task", "intermediate", "fraction", "count", "split", "metric", "k", "mean",
                              "sd", "n"]
    got = {(r["fraction"], r["k"]): (r["mean"], r["sd"], r["n"]) for r in curves.iter_rows(named=True)}
    assert got == {(0.1, 1): (pytest.approx(0.6), pytest.approx(0.1), 3),
                   (0.1, 2): (pytest.approx(0.7), pytest.approx(0.1), 3),
                   (1.0, 1): (pytest.approx(0.85), pytest.approx(math.sqrt(0.005)), 2),
                   (1.0, 2): (pytest.approx(0.9), pytest.approx(0.0, abs=1e-15), 3)}
    assert curves["k"].to_list() == [1, 1, 2, 2]  # along the axis; the baseline has no k


def test_sequential_matrix_rows_are_intermediate_tasks_and_none():
    runs = _runs([{"variant": "bert", "task": final, "intermediate": first, "seed": s, "value": v + s / 100}
                  for final, first, v in (("rte", None, 0.6), ("rte", "mrpc", 0.61), ("cola", None, 0.5),
                                          ("cola", "rte", 0.53)) for s in (1, 2)]
                 + [{"variant": "direct-only", "seed": 1, "value": 0.1}])
    matrix = analysis.sequential_matrix(runs)
    got = {(r["intermediate"], r["task"]): (r["mean"], r["n"]) for r in matrix.iter_rows(named=True)}
    assert got == {("none", "rte"): (pytest.approx(0.615), 2), ("mrpc", "rte"): (pytest.approx(0.625), 2),
                   ("none", "cola"): (pytest.approx(0.515), 2), ("rte", "cola"): (pytest.approx(0.545), 2)}
    assert set(matrix["variant"]) == {"bert"}  # a variant never fine-tuned sequentially has no matrix
    assert matrix["sd"].to_list() == pytest.approx([math.sqrt(0.00005)] * 4)


def test_forgetting_curve_and_best_point_perplexity_per_eval_split():
    curves = pl.DataFrame([{"model": "m", "variant": v, "task": "mlm-nl", "seed": s, "step": step, "split": split,
                            "metric": metric, "value": value}
                           for v in ("full", "freeze") for s in (1, 2, 3) for step in (0, 50)
                           for split, metric, value in (("validation", "perplexity", 10 - step / 10 + s),
                                                        ("xnli", "perplexity", 6 + step / 5 * s),
                                                        ("validation", "loss", 2.0))])
    curve = analysis.forgetting_curve(curves)
    assert curve.columns == ["model", "variant", "task", "split", "step", "mean", "sd", "n"]
    full = curve.filter(pl.col("variant") == "full")
    assert full.select("split", "step").rows() == [("validation", 0), ("xnli", 0), ("validation", 50), ("xnli", 50)]
    assert full["mean"].to_list() == pytest.approx([12.0, 6.0, 7.0, 26.0])
    assert full["sd"].to_list() == pytest.approx([1.0, 0.0, 1.0, 10.0]) and set(full["n"]) == {3}

    runs = _runs([{"variant": v, "seed": s, "split": split, "metric": "perplexity", "primary": split == "validation",
                   "value": base + s} for v, base in (("full", 7.0), ("freeze", 14.0)) for s in (1, 2, 3)
                  for split in ("validation", "test")]
                 + [{"variant": "full", "seed": 1, "metric": "loss", "value": 2.0}], task="mlm-nl")
    best = analysis.freezing_perplexity(runs)
    assert best.select("variant", "split", "mean", "sd", "n").rows() == [
        ("full", "validation", 9.0, 1.0, 3), ("full", "test", 9.0, 1.0, 3),
        ("freeze", "validation", 16.0, 1.0, 3), ("freeze", "test", 16.0, 1.0, 3)]


def test_activation_distance_curves_per_layer_and_step():
    distances = pl.DataFrame([{"model": "m", "variant": "gradual", "task": "mlm-nl", "reference": "bertje",
                               "seed": s, "layer": layer, "step": step, "distance": layer + step / 50 + s}
                              for s in (1, 2) for step in (50, 0) for layer in (0, 12)])
    curves = analysis.activation_distance_curves(distances)
    assert curves.select("layer", "step", "mean", "sd", "n").rows() == [
        (0, 0, 1.5, math.sqrt(0.5), 2), (12, 0, 13.5, math.sqrt(0.5), 2),
        (0, 50, 2.5, math.sqrt(0.5), 2), (12, 50, 14.5, math.sqrt(0.5), 2)]


def test_weight_distance_per_module_and_per_layer_by_data_size():
    distances = pl.DataFrame([{"model": "m", "variant": "bert", "task": "sst2", "fraction": f, "count": None,
                               "seed": s, "module": module, "layer": layer, "l2": l2 * f * s, "rel_l2": 0.1 * s}
                              for f in (0.1, 1.0) for s in (1, 2)
                              for module, layer, l2 in (("embeddings", -1, 1.0), ("layer.0.attention", 0, 3.0),
                                                        ("layer.0.ffn", 0, 4.0))])
    modules = analysis.weight_distance_by_size(distances)
    attention = modules.filter(pl.col("module") == "layer.0.attention", pl.col("fraction") == 1.0).row(0, named=True)
    assert (attention["mean"], attention["sd"], attention["n"], attention["rel_l2"]) == (
        pytest.approx(4.5), pytest.approx(3 / math.sqrt(2)), 2, pytest.approx(0.15))
    layers = analysis.weight_distance_by_size(distances, per="layer")
    assert layers.select("fraction", "layer", "mean", "n").rows() == [
        (0.1, -1, pytest.approx(0.15), 2), (0.1, 0, pytest.approx(0.75), 2),  # sqrt(3² + 4²) = 5 per unit
        (1.0, -1, pytest.approx(1.5), 2), (1.0, 0, pytest.approx(7.5), 2)]
    with pytest.raises(ValueError, match="per must be"):
        analysis.weight_distance_by_size(distances, per="head")


def test_model_profile_speed_relative_to_the_baseline():
    profile = pl.DataFrame([{"model": "bert", "variant": v, "device": "cuda", "batch_size": 32, "seq_len": 128,
                             "seed": s, "n_params": p, "encoder_layers": layers, "inference_seconds": 1.0,
                             "examples_per_second": eps + s}
                            for v, p, layers, eps in (("bert", 110_000_000, 12, 99.0), ("remove", 66_000_000, 6, 199.0))
                            for s in (1, 2, 3)])
    summary = analysis.model_profile_summary(profile, "bert")
    assert summary.select("variant", "n_params", "encoder_layers", "mean", "n", "speedup").rows() == [
        ("bert", 110_000_000, 12, 101.0, 3, 1.0), ("remove", 66_000_000, 6, 201.0, 3, pytest.approx(201 / 101))]
    assert analysis.model_profile_summary(profile, None)["speedup"].to_list() == [None, None]
    distil = profile.filter(pl.col("variant") == "remove").with_columns(pl.lit("distil").alias("model"),
                                                                      pl.lit("distil").alias("variant"))
    both = analysis.model_profile_summary(pl.concat([profile, distil]), "bert")
    assert both.filter(pl.col("variant") == "distil")["speedup"].to_list() == [pytest.approx(201 / 101)]


def test_vocabulary_table_in_the_reports_table_2_layout():
    rows = [{"schema_version": 2, "model": m, "reference": "bert-base-uncased", "case": "exact", "vocab_size": size,
             "english_like": like, "english_like_share": like / size, "overlap": shared, "overlap_share": shared / like,
             "corpus": None, "max_lines": None, "stride": 10, "pieces": None, "windows": None,
             "english_windows": None, "english_window_share": None}
            for m, size, like, shared in (("de", 30_000, 25_266, 5_775), ("zh", 21_128, 3_365, 2_672))]
    table = analysis.vocabulary_table(pl.DataFrame(rows + rows[:1]))  # a measurement repeated
    assert table.select("model", "overlap", "english_like").rows() == [("de", 5_775, 25_266), ("zh", 2_672, 3_365)]
    assert "schema_version" not in table.columns and "english_window_share" in table.columns


def test_variant_levels_default_to_none_and_failed_runs_are_those_without_a_number():
    assert analysis.variant_levels([{"name": "a"}, {"name": "b", "levels": {}}]).columns == ["variant"]
    levels = analysis.variant_levels([{"name": "a"}, {"name": "b", "levels": {"layer": 0, "head": 3}}])
    assert levels.rows() == [("a", None, None), ("b", 0, 3)]
    runs = _runs([{"variant": "a", "seed": 1, "run_id": "ok", "value": 0.5},
                  {"variant": "a", "seed": 2, "run_id": "nan", "value": float("nan")},
                  {"variant": "a", "seed": 3, "run_id": "null", "value": None},
                  {"variant": "a", "seed": 4, "run_id": "partly", "value": 0.1},
                  {"variant": "a", "seed": 4, "run_id": "partly", "value": None, "split": "other"}])
    assert analysis.failed_runs(runs)["run_id"].to_list() == ["nan", "null"]


def test_groups_never_pool_data_sizes_or_intermediate_tasks():
    runs = _runs([{"variant": "a", "seed": s, "fraction": f, "intermediate": i, "value": v}
                  for s in (1, 2) for f, i, v in ((0.1, None, 0.5), (1.0, None, 0.7), (1.0, "mnli", 0.9))])
    summary = analysis.primary_summary(runs, None)
    assert summary.select("fraction", "intermediate", "mean", "n").rows() == [
        (0.1, None, 0.5, 2), (1.0, None, 0.7, 2), (1.0, "mnli", 0.9, 2)]
    best = analysis.best_of_runs(runs.with_columns(pl.col("value") + pl.col("seed") / 100))
    assert best.select("fraction", "intermediate", "best", "best_seed").rows() == [
        (0.1, None, 0.52, 2), (1.0, None, 0.72, 2), (1.0, "mnli", pytest.approx(0.92), 2)]


def test_an_axis_that_renames_another_gets_no_curve_of_its_own():
    """Partial reinit: `from` is K − 1, so one of them is the curve's x and the other splits no curve."""
    levels = analysis.variant_levels([{"name": "base"}] + [
        {"name": f"k{k}-lr{lr}", "levels": {"from": k - 1, "k": k, "lr": lr}} for k in (1, 2) for lr in (1, 2)])
    assert analysis.level_axes(levels) == {"from": ["k"], "lr": []}  # a plan's levels come with sorted keys
    runs = _runs([{"variant": f"k{k}-lr{lr}", "seed": 1, "value": k + lr / 10} for k in (1, 2) for lr in (1, 2)])
    curves = analysis.level_curves(runs, levels, "from")
    assert "k" not in curves.columns and curves.select("lr", "from", "mean").rows() == [
        (1, 0, 1.1), (2, 0, 1.2), (1, 1, 2.1), (2, 1, 2.2)]
