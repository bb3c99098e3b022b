"""Which epoch's weights a study's runs report (`selection`), said in its report beside what the paper did.

A run's result is its best evaluation point on the first eval split (`best`) or its last one (`last`):
bertology.train.loop. The rule is the study's regime setting, which a variant may override; the plan
keeps both, so the report reads them from the plan's spec. Older plans have no `selection`: their runs
selected the best point, which is the default. The paper's own rule is in bertology.results.conventions.
"""

from __future__ import annotations

import polars as pl

from bertology.errors import BadInput
from bertology.results import conventions
from bertology.tasks.registry import get_task

DEFAULT = "best"
RULES = {"best": "its best epoch on dev (by the primary metric on the task's first eval split)",
         "last": "its last epoch (the weights fine-tuning ended with; no epoch chosen on dev)"}


def rules(spec: dict) -> dict[str, str]:
    """Variant -> the rule its runs used: the variant's own regime, else the study's, else the default."""
    study = spec.get("regime", {}).get("selection", DEFAULT)
    return {v["name"]: (v.get("regime") or {}).get("selection", study) for v in spec.get("variants", [])}


def note(study: str, spec: dict, summary: pl.DataFrame | None = None) -> str:
    """One paragraph: the rule applied (per variant where they differ), what the paper did, and, where the
    best epoch was chosen on the split a table reports, that those numbers are optimistic."""
    by_variant = rules(spec)
    applied = sorted(set(by_variant.values())) or [spec.get("regime", {}).get("selection", DEFAULT)]
    if len(applied) == 1:
        text = f"Model selection: each run reports {RULES[applied[0]]} (`selection={applied[0]}`)"
    else:
        text = "Model selection: " + "; ".join(
            f"`{v}` reports {RULES[r]}" for v, r in by_variant.items()) + " (each variant's `selection`)"
    text += "; its weights are the ones evaluated and analysed, and a sequential run's second task starts from them."
    paper = conventions.of_study(study)
    if paper.selection is not None:
        rule, why = paper.selection
        text += f" The report: {why}"
        if applied != [rule]:
            text += f" This run differs from it (`selection={rule}` would follow it)."
    if "best" in applied and summary is not None:
        text += _optimism(summary)
    return text


def _optimism(summary: pl.DataFrame) -> str:
    """Where a run's best epoch was chosen on the split the table reports, say so: that split's number is
    the best of several epochs, an optimistic estimate; the other splits are not selected on."""
    chosen = []
    for task in summary["task"].unique(maintain_order=True):
        try:
            first = get_task(task).eval_splits[0]
        except BadInput:  # a task this code does not know (older results): nothing to say
            continue
        if first in set(summary.filter(pl.col("task") == task)["split"]):
            chosen.append(f"{task} {first}")
    if not chosen:
        return ""
    return (" Each run's best epoch (by the primary metric) was chosen on the split this table reports for "
            f"{', '.join(chosen)}: those numbers are the best of several epochs on the same data, an optimistic "
            "estimate.")
