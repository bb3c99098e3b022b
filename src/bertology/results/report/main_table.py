"""The main table: the primary metric of every variant (columns) per model, task, eval split and metric
(rows), as the reports lay out their tables, with its figure, each variant's difference from the
unmodified model, and on request the best run of each group.

With more than MAX_VARIANT_COLUMNS variants a table of columns stops being readable, so the long form has
one row per variant and the differences beside the means.
"""

from __future__ import annotations

import polars as pl

from bertology.results import analysis, conventions, plots, selection
from bertology.results.analysis import ROWS
from bertology.results.cells import cell_text, delta_p, mean_sd_ci_n
from bertology.results.labels import (
    group_label,
    own_models,
    relabelled,
    row_columns,
    shown_columns,
    sized,
    variant_labels,
)
from bertology.results.report.document import Section, figures_drawn

MAX_VARIANT_COLUMNS = 12
MEAN_CI = ("mean", "sd", "ci_low", "ci_high", "n")  # a main-table cell's columns
DELTA_P = ("delta", "p_value", "p_bh")  # a difference cell's columns


def main_table(summary: pl.DataFrame, variants: list[str], expected_n: int) -> pl.DataFrame:
    """The reports' layout: one row per (model, task, eval split), one column per variant."""
    return variant_columns(summary.with_columns(cell_text(mean_sd_ci_n, *MEAN_CI, expected_n=expected_n)), variants)


def delta_table(summary: pl.DataFrame, variants: list[str], baseline: str) -> pl.DataFrame:
    """Each other variant's `Δ (p=…)` against the baseline, in the main table's layout."""
    others = summary.filter(pl.col("variant") != baseline)
    return variant_columns(others.with_columns(cell_text(delta_p, *DELTA_P)), [v for v in variants if v != baseline])


def long_table(summary: pl.DataFrame, expected_n: int) -> pl.DataFrame:
    """The main and Δ tables in one, one row per (row, variant) in the plan's order: for studies with too
    many variants for columns."""
    summary = sized(summary)
    return summary.select(*row_columns(summary), "variant",
                          cell_text(mean_sd_ci_n, *MEAN_CI, expected_n=expected_n, name="mean ± sd [95% CI] (n)"),
                          cell_text(delta_p, *DELTA_P, name="Δ (p; BH p)"))


def variant_columns(cells: pl.DataFrame, variants: list[str]) -> pl.DataFrame:
    """`cell` texts pivoted to one row per main-table row and one column per variant, in the given order; a
    variant without a result shows "—"."""
    cells = sized(cells)
    rows = row_columns(cells)
    present = [v for v in variants if v in set(cells["variant"])]
    wide = cells.pivot(on="variant", on_columns=present, index=rows, values="cell")
    return wide.with_columns(pl.lit("—").alias(v) for v in variants if v not in present).select(
        *rows, *variants).fill_null("—")


def main(results, summary, levels):
    """The main table, its figure and the differences from the unmodified model: the result every
    study has, in the reports' layout (one row per variant beyond MAX_VARIANT_COLUMNS variants)."""
    labels = variant_labels(results.spec["variants"])
    variants, baseline, seeds = [labels[v] for v in results.variants], results.baseline, len(results.spec["seeds"])
    summary = relabelled(summary, labels)
    baseline = labels.get(baseline, baseline)
    figures = figures_drawn(main_figure(summary, baseline)) if len(variants) > 1 else ()  # nothing to compare
    note = ("Each cell: mean ± sample sd of the primary metric over training seeds, [its 95% percentile "
            "bootstrap interval] (from two runs on), (n runs)"
            + ("; the figure draws each mean with that interval" + (f", and `{baseline}` as a dashed line"
                                                                     if baseline else "") if figures else "")
            + ". " + selection.note(results.name, results.spec, summary))
    evaluation = conventions.of_study(results.name).evaluation
    if evaluation:  # the paper evaluated on a split the study cannot: say which one it used, and why
        note += " " + evaluation
    own = own_models(results)
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


def main_figure(summary: pl.DataFrame, baseline: str | None) -> str | None:
    """Every variant's mean with its 95% interval, a panel per main-table row (task, split, metric…)."""
    labelled = sized(summary)
    keys = shown_columns(labelled, [k for k in ROWS if k != "metric"], always=("task",)) + ["metric"]
    return plots.interval_panels(labelled.with_columns(group_label(keys).alias("_panel")), panel="_panel",
                                 name="main", baseline=baseline)


def best_of_runs(results, summary, levels):
    """Each group's best run beside the mean ± sd: what the monolingual report prints (§7)."""
    best = analysis.best_of_runs(results.tables["runs"])
    labels = variant_labels(results.spec["variants"])
    cells = relabelled(best, labels).with_columns(cell_text(lambda b, s: f"{b:.3f} (seed {s})", "best", "best_seed"))
    note = ("The monolingual report's \"best epoch of the best run\" (§7), beside the mean ± sd above: each "
            "group's best value over seeds (lowest for perplexity and loss), already the best epoch of its run.")
    return ([Section("Best run", note, (("", variant_columns(cells, [labels[v] for v in results.variants])),))],
            {"best_of_runs": best})
