"""The study report: which tables and plots a study gets, and their Markdown and HTML renderings.

The layout follows from what the study varies, never from its name:
- always: the main table (mean ± sd [95% interval] (n); variants as columns; with more than
  MAX_VARIANT_COLUMNS variants a long form, one row per variant) and its figure (each variant's mean with
  its interval, the unmodified model dashed), where the best epoch was chosen on the reported split, each
  variant's difference from the unmodified model with its paired p-value and the Benjamini–Hochberg
  adjusted one, and the runs that are missing or failed (never dropped silently);
- variants with `layer` and `head` levels: the head deltas as layer × head matrices and heat maps, and
  their summary per layer, per head and over all heads;
- any other numeric level axis (e.g. K, the layers re-initialised): the primary metric along it per data
  size, with the unmodified model dashed;
- intermediate tasks: the sequential matrix (intermediate × final task);
- a training-loss series (`log_every`): the loss against the training step, one line per variant;
- perplexity curves (a masked-LM task): the forgetting curve (a panel per eval split, the variants its
  lines), and the best-point perplexity per eval split;
- activation distances: their curves per layer; weight distances with more than one data size: the
  distance per layer and size; a model profile whose variants differ in size: parameters and inference
  speed (otherwise the speeds differ by noise alone); vocabulary analyses of the study's models: the
  vocabulary table; on request, the best run of each group.

What follows from the paper a study reproduces (bertology.results.conventions): the best run of each group
for the monolingual report's studies, MRPC by accuracy in the college report's sequential matrix. As the
papers do, layers and heads are numbered from 1 in every rendered label (`L1H1`, "layer 1"; embeddings and
pooler by name); the weight names and every stored table keep the 0-based indices.

`build_report` computes the analysis tables (bertology.results.analysis, written as Parquet beside the
report) and the sections; `markdown` and `html` render the same sections. The HTML page is self-contained:
inline CSS and SVG, nothing fetched.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from bertology.results import analysis, conventions, paper_comparison, plots, selection
from bertology.results.analysis import HEAD_AXES, ROWS
from bertology.results.study_results import StudyResults

MAX_VARIANT_COLUMNS = 12
FORGETTING_STEPS = 6  # evaluation steps the forgetting table prints (the plot and its Parquet keep all)
LOSS_STEPS = 6  # training steps the training-loss table prints (the plot and its Parquet keep all)
LOSS_LINES = 12  # variants the training-loss plot draws (the table and its Parquet keep all)
DESCRIBE = ("n", "mean", "std", "min", "25%", "50%", "75%", "max")
SIZE = {"fraction": pl.Float64, "count": pl.Int64}  # the training-data size labels
MEAN_CI = ("mean", "sd", "ci_low", "ci_high", "n")  # a main-table cell's columns
DELTA_P = ("delta", "p_value", "p_bh")  # a difference cell's columns
CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:80em;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left}th{background:#f3f3f3}
caption{text-align:left;font-weight:600;padding:.3em 0}svg{max-width:100%;height:auto}"""


@dataclass(frozen=True)
class Section:
    title: str
    note: str
    tables: tuple[tuple[str, pl.DataFrame], ...] = ()  # (caption, table of display text)
    figures: tuple[str, ...] = ()  # inline SVG
    items: tuple[str, ...] = ()  # a list, e.g. the missing runs


@dataclass(frozen=True)
class Report:
    name: str
    study_id: str
    settings: str  # the study's settings in one paragraph
    sections: tuple[Section, ...]
    tables: dict[str, pl.DataFrame]  # analysis tables, written as tables/<name>.parquet


def build_report(results: StudyResults, *, best_of_runs: bool = False) -> Report:
    """Every section that applies to the study, in a fixed order, and the analysis tables behind them."""
    # the tables several sections read, read once (one row per run and metric or module: small)
    results = replace(results, tables={**results.tables, **{t: results.tables[t].collect().lazy() for t in (
        "runs", "weight_distance") if t in results.tables}})
    if "runs" in results.tables:  # a variant with its own model (DistilBERT) in the study model's rows
        results.tables["runs"] = analysis.beside_study_model(results.tables["runs"], _own_models(results),
                                                             results.spec.get("models", []))
    best_of_runs = best_of_runs or conventions.of_study(results.name).best_of_runs
    parts: list[Callable] = [_vocabulary, _missing, _preset]
    summary, tables = None, {}
    if "runs" in results.tables:  # a plan without runs (the vocab-overlap study) has only its vocabulary
        summary = analysis.primary_summary(results.tables["runs"], results.baseline)
        tables["main"] = summary
        parts = [_main, *([_best_of_runs] if best_of_runs else []), _heads, _level_curves, _sequential,
                 _training_loss, _perplexity, _activations, _weights, _profile, *parts]
    parts.append(_paper)
    levels = analysis.variant_levels(results.spec["variants"])
    sections = []
    for part in parts:
        more_sections, more_tables = part(results, summary, levels)
        sections += more_sections
        tables |= more_tables
    return Report(results.name, results.study_id, _settings(results.spec), tuple(sections), tables)


# -- the main table -------------------------------------------------------------------------------------

def mean_sd_n(mean: float | None, sd: float | None, n: int | None, expected_n: int | None = None) -> str:
    """`mean ± sd (n=…)`, flagging a group with fewer runs than the plan expected."""
    return mean_sd_ci_n(mean, sd, None, None, n, expected_n)


def mean_sd_ci_n(mean: float | None, sd: float | None, low: float | None, high: float | None, n: int | None,
                 expected_n: int | None = None) -> str:
    """`mean ± sd [95% interval] (n=…)` (no interval for fewer than two runs), flagging a group with fewer
    runs than the plan expected."""
    if mean is None:
        return "—"
    flag = "" if expected_n is None or n == expected_n else f" of {expected_n}"
    interval = "" if low is None or high is None else f" [{low:.3f}, {high:.3f}]"
    return f"{mean:.3f} ± {'—' if sd is None else f'{sd:.3f}'}{interval} (n={n}{flag})"


