"""The report vs this run: the paper's transcribed numbers beside ours, and whether its orderings hold
(bertology.results.paper_comparison computes both; this module lays them out).

Two sections: the verdict, first in every report (the orderings the report asserts that this run tested,
holds or violated: what a reader came for), and the full comparison, last, because it reads what the
sections above show (the head summary, the forgetting curve, the vocabulary, the model profile) in the
paper's own terms. `marks` gives the main figure the report's printed values.
"""

from __future__ import annotations

import polars as pl

from bertology.results import analysis, paper_comparison
from bertology.results.analysis import HEAD_AXES
from bertology.results.cells import cell_text, num
from bertology.results.labels import relabelled, shown_columns, variant_labels
from bertology.results.report.document import Section, anchor

VERDICT_TITLE = "Verdict: the report vs this run"
COMPARISON_TITLE = "The report vs this run: every number and claim"
_LAST: dict = {}  # the last study's comparison: three builders read it, computed once


def compared(results, summary, levels) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """(cells, orderings) of paper_comparison for the study, or None where no report's numbers are
    transcribed for it; computed once per StudyResults (build_report passes the same one to every builder)."""
    key = (results.name, results.study_id, id(results))
    if _LAST.get("key") == key:
        return _LAST["value"]
    value = None
    if not paper_comparison.paper_numbers(results.name).is_empty():
        t = results.tables
        heads = (analysis.head_delta_summary(analysis.head_deltas(summary, levels))
                 if summary is not None and set(HEAD_AXES) <= set(levels.columns) else None)
        ours = paper_comparison.our_values(
            paper_comparison.all_metrics_summary(t["runs"], results.baseline) if "runs" in t else None,
            best=paper_comparison.all_metrics_best(t["runs"]) if "runs" in t else None,
            head_summary=heads,
            forgetting=analysis.forgetting_curve(t["curves"]) if "curves" in t else None,
            vocabulary=analysis.vocabulary_table(results.vocabulary) if results.vocabulary is not None else None,
            profile=(analysis.model_profile_summary(t["model_profile"], results.baseline)
                     if "model_profile" in t else None))
        stood_in = results.spec.get("preset") in ("tiny", "demo")
        cells = paper_comparison.compare_cells(results.name, ours, comparable=not stood_in)
        value = (cells, paper_comparison.compare_orderings(cells))
    _LAST.clear()
    _LAST.update(key=key, value=value)
    return value


def marks(results, summary, levels) -> pl.DataFrame | None:
    """The report's printed values of the main table's groups (its primary metric): the summary's keys
    (model, task, intermediate, split, metric, variant) with `paper` (the value) and `printed` (its text),
    for the main figure to draw beside our means; None where the report prints none of them."""
    got = compared(results, summary, levels)
    if got is None or summary is None:
        return None
    cells = got[0].filter((pl.col("status") != "not run") & pl.col("paper").is_not_null()
                          & pl.col("quantity").is_in(["mean", "single", "best"]))
    if cells.is_empty():
        return None
    keys = [k for k in ("task", "split", "metric", "variant", "intermediate") if k in summary.columns]
    ours = summary.select(*keys, *(["model"] if "model" in summary.columns else [])).unique(maintain_order=True)
    if "intermediate" in keys:
        ours = ours.with_columns(pl.col("intermediate").fill_null("none"))
    right = cells.select(*(pl.col(k).cast(pl.String).fill_null("none") if k == "intermediate" else pl.col(k).cast(pl.String)
                           for k in keys), pl.col("our_model").alias("model"), "paper",
                         "printed", "quantity", "table").unique(subset=[*keys, "model"], maintain_order=True)
    on = [*keys, *(["model"] if "model" in ours.columns else [])]
    found = ours.with_columns(pl.col(k).cast(pl.String) for k in keys).join(right, on=on, how="inner",
                                                                             maintain_order="left")
    return None if found.is_empty() else found


def shown_orderings(orderings: pl.DataFrame, labels: dict) -> pl.DataFrame:
    """The orderings as the report's tables show them: head variants as the papers number them (L1H1), the
    quantity, both sides' values, the status and the claim."""
    named = pl.col("ordering")
    for name, label in labels.items():
        named = named.str.replace_all(rf"\b{name}\b", label)
    return orderings.with_columns(named.alias("ordering")).select(
        "table", "group",
        pl.struct("quantity", "quantity_lower").map_elements(
            lambda q: paper_comparison.quantity_label(q["quantity"], q["quantity_lower"]),
            return_dtype=pl.String).alias("quantity"), "ordering",
        cell_text(lambda a, b: f"{num(a)} > {num(b)}", "paper_higher", "paper_lower", name="report"),
        cell_text(lambda a, b, ca, cb: f"{num(a)} vs {num(b)}" + (f" ({ca} vs {cb})" if ca and cb else ""),
                  "ours_higher", "ours_lower", "ci_higher", "ci_lower", name="this run"), "status",
        pl.struct(orderings.columns).map_elements(paper_comparison.claim_text, return_dtype=pl.String)
        .alias("the report's claim"), "asserted", "all_pairs")


