"""A study's parameters as an Argo Workflow passes them: the table of names, kinds and defaults, and each
raw string typed on its own.

The Workflow hands `plan` every parameter as a raw string (`--param name=value`), so each one is typed
here by its own name: a malformed `-p` is reported as that parameter, before anything else looks at it.
The rules that span several values, or the specs a value lands in, are `bertology.study.checks`.
"""

from __future__ import annotations

import json
from typing import Any

from bertology.errors import BadInput

# name -> (kind, default as the Workflow would pass it). An empty value means "the default", so a
# step template can declare every parameter with `default: ""`. Where a report states a setting, each
# study's workflow passes it; these defaults are what the reports' fine-tuning scripts (Hugging Face's
# run_glue / run_mlm) default to where the reports are silent: no warmup, no weight decay.
PARAMS: dict[str, tuple[str, str]] = {
    "preset": ("str", "paper"),
    "models": ("json-list", '["google-bert/bert-base-uncased"]'),
    "variants": ("variants", '[{"name": "pre-trained", "interventions": []}]'),
    "tasks": ("json-list", '["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]'),
    "source": ("str", "hub"),
    "seeds": ("int-list", "[1, 2, 3]"),
    "lr": ("float", "2e-5"),
    "batch_size": ("int", "32"),
    "epochs": ("int", "3"),
    "max_length": ("int", "128"),
    "warmup_ratio": ("float", "0"),
    "weight_decay": ("float", "0"),
    "fraction": ("optional-float", ""),
    "count": ("optional-int", ""),
    # a training-size factor: fractions in (0, 1] and {"count": N} (partial-reinit's 100%, 10%, 1%, ~670)
    "sizes": ("sizes", "[]"),
    "subset_seed": ("int", "0"),
    "regime": ("str", "full"),
    "train_layers": ("optional-layers", ""),
    "unfreeze_per_epoch": ("int", "4"),
    # "run": each training seed draws its own random intervention (reinit, shuffles), as the monolingual
    # report's three runs "with no fixed random seed" did; an integer: one fixed draw for every seed
    "intervention_seed": ("intervention-seed", "run"),
    # per-task overrides of dataset and regime settings, e.g. {"squad2": {"fraction": 0.1, "batch_size": 1}}
    "task_settings": ("task-settings", "{}"),
    # sequential fine-tuning: each task is also fine-tuned after each of these (and directly)
    "intermediates": ("json-list", "[]"),
    # which evaluation point's weights are each run's result: "best" (on the first eval split) or "last"
    "selection": ("str", "best"),
    # evaluation and monitoring (the cross-lingual report: every 50 steps, against a native model)
    "eval_every": ("int", "0"),
    "reference": ("optional-str", ""),
    "eval_count": ("optional-int", ""),
    "doc_stride": ("optional-int", ""),
    # how runs execute (never part of a run id)
    "checkpoint_every": ("int", "1000"),
    "compile": ("bool", "false"),
    # on a GPU, each training step replays as one CUDA graph (bertology.train.graphs); false: eager steps
    "cuda_graph": ("bool", "true"),
    # cells per pod: one pod fine-tunes, evaluates and analyses N runs in turn; empty = the smallest N that
    # keeps the Workflow inside Argo's budget (bertology.steps.budget)
    "bundle": ("optional-int", ""),
    # runs of a pod fine-tuned at once, each its own process sharing the GPU (bertology.steps.shared_gpu);
    # 1 until measured on a GPU (bench/gpu.py measures K = 1, 2, 4)
    "gpu_concurrency": ("int", "1"),
    # runs of a pod trained as one model, up to K at once (bertology.train.fused); 1: each run alone. A fused
    # run's id differs from the run alone (fused: true): its numbers differ by float noise and its dropout draws
    "fuse": ("int", "1"),
    # steps per point of the training-loss series (the college report's Figures 1 and 4); 0: none
    "log_every": ("int", "50"),
    # experiment tracking of each fine-tune: wandb, mlflow or tensorboard; empty: none (never part of a run id)
    "tracker": ("optional-str", ""),
    # keep every run's fine-tuned weights in the store (~440 MB a run at BERT-base size); by default only a
    # sequential run's intermediate run keeps them (its final runs start from them)
    "keep_weights": ("bool", "false"),
    # seconds a step's pod may run, by step, over plan's estimate (bertology.steps.timing); {}: the estimate
    "deadlines": ("json-object", "{}"),
}
NOT_EXPLICIT = ("preset",)  # the one parameter a preset never replaces: the preset itself
# A study Workflow writes its own defaults as `default:VALUE`. Argo hands plan only the final values, so
# this mark is what tells a default (which a preset may replace) from a value the submitter passed with
# `-p` or `--parameter-file` (which it never replaces): `argo submit` and `bertology run` alike.
DEFAULT_MARK = "default:"