def delta_p(delta: float | None, p_value: float | None, p_bh: float | None = None) -> str:
    """`Δ (p=…; BH p=…)`: the raw paired p-value and the one adjusted for the study's many comparisons."""
    if delta is None:
        return "—"
    adjusted = "" if p_bh is None else f"; BH p={p_bh:.3g}"
    return f"{delta:+.3f}" + ("" if p_value is None else f" (p={p_value:.3g}{adjusted})")


def main_table(summary: pl.DataFrame, variants: list[str], expected_n: int) -> pl.DataFrame:
    """The reports' layout: one row per (model, task, eval split), one column per variant."""
    return _wide(summary.with_columns(_text(mean_sd_ci_n, *MEAN_CI, expected_n=expected_n)), variants)


def delta_table(summary: pl.DataFrame, variants: list[str], baseline: str) -> pl.DataFrame:
    """Each other variant's `Δ (p=…)` against the baseline, in the main table's layout."""
    others = summary.filter(pl.col("variant") != baseline)
    return _wide(others.with_columns(_text(delta_p, *DELTA_P)), [v for v in variants if v != baseline])


def long_table(summary: pl.DataFrame, expected_n: int) -> pl.DataFrame:
    """The main and Δ tables in one, one row per (row, variant) in the plan's order: for studies with too
    many variants for columns."""
    summary = _sized(summary)
    return summary.select(*_row_columns(summary), "variant",
                          _text(mean_sd_ci_n, *MEAN_CI, expected_n=expected_n, name="mean ± sd [95% CI] (n)"),
                          _text(delta_p, *DELTA_P, name="Δ (p; BH p)"))


def _main(results, summary, levels):
    labels = variant_labels(results.spec["variants"])
    variants, baseline, seeds = [labels[v] for v in results.variants], results.baseline, len(results.spec["seeds"])
    summary = _relabelled(summary, labels)
    baseline = labels.get(baseline, baseline)
    figures = _figures(_main_figure(summary, baseline)) if len(variants) > 1 else ()  # nothing to compare
    note = ("Each cell: mean ± sample sd of the primary metric over training seeds, [its 95% percentile "
            "bootstrap interval] (from two runs on), (n runs)"
            + ("; the figure draws each mean with that interval" + (f", and `{baseline}` as a dashed line"
                                                                     if baseline else "") if figures else "")
            + ". " + selection.note(results.name, results.spec, summary))
    own = _own_models(results)
    if own and len(results.spec.get("models", [])) == 1:
        note += (" " + ", ".join(f"`{labels[v]}` is {m}" for v, m in own.items()) + " (a model of its own), shown "
                 "in the study model's rows; its difference from the baseline is paired on training seeds.")
    tests = summary["p_value"].count()
    versus = (f"difference from `{baseline}` (mean over seeds) and the paired t-test's p-value over the seeds "
              "both ran (none with fewer than two)"
              + (f", with the p-value adjusted for the study's {tests} comparisons (Benjamini–Hochberg false "
                 "discovery rate over every p-value of this table: **BH p**); with many comparisons, some raw p "
                 "below 0.05 are expected by chance alone" if tests > 1 else ""))
    if len(variants) > MAX_VARIANT_COLUMNS:
        note += f" {len(variants)} variants, one row each" + (f", with the {versus}." if baseline else ".")
        return [Section("Main table", note, (("", long_table(summary, seeds)),), figures)], {}
    sections = [Section("Main table", note, (("", main_table(summary, variants, seeds)),), figures)]
    if baseline is not None and len(variants) > 1:
        sections.append(Section("Difference from the unmodified model", versus[0].upper() + versus[1:] + ".",
                                (("", delta_table(summary, variants, baseline)),)))
    return sections, {}


def _main_figure(summary: pl.DataFrame, baseline: str | None) -> str | None:
    """Every variant's mean with its 95% interval, a panel per main-table row (task, split, metric…)."""
    labelled = _sized(summary)
    keys = _shown(labelled, [k for k in ROWS if k != "metric"], always=("task",)) + ["metric"]
    return plots.interval_panels(labelled.with_columns(_label(keys).alias("_panel")), panel="_panel",
                                 name="main", baseline=baseline)


def _best_of_runs(results, summary, levels):
    best = analysis.best_of_runs(results.tables["runs"])
    labels = variant_labels(results.spec["variants"])
    cells = _relabelled(best, labels).with_columns(_text(lambda b, s: f"{b:.3f} (seed {s})", "best", "best_seed"))
    note = ("The monolingual report's \"best epoch of the best run\" (§7), beside the mean ± sd above: each "
            "group's best value over seeds (lowest for perplexity and loss), already the best epoch of its run.")
    return ([Section("Best run", note, (("", _wide(cells, [labels[v] for v in results.variants])),))],
            {"best_of_runs": best})


# -- sections for what a study varies ---------------------------------------------------------------------

