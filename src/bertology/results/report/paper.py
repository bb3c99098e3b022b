"""The report vs this run: the paper's transcribed numbers beside ours, and whether its orderings hold
(bertology.results.paper_comparison computes both; this module lays them out).

Last in every report, because it reads what the sections above show (the head summary, the forgetting
curve, the vocabulary, the model profile) in the paper's own terms.
"""

from __future__ import annotations

import polars as pl

from bertology.results import analysis, paper_comparison
from bertology.results.analysis import HEAD_AXES
from bertology.results.cells import cell_text, num
from bertology.results.labels import relabelled, shown_columns, variant_labels
from bertology.results.report.document import Section


def comparison(results, summary, levels):
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
    named = pl.col("ordering")
    for name, label in labels.items():  # head variants as the papers number them (L1H1)
        named = named.str.replace_all(rf"\b{name}\b", label)
    shown_orderings = orderings.with_columns(named.alias("ordering")).select(
        "table", "group",
        pl.struct("quantity", "quantity_lower").map_elements(
            lambda q: paper_comparison.quantity_label(q["quantity"], q["quantity_lower"]),
            return_dtype=pl.String).alias("quantity"), "ordering",
        cell_text(lambda a, b: f"{num(a)} > {num(b)}", "paper_higher", "paper_lower", name="report"),
        cell_text(lambda a, b, ca, cb: f"{num(a)} vs {num(b)}" + (f" ({ca} vs {cb})" if ca and cb else ""),
              "ours_higher", "ours_lower", "ci_higher", "ci_lower", name="this run"), "status",
        pl.struct(orderings.columns).map_elements(paper_comparison.claim_text, return_dtype=pl.String)
        .alias("the report's claim"), "asserted", "all_pairs")
    asserted = shown_orderings.filter(pl.col("asserted")).drop("asserted", "all_pairs")
    all_pairs = shown_orderings.filter(pl.col("all_pairs")).drop("asserted", "all_pairs")
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
    return ([Section("The report vs this run", note, tables)],
            {"paper_cells": cells.drop("_cell"), "paper_orderings": orderings})
