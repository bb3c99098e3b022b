"""aggregate: the study's tables and report from the published results (Polars, CPU only).

Reads the plan and, lazily, the published results of exactly its runs (bertology.results.study_results),
builds the report's layout from what the study varies (bertology.results.report), and writes
`studies/<name>/<study-id>/tables/<table>.parquet` (the analysis tables; `main` is the long form of the main
table: n, mean, sd, bootstrap interval and paired test per group), `report.md` and `report.html`. Runs the
plan expected but that have no result, or only part of their results (a failed analyze), are listed, never
dropped silently, and the workflow's aggregate then fails (exit 1) once the report is written, so a study
whose steps failed ends Failed. `bertology report` rebuilds the same report from a store.
"""

from __future__ import annotations

import logging
from pathlib import Path

import polars as pl

from bertology.errors import BadInput, BertologyError
from bertology.results.report import Report, build_report, html, markdown
from bertology.results.study_results import load_study_results
from bertology.steps.harness import require_study
from bertology.store import Store

log = logging.getLogger("bertology")


class IncompleteStudy(BertologyError):
    """Some of the plan's runs (or a vocabulary plan's models) failed, are missing or lack part of their
    results: the report is written and lists them, and the step fails (exit 1, not retried) so the Workflow
    ends Failed instead of reporting a partial study as done."""


def aggregate(store: Store, name: str, study_id: str, *, best_of_runs: bool = False,
              out: Path | None = None, echo: bool = True, require_complete: bool = False) -> list[str]:
    """Build and write the study's report; returns where each file went (store URLs, then paths in `out`).

    With `require_complete` (the workflow's aggregate step, which runs after failed cells too) a study
    with missing or incomplete runs raises IncompleteStudy once its report is written."""
    results = load_study_results(store, name, study_id)
    report = build_report(results, best_of_runs=best_of_runs)
    written = write_report(store, report, out)
    if echo:
        print(markdown(report), flush=True)
    for location in written:
        log.info("wrote %s", location)
    log.info("results (Parquet, hive-partitioned): %s", store.url("results/"))
    if require_complete and not results.complete:
        raise IncompleteStudy(f"study {name} ({study_id}) is incomplete: {results.shortfall()} (listed in the "
                              f"report: {written[-1]}); rerun the study to retry them, finished work is reused")
    return written


def write_report(store: Store, report: Report, out: Path | None = None) -> list[str]:
    """The analysis tables (each with the study and its id) as Parquet, and the report as Markdown and HTML,
    into the store and, with `out`, the two report files into that directory too."""
    base = f"studies/{report.name}/{report.study_id}"
    keys = []
    for table, frame in report.tables.items():
        keys.append(f"{base}/tables/{table}.parquet")
        store.write_parquet(keys[-1], frame.with_columns(pl.lit(report.name).alias("study"),
                                                         pl.lit(report.study_id).alias("study_id")).to_arrow())
    documents = {"report.md": markdown(report), "report.html": html(report)}
    for file, text in documents.items():
        keys.append(f"{base}/{file}")
        store.write_bytes(keys[-1], text.encode())
    written = [store.url(k) for k in keys]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for file, text in documents.items():
            (out / file).write_text(text, encoding="utf-8")
            written.append(str(out / file))
    return written


def run(store: Store, args) -> None:
    name, study_id, options = require_study(args, "aggregate")
    if set(options) - {"best_of_runs"}:
        raise BadInput(f"aggregate --spec takes name, id and best_of_runs, got {sorted(options)}")
    aggregate(store, name, study_id, best_of_runs=bool(options.get("best_of_runs", False)), require_complete=True)