def _heads(results, summary, levels):
    if not set(HEAD_AXES) <= set(levels.columns):
        return [], {}
    deltas = analysis.head_deltas(summary, levels)
    if deltas.is_empty():
        return [], {}
    keys = [k for k in ROWS if k in deltas.columns]
    tables, figures = [], []
    titled = _shown(_sized(deltas), keys, always=("task", "metric"))
    for i, group in enumerate(_sized(deltas).partition_by(keys, maintain_order=True)):
        title = _title(group, titled)
        layers, heads = sorted(group["layer"].unique()), sorted(group["head"].unique())
        wide = group.pivot(on="head", on_columns=heads, index="layer", values="delta").sort("layer")
        matrix = wide.drop("layer").to_numpy().astype(float)
        p_values = (group.pivot(on="head", on_columns=heads, index="layer", values="p_value").sort("layer")
                    .drop("layer").to_numpy().astype(float))
        shown = pl.DataFrame({"layer": [one_based(v) for v in layers]}).with_columns(
            pl.Series(f"head {one_based(h)}", [_signed(v) for v in matrix[:, j]]) for j, h in enumerate(heads))
        baseline = group["baseline_mean"].drop_nulls()
        caption = title + (f" (baseline {baseline[0]:.3f})" if len(baseline) else "")
        tables.append((caption, shown))
        figures.append(plots.heat_map(matrix, [one_based(v) for v in layers], [one_based(h) for h in heads],
                                      name=f"heads-{i}", title=caption, xlabel="head", ylabel="layer", fmt="+.3f",
                                      centre=True, label=f"Δ {group['metric'][0]} vs the baseline",
                                      unclear=~(p_values < 0.05)))
    note = ("Each head variant's mean primary metric minus the baseline's, per task (the college report's "
            "Figures 5–6): green above the baseline, red below, on a colour scale symmetric around 0. Hatched "
            "cells marked n.s.: the 95% interval of the paired difference includes 0 (paired t-test p ≥ 0.05, "
            "before any adjustment for the many heads), or there is no interval (fewer than two seeds). Layers "
            "and heads numbered from 1, as the report does (L1H1: the weights' layer 0, head 0).")
    described = analysis.head_delta_summary(deltas)
    shown = _sized(described).with_columns(pl.col("index") + 1)
    shown = shown.select(*_shown(shown, keys), "over", "index", "n", *(
        _text(lambda x: "—" if x is None else f"{x:.4f}", c, name=c) if c == "std" else _text(_signed, c, name=c)
        for c in DESCRIBE[1:]))
    summary_note = ("The head deltas described per layer, per head index (both from 1) and over all heads (n, mean, "
                    "sd, min, quartiles, max: the college report's Figures 7–10).")
    return ([Section("Attention heads: difference from the baseline", note, tuple(tables), tuple(figures)),
             Section("Attention heads: summary by layer and by head", summary_note, (("", shown),))],
            {"head_deltas": deltas, "head_delta_summary": described})


def _level_curves(results, summary, levels):
    heads = set(HEAD_AXES) <= set(levels.columns)
    sections, tables = [], {}
    for axis, aliases in analysis.level_axes(levels.drop(HEAD_AXES) if heads else levels).items():
        if levels[axis].drop_nulls().n_unique() < 2 or not levels[axis].dtype.is_numeric():
            continue  # a curve needs ordered levels (numbers); named categories are the main figure's bars
        curves = analysis.level_curves(results.tables["runs"], levels, axis)
        if curves.is_empty():
            continue
        tables[f"level_curves_{axis}"] = curves
        # each value of the axis, with the values of the axes that only rename it
        grid = levels.filter(pl.col(axis).is_not_null()).select(axis, *aliases).unique().sort(axis)
        names = {row[0]: " · ".join(f"{a}={v}" for a, v in zip((axis, *aliases), row)) for row in grid.rows()}
        others = [c for c in curves.columns if c in levels.columns and c != axis]
        labelled = _sized(curves)
        keys = [*_shown(labelled, list(ROWS)), *others]
        shown = (labelled.with_columns(_text(mean_sd_n, "mean", "sd", "n"),
                                     pl.col(axis).replace_strict(names, return_dtype=pl.String).alias("_on"))
                 .pivot(on="_on", on_columns=[names[v] for v in grid[axis] if v in set(curves[axis])], index=keys,
                        values="cell"))
        panel_keys = _shown(labelled, ["model", "task", "intermediate", "split", "metric"], always=("task",))
        lines = labelled.with_columns(_label(panel_keys).alias("_panel"),
                                      _label(["data", *(f"{o}=" for o in others)]).alias("_series"))
        ticks = {v: name.replace(" · ", "\n").removeprefix(f"{axis}=") for v, name in names.items()} if aliases else None
        metrics = curves["metric"].unique()
        base = summary.filter(pl.col("variant") == results.baseline) if results.baseline else summary.clear()
        baseline = ({(p, d): m for p, d, m in _sized(base).select(_label(panel_keys), _label(["data"]), "mean").rows()}
                    if not others else None)
        figure = plots.line_panels(lines, panel="_panel", series="_series", x=axis, name=f"levels-{axis}",
                                   xlabel=axis, ylabel=metrics[0] if len(metrics) == 1 else "primary metric",
                                   legend="training data", xticks=ticks, metric="metric", baseline=baseline)
        title = f"Curves by {' · '.join((axis, *aliases))}"
        note = (f"The primary metric by `{axis}`, one curve per training-data size: mean ± sd over seeds "
                "(partial-reinit report, Figures 1–2; college report, Figure 3)"
                + (f"; dashed, in each curve's colour: `{results.baseline}`, the unmodified model, on the same "
                   "data." if baseline else "."))
        sections.append(Section(title, note, (("", shown.fill_null("—")),), _figures(figure)))
    return sections, tables


