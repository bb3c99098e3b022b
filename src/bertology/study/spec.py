"""A study: its settings, typed and checked, and their expansion into the runs it makes.

`StudySpec.from_params` builds the spec from the raw strings the Workflow passes (typed by
bertology.study.params, checked by bertology.study.checks, then the preset applied by
bertology.study.presets). The spec's id is the study's content id; `cells` expands it into every run in
table order, and `checkpoint`, `dataset` and `regime_of` are the specs each run is made of, so plan's
lists of checkpoints to build and datasets to prepare are the cells' own.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from bertology.errors import BadInput, unknown
from bertology.interventions.catalog import is_random
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec, content_id
from bertology.study.checks import check_task_settings, check_values
from bertology.study.params import (
    NOT_EXPLICIT,
    PARAMS,
    REGIME_PARAMS,
    TASK_DATASET_KEYS,
    TASK_REGIME_KEYS,
    Size,
    check_study_name,
    typed_param,
    unmark,
)
from bertology.study.presets import (
    PRESET_LIMITS,
    PRESETS,
    apply_preset,
    preset_task_settings,
    stand_in,
    stand_in_variants,
)
from bertology.variants import Variant, parse_variants


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
    # a sequential run's task head (RunSpec.final_head); not part of the id of a study without intermediates
    final_head: str = "carried"
    eval_count: int | None = None
    doc_stride: int | None = None
    task_settings: dict = dataclasses.field(default_factory=dict)  # task -> {setting: value}
    # (variant, model) pairs not run: a swap-embeddings whose donor is the model itself (Table 5's "NA")
    not_applied: tuple[tuple[str, str], ...] = ()
    bundle: int | None = None  # runs per pod (None: automatic); how cells are packed, not part of the id
    # a pod's runs fine-tuned at once, side by side in its process (bertology.train.side_by_side: on a GPU each
    # on its own CUDA stream), each ending as it ends alone; not part of the id
    gpu_concurrency: int = 1
    # a pod's runs trained as one stacked model, up to K at once (bertology.train.fused): K is not part of any
    # id, but K > 1 makes every run a fused one (Regime.fused), which is part of its id
    fuse: int = 1

    keep_weights: bool = False  # keep every run's fine-tuned weights (else only intermediate runs keep them)
    deadlines: dict = dataclasses.field(default_factory=dict)  # step -> seconds, over plan's estimates

    # how the work is executed: neither in to_dict nor in ids
    OPERATIONAL = ("bundle", "gpu_concurrency", "fuse", "deadlines")

    @classmethod
    def from_params(cls, name: str, raw: dict[str, str]) -> tuple[StudySpec, list[str]]:
        """Type the raw parameters, apply the preset; returns the spec and what the preset changed."""
        check_study_name(name)
        strange = sorted(set(raw) - set(PARAMS))
        if strange:
            raise unknown("study parameter", strange[0], PARAMS)
        marked = {k: unmark(v) for k, v in raw.items()}
        raw = {k: value for k, (value, _) in marked.items()}
        # set by hand: a value without the default mark (an empty one means the default)
        explicit = {k for k, (value, default) in marked.items() if value and not default and k not in NOT_EXPLICIT}
        values = {k: typed_param(k, raw.get(k, "").strip() or default) for k, (_, default) in PARAMS.items()}
        preset = values["preset"]
        if preset not in PRESETS:
            raise unknown("preset", preset, PRESETS)
        check_values(values, raw)  # every value as given, before a preset replaces any
        task_settings = check_task_settings(values["task_settings"], [*values["tasks"], *values["intermediates"]])
        not_applied = _identity_swaps(values["models"], parse_variants(values["variants"], raw.get("variants", "")))
        changes = apply_preset(preset, values, explicit)
        if "task_settings" not in explicit:
            task_settings = preset_task_settings(preset, task_settings, changes)
        task_settings = {task: v for task, v in task_settings.items()
                         if task in (*values["tasks"], *values["intermediates"])}  # a preset may drop tasks
        limits = {k: v for k, v in PRESET_LIMITS.get(preset, {}).items() if k not in explicit}
        variants = parse_variants(values["variants"], raw.get("variants", ""), limits.get("grid"))
        if "variants" not in explicit:
            variants = stand_in_variants(preset, variants, changes)
        if values["reference"] is not None and "reference" not in explicit:
            values["reference"] = stand_in(preset, values["reference"], "reference", changes)
        regime = Regime.from_dict({"name": values["regime"], **{k: values[k] for k in REGIME_PARAMS},
                                   "fused": values["fuse"] > 1})
        sizes = values["sizes"] or ((values["fraction"], values["count"]),)
        spec = cls(name=name, preset=preset, models=tuple(dict.fromkeys(values["models"])),
                   variants=variants, tasks=tuple(dict.fromkeys(values["tasks"])),
                   source=values["source"], seeds=tuple(values["seeds"]), regime=regime,
                   max_length=values["max_length"], sizes=tuple(dict.fromkeys(sizes)),
                   subset_seed=values["subset_seed"], intervention_seed=values["intervention_seed"],
                   intermediates=tuple(dict.fromkeys(values["intermediates"])), final_head=values["final_head"],
                   eval_count=values["eval_count"], doc_stride=values["doc_stride"], task_settings=task_settings,
                   not_applied=tuple(p for p in not_applied if p[1] in values["models"]), bundle=values["bundle"],
                   gpu_concurrency=values["gpu_concurrency"], fuse=values["fuse"],
                   keep_weights=values["keep_weights"], deadlines=values["deadlines"])
        spec._check_shape()
        spec._check_fuse()
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
        if self.fuse < 1:
            raise BadInput(f"parameter 'fuse' must be >= 1 (runs trained as one model; 1: each run alone), "
                           f"got {self.fuse}")

    def _check_fuse(self) -> None:
        """`fuse` K > 1 only where bertology.train.fused can train the runs: runs that train (no regime none),
        each from its checkpoint (no intermediate run first), without the activation monitor (no reference).
        Fusing is the study's setting: a variant's regime cannot set it."""
        for variant in self.variants:
            if "fused" in variant.regime:
                raise BadInput(f"variant '{variant.name}' regime sets 'fused'; the study parameter fuse sets it "
                               f"for every run (allowed: fuse=K, K > 1 fuses)")
        if self.fuse == 1:
            return
        allowed = "allowed with it: fuse=1, each run alone"
        if self.gpu_concurrency > 1:
            raise BadInput(f"parameter 'fuse' is {self.fuse} and 'gpu_concurrency' is {self.gpu_concurrency}: a pod "
                           f"either fuses its runs or runs them side by side (allowed: one of them above 1)")
        if self.intermediates:
            raise BadInput(f"parameter 'fuse' is {self.fuse}, but sequential fine-tuning (intermediates "
                           f"{', '.join(self.intermediates)}) is not supported fused ({allowed})")
        regimes = [("the study", self.regime),
                   *((f"variant '{v.name}'", self.regime_of(v)) for v in self.variants if v.regime)]
        for where, regime in regimes:
            if regime.name == "none":
                raise BadInput(f"parameter 'fuse' is {self.fuse}, but {where} has regime none: nothing trains, so "
                               f"nothing fuses ({allowed})")
            if regime.reference is not None:
                raise BadInput(f"parameter 'fuse' is {self.fuse}, but {where} has reference {regime.reference}: the "
                               f"activation monitor is not supported fused ({allowed})")
            if regime.compile:
                raise BadInput(f"parameter 'fuse' is {self.fuse}, but {where} has compile true: a compiled model "
                               f"is not supported fused ({allowed})")

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in self.OPERATIONAL}
        d["variants"] = [v.to_dict() for v in self.variants]
        # The tracker changes no result, so not the study id either (the cells carry it to finetune).
        d["regime"] = {k: v for k, v in self.regime.to_dict().items() if k != "tracker"}
        d["sizes"] = [{"fraction": f, "count": c} for f, c in self.sizes]
        d["intermediates"] = list(self.intermediates)
        d["not_applied"] = [list(p) for p in self.not_applied]
        if not self.intermediates or self.final_head == "new":  # as before it existed: only new heads
            del d["final_head"]
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
        if self.intervention_seed is not None:
            chain_seed = self.intervention_seed
        else:
            chain_seed = seed if is_random(i.name for i in variant.interventions) else 0
        return CheckpointSpec(self.model_of(model, variant), variant.interventions, chain_seed)

    def dataset(self, tokenizer: str, task: str, size: Size = (None, None)) -> DatasetSpec:
        """The task's data at this size, with the task's own settings (task_settings) applied over the study's,
        tokenized with `tokenizer`'s (a model reference: the checkpoint's own, CheckpointSpec.tokenizer)."""
        fraction, count = size
        settings = {"fraction": fraction, "count": count, "max_length": self.max_length,
                    "eval_count": self.eval_count, "doc_stride": self.doc_stride}
        per_task = {k: v for k, v in self.task_settings.get(task, {}).items() if k in TASK_DATASET_KEYS}
        if "fraction" in per_task or "count" in per_task:  # a task's own size replaces the study's
            settings.update(fraction=None, count=None)
        if per_task.get("fraction") == 1:  # all the data, the same dataset as a study's size 1 (sizes: None)
            per_task["fraction"] = None
        settings.update(per_task)
        return DatasetSpec(task=task, source=self.source, tokenizer=tokenizer, subset_seed=self.subset_seed, **settings)

    def cells(self) -> list[Cell]:
        """Every run of the study in table order: model, task, size, intermediate, variant, seed.

        A variant with `runs` runs only the first `runs` seeds. A run's data is tokenized with its checkpoint's
        tokenizer: a variant whose chain swaps the embeddings (english) reads its donor's word-pieces, so its
        dataset differs from its base model's.
        A variant with its own model runs once, not once per study model (duplicates are dropped). A
        sequential run's intermediate run uses the same checkpoint, regime, size and seed. A cell keeps its
        fine-tuned weights (`keep_weights`) when the study asks, or when its run is another's intermediate run.
        """
        cells: dict[tuple[str, str], Cell] = {}
        skip = set(self.not_applied)
        for model, task, size, after, variant, seed in itertools.product(
                self.models, self.tasks, self.sizes, (None, *self.intermediates), self.variants, self.seeds):
            if (variant.name, model) in skip or seed not in variant.seeds(self.seeds):
                continue
            base = self.model_of(model, variant)
            checkpoint = self.checkpoint(model, variant, seed)
            reads = checkpoint.tokenizer  # swap-embeddings' donor's: the word-pieces its table is indexed by
            first = None if after is None else RunSpec(checkpoint, self.dataset(reads, after, size),
                                                       self.regime_of(variant, after), seed)
            run = RunSpec(checkpoint, self.dataset(reads, task, size), self.regime_of(variant, task), seed,
                          after=first, final_head="new" if first is None else self.final_head)
            cells.setdefault((variant.name, run.id), Cell(self.name, variant.name, base, run))
        # a run that is also an intermediate run keeps its weights: the final runs start from them
        intermediate = {c.run.after.id for c in cells.values() if c.run.after is not None}
        return [dataclasses.replace(c, keep_weights=self.keep_weights or c.run.id in intermediate)
                for c in cells.values()]


def _identity_swaps(models: list[str], variants: tuple[Variant, ...]) -> list[tuple[str, str]]:
    """(variant, model) pairs whose chain swaps in the model's own embeddings: the identity, not run.

    The monolingual report: the English word embeddings modification "is applied only to non-English
    pre-trained models" (Table 5's EN english is "NA"), so english-embeddings can list the English model
    for its base and clean cells. Judged on the references as written, before a preset's stand-ins (under
    tiny every model is tiny:bert, and the swap still runs as a smoke test)."""
    return [(v.name, m) for v in variants for m in models
            if any(step.name == "swap-embeddings" and step.params_dict.get("donor") == m for step in v.interventions)]
