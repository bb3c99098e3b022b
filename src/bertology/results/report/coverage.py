"""What the report lacks or stood in: runs the plan expected that are missing, incomplete or failed,
models whose vocabulary was not measured, and the settings a preset replaced.

These are never dropped silently: a mean over fewer runs than planned, or over stand-in models, reads
differently, so the report lists each such run and change by name.
"""

from __future__ import annotations

import polars as pl

from bertology.results import analysis
from bertology.results.labels import size_text
from bertology.results.report.document import Section


def missing(results, summary, levels):
    """Runs the plan expected that are missing, incomplete (no weight distances: a failed analyze) or
    failed (no primary metric), and models whose vocabulary was not measured, each listed by name."""
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
                                    items=tuple(describe_cell(c) + (f" (no {', '.join(lacking[c.run.id])})"
                                                                     if reason == "incomplete" else "")
                                                for c in cells)))
    table = pl.DataFrame([{**{k: v for k, v in c.labels().items() if k != "study"}, "reason": r} for c, r in rows],
                         infer_schema_length=None)
    return sections, {"missing_runs": table}


def preset(results, summary, levels):
    """What the preset changed: a tiny or demo study says which stand-ins replaced the report's models."""
    if not results.preset_changes:
        return [], {}
    note = (f"Preset `{results.spec.get('preset')}` replaced these settings of the study; models marked "
            "stand-in are offline substitutes, so its numbers are not the report's.")
    return [Section("Preset changes", note, items=results.preset_changes)], {}


def describe_cell(cell) -> str:
    """One run of the plan as a reader finds it: variant / model / task [/ after …] [/ size] / seed: run id."""
    labels = cell.labels()
    extra = "".join([f" / after {labels['intermediate']}" if labels["intermediate"] else "",
                     f" / {size_text(labels['fraction'], labels['count'])}"
                     if labels["fraction"] is not None or labels["count"] is not None else ""])
    return f"{cell.variant} / {cell.model} / {labels['task']}{extra} / seed {labels['seed']}: run {labels['run_id']}"