def _sequential(results, summary, levels):
    runs = results.tables["runs"]
    if not results.spec["intermediates"] and not runs.select(
            pl.col("intermediate").is_not_null().any()).collect().item():
        return [], {}
    metrics = conventions.of_study(results.name).sequential_metrics
    matrix = analysis.sequential_matrix(runs, metrics)
    order = ["none", *results.spec["intermediates"]]
    matrix = matrix.sort(pl.col("intermediate").replace_strict(order, range(len(order)), default=len(order)),
                         maintain_order=True)
    several = matrix.group_by("task").agg(pl.col("split").n_unique()).filter(pl.col("split") > 1)["task"]
    labelled = _sized(matrix).with_columns(pl.when(pl.col("task").is_in(several.implode()))
                                   .then(pl.format("{} {}", "task", "split")).otherwise("task").alias("final"),
                                   _text(lambda m, s: "—" if m is None else f"{m:.3f} ± {'—' if s is None else f'{s:.3f}'}",
                                         "mean", "sd"))
    keys = [k for k in ("model", "variant", "fraction", "count") if k in matrix.columns]
    tables, figures = [], []
    for i, group in enumerate(labelled.partition_by(keys, maintain_order=True) if keys else [labelled]):
        finals = group["final"].unique(maintain_order=True).to_list()
        rows = group["intermediate"].unique(maintain_order=True).to_list()
        shown = group.pivot(on="final", on_columns=finals, index="intermediate", values="cell").fill_null("—")
        values = group.pivot(on="final", on_columns=finals, index="intermediate", values="mean")
        title = _title(group, _shown(labelled, keys, always=("variant",)))
        tables.append((title, shown))
        figures.append(plots.heat_map(values.drop("intermediate").to_numpy().astype(float), rows, finals,
                                      name=f"sequential-{i}", title=title, xlabel="final task",
                                      ylabel="intermediate task", fmt=".3f", centre=False))
    note = ("Rows: the task fine-tuned on first (\"none\": fine-tuned directly); columns: the final task, its "
            "primary metric, mean ± sd over seeds (the college report's Figure 2). The heat map shades each "
            "column from its lowest to its highest value."
            + "".join(f" {task.upper()}: {metric}, as the report's Figure 2 shows." for task, metric in metrics.items()
                      if task in set(matrix["task"])))
    return [Section("Sequential fine-tuning", note, tuple(tables), tuple(figures))], {"sequential_matrix": matrix}


def _training_loss(results, summary, levels):
    """The college report's Figures 1 and 4: training loss against iterations, a panel per task."""
    curves = results.tables.get("curves")
    if curves is not None:
        curves = analysis.beside_study_model(curves, _own_models(results), results.spec.get("models", []))
    loss = analysis.training_loss_curve(curves) if curves is not None else pl.DataFrame()
    if loss.is_empty():
        return [], {}
    labels = variant_labels(results.spec["variants"])
    lines = _relabelled(_sized(loss), labels)
    panel_keys = _shown(lines, ["model", "task", "intermediate", "fraction", "count"], always=("task",))
    lines = lines.with_columns(_label(panel_keys).alias("_panel"))
    variants = [labels[v] for v in results.variants if labels[v] in set(lines["variant"])]
    drawn = variants[:LOSS_LINES]
    figure = plots.line_panels(lines.filter(pl.col("variant").is_in(drawn)), panel="_panel", series="variant",
                               x="step", name="training-loss", xlabel="training step (iteration)",
                               ylabel="training loss", legend="variant")
    steps = loss["step"].unique().sort()
    picked = steps.gather(np.unique(np.linspace(0, len(steps) - 1, LOSS_STEPS).round().astype(int)))
    shown = (lines.filter(pl.col("step").is_in(picked.implode()))
             .with_columns(_text(lambda m, s: f"{m:.3f} (± {'—' if s is None else f'{s:.3f}'})", "mean", "sd"),
                           pl.format("step {}", "step").alias("_step"))
             .pivot(on="_step", on_columns=[f"step {s}" for s in picked], index=["_panel", "variant"], values="cell")
             .rename({"_panel": " · ".join(panel_keys)}).fill_null("—"))
    note = ("Training loss averaged over each `log_every` steps, against the training step, mean (± sd) over seeds, "
            "one line per variant (the college report's Figures 1 and 4: loss against iterations); the table gives a "
            "few of the steps, tables/training_loss.parquet all of them."
            + (f" The plot draws the first {LOSS_LINES} of {len(variants)} variants." if len(variants) > LOSS_LINES
               else ""))
    return [Section("Training loss", note, (("", shown),), _figures(figure))], {"training_loss": loss}


def _perplexity(results, summary, levels):
    sections, tables = [], {}
    curves = results.tables.get("curves")
    forgetting = analysis.forgetting_curve(curves) if curves is not None else pl.DataFrame()
    if not forgetting.is_empty():
        tables["forgetting_curve"] = forgetting
        lines = _sized(forgetting)
        panel_keys = _shown(lines, ["model", "variant", "task", "intermediate", "fraction", "count"],
                            always=("variant",))
        lines = lines.with_columns(_label(panel_keys).alias("_panel"))
        # the variants side by side within each eval split: what forgets more, on one log axis
        by_split = _relabelled(lines, variant_labels(results.spec["variants"])).with_columns(
            _label([*_shown(lines, ["model", "task", "intermediate", "fraction", "count"], always=("task",)), "split"])
            .alias("_split"))
        figure = plots.line_panels(by_split, panel="_split", series="variant", x="step", name="forgetting",
                                   xlabel="training step", ylabel="perplexity", legend="variant")
        steps = forgetting["step"].unique().sort()
        picked = steps.gather(np.unique(np.linspace(0, len(steps) - 1, FORGETTING_STEPS).round().astype(int)))
        splits = forgetting["split"].unique(maintain_order=True).to_list()
        panels = lines["_panel"].unique(maintain_order=True).to_list()
        shown = (lines.filter(pl.col("step").is_in(picked.implode()))
                 .sort(pl.col("_panel").replace_strict(panels, range(len(panels))), "step", maintain_order=True)
                 .with_columns(_text(lambda m, s: f"{m:.2f} (± {'—' if s is None else f'{s:.2f}'})", "mean", "sd"))
                 .pivot(on="split", on_columns=splits, index=["_panel", "step"], values="cell")
                 .rename({"_panel": " · ".join(panel_keys)}).fill_null("—"))
        note = ("Perplexity on every eval split during fine-tuning, mean (± sd) over seeds, at a few of the "
                "evaluation steps (all of them in the plot and in tables/forgetting_curve.parquet): the "
                "cross-lingual report's Table 1 and Figure 2. The plot has a panel per eval split, the variants "
                "as lines in it, on a log axis shared by all panels.")
        sections.append(Section("Forgetting curve", note, (("", shown),), _figures(figure)))
    best = analysis.freezing_perplexity(results.tables["runs"])
    if not best.is_empty():
        tables["freezing_perplexity"] = best
        splits = best["split"].unique(maintain_order=True).to_list()
        keys = _shown(_sized(best), ["model", "task", "intermediate", "fraction", "count", "variant"],
                      always=("variant",))
        shown = (_sized(best).with_columns(_text(mean_sd_n, "mean", "sd", "n"))
                 .pivot(on="split", on_columns=splits, index=keys, values="cell").fill_null("—"))
        note = ("Each variant's perplexity at its best evaluation point on every eval split, mean ± sd over seeds "
                "(the cross-lingual report's Table 2: freezing schemes).")
        sections.append(Section("Perplexity by eval split", note, (("", shown),)))
    return sections, tables


