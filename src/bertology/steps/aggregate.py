"""aggregate: the study's table in its report's layout, from the published results (Polars, CPU only).

Rows are (model, task, eval split: MNLI has two), columns the study's variants in their order, each cell
`mean ± sd (n)` over the training seeds of the primary metric; a second table gives each variant's
difference from the unmodified model and the paired t-test's p-value over the seeds both ran
(bertology.results.stats, which also gives the bootstrap 95% interval kept in the long form). Runs the
plan expected but that have no result are listed, never dropped silently. Writes
`studies/<name>/<study-id>/tables/main.parquet` (long form) and `report.md`.
"""

from __future__ import annotations

import logging

import polars as pl

from bertology.errors import BadInput
from bertology.results import stats
from bertology.results.tables import results_key
from bertology.spec import Cell
from bertology.steps.harness import require_spec
from bertology.store import Store

log = logging.getLogger("bertology")


ROWS = ("model", "task", "split", "metric")


def summarise(runs: pl.DataFrame, baseline: str | None = None) -> pl.DataFrame:
    """Per (model, task, split, metric, variant) of the primary metric: mean, sample sd, n, the bootstrap
    95% interval, and against `baseline` (the unmodified model) the difference and paired p-value."""
    return stats.summarize(runs.lazy().filter(pl.col("primary")), by=ROWS, baseline=baseline)


def versus_baseline(summary: pl.DataFrame, variants: list[str], baseline: str) -> pl.DataFrame:
    """Each other variant's `Δ (p=…)` against the baseline, in the report's layout."""
    text = summary.filter(pl.col("variant") != baseline).with_columns(
        pl.struct("delta", "p_value").map_elements(
            lambda s: "—" if s["delta"] is None else
            f"{s['delta']:+.3f}" + ("" if s["p_value"] is None else f" (p={s['p_value']:.3g})"),
            return_dtype=pl.String).alias("cell"))
    return _wide(text, [v for v in variants if v != baseline])


def layout(summary: pl.DataFrame, variants: list[str], expected_n: int) -> pl.DataFrame:
    """The report's layout: one row per (model, task, eval split), one column per variant."""
    def cell(mean, sd, n):
        if mean is None:
            return "—"
        sd_text = "—" if sd is None else f"{sd:.3f}"
        flag = "" if n == expected_n else f" of {expected_n}"
        return f"{mean:.3f} ± {sd_text} (n={n}{flag})"

    return _wide(summary.with_columns(pl.struct("mean", "sd", "n").map_elements(
        lambda s: cell(s["mean"], s["sd"], s["n"]), return_dtype=pl.String).alias("cell")), variants)


def _wide(cells: pl.DataFrame, variants: list[str]) -> pl.DataFrame:
    """`cell` texts pivoted to one row per (model, task, split, metric) and one column per variant, in
    the given order; a variant without a result shows "—"."""
    wide = cells.pivot(on="variant", index=list(ROWS), values="cell")
    for v in variants:
        if v not in wide.columns:
            wide = wide.with_columns(pl.lit("—").alias(v))
    return wide.select(*ROWS, *variants).fill_null("—")


def markdown(df: pl.DataFrame) -> str:
    header = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(str(v) for v in row) + " |" for row in df.iter_rows()]
    return "\n".join([header, rule, *rows])


def aggregate(store: Store, name: str, study_id: str) -> str:
    base = f"studies/{name}/{study_id}"
    if not store.exists(f"{base}/plan.json"):
        raise BadInput(f"no plan for study '{name}' id {study_id} in {store.uri} (run plan first)")
    plan = store.read_json(f"{base}/plan.json")
    cells = [Cell.from_dict(c) for c in plan["cells"]]
    frames, missing = [], []
    published = set(store.list(f"results/runs/study={name}"))  # one listing, not a request per cell
    for c in cells:
        key = results_key("runs", name, c.run.id)
        if key in published:
            frames.append(pl.from_arrow(store.read_parquet(key)))
        else:
            missing.append(c)
    if not frames:
        raise BadInput(f"study '{name}' has no finished runs in {store.uri} ({len(cells)} expected)")
    runs = pl.concat(frames, how="vertical_relaxed")
    spec = plan["spec"]
    variants = [v["name"] for v in spec["variants"]]
    baseline = next((v["name"] for v in spec["variants"] if not v.get("interventions")), None)
    summary = summarise(runs, baseline)
    table = layout(summary, variants, expected_n=len(spec["seeds"]))

    store.write_parquet(f"{base}/tables/main.parquet", summary.with_columns(
        pl.lit(name).alias("study"), pl.lit(study_id).alias("study_id")).to_arrow())
    lines = [f"# {name} ({study_id})", "",
             (f"Preset `{spec['preset']}`; models {', '.join(spec['models'])}; seeds {spec['seeds']}; "
             f"regime {spec['regime']['name']} (lr {spec['regime']['lr']}, batch {spec['regime']['batch_size']}, "
             f"{spec['regime']['epochs']} epochs, max length {spec['max_length']}); data source `{spec['source']}`."),
             "Each cell: mean ± sample sd of the primary metric over training seeds (n runs).", "",
             markdown(table), ""]
    if baseline is not None and len(variants) > 1:
        note = (f"Difference from `{baseline}` (mean over seeds) and the paired t-test's p-value over the seeds "
                "both ran (none with fewer than two).")
        lines += [note, "", markdown(versus_baseline(summary, variants, baseline)), ""]
    if missing:
        lines += [f"**Missing runs ({len(missing)} of {len(cells)}):**", ""]
        lines += [f"- {c.variant} / {c.model} / {c.run.dataset.task} / seed {c.run.seed}: run {c.run.id}"
                  for c in missing]
        lines.append("")
    report = "\n".join(lines)
    store.write_bytes(f"{base}/report.md", report.encode())
    print(report, flush=True)
    log.info("table: %s", store.url(f"{base}/tables/main.parquet"))
    log.info("report: %s", store.url(f"{base}/report.md"))
    log.info("results (Parquet, hive-partitioned): %s", store.url("results/"))
    return base


def run(store: Store, args) -> None:
    spec = require_spec(args, "aggregate")
    if not isinstance(spec, dict) or not {"name", "id"} <= set(spec):
        raise BadInput(f"aggregate --spec must be {{\"name\": ..., \"id\": ...}}, got {spec!r}")
    aggregate(store, spec["name"], spec["id"])