STATUS_NOTE = ("**holds** / **violated**: our two values are in the report's order / the other way round, and "
               "the bootstrap 95% intervals of our means do not overlap; **…, not significant**: they overlap, so "
               "our order may be noise; **…, untested (n < 3)**: a side has fewer than 3 runs, too few for an "
               "interval, so only the values say which is higher; **tie**: our two values are equal.")


def verdict(results, summary, levels):
    """The verdict, first: the orderings the report asserts that this run tested, each holding or violated
    (the rows of the full comparison's asserted table that were run; its claims stay there)."""
    got = compared(results, summary, levels)
    if got is None:
        return [], {}
    cells, orderings = got
    line = paper_comparison.verdict(orderings)
    labels = {k: v for k, v in variant_labels(results.spec["variants"]).items() if k != v}
    shown = shown_orderings(orderings, labels).filter(pl.col("asserted") & (pl.col("status") != "not run"))
    multi = shown["table"].n_unique() > 1
    table = shown.select(*(["table"] if multi else []), "group", "ordering", "quantity", "report", "this run",
                         "status")
    tables = cells.filter(pl.col("status") != "not run")["table"].unique(maintain_order=True).to_list()
    source = f"{cells['report'][0]}" + (f", {', '.join(tables)}" if tables else "")
    note = (f"**{line[0].upper() + line[1:]}.** Each row: an ordering A > B that the report ({source}) asserts "
            "in its text, the two values it printed, ours of the same quantity, and whether the order holds here. "
            + STATUS_NOTE + (" The models were stood in (a tiny or demo preset): compare the orderings only, not "
                             "the values." if (cells["status"] == "not comparable").any() else "")
            + f" Why each ordering counts, every number and the orderings not run: [below]"
              f"(#{anchor(COMPARISON_TITLE)}).")
    return [Section(VERDICT_TITLE, note, (("", table),) if table.height else ())], {}


def comparison(results, summary, levels):
    """The report vs this run: the report's transcribed numbers beside ours and whether its orderings hold
    (bertology.results.paper_comparison)."""
    got = compared(results, summary, levels)
    if got is None:
        return [], {}
    cells, orderings = got
    verdict = paper_comparison.verdict(orderings)
    comparable = not (cells["status"] == "not comparable").any()
    note = paper_comparison.section_note(cells, verdict)
    if not comparable:
        note += (" The models were stood in (a tiny or demo preset, or models other than the report's): the "
                 "values are not comparable, so no difference is given; compare the orderings only.")
    labels = {k: v for k, v in variant_labels(results.spec["variants"]).items() if k != v}
    run = relabelled(cells.filter(pl.col("status") != "not run"), labels)
    keys = shown_columns(run, ["table", "row", "column", "model", "variant", "task", "intermediate", "split", "metric"],
                  always=("table", "row", "column"))
    shown_cells = run.select(
        *keys, pl.col("printed").alias("report"),
        pl.col("quantity").replace(paper_comparison.QUANTITIES).alias("quantity"),
        cell_text(num, "ours", name="this run"),
        cell_text(lambda m, s, n: "—" if m is None else num(m) + ("" if s is None else f" ± {num(s)}") + ("" if n is None else f" (n={n})"),
              "ours_mean", "ours_sd", "n", name="our mean ± sd"),
        cell_text(lambda d: "—" if d is None else f"{d:+.3f}", "difference", name="difference"), "status")
    shown = shown_orderings(orderings, labels)
    asserted = shown.filter(pl.col("asserted")).drop("asserted", "all_pairs")
    all_pairs = shown.filter(pl.col("all_pairs")).drop("asserted", "all_pairs")
    unasserted = int((~orderings.filter(pl.col("all_pairs"))["asserted"]).sum())
    pairs_caption = (f"All pairs, asserted or not (not the verdict's): each adjacent pair of distinct printed values "
                     f"in a row or column of the report's table; {unasserted} of {all_pairs.height} not asserted")
    not_run = cells.height - run.height
    if not run.height:  # no table of nothing: say so in the note
        note += f" None of the report's {cells.height} cells was run here (they are in tables/paper_cells.parquet)."
    tables = (*(((f"Cells ({run.height} of {cells.height} run"
                  + (f"; the {not_run} others are in tables/paper_cells.parquet)" if not_run else ")"), shown_cells),)
                if run.height else ()),
              *(((f"Orderings the report asserts: {verdict}", asserted),) if asserted.height else ()),
              *(((pairs_caption, all_pairs),) if all_pairs.height else ()))
    return ([Section(COMPARISON_TITLE, note, tables)],
            {"paper_cells": cells.drop("_cell"), "paper_orderings": orderings})