def _activations(results, summary, levels):
    if "activation_distance" not in results.tables:
        return [], {}
    curves = analysis.activation_distance_curves(results.tables["activation_distance"])
    if curves.is_empty():
        return [], {}
    lines = _sized(curves)
    panel_keys = _shown(lines, ["model", "variant", "task", "intermediate", "fraction", "count", "reference"],
                        always=("variant",))
    lines = lines.with_columns(_label(panel_keys).alias("_panel"),
                               pl.when(pl.col("layer") == 0).then(pl.lit("embeddings"))
                               .otherwise(pl.format("layer {}", "layer")).alias("_layer"))
    figure = plots.line_panels(lines, panel="_panel", series="_layer", x="step", name="activations",
                               xlabel="training step", ylabel="mean L2 distance", legend="hidden states")
    panels = lines["_panel"].unique(maintain_order=True).to_list()
    last = lines.filter(pl.col("step") == pl.col("step").max().over("_panel"))
    shown = (last.with_columns(_text(mean_sd_n, "mean", "sd", "n"))
             .pivot(on="_panel", on_columns=panels, index="_layer", values="cell").rename({"_layer": "layer"})
             .fill_null("—"))
    note = ("Mean L2 distance between the fine-tuned model's hidden states and the native reference model's on a "
            "fixed batch, per layer (the embeddings' output, then layers 1 to L) during fine-tuning, mean ± sd over seeds; the table gives "
            "the last evaluation step (the cross-lingual report's Figures 1, 3 and A.1–A.4).")
    return ([Section("Hidden-state distance to the native model", note, (("", shown),), _figures(figure))],
            {"activation_distance": curves})


def _weights(results, summary, levels):
    if "weight_distance" not in results.tables:
        return [], {}
    distances = results.tables["weight_distance"]
    sizes = distances.select("fraction", "count").unique().collect().height
    if max(len(results.spec["sizes"]), sizes) < 2:
        return [], {}
    per_module = analysis.weight_distance_by_size(distances)
    per_layer = analysis.weight_distance_by_size(distances, per="layer")
    projection = analysis.weight_distance_by_size(distances, per="output-projection")
    lines = _sized(projection if projection.height else per_layer)
    panel_keys = _shown(lines, ["model", "variant", "task", "intermediate"], always=("task",))
    lines = lines.with_columns(_label(panel_keys).alias("_panel"))
    names = weight_layer_names(per_module)
    figure = plots.line_panels(lines, panel="_panel", series="data", x="layer", name="weights",
                               xlabel="layer", ylabel="L2 distance", legend="training data",
                               xticks={v: names[v] for v in sorted(names)})
    sizes_seen = lines["data"].unique(maintain_order=True).to_list()
    shown = (lines.with_columns(_text(mean_sd_n, "mean", "sd", "n"))
             .pivot(on="data", on_columns=sizes_seen, index=[*panel_keys, "layer"], values="cell")
             .with_columns(pl.col("layer").replace_strict(names, return_dtype=pl.String)).fill_null("—"))
    without = analysis.runs_without_projection(distances)
    measured = ("each layer's output dense weight matrix (the partial-reinit report's Figure 3: \"the weight "
                "matrices of the linear projections contained in the output sub-layer\")"
                + (f"; {without} runs analysed before that measure existed are left out" if without else "")
                if projection.height else "all of each layer's weights (embeddings, layers 1 to L, pooler; these "
                "runs were analysed before the output-projection measure existed)")
    note = (f"L2 distance between the built and the fine-tuned weights of {measured}, by training-data size, mean ± "
            "sd over seeds; whole layers in tables/weight_distance_by_layer.parquet, per module in "
            "tables/weight_distance.parquet.")
    return ([Section("Weight distance by training-data size", note, (("", shown),), _figures(figure))],
            {"weight_distance": per_module, "weight_distance_by_layer": per_layer,
             "weight_distance_output_projection": projection})


def _profile(results, summary, levels):
    if "model_profile" not in results.tables:
        return [], {}
    profile = analysis.model_profile_summary(results.tables["model_profile"], results.baseline)
    size = [c for c in ("n_params", "encoder_layers") if c in profile.columns]
    # per study model; with one, a variant's own model (DistilBERT) is compared with it too
    by_model = ["model"] if "model" in profile.columns and len(results.spec.get("models", [])) > 1 else []
    resized = bool(size) and (profile.group_by(by_model or pl.lit(0)).agg(pl.struct(size).n_unique().alias("_n"))
                              ["_n"].max() > 1)
    if not resized:
        # every variant has its model's size: their speeds differ by measurement noise alone (a head
        # re-initialised, layers reversed), not a finding; the numbers stay in tables/model_profile.parquet
        return [], {"model_profile": profile}
    keys = _shown(profile, ["model", "device", "batch_size", "seq_len", "variant"], always=("variant",))
    cost = ([_text(lambda x: "—" if x is None else f"{x:.2f}", "intervention_cpu_seconds", name="cost to make (CPU s)")]
            if "intervention_cpu_seconds" in profile.columns else [])
    shown = _relabelled(profile, variant_labels(results.spec["variants"])).select(
        *keys, (pl.col("n_params") / 1e6).round(1).alias("parameters (M)"), pl.col("encoder_layers").alias("layers"),
        *cost, _text(lambda m, s, n: f"{m:,.1f} ± {'—' if s is None else f'{s:,.1f}'} (n={n})", "mean", "sd", "n",
                     name="examples/s"),
        _text(lambda x: "—" if x is None else f"{x:.2f}×", "speedup", name="speed"))
    note = ("Parameters, encoder layers, the intervention's cost and inference speed of each variant, with the "
            "speed relative to the unmodified model on the same device (the monolingual report's Table 7).")
    return [Section("Model size and inference speed", note, (("", shown),))], {"model_profile": profile}


