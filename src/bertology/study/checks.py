"""A study's typed parameter values checked together, as the user gave them, before a preset replaces any.

Each raw string is typed alone (`bertology.study.params`); what is checked here spans several values
(a size given twice), or is the rule of the spec a value lands in (Regime, DatasetSpec, a model
reference), or of task_settings as a whole. Checked before the preset so that a typo is never hidden by
`preset=tiny` and then run for real later.
"""

from __future__ import annotations

from typing import Any

from bertology.errors import BadInput
from bertology.spec import Regime, as_float, as_int
from bertology.study.params import REGIME_PARAMS, TASK_DATASET_KEYS, TASK_REGIME_KEYS, show


def check_values(values: dict[str, Any], raw: dict[str, str]) -> None:
    """Each value as the user gave it, by the rules of the spec it lands in (Regime, DatasetSpec, model
    references), before a preset replaces any: a wrong value is refused whether or not a preset would have
    overridden it, so a typo is never hidden by `preset=tiny` and then run for real later. Then the one
    training size: `sizes`, a `fraction` or a `count`, never two of them."""
    Regime.from_dict({"name": values["regime"], **{k: values[k] for k in REGIME_PARAMS}})
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
            raise BadInput(f"task_settings names task '{task}', which is not one of the study's tasks "
                           f"({', '.join(study_tasks)})")
        unknown = sorted(set(settings) - set(allowed))
        if unknown:
            raise BadInput(f"task_settings '{task}' has unknown setting '{unknown[0]}' (allowed: {', '.join(allowed)})")
        if "fraction" in settings and "count" in settings:
            raise BadInput(f"task_settings '{task}': give a fraction or a count, not both")
    return {task: dict(sorted(settings.items())) for task, settings in sorted(value.items()) if settings}
