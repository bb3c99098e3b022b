"""Which epoch's weights a study's runs report (`selection`), said in its report beside what the paper did.

A run's result is its best evaluation point on the first eval split (`best`) or its last one (`last`):
bertology.train.loop. The rule is the study's regime setting, which a variant may override; the plan
keeps both, so the report reads them from the plan's spec. Older plans have no `selection`: their runs
selected the best point, which is the default. The paper's own rule is in bertology.results.conventions.

Under `best` a split that its task reads at its own best point (`Task.own_best_splits`: MNLI-mm, which the
monolingual report prints at its own best epoch beside MNLI-m's) is read there: `per_split` takes its numbers
and epoch from the run's curves, since the published rows score the kept weights, the first split's best.
"""

from __future__ import annotations

import polars as pl

from bertology.errors import BadInput
from bertology.results import conventions
from bertology.tasks.registry import Task, get_task

DEFAULT = "best"
RULES = {"best": "its best epoch on dev (by the primary metric on the task's first eval split)",
         "last": "its last epoch (the weights fine-tuning ended with; no epoch chosen on dev)"}


def rules(spec: dict) -> dict[str, str]:
    """Variant -> the rule its runs used: the variant's own regime, else the study's, else the default."""
    study = spec.get("regime", {}).get("selection", DEFAULT)
    return {v["name"]: (v.get("regime") or {}).get("selection", study) for v in spec.get("variants", [])}


def per_split(runs: pl.LazyFrame, curves: pl.LazyFrame | None, spec: dict) -> pl.LazyFrame:
    """The runs rows with each split its task reads at its own best point (`Task.own_best_splits`) taken from
    that point of the run's curves, value and `best_epoch`, for the runs whose rule is `best`; every other row
    as published. Why from the curves: a run's published rows score its kept weights (the first split's best
    point) on every split, while its curves hold every split at every evaluation point, computed by the same
    evaluation; so runs published before this rule are read by it too."""
    best = [variant for variant, rule in rules(spec).items() if rule == "best"]
    if curves is None or not best:
        return runs
    tasks = {}
    for name in runs.select("task").unique().collect()["task"].drop_nulls().to_list():
        try:
            task = get_task(name)
        except BadInput:  # a task this code does not know (older results): as published
            continue
        if task.own_best_splits:
            tasks[name] = task
    if not tasks:
        return runs
    if "kind" in curves.collect_schema().names():  # evaluation points only (null: rows from before `kind`)
        curves = curves.filter(pl.col("kind").fill_null("eval") == "eval")
    wanted = pl.any_horizontal((pl.col("task") == name) & pl.col("split").is_in(list(task.own_best_splits))
                               for name, task in tasks.items())
    points = (curves.filter(wanted & pl.col("variant").is_in(best))
              .select("run_id", "task", "split", "epoch", "step", "metric", "value").unique()
              .sort("run_id", "split", "step").collect())
    chosen = []
    for (run_id, split), rows in points.group_by("run_id", "split", maintain_order=True):
        task = tasks[rows["task"][0]]
        read_at = _best_step(rows.filter(pl.col("metric") == task.primary_metric), task)
        if read_at is not None:
            chosen.append(rows.filter(pl.col("step") == read_at))
    if not chosen:
        return runs
    own = pl.concat(chosen).select("run_id", "split", "metric", pl.col("value").alias("own_value"),
                                   pl.col("epoch").alias("own_epoch"))
    return (runs.join(own.lazy(), on=["run_id", "split", "metric"], how="left", maintain_order="left")
            .with_columns(pl.coalesce("own_value", "value").alias("value"),
                          pl.coalesce("own_epoch", "best_epoch").alias("best_epoch"))
            .drop("own_value", "own_epoch"))


def _best_step(primary: pl.DataFrame, task: Task) -> int | None:
    """The step of the best of a run's evaluation points on one split (ordered by step), as the loop picks
    its best point (bertology.train.loop.select_points): the earliest of equal ones, never the point before
    the first step unless it is the only one."""
    trained = primary.filter(pl.col("step") > 0)
    rows = (trained if trained.height else primary).rows(named=True)
    top = None
    for row in rows:
        if task.better(row["value"], None if top is None else top["value"]):
            top = row
    return None if top is None else top["step"]


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
    if "best" in applied:
        text += _own_best(spec)
    paper = conventions.of_study(study)
    if paper.selection is not None:
        rule, why = paper.selection
        text += f" The report: {why}"
        if applied != [rule]:
            text += f" This run differs from it (`selection={rule}` would follow it)."
    if "best" in applied and summary is not None:
        text += _optimism(summary)
    return text


def _own_best(spec: dict) -> str:
    """The splits read at their own best epoch rather than the first split's (Task.own_best_splits), where the
    study has them."""
    own = []
    for name in spec.get("tasks", []):
        try:
            task = get_task(name)
        except BadInput:
            continue
        own += [f"{name} {split} is read at its own best epoch (by its own {task.primary_metric}), not at "
                f"{task.eval_splits[0]}'s" for split in task.own_best_splits]
    if not own:
        return ""
    return (f" Under `selection=best`, {'; '.join(own)}: the runs' `best_epoch` says which epoch each split's "
            "number is from, and the weights kept (analysed, and a sequential run's start) are the first "
            "split's best.")


def _optimism(summary: pl.DataFrame) -> str:
    """Where a run's best epoch was chosen on the split the table reports, say so: that split's number is
    the best of several epochs, an optimistic estimate; the other splits are not selected on."""
    chosen = []
    for task in summary["task"].unique(maintain_order=True):
        try:
            registered = get_task(task)
        except BadInput:  # a task this code does not know (older results): nothing to say
            continue
        reported = set(summary.filter(pl.col("task") == task)["split"])
        chosen += [f"{task} {split}" for split in (registered.eval_splits[0], *registered.own_best_splits)
                   if split in reported]
    if not chosen:
        return ""
    return (" Each run's best epoch (by the primary metric) was chosen on the split this table reports for "
            f"{', '.join(chosen)}: those numbers are the best of several epochs on the same data, an optimistic "
            "estimate.")
