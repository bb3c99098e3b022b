"""What keeps a study report from presenting noise as a finding, and its plots readable (issue 13): the main
result drawn with its 95% intervals in every study and the intervals in the tables; a Benjamini–Hochberg p
beside the raw p; the model-size section only where the model's size changes; the best-epoch selection
said; heat maps of differences centred on 0, labelled, with unclear cells marked; text kept as text at
10 pt or more; one y-range per metric, perplexity on a log axis; forgetting curves by split; no one-point
panels; level curves only along ordered levels; the notes' Markdown rendered in the HTML."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import polars as pl
import pytest
from scipy import stats as scipy_stats

from bertology.results import analysis, plots
from bertology.results.report import build_report, html, markdown
from bertology.results.report.render import inline_html
from bertology.results.study_results import StudyResults, with_defaults

SEEDS = (1, 2, 3)


def _runs(rows: list[dict]) -> pl.DataFrame:
    base = {"model": "bert", "intermediate": None, "split": "validation", "fraction": None, "count": None,
            "metric": "accuracy", "primary": True}
    return pl.from_dicts([{**base, **r, "run_id": f"{r['variant']}-{r['task']}-{r['seed']}"} for r in rows],
                         infer_schema_length=None)


def _results(name: str, runs: pl.DataFrame, variants: list[dict], **tables) -> StudyResults:
    spec = with_defaults({"preset": "paper", "models": ["bert"], "seeds": list(SEEDS), "variants": variants})
    return StudyResults(name, "id", spec, [], [], {"runs": runs.lazy(), **{k: v.lazy() for k, v in tables.items()}},
                        [])


def _section(page: str, title: str) -> str:
    """One section of an HTML report."""
    start = page.index(f"<h2>{title}")
    return page[start:page.find("<section>", start) % len(page)]


# reversed-layers: three variants, no level axis (the report the issue found without any figure)
REVERSED = [{"name": "pre-trained", "interventions": []},
            {"name": "reversed", "interventions": [{"name": "reverse-layers"}]},
            {"name": "clean", "interventions": [{"name": "reinit", "params": {"scope": "all"}}]}]
EFFECT = {"pre-trained": 0.0, "reversed": -0.1, "clean": -0.2}


def _reversed_runs() -> pl.DataFrame:
    return _runs([{"variant": v, "task": t, "seed": s, "value": 0.8 + EFFECT[v] + 0.01 * s + (0.05 if t == "rte" else 0)}
                  for v in EFFECT for t in ("cola", "rte") for s in SEEDS])


@pytest.fixture(scope="module")
def reversed_report():
    return build_report(_results("reversed-layers", _reversed_runs(), REVERSED))


def test_every_study_plots_its_main_result_with_intervals_and_the_baseline(reversed_report):
    page = html(reversed_report)
    main = _section(page, "Main table")
    assert main.count("<svg") == 1  # the main-result figure, in the main table's section
    figure = main[main.index("<svg"):]
    for text in ("cola · accuracy", "rte · accuracy", "pre-trained (baseline)", "reversed", "clean"):
        assert text in figure, text
    # the intervals the figure draws are in both tables too: mean ± sd [ci_low, ci_high] (n)
    row = reversed_report.tables["main"].filter(pl.col("task") == "cola", pl.col("variant") == "reversed").row(
        0, named=True)
    assert row["ci_low"] < row["mean"] < row["ci_high"]
    cell = f"{row['mean']:.3f} ± {row['sd']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}] (n=3)"
    assert cell in markdown(reversed_report) and cell in main


def test_the_main_figure_shares_one_y_range_per_metric_and_draws_points_for_many_variants():
    summary = analysis.primary_summary(_reversed_runs(), "pre-trained").with_columns(
        pl.format("{} · {}", "task", "metric").alias("_panel"))
    bars = plots.interval_figure(summary, panel="_panel", baseline="pre-trained")
    axes = bars.axes
    assert len(axes) == 2 and axes[0].get_ylim() == axes[1].get_ylim()
    assert len(axes[0].patches) == 3  # a bar per variant
    # its error bar spans exactly the bootstrap interval
    errorbar = next(c for c in axes[0].containers if c.__class__.__name__ == "ErrorbarContainer")
    spans = [tuple(segment[:, 1]) for segment in errorbar.lines[2][0].get_segments()]
    cola = summary.filter(pl.col("task") == "cola")
    assert np.array(spans) == pytest.approx(np.column_stack([cola["ci_low"], cola["ci_high"]]))
    many = pl.concat([summary.with_columns(pl.format("{}-{}", "variant", pl.lit(i)).alias("variant"))
                      for i in range(plots.MAX_BARS)])
    points = plots.interval_figure(many, panel="_panel")
    assert not points.axes[0].patches  # more than MAX_BARS variants: points with intervals, no bars


def test_differences_come_with_a_benjamini_hochberg_p_never_below_the_raw_p():
    """head-reinit: 96 p-values; a study-wide adjustment says which differences survive."""
    rng = np.random.default_rng(0)
    heads = [f"L{layer}H{head}" for layer in range(4) for head in range(12)]
    rows = [{"variant": v, "task": t, "seed": s, "value": 0.5 + 0.01 * rng.standard_normal()}
            for v in ("baseline", *heads) for t in ("cola", "stsb") for s in SEEDS]
    summary = analysis.primary_summary(_runs(rows), "baseline")
    tested = summary.filter(pl.col("p_value").is_not_null())
    assert tested.height == 96
    assert (tested["p_bh"] >= tested["p_value"]).all()
    expected = scipy_stats.false_discovery_control(tested["p_value"].to_numpy(), method="bh")
    assert tested["p_bh"].to_numpy() == pytest.approx(expected)
    assert summary.filter(pl.col("variant") == "baseline")["p_bh"].null_count() == 2
    variants = [{"name": "baseline", "interventions": []},
                *({"name": h, "interventions": []} for h in heads)]
    text = markdown(build_report(_results("head-reinit", _runs(rows), variants)))
    assert "Benjamini–Hochberg" in text and "96 comparisons" in text
    assert re.search(r"\| [+-]\d\.\d{3} \(p=[\d.e-]+; BH p=[\d.e-]+\) \|", text)


def _profile(variants: dict[str, int]) -> pl.DataFrame:
    """model_profile rows: the encoder depth of each variant, a speed that is only noise."""
    return pl.from_dicts([{"model": "bert", "variant": v, "seed": s, "device": "cpu", "batch_size": 32, "seq_len": 128,
                           "n_params": 1_000_000 * layers, "encoder_params": 900_000 * layers,
                           "encoder_layers": layers, "inference_seconds": 1.0,
                           "examples_per_second": 100.0 + 30 * s * (i % 2)}
                          for i, (v, layers) in enumerate(variants.items()) for s in SEEDS])


def test_model_size_and_speed_only_where_the_variants_sizes_differ(reversed_report):
    same = build_report(_results("head-reinit", _reversed_runs(), REVERSED,
                                 model_profile=_profile(dict.fromkeys(EFFECT, 12))))
    assert "Model size and inference speed" not in markdown(same)
    assert "model_profile" in same.tables  # the numbers are still written
    removal = build_report(_results("layer-removal", _reversed_runs(), REVERSED,
                                    model_profile=_profile({"pre-trained": 12, "reversed": 6, "clean": 12})))
    assert "## Model size and inference speed" in markdown(removal)
    # a variant with a model of its own the same size (crosslingual-mlm's native model) is no size change,
    # one of another size (layer-removal's DistilBERT) is
    own = [*REVERSED[:2], {**REVERSED[2], "model": "native"}]
    for layers, shown in ((12, False), (6, True)):
        profile = _profile({"pre-trained": 12, "reversed": 12, "clean": layers}).with_columns(
            pl.when(pl.col("variant") == "clean").then(pl.lit("native")).otherwise("model").alias("model"))
        text = markdown(build_report(_results("crosslingual-mlm", _reversed_runs(), own, model_profile=profile)))
        assert ("## Model size and inference speed" in text) == shown


def test_every_report_says_where_the_best_epoch_was_chosen_on_the_reported_split(reversed_report):
    """bertology.train.loop: "the best point by the task's primary metric on the first eval split", and a split
    read at its own best point (MNLI-mm) on itself."""
    text = markdown(reversed_report)
    assert "best epoch (by the primary metric) was chosen on the split this table reports for cola validation, " \
           "rte validation" in text
    mnli = _runs([{"variant": v, "task": "mnli", "split": split, "seed": s, "value": 0.6 + 0.01 * s}
                  for v in EFFECT for split in ("validation_matched", "validation_mismatched") for s in SEEDS])
    # MNLI selects on both: matched for the kept weights, mismatched for its own numbers (Task.own_best_splits)
    assert "reports for mnli validation_matched, mnli validation_mismatched:" in markdown(
        build_report(_results("reversed-layers", mnli, REVERSED)))


def test_every_report_says_which_selection_rule_its_runs_used_and_what_the_paper_did():
    """bertology.results.selection: the rule from the plan's regime (a variant may override it), the paper's
    from bertology.results.conventions, and a flag where they differ."""
    mono = markdown(build_report(_results("reversed-layers", _reversed_runs(), REVERSED)))
    assert ("Model selection: each run reports its best epoch on dev (by the primary metric on the task's first "
            "eval split) (`selection=best`)") in mono
    assert 'The report: each run at its best epoch ("the best epoch of the best run is reported", §7).' in mono
    assert "This run differs" not in mono

    def last(name, variants=REVERSED):
        results = _results(name, _reversed_runs(), variants)
        spec = {**results.spec, "regime": {"name": "full", "lr": 2e-5, "batch_size": 32, "epochs": 3,
                                           "selection": "last"}}
        return markdown(build_report(dataclasses.replace(results, spec=spec)))

    college = last("layerwise-reinit")
    assert "each run reports its last epoch (the weights fine-tuning ended with; no epoch chosen on dev)" in college
    assert 'The report: no epoch is selected: "we run for 3 epochs after reinitializing the relevant layers"' in college
    assert "was chosen on the split this table reports" not in college  # nothing was selected on dev
    assert "This run differs from it (`selection=best` would follow it)." in last("reversed-layers")
    mixed = last("layerwise-reinit", [REVERSED[0], {**REVERSED[1], "regime": {"selection": "best"}}, REVERSED[2]])
    assert "`reversed` reports its best epoch on dev" in mixed and "`clean` reports its last epoch" in mixed


HEADS = [{"name": "baseline", "interventions": []},
         *({"name": f"L{layer}H{head}", "interventions": [], "levels": {"layer": layer, "head": head}}
           for layer in (0, 1) for head in (0, 1))]


def test_head_heat_map_is_centred_on_zero_labelled_and_marks_unclear_cells():
    values = np.array([[0.02, -0.005], [0.001, np.nan]])
    unclear = np.array([[False, True], [True, True]])
    fig = plots.heat_map_figure(values, ["1", "2"], ["1", "2"], title="t", xlabel="head", ylabel="layer",
                                fmt="+.3f", centre=True, label="Δ accuracy vs the baseline", unclear=unclear)
    mesh = fig.axes[0].collections[0]
    assert mesh.norm.vmin == -mesh.norm.vmax == -0.02  # symmetric around 0, whatever the data's range
    assert fig.axes[1].get_ylabel() == "Δ accuracy vs the baseline"  # the colour bar says what it shows
    marks = [t.get_text() for t in fig.axes[0].texts]
    assert marks == ["+0.020", "-0.005\nn.s.", "+0.001\nn.s."]  # a NaN cell has no value to mark
    assert len([p for p in fig.axes[0].patches if p.get_hatch()]) == 2
    # in a report: one seed gives no interval, so every head is marked
    rows = [{"variant": v["name"], "task": "cola", "seed": s, "value": 0.5 + 0.01 * s + (0.02 if "H1" in v["name"] else 0)}
            for v in HEADS for s in SEEDS]
    page = html(build_report(_results("head-reinit", _runs(rows), HEADS)))
    heads = _section(page, "Attention heads: difference from the baseline")
    assert "Δ accuracy vs the baseline" in heads
    # seeds move every variant alike: the H1 heads differ by exactly +0.02 on each seed (no interval, no
    # p-value: the paired t-test's standard error is 0), the H0 heads by 0
    assert heads.count("n.s.") == 4 + 1  # each cell, and the note


def test_svg_text_stays_text_at_ten_points_or_more(reversed_report):
    page = html(reversed_report)
    sizes = [float(s) for s in re.findall(r"font-size: ([\d.]+)px", page)]
    assert sizes and min(sizes) >= plots.FONT  # matplotlib's SVG writes points as px (72 per inch)
    assert "<text" in page and 'id="DejaVuSans' not in page  # no glyphs drawn as paths


def _curves(rows: list[dict]) -> pl.DataFrame:
    base = {"model": "bert", "task": "mlm-nl", "intermediate": None, "fraction": None, "count": None,
            "metric": "perplexity", "kind": "eval", "lr": 1e-4}
    return pl.from_dicts([{**base, **r} for r in rows], infer_schema_length=None)


def test_forgetting_curves_compare_the_variants_within_each_split_on_a_log_axis():
    variants = [{"name": "all layers", "interventions": []}, {"name": "frozen", "interventions": []}]
    splits = {"validation": 1.0, "xnli": 30.0}
    curves = _curves([{"variant": v, "seed": s, "split": split, "step": step,
                       "value": scale * (1 + step / 100) * (2 if v == "frozen" else 1)}
                      for v in ("all layers", "frozen") for s in SEEDS for split, scale in splits.items()
                      for step in (0, 50, 100)])
    runs = _runs([{"variant": v, "task": "mlm-nl", "split": split, "metric": "perplexity", "seed": s, "value": 5.0 + s}
                  for v in ("all layers", "frozen") for split in splits for s in SEEDS])
    page = html(build_report(_results("crosslingual-mlm", runs, variants, curves=curves)))
    figure = _section(page, "Forgetting curve")
    assert "mlm-nl · validation" in figure and "mlm-nl · xnli" in figure  # a panel per split ...
    assert "all layers" in figure and "frozen" in figure  # ... the variants its lines
    forgetting = analysis.forgetting_curve(curves).with_columns(pl.col("split").alias("_panel"))
    fig = plots.line_figure(forgetting, panel="_panel", series="variant", x="step", xlabel="step",
                            ylabel="perplexity", legend="variant")
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "log"]
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim()  # one metric, one y-range
    accuracy = plots.line_figure(forgetting, panel="_panel", series="variant", x="step", xlabel="step",
                                 ylabel="accuracy", legend="variant")
    assert accuracy.axes[0].get_yscale() == "linear"


def test_one_point_panels_are_left_out_and_a_figure_of_only_those_is_not_drawn():
    points = pl.DataFrame({"panel": ["a", "a", "b"], "series": ["x"] * 3, "step": [0, 10, 0], "mean": [1.0, 2.0, 3.0],
                           "sd": [0.1] * 3})
    fig = plots.line_figure(points, panel="panel", series="series", x="step", xlabel="s", ylabel="loss", legend="l")
    assert [ax.get_title() for ax in fig.axes] == ["a"]
    assert plots.line_figure(points.filter(pl.col("panel") == "b"), panel="panel", series="series", x="step",
                             xlabel="s", ylabel="loss", legend="l") is None


def test_level_curves_only_along_ordered_levels_with_the_baseline_drawn():
    numeric = [{"name": "pre-trained", "interventions": []},
               *({"name": f"reinit from {k}", "interventions": [], "levels": {"k": k}} for k in (1, 2, 3))]
    rows = [{"variant": v["name"], "task": "rte", "seed": s, "value": 0.7 - 0.05 * v.get("levels", {}).get("k", 0) + 0.01 * s}
            for v in numeric for s in SEEDS]
    page = html(build_report(_results("partial-reinit", _runs(rows), numeric)))
    curves = _section(page, "Curves by k")
    assert "<svg" in curves and plots.BASELINE in curves  # the unmodified model as a dashed line
    named = [{"name": "pre-trained", "interventions": []},
             *({"name": d, "interventions": [], "levels": {"distribution": d}} for d in ("normal", "uniform"))]
    rows = [{"variant": v["name"], "task": "rte", "seed": s, "value": 0.7 + 0.01 * s} for v in named for s in SEEDS]
    text = markdown(build_report(_results("init-distribution", _runs(rows), named)))
    assert "## Curves by" not in text and "## Main table" in text  # names are no axis: bars only


def test_notes_markdown_is_rendered_in_the_html(reversed_report):
    assert inline_html("`a<b` and **bold** <i> [table](#main) [site](https://example.org)") == (
        "<code>a&lt;b</code> and <strong>bold</strong> &lt;i&gt; <a href=\"#main\">table</a> "
        "site (https://example.org)")
    # as the page was before markdown-it: *emphasis* as written, quotes left as they are outside code
    # (escaped inside it), every other site as text
    assert inline_html("the *bert-finetuned* model's \"q\" & `'q'` [x](//host/y) [y](mailto:a@b)") == (
        "the *bert-finetuned* model's \"q\" &amp; <code>&#x27;q&#x27;</code> x (//host/y) y (mailto:a@b)")
    page = html(reversed_report)
    assert "<code>pre-trained</code>" in page
    assert not re.search(r"<p>[^<]*`", page)  # no raw backticks in any paragraph
