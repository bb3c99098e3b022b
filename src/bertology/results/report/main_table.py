"""The main table: the primary metric of every variant (columns) per model, task, eval split and metric
(rows), as the reports lay out their tables, with its figure, each variant's difference from the
unmodified model, and on request the best run of each group.

With more than MAX_VARIANT_COLUMNS variants a table of columns stops being readable, so the long form has
one row per variant and the differences beside the means.
"""

from __future__ import annotations

import math

import polars as pl

from bertology.results import analysis, conventions, paper_comparison, plots, selection
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
from bertology.results.report import paper
from bertology.results.report.document import Section, figures_drawn
from bertology.results.stats import MIN_INTERVAL_RUNS

MAX_VARIANT_COLUMNS = 12
MEAN_CI = ("mean", "sd", "ci_low", "ci_high", "n")  # a main-table cell's columns
DELTA_P = ("delta", "p_value", "p_bh")  # a difference cell's columns


def mean_ci_or_runs(mean: float | None, sd: float | None, low: float | None, high: float | None, n: int | None,
                    expected_n: int | None = None) -> str:
    """A main-table cell: `mean ± sd [95% interval] (n=…)` from MIN_INTERVAL_RUNS runs on; below that, no
    interval (the percentile interval of two runs is the two runs) but the runs themselves: `mean (runs a,
    b; n=2)`, the two recovered exactly from their mean and sample sd (mean ∓ sd/√2); one run: `value (n=1)`."""
    if mean is None or n is None or n >= MIN_INTERVAL_RUNS:
        return mean_sd_ci_n(mean, sd, low, high, n, expected_n)
    flag = "" if expected_n is None or n == expected_n else f" of {expected_n}"
    if n == 2 and sd is not None:
        half = sd / math.sqrt(2)
        return f"{mean:.3f} (runs {mean - half:.3f}, {mean + half:.3f}; n=2{flag})"
    return f"{mean:.3f} (n={n}{flag})"


def main_table(summary: pl.DataFrame, variants: list[str], expected_n: int) -> pl.DataFrame:
    """The reports' layout: one row per (model, task, eval split), one column per variant."""
    return variant_columns(summary.with_columns(cell_text(mean_ci_or_runs, *MEAN_CI, expected_n=expected_n)),
                           variants)


def delta_table(summary: pl.DataFrame, variants: list[str], baseline: str) -> pl.DataFrame:
    """Each other variant's `Δ (p=…)` against the baseline, in the main table's layout."""
    others = summary.filter(pl.col("variant") != baseline)
    return variant_columns(others.with_columns(cell_text(delta_p, *DELTA_P)), [v for v in variants if v != baseline])


def long_table(summary: pl.DataFrame, expected_n: int) -> pl.DataFrame:
    """The main and Δ tables in one, one row per (row, variant) in the plan's order: for studies with too
    many variants for columns."""
    summary = sized(summary)
    return summary.select(*row_columns(summary), "variant",
                          cell_text(mean_ci_or_runs, *MEAN_CI, expected_n=expected_n, name="mean ± sd [95% CI] (n)"),
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
    marks = paper.marks(results, summary, levels)
    marks = relabelled(marks, labels) if marks is not None else None
    summary = relabelled(summary, labels)
    baseline = labels.get(baseline, baseline)
    drawn = with_report(summary, marks)
    figures = figures_drawn(main_figure(drawn, baseline)) if len(variants) > 1 else ()  # nothing to compare
    few = summary.filter(pl.col("n") < MIN_INTERVAL_RUNS).height
    note = (f"Each cell: mean ± sample sd of the primary metric over training seeds, [its 95% percentile "
            f"bootstrap interval] (from {MIN_INTERVAL_RUNS} runs on), (n runs)"
            + (f"; with fewer than {MIN_INTERVAL_RUNS} runs there is no interval (of two runs it would be the two "
               "runs themselves): the cell shows the runs instead" if few else "")
            + ("; the figure draws each mean" + (" with its interval" if few < summary.height else "")
               + (f", `{baseline}` as a dashed line" if baseline else "")
               + (f", and the value the report printed as a red diamond labelled \"report\" ({report_quantity(marks)})"
                  if figures and marks is not None else "") if figures else "")
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
    """Every variant's mean with its 95% interval, a panel per main-table row (task, split, metric…), and
    the report's printed value where `summary` has one (`report`, from `with_report`)."""
    labelled = sized(summary)
    keys = shown_columns(labelled, [k for k in ROWS if k != "metric"], always=("task",)) + ["metric"]
    return plots.interval_panels(labelled.with_columns(group_label(keys).alias("_panel")), panel="_panel",
                                 name="main", baseline=baseline,
                                 report="report" if "report" in summary.columns else None)


def with_report(summary: pl.DataFrame, marks: pl.DataFrame | None) -> pl.DataFrame:
    """The summary with `report`, the value the report printed for each row's group (paper.marks), null
    where it printed none; unchanged where it printed none at all."""
    if marks is None:
        return summary
    keys = [k for k in marks.columns if k in summary.columns]
    left = summary.with_row_index("_row").select(
        "_row", *((pl.col(k).cast(pl.String).fill_null("none") if k == "intermediate" else pl.col(k).cast(pl.String))
                  for k in keys))
    right = marks.select(*keys, pl.col("paper").alias("report")).unique(subset=keys, keep="first")
    joined = left.join(right, on=keys, how="left").sort("_row")
    return summary.with_columns(joined["report"])


def report_quantity(marks: pl.DataFrame) -> str:
    """What the report's printed values are, per table: "Table 1: best run"."""
    pairs = marks.select("table", "quantity").unique(maintain_order=True).rows()
    return "; ".join(f"{table}: {paper_comparison.QUANTITIES.get(q, q)}" for table, q in pairs)


def best_of_runs(results, summary, levels):
    """Each group's best run beside the mean ± sd: what the monolingual report prints (§7)."""
    best = analysis.best_of_runs(results.tables["runs"])
    labels = variant_labels(results.spec["variants"])
    cells = relabelled(best, labels).with_columns(cell_text(lambda b, s: f"{b:.3f} (seed {s})", "best", "best_seed"))
    note = ("The monolingual report's \"best epoch of the best run\" (§7), beside the mean ± sd above: each "
            "group's best value over seeds (lowest for perplexity and loss), already the best epoch of its run.")
    return ([Section("Best run", note, (("", variant_columns(cells, [labels[v] for v in results.variants])),))],
            {"best_of_runs": best})