def _figures(*figures: str | None) -> tuple[str, ...]:
    """The figures that were drawn (a plot function gives None when there is nothing to draw)."""
    return tuple(f for f in figures if f)


def _vocabulary(results, summary, levels):
    if results.vocabulary is None:
        return [], {}
    table = analysis.vocabulary_table(results.vocabulary)
    shown = table.select(
        "model", "reference", *(_text(lambda x: f"{x:,}", column, name=name) for column, name in (
            ("vocab_size", "word-pieces"), ("english_like", "English-like"), ("overlap", "shared with the reference"))),
        pl.col("corpus").fill_null("—"),
        _text(lambda x: "—" if x is None else f"{x:.1%}", "english_window_share", name="English-like contexts"))
    note = ("English-like word-pieces (`(##)?[A-Za-z]+`) of each model's vocabulary and how many it shares with "
            "the reference vocabulary, and the share of English-like 10-piece contexts in a corpus (the "
            "monolingual report's Table 2).")
    return [Section("Vocabulary", note, (("", shown),))], {"vocabulary": table}


def _missing(results, summary, levels):
    failed = set(analysis.failed_runs(results.tables["runs"])["run_id"]) if "runs" in results.tables else set()
    lacking = {c.run.id: tables for c, tables in results.incomplete}
    rows = [(c, "missing") for c in results.missing] + [(c, "incomplete") for c, _ in results.incomplete] + [
        (c, "failed") for c, run_id in zip(results.cells, results.run_ids) if run_id in failed]
    sections = []
    if results.unmeasured:
        sections.append(Section(f"Models not measured ({len(results.unmeasured)} of {len(results.spec['models'])})",
                                "Models of the plan whose vocabulary measurement failed or is missing.",
                                items=results.unmeasured))
    if not rows:
        return sections, {}
    for reason, note in (("missing", "Runs the plan expected that published no result."),
                         ("incomplete", ("Runs that published their scores but not all their results (a failed "
                                        "analyze step publishes no weight distances).")),
                         ("failed", "Runs that published no number for their primary metric.")):
        cells = [c for c, r in rows if r == reason]
        if cells:
            sections.append(Section(f"{reason.capitalize()} runs ({len(cells)} of {len(results.cells)})", note,
                                    items=tuple(_describe_cell(c) + (f" (no {', '.join(lacking[c.run.id])})"
                                                                     if reason == "incomplete" else "")
                                                for c in cells)))
    table = pl.DataFrame([{**{k: v for k, v in c.labels().items() if k != "study"}, "reason": r} for c, r in rows],
                         infer_schema_length=None)
    return sections, {"missing_runs": table}


def _preset(results, summary, levels):
    """What the preset changed: a tiny or demo study says which stand-ins replaced the report's models."""
    if not results.preset_changes:
        return [], {}
    note = (f"Preset `{results.spec.get('preset')}` replaced these settings of the study; models marked "
            "stand-in are offline substitutes, so its numbers are not the report's.")
    return [Section("Preset changes", note, items=results.preset_changes)], {}


def _paper(results, summary, levels):
    """The report vs this run: the report's transcribed numbers beside ours and whether its orderings hold
    (bertology.results.paper_comparison)."""
    if paper_comparison.paper_numbers(results.name).is_empty():
        return [], {}
    t = results.tables
    heads = (analysis.head_delta_summary(analysis.head_deltas(summary, levels))
             if summary is not None and set(HEAD_AXES) <= set(levels.columns) else None)
    ours = paper_comparison.our_values(
        paper_comparison.all_metrics_summary(t["runs"], results.baseline) if "runs" in t else None,
        best=paper_comparison.all_metrics_best(t["runs"]) if "runs" in t else None,
        head_summary=heads,
        forgetting=analysis.forgetting_curve(t["curves"]) if "curves" in t else None,
        vocabulary=analysis.vocabulary_table(results.vocabulary) if results.vocabulary is not None else None,
        profile=analysis.model_profile_summary(t["model_profile"], results.baseline) if "model_profile" in t else None)
    stood_in = results.spec.get("preset") in ("tiny", "demo")
    cells = paper_comparison.compare_cells(results.name, ours, comparable=not stood_in)
    orderings = paper_comparison.compare_orderings(cells)
    verdict = paper_comparison.verdict(orderings)
    comparable = not (cells["status"] == "not comparable").any()
    note = paper_comparison.section_note(cells, verdict)
    if not comparable:
        note += (" The models were stood in (a tiny or demo preset, or models other than the report's): the "
                 "values are not comparable, so no difference is given; compare the orderings only.")
    labels = {k: v for k, v in variant_labels(results.spec["variants"]).items() if k != v}
    run = _relabelled(cells.filter(pl.col("status") != "not run"), labels)
    keys = _shown(run, ["table", "row", "column", "model", "variant", "task", "intermediate", "split", "metric"],
                  always=("table", "row", "column"))
    shown_cells = run.select(
        *keys, pl.col("printed").alias("report"),
        pl.col("quantity").replace(paper_comparison.QUANTITIES).alias("quantity"),
        _text(lambda v: "—" if v is None else f"{v:.4g}", "ours", name="this run"),
        _text(lambda m, s, n: "—" if m is None else f"{m:.4g}" + ("" if s is None else f" ± {s:.2g}") + ("" if n is None else f" (n={n})"),
              "ours_mean", "ours_sd", "n", name="our mean ± sd"),
        _text(lambda d: "—" if d is None else f"{d:+.3f}", "difference", name="difference"), "status")
    named = pl.col("ordering")
    for name, label in labels.items():  # head variants as the papers number them (L1H1)
        named = named.str.replace_all(rf"\b{name}\b", label)
    shown_orderings = orderings.with_columns(named.alias("ordering")).select(
        "table", "group", pl.col("quantity").replace(paper_comparison.QUANTITIES), "ordering",
        _text(lambda a, b: f"{a:.4g} > {b:.4g}", "paper_higher", "paper_lower", name="report"),
        _text(lambda a, b, ca, cb: f"{_num(a)} vs {_num(b)}" + (f" ({ca} vs {cb})" if ca and cb else ""),
              "ours_higher", "ours_lower", "ci_higher", "ci_lower", name="this run"), "status")
    not_run = cells.height - run.height
    if not run.height:  # no table of nothing: say so in the note
        note += f" None of the report's {cells.height} cells was run here (they are in tables/paper_cells.parquet)."
    tables = (*(((f"Cells ({run.height} of {cells.height} run"
                  + (f"; the {not_run} others are in tables/paper_cells.parquet)" if not_run else ")"), shown_cells),)
                if run.height else ()),
              *(((f"Orderings: {verdict}", shown_orderings),) if orderings.height else ()))
    return ([Section("The report vs this run", note, tables)],
            {"paper_cells": cells.drop("_cell"), "paper_orderings": orderings})


