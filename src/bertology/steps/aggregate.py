"""aggregate: the study's table in its report's layout, from the published results (Polars, CPU only).

Rows are (model, task, eval split: MNLI has two), columns the study's variants in their order, each cell `mean ± sd (n)` over the
training seeds of the primary metric. Runs the plan expected but that have no result are listed, never
dropped silently. Writes `studies/<name>/<study-id>/tables/main.parquet` (long form) and `report.md`.
"""

from __future__ import annotations

import logging

import polars as pl

from bertology.errors import BadInput
from bertology.results.tables import results_key
from bertology.spec import Cell
from bertology.steps.harness import require_spec
from bertology.store import Store

log = logging.getLogger("bertology")


def summarise(runs: pl.DataFrame) -> pl.DataFrame:
    """Mean, sample sd and n of the primary metric per (model, task, variant)."""
    return (runs.filter(pl.col("primary"))
            .group_by("model", "task", "variant", "split", "metric", maintain_order=True)
            .agg(pl.col("value").mean().alias("mean"), pl.col("value").std(ddof=1).alias("sd"),
                 pl.len().alias("n"), pl.col("seed").sort().alias("seeds")))


def layout(summary: pl.DataFrame, variants: list[str], expected_n: int) -> pl.DataFrame:
    """The report's layout: one row per (model, task, eval split), one column per variant."""
    def cell(mean, sd, n):
        if mean is None:
            return "—"
        sd_text = "—" if sd is None else f"{sd:.3f}"
        flag = "" if n == expected_n else f" of {expected_n}"
        return f"{mean:.3f} ± {sd_text} (n={n}{flag})"

    text = summary.with_columns(pl.struct("mean", "sd", "n").map_elements(
        lambda s: cell(s["mean"], s["sd"], s["n"]), return_dtype=pl.String).alias("cell"))
    wide = text.pivot(on="variant", index=["model", "task", "split", "metric"], values="cell")
    for v in variants:
        if v not in wide.columns:
            wide = wide.with_columns(pl.lit("—").alias(v))
    return wide.select("model", "task", "split", "metric", *variants).fill_null("—")


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
    summary = summarise(runs)
    spec = plan["spec"]
    variants = [v["name"] for v in spec["variants"]]
    table = layout(summary, variants, expected_n=len(spec["seeds"]))

    store.write_parquet(f"{base}/tables/main.parquet", summary.with_columns(
        pl.lit(name).alias("study"), pl.lit(study_id).alias("study_id")).to_arrow())
    lines = [f"# {name} ({study_id})", "",
             (f"Preset `{spec['preset']}`; models {', '.join(spec['models'])}; seeds {spec['seeds']}; "
             f"regime {spec['regime']['name']} (lr {spec['regime']['lr']}, batch {spec['regime']['batch_size']}, "
             f"{spec['regime']['epochs']} epochs, max length {spec['max_length']}); data source `{spec['source']}`."),
             "Each cell: mean ± sample sd of the primary metric over training seeds (n runs).", "",
             markdown(table), ""]
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
