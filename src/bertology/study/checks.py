"""A study's typed parameter values checked together, as the user gave them, before a preset replaces any.

Each raw string is typed alone (`bertology.study.params`); what is checked here spans several values
(a size given twice), or is the rule of the spec a value lands in (Regime, DatasetSpec, a model
reference), or of task_settings as a whole. Checked before the preset so that a typo is never hidden by
`preset=tiny` and then run for real later.
"""

from __future__ import annotations

from typing import Any

from bertology.errors import BadInput, choices
from bertology.spec import Regime, as_float, as_int, check_final_head
from bertology.study.params import REGIME_PARAMS, TASK_DATASET_KEYS, TASK_REGIME_KEYS, show


def check_values(values: dict[str, Any], raw: dict[str, str]) -> None:
    """Each value as the user gave it, by the rules of the spec it lands in (Regime, DatasetSpec, model
    references), before a preset replaces any: a wrong value is refused whether or not a preset would have
    overridden it, so a typo is never hidden by `preset=tiny` and then run for real later. Then the one
    training size: `sizes`, a `fraction` or a `count`, never two of them."""
    Regime.from_dict({"name": values["regime"], **{k: values[k] for k in REGIME_PARAMS}})
    check_final_heads(check_final_head(values["final_head"]), values["tasks"], values["intermediates"])
    as_int(values["max_length"], "max_length", 8)
    if values["fraction"] is not None:
        as_float(values["fraction"], "fraction", 0.0, 1.0, low_open=True)
    for key in ("count", "eval_count", "doc_stride"):
        if values[key] is not None:
            as_int(values[key], key, 1)
    as_int(values["subset_seed"], "subset_seed", 0)
    for seed in values["seeds"]:
        as_int(seed, "seed", 0)
    check_model_refs((*values["models"], *([values["reference"]] if values["reference"] else [])))
    if values["sizes"] and (values["fraction"] is not None or values["count"] is not None):
        raise BadInput(f"give sizes or a single fraction/count, not both (sizes={show(raw.get('sizes'))}, "
                       f"fraction={values['fraction']}, count={values['count']})")
    if values["fraction"] is not None and values["count"] is not None:
        raise BadInput(f"give a training fraction or a count, not both "
                       f"(fraction={values['fraction']}, count={values['count']})")


def check_names(spec) -> None:
    """What plan refuses before it reads a model or data, with neither torch nor the network: every task and
    intermediate task known (the list of them puts the kinds of the study's other tasks first), the data
    source of a known kind, and each variant's chain of known interventions with known parameters and
    allowed values (bertology.interventions.catalog). `bertology run` checks a study's parameters by this
    before it starts anything, so such a typo is one line in about a second."""
    from bertology import tasks
    from bertology.interventions import catalog
    from bertology.tasks.registry import unknown_task

    names = (*spec.tasks, *spec.intermediates)
    kinds = [tasks.TASKS[name].kind for name in names if name in tasks.TASKS]
    for name in names:
        if name not in tasks.TASKS:
            raise unknown_task(name, kinds)
    tasks.parse_source(spec.source)
    for variant in spec.variants:
        try:
            catalog.check_chain([step.to_dict() for step in variant.interventions])
        except BadInput as e:
            raise BadInput(f"variant '{variant.name}': {e}") from None


def head_shape(task) -> str:
    """A task's head as far as carrying it to another task goes: its kind and its outputs."""
    if task.kind == "sequence":
        return "regression head (1 output)" if task.is_regression else f"{task.num_labels}-class head"
    return f"{task.kind} head"


def check_final_heads(final_head: str, final_tasks: list[str], intermediates: list[str]) -> None:
    """`final_head=carried` only where every intermediate task's head fits every final task's. A pair that
    cannot carry its head is refused rather than given a new one: the matrix would mix carried and new
    heads, and Hugging Face's run_glue, whose carrying this follows, stops on such a pair too."""
    if final_head != "carried" or not intermediates:
        return
    from bertology import tasks

    for final in final_tasks:
        for intermediate in intermediates:
            shapes = head_shape(tasks.get_task(intermediate)), head_shape(tasks.get_task(final))
            if shapes[0] != shapes[1]:
                raise BadInput(f"final_head carried: intermediate task {intermediate}'s {shapes[0]} does not fit "
                               f"final task {final}'s {shapes[1]} (allowed: final_head=new, which draws a new "
                               f"head, or intermediates whose head fits)")


def check_model_refs(refs) -> None:
    """Each model reference well formed and, for a local directory or package, present (no hub lookup)."""
    from bertology import models  # torch and transformers: only where a study is planned

    for text in refs:
        ref = models.parse_model_ref(text)
        if ref.kind not in ("store", "tiny"):
            models.check_model_ref(ref)


def check_task_settings(value: Any, study_tasks: list[str]) -> dict:
    """task_settings: a JSON object of the study's tasks to objects of dataset/regime settings."""
    allowed = (*TASK_DATASET_KEYS, *TASK_REGIME_KEYS)
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise BadInput(f"parameter 'task_settings' must be a JSON object of task -> {{setting: value}}, e.g. "
                       f'{{"squad2": {{"fraction": 0.1, "batch_size": 1}}}}, got {show(value)}')
    for task, settings in value.items():
        if task not in study_tasks:
            listed = choices(task, study_tasks, "the study's tasks")
            raise BadInput(f"task_settings names task '{task}', which is not one of the study's tasks ({listed})")
        unknown = sorted(set(settings) - set(allowed))
        if unknown:
            raise BadInput(f"task_settings '{task}' has unknown setting '{unknown[0]}' "
                           f"({choices(unknown[0], allowed, 'allowed')})")
        if "fraction" in settings and "count" in settings:
            raise BadInput(f"task_settings '{task}': give a fraction or a count, not both")
    return {task: dict(sorted(settings.items())) for task, settings in sorted(value.items()) if settings}