# -- rendering --------------------------------------------------------------------------------------------

def markdown(report: Report) -> str:
    lines = [f"# {report.name} ({report.study_id})", "", report.settings, ""]
    for section in report.sections:
        lines += [f"## {section.title}", "", section.note, ""]
        for caption, table in section.tables:
            lines += ([f"**{caption}**", ""] if caption else []) + [markdown_table(table), ""]
        lines += [f"- {item}" for item in section.items] + ([""] if section.items else [])
        if section.figures:
            lines += [f"({len(section.figures)} figure{'s' if len(section.figures) > 1 else ''} in report.html)", ""]
    return "\n".join(lines)


def html(report: Report) -> str:
    e = html_lib.escape
    title = f"{report.name} ({report.study_id})"
    body = [f"<h1>{e(title)}</h1>", f"<p>{inline_html(report.settings)}</p>"]
    for section in report.sections:
        body += ["<section>", f"<h2>{e(section.title)}</h2>", f"<p>{inline_html(section.note)}</p>"]
        body += [html_table(table, caption) for caption, table in section.tables]
        body += [f"<figure>{svg}</figure>" for svg in section.figures]
        if section.items:
            body += ["<ul>", *(f"<li>{e(item)}</li>" for item in section.items), "</ul>"]
        body.append("</section>")
    return "\n".join(['<!DOCTYPE html>', '<html lang="en">', '<head>', '<meta charset="utf-8">',
                      f"<title>{e(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>", *body,
                      "</body>", "</html>", ""])


def inline_html(text: str) -> str:
    """The Markdown the notes use, as HTML: `code`, **bold** and [links](relative/or#anchor) (a link that
    leaves the page stays text: the page fetches nothing). Everything else is escaped, so a note is never
    markup of its own (no markdown library is a dependency; this subset is all the notes need)."""
    parts = re.split(r"`([^`]+)`", text)  # odd parts: code spans, taken literally
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{html_lib.escape(part)}</code>")
            continue
        part = html_lib.escape(part, quote=False)
        part = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", part)
        part = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", _link, part)
        out.append(part)
    return "".join(out)


def _link(match: re.Match) -> str:
    text, target = match.groups()
    if re.match(r"([a-z][a-z0-9+.-]*:|//)", target, re.IGNORECASE):  # another site, or a scheme: plain text
        return f"{text} ({target})"
    return f'<a href="{html_lib.escape(target)}">{text}</a>'


