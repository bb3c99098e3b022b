"""A study's result as `bertology run` and `bertology report` end with it: the main table and the report's
orderings, read back from the Parquet tables the aggregate step wrote (`studies/<name>/<id>/tables/`).

The terminal gets the gist, the report gets everything: the main table's cells are `mean ± sd (n=…)` of the
primary metric over seeds (no interval or p-values: those are in report.md and report.html), with the
variants as columns up to WIDE_VARIANTS of them and one row per variant beyond; the orderings are the
verdict line and the orderings the report asserts that our results could test (paper_comparison's rule). A
study without a main table (vocab-overlap) shows its vocabulary table. Tables longer than MAX_ROWS rows are cut, saying how many
rows the report holds besides. Tables print as Markdown through Polars, so they paste into a document.
"""

from __future__ import annotations

import polars as pl

from bertology.results.cells import mean_sd_n
from bertology.results.labels import variant_labels
from bertology.results.paper_comparison import OLD_STATUSES, quantity_label, verdict
from bertology.results.study_results import with_defaults
from bertology.store import Store

WIDE_VARIANTS = 4  # variants as columns up to this many (a terminal's width); one row per variant beyond
MAX_ROWS = 40  # rows printed per table; the rest are in the report
ROW_LABELS = ("model", "task", "split", "metric")  # always shown; intermediate task and data size when they vary
MAIN = "the primary metric, mean ± sd over training seeds (n runs)"
ORDERINGS = ("group", "ordering", "ours", "status")


def study_result(store: Store, name: str, study_id: str) -> list[str]:
    """The lines that show a study's result: the main table (or the vocabulary table) and the orderings of
    the report it reproduces; none for a study whose aggregate wrote no tables."""
    tables = f"studies/{name}/{study_id}/tables"
    lines: list[str] = []
    if store.exists(f"{tables}/main.parquet"):
        spec = with_defaults(store.read_json(f"studies/{name}/{study_id}/plan.json")["spec"])
        main = pl.from_arrow(store.read_parquet(f"{tables}/main.parquet"))
        lines += ["", f"{name} {study_id}: {MAIN}", *_markdown(main_table(main, spec))]
    elif store.exists(f"{tables}/vocabulary.parquet"):
        vocabulary = pl.from_arrow(store.read_parquet(f"{tables}/vocabulary.parquet"))
        lines += ["", f"{name} {study_id}: the vocabulary table", *_markdown(vocabulary_table(vocabulary))]
    if store.exists(f"{tables}/paper_orderings.parquet"):
        orderings = pl.from_arrow(store.read_parquet(f"{tables}/paper_orderings.parquet"))
        lines += ["", f"the report vs this run: {verdict(orderings)}"]
        tested = tested_orderings(orderings)
        if not tested.is_empty():
            lines += _markdown(tested)
    return lines


def main_table(main: pl.DataFrame, spec: dict) -> pl.DataFrame:
    """The main table as text: a row per (model, task, split, metric[, intermediate, data]) and a column per
    variant in the plan's order (1-based head labels, as the report), or with more than WIDE_VARIANTS variants
    one row per (row, variant); each cell `mean ± sd (n=…)`, flagged when fewer runs than seeds finished."""
    labels = variant_labels(spec["variants"])
    seeds = len(spec.get("seeds") or []) or None
    main = _sized(main).with_columns(
        pl.col("variant").replace(labels),
        pl.struct("mean", "sd", "n").map_elements(lambda s: mean_sd_n(s["mean"], s["sd"], s["n"], seeds),
                                                  return_dtype=pl.String).alias("cell"))
    rows = [*ROW_LABELS, *(c for c in ("intermediate", "data") if c in main.columns and main[c].n_unique() > 1)]
    variants = [labels[v["name"]] for v in spec["variants"]]
    if len(variants) > WIDE_VARIANTS:
        return main.select(*rows, "variant", pl.col("cell").alias("mean ± sd (n)"))
    present = [v for v in variants if v in set(main["variant"])]
    wide = main.pivot(on="variant", on_columns=present, index=rows, values="cell")
    return wide.select(*rows, *(pl.col(v) if v in present else pl.lit("—").alias(v) for v in variants)).fill_null("—")


def tested_orderings(orderings: pl.DataFrame) -> pl.DataFrame:
    """The orderings the report asserts that our results could test (not "not run"; those the verdict counts):
    the report's table and row or column (`group`), the ordering as the report names it, our two values of the
    quantity the report printed (e.g. the best run, for the monolingual report's Table 1;
    paper_comparison.quantity_label), and whether it holds ("holds", "holds, not significant", "holds, untested
    (n < 3)", "tie", "violated, not significant", "violated, untested (n < 3)", "violated"; a table stored with the older "(within CI overlap)" reads so)."""
    def ours(s: dict) -> str:
        return f"{s['ours_higher']:.3f} vs {s['ours_lower']:.3f} ({quantity_label(s['quantity'], s['quantity_lower'])})"

    if "quantity_lower" not in orderings.columns:  # an aggregate from before mixed orderings were told apart
        orderings = orderings.with_columns(pl.col("quantity").alias("quantity_lower"))
    if "asserted" in orderings.columns:  # else an aggregate from before asserted orderings were told apart
        orderings = orderings.filter(pl.col("asserted"))
    orderings = orderings.with_columns(pl.col("status").replace(OLD_STATUSES))  # as worded now, if stored before
    return orderings.filter(pl.col("status") != "not run").select(
        "group", "ordering",
        pl.struct("ours_higher", "ours_lower", "quantity", "quantity_lower").map_elements(ours, return_dtype=pl.String).alias("ours"),
        "status")


def vocabulary_table(vocabulary: pl.DataFrame) -> pl.DataFrame:
    """The monolingual report's Table 2 as the report shows it, without the measurement settings' columns."""
    share = pl.col("english_window_share")
    return vocabulary.select(
        "model", "reference", pl.col("vocab_size").alias("word-pieces"), pl.col("english_like").alias("English-like"),
        pl.col("overlap").alias("shared"),
        pl.when(share.is_null()).then(pl.lit("—")).otherwise(pl.format("{}%", (share * 100).round(1)))
        .alias("English-like contexts"))


def _sized(main: pl.DataFrame) -> pl.DataFrame:
    """`intermediate` as "none" for a direct fine-tune, and `data`: the training-data size as text."""
    main = main.with_columns(pl.col("intermediate").fill_null("none")) if "intermediate" in main.columns else main
    size = [pl.when(pl.col("fraction").is_not_null()).then(pl.format("fraction {}", "fraction"))
            if "fraction" in main.columns else pl.lit(None, pl.String)]
    if "count" in main.columns:
        size.append(pl.when(pl.col("count").is_not_null()).then(pl.format("count {}", "count")))
    return main.with_columns(pl.coalesce(*size, pl.lit("all data")).alias("data"))


def _markdown(table: pl.DataFrame) -> list[str]:
    """The table as Markdown lines (Polars' own formatter), cut after MAX_ROWS rows."""
    shown = table.head(MAX_ROWS)
    with pl.Config(tbl_formatting="ASCII_MARKDOWN", tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True,
                   tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=1000, tbl_width_chars=10_000,
                   tbl_cell_alignment="LEFT"):
        lines = str(shown).splitlines()
    if table.height > shown.height:
        lines.append(f"… {table.height - shown.height} more rows in the report")
    return lines