def unmark(text: str) -> tuple[str, bool]:
    """(the value, whether it is a Workflow default) of a raw study parameter."""
    stripped = text.strip()
    if stripped.startswith(DEFAULT_MARK):
        return stripped[len(DEFAULT_MARK):].strip(), True
    return stripped, False


# The study parameters that make up its Regime.
REGIME_PARAMS = ("lr", "batch_size", "epochs", "warmup_ratio", "weight_decay", "train_layers", "unfreeze_per_epoch",
                 "eval_every", "reference", "checkpoint_every", "log_every", "compile", "cuda_graph",
                 "tracker", "selection")

# The settings task_settings may override per task, and which spec each lands in.
TASK_DATASET_KEYS = ("fraction", "count", "max_length", "doc_stride", "eval_count")
TASK_REGIME_KEYS = ("lr", "batch_size", "epochs", "warmup_ratio", "weight_decay", "eval_batch_size", "eval_every")

Size = tuple["float | None", "int | None"]  # (fraction, count); (None, None) is all the training data


def check_study_name(name: str) -> None:
    """A study name is a path segment of the store (`studies/<name>/`, `study=<name>`): letters, digits, '-'."""
    if not name or not name.replace("-", "").isalnum():
        raise BadInput(f"study name '{name}' must be letters, digits and '-' (e.g. reversed-layers)")


def parse_sizes(value: Any, text: str) -> tuple[Size, ...]:
    """`sizes`: a JSON list of fractions in (0, 1] (1 = all the data) and {"count": N} objects."""
    allowed = 'a JSON list of fractions in (0, 1] and {"count": N} objects, e.g. [1, 0.1, 0.01, {"count": 670}]'
    if not isinstance(value, list):
        raise BadInput(f"parameter 'sizes' must be {allowed}, got {text!r}")
    sizes: list[Size] = []
    for item in value:
        if isinstance(item, (int, float)) and not isinstance(item, bool) and 0 < item <= 1:
            sizes.append((None, None) if item == 1 else (float(item), None))
        elif (isinstance(item, dict) and set(item) == {"count"} and isinstance(item["count"], int)
              and not isinstance(item["count"], bool) and item["count"] >= 1):
            sizes.append((None, item["count"]))
        else:
            raise BadInput(f"parameter 'sizes' item {json.dumps(item)} is not allowed; allowed: {allowed}")
    return tuple(sizes)


def show(value: Any) -> str:
    """A value as a log or error line quotes it: lists and objects as JSON."""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def parse_pairs(pairs: list[str], flag: str) -> dict[str, str]:
    """`NAME=VALUE` arguments (`-p` of bertology run, `--param` of plan) to a dict, one-line errors."""
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"malformed {flag} '{pair}' (expected NAME=VALUE, e.g. {flag} preset=tiny)")
        params[name.strip()] = value
    return params


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def typed_param(name: str, text: str) -> Any:
    """One raw parameter string to its typed value, with a one-line error naming the parameter."""
    kind = PARAMS[name][0]
    text = text.strip()
    if kind.startswith("optional-"):
        if text.lower() in ("", "null", "none"):
            return None
        kind = kind[len("optional-"):]
    if kind == "str":
        if not text:
            raise BadInput(f"parameter '{name}' is empty")
        return text
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise BadInput(f"parameter '{name}' must be true or false, got {text!r}")
        return text.lower() == "true"
    if kind == "layers":  # from:K, last:K or a JSON list of layer indices
        return json.loads(text) if text.startswith("[") and _is_json(text) else text
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise BadInput(f"parameter '{name}' must be an integer, got {text!r}")
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadInput(f"parameter '{name}' must be a number, got {text!r}")
        return float(value)
    if kind in ("json-list", "int-list"):
        if not isinstance(value, list):
            raise BadInput(f"parameter '{name}' must be a JSON list such as [\"a\", \"b\"], got {text!r}")
        want = int if kind == "int-list" else str
        bad = [v for v in value if isinstance(v, bool) or not isinstance(v, want)]
        if bad:
            raise BadInput(f"parameter '{name}' must be a list of {want.__name__}s, got {bad[0]!r} in {text!r}")
        return value
    if kind == "variants":
        return value
    if kind == "intervention-seed":  # "run" (follow each run's seed) or a fixed integer >= 0
        if text.lower() == "run":
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadInput(f"parameter '{name}' must be run (each training seed draws its own intervention) "
                           f"or an integer >= 0 (one fixed draw), got {text!r}")
        return value
    if kind == "task-settings":
        return value
    if kind == "json-object":
        if not isinstance(value, dict):
            raise BadInput(f"parameter '{name}' must be a JSON object such as {{\"key\": 1}}, got {text!r}")
        return value
    if kind == "sizes":
        return parse_sizes(value, text)
    raise AssertionError(kind)  # pragma: no cover