def markdown_table(df: pl.DataFrame) -> str:
    def cell(v) -> str:
        return "—" if v is None else str(v).replace("|", "\\|")

    header = "| " + " | ".join(map(cell, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    return "\n".join([header, rule, *("| " + " | ".join(map(cell, row)) + " |" for row in df.iter_rows())])


def html_table(df: pl.DataFrame, caption: str = "") -> str:
    e = html_lib.escape

    def cell(v) -> str:
        return "—" if v is None else e(str(v))

    head = "<tr>" + "".join(f"<th>{e(c)}</th>" for c in df.columns) + "</tr>"
    rows = ["<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in df.iter_rows()]
    return "\n".join(["<table>", *([f"<caption>{e(caption)}</caption>"] if caption else []), head, *rows, "</table>"])


# -- labels as the papers write them ----------------------------------------------------------------------

def one_based(index: int) -> str:
    """A 0-based layer or head index as the papers number it."""
    return str(int(index) + 1)


def variant_labels(variants: list[dict]) -> dict[str, str]:
    """Each variant's name as the report prints it: a head variant named from its 0-based grid values,
    `L{layer}H{head}` (head-reinit's L0H0), is printed 1-based (L1H1); every other name as it is."""
    labels = {}
    for v in variants:
        levels = v.get("levels") or {}
        layer, head = levels.get("layer"), levels.get("head")
        zero_based = isinstance(layer, int) and isinstance(head, int) and v["name"] == f"L{layer}H{head}"
        labels[v["name"]] = f"L{layer + 1}H{head + 1}" if zero_based else v["name"]
    return labels


def weight_layer_names(per_module: pl.DataFrame) -> dict[int, str]:
    """The weight-distance layer axis by name: "embeddings" and "pooler" for the layers holding only that
    module (stored as -1 and L), the encoder layers from 1."""
    modules = per_module.group_by("layer").agg(pl.col("module").unique())
    names = {}
    for layer, held in modules.iter_rows():
        held = set(held)
        names[layer] = next(iter(held)) if held in ({"embeddings"}, {"pooler"}) else one_based(layer)
    return names


def _relabelled(frame: pl.DataFrame, labels: dict[str, str]) -> pl.DataFrame:
    return frame.with_columns(pl.col("variant").replace(labels)) if "variant" in frame.columns else frame


def _own_models(results) -> dict[str, str]:
    """Variants that fine-tune a model of their own (a `model` key) -> that model."""
    return {v["name"]: v["model"] for v in results.spec["variants"] if v.get("model")}


# -- helpers ----------------------------------------------------------------------------------------------

def _settings(spec: dict) -> str:
    """The plan's settings in one paragraph (those it has: a vocabulary plan has no regime or seeds)."""
    parts = [f"Preset `{spec.get('preset')}`", f"models {', '.join(spec.get('models', []))}"]
    if "seeds" in spec:
        parts.append(f"seeds {spec['seeds']}")
    if "regime" in spec:
        regime = spec["regime"]
        parts.append(f"regime {regime['name']} (lr {regime['lr']}, batch {regime['batch_size']}, "
                     f"{regime['epochs']} epochs, max length {spec.get('max_length')})")
    if "source" in spec:
        parts.append(f"data source `{spec['source']}`")
    text = "; ".join(parts) + "."
    sizes = [_size_text(s.get("fraction"), s.get("count")) for s in spec["sizes"]]
    if sizes != ["all data"]:
        text += f" Training data: {', '.join(sizes)}."
    if spec["intermediates"]:
        text += f" Intermediate tasks: {', '.join(spec['intermediates'])}."
    axes = list(dict.fromkeys(a for v in spec["variants"] for a in v["levels"]))
    if axes:
        text += f" Variants vary {', '.join(axes)}."
    return text


def _size_text(fraction: float | None, count: int | None) -> str:
    return f"fraction {fraction}" if fraction is not None else f"count {count}" if count is not None else "all data"


def _sized(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame as a table shows it: "none" for no intermediate task, and `data`, its groups' training-data
    size as text (as _size_text), where it has a size."""
    if "intermediate" in frame.columns:
        frame = frame.with_columns(pl.col("intermediate").fill_null("none"))
    if not any(c in frame.columns for c in SIZE):
        return frame
    frame = frame.with_columns(pl.lit(None, dtype).alias(c) for c, dtype in SIZE.items() if c not in frame.columns)
    return frame.with_columns(pl.when(pl.col("fraction").is_not_null()).then(pl.format("fraction {}", "fraction"))
                              .when(pl.col("count").is_not_null()).then(pl.format("count {}", "count"))
                              .otherwise(pl.lit("all data")).alias("data"))


def _describe_cell(cell) -> str:
    labels = cell.labels()
    extra = "".join([f" / after {labels['intermediate']}" if labels["intermediate"] else "",
                     f" / {_size_text(labels['fraction'], labels['count'])}"
                     if labels["fraction"] is not None or labels["count"] is not None else ""])
    return f"{cell.variant} / {cell.model} / {labels['task']}{extra} / seed {labels['seed']}: run {labels['run_id']}"


def _text(fn: Callable[..., str], *columns: str, name: str = "cell", **kwargs) -> pl.Expr:
    """A display column: `fn` of each row's `columns` (display only: one row per group, not per run)."""
    return pl.struct(*columns).map_elements(lambda s: fn(*(s[c] for c in columns), **kwargs),
                                            return_dtype=pl.String).alias(name)


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _signed(value: float | None) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{value:+.4f}"


def _row_columns(frame: pl.DataFrame) -> list[str]:
    """The main table's row labels (of a _sized frame): model, task, split and metric, and the intermediate
    task and data size where the study varies them."""
    return _shown(frame, list(ROWS), always=("model", "task", "split", "metric"))


def _shown(frame: pl.DataFrame, keys: list[str], always: tuple[str, ...] = ()) -> list[str]:
    """The group columns worth printing: those that vary in `frame`, and `always`; the size columns as the
    one `data` column of a _sized frame."""
    shown = []
    for key in keys:
        name = "data" if key in SIZE else key
        if name in frame.columns and name not in shown and (key in always or frame[name].n_unique() > 1):
            shown.append(name)
    return shown


def _label(keys: list[str]) -> pl.Expr:
    """A group's label from its `keys` values, e.g. "reversed · rte · fraction 0.1"; a key ending in "="
    is written with its name ("k=3")."""
    if not keys:
        return pl.lit("all")
    parts = [pl.format(f"{k}{{}}", k.removesuffix("=")) if k.endswith("=") else pl.col(k).cast(pl.String)
             for k in keys]
    return pl.concat_str(parts, separator=" · ", ignore_nulls=True)


def _title(group: pl.DataFrame, keys: list[str]) -> str:
    """The label of a one-group frame."""
    return group.head(1).select(_label([k for k in keys if k in group.columns])).item()


def _wide(cells: pl.DataFrame, variants: list[str]) -> pl.DataFrame:
    """`cell` texts pivoted to one row per main-table row and one column per variant, in the given order; a
    variant without a result shows "—"."""
    cells = _sized(cells)
    rows = _row_columns(cells)
    present = [v for v in variants if v in set(cells["variant"])]
    wide = cells.pivot(on="variant", on_columns=present, index=rows, values="cell")
    return wide.with_columns(pl.lit("—").alias(v) for v in variants if v not in present).select(
        *rows, *variants).fill_null("—")
