"""The concepts of a study as frozen specs with a canonical JSON form and a content id.

Ids are what make every step cacheable and idempotent: a step derives its output key from the id of
the spec it was given, so the same spec always lands on the same key and a finished key is never
computed twice. An id is the first 16 hex digits of sha256(kind + code version + canonical JSON); bump a
kind's code version when the code that produces that artifact changes meaning.

Labels (which study a run belongs to, what a variant is called) are not part of any id: the same
checkpoint or run is shared by every study that needs it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bertology import tiny_recipe
from bertology.canonical import canonical_json, hash_id
from bertology.errors import BadInput, choices, did_you_mean, unknown
from bertology.interventions.catalog import TOKENIZER_FROM
from bertology.tracking import check_name  # the names only: no tracking library is imported

# Bump a kind's version when the code producing its artifact changes what the artifact means.
CODE_VERSIONS = {"checkpoint": "1", "dataset": "1", "run": "1", "study": "1", "vocab": "1"}


# Kinds whose artifacts depend on a model's weights (a dataset or vocabulary needs its tokenizer only).
WEIGHT_KINDS = ("checkpoint", "run", "study")
TINY_BERT = '"tiny:bert"'  # the tiny preset's BERT, as a JSON string in a canonical payload


def content_id(kind: str, payload: Any) -> str:
    """A payload that names the tiny BERT also hashes its pre-training recipe (bertology.tiny_recipe):
    `tiny:bert` is a name for weights a recipe makes, so a changed recipe never reuses the artifacts the
    old weights made, in a store that holds them."""
    text = f"{kind}:{CODE_VERSIONS[kind]}:{canonical_json(payload)}"
    if kind in WEIGHT_KINDS and TINY_BERT in text:
        text += f":{tiny_recipe.key()}"
    return hash_id(text)


def require_key(d: dict, key: str, kind: str) -> Any:
    if key not in d:
        raise BadInput(f"{kind} spec is missing '{key}'")
    return d[key]


def check_keys(d: Any, allowed: set[str], kind: str) -> dict:
    if not isinstance(d, dict):
        raise BadInput(f"{kind} spec must be a JSON object, got {type(d).__name__}")
    extra = sorted(set(d) - allowed)
    if extra:
        raise BadInput(f"unknown key '{extra[0]}' in {kind} spec ({choices(extra[0], sorted(allowed), 'allowed')})")
    return d


def as_int(value: Any, name: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) != int(value):
        raise BadInput(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise BadInput(f"{name} must be >= {minimum}, got {value}")
    return value


def as_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadInput(f"{name} must be true or false, got {value!r}")
    return value


def as_float(value: Any, name: str, low: float, high: float, *, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not (low < value if low_open else low <= value) or value > high:
        bracket = "(" if low_open else "["
        raise BadInput(f"{name} must be in {bracket}{low}, {high}], got {value!r}")
    return value


@dataclass(frozen=True)
class Intervention:
    """One registry entry applied to a checkpoint: `{"name": ..., "params": {...}}`."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_dict(cls, d: Any) -> Intervention:
        if isinstance(d, str):  # shorthand: "reverse-layers"
            d = {"name": d}
        d = check_keys(d, {"name", "params"}, "intervention")
        name = require_key(d, "name", "intervention")
        params = d.get("params") or {}
        if not isinstance(name, str) or not isinstance(params, dict):
            raise BadInput(f"intervention must be {{'name': str, 'params': object}}, got {d!r}")
        return cls(name, tuple(sorted(params.items())))

    @property
    def params_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def to_dict(self) -> dict:
        return {"name": self.name, "params": self.params_dict}


@dataclass(frozen=True)
class CheckpointSpec:
    """A base model plus an ordered chain of interventions; an empty chain is the unmodified model."""

    model: str
    interventions: tuple[Intervention, ...] = ()
    seed: int = 0

    @classmethod
    def from_dict(cls, d: Any) -> CheckpointSpec:
        d = check_keys(d, {"model", "interventions", "seed"}, "checkpoint")
        chain = d.get("interventions") or []
        if not isinstance(chain, list):
            raise BadInput(f"checkpoint interventions must be a list, got {chain!r}")
        return cls(str(require_key(d, "model", "checkpoint")),
                   tuple(Intervention.from_dict(i) for i in chain),
                   as_int(d.get("seed", 0), "intervention seed", 0))

    def to_dict(self) -> dict:
        return {"model": self.model, "interventions": [i.to_dict() for i in self.interventions],
                "seed": self.seed}

    @property
    def id(self) -> str:
        return content_id("checkpoint", self)

    @property
    def tokenizer(self) -> str:
        """The model reference whose tokenizer the built checkpoint has: the base model's, or that of the last
        intervention that replaces it (interventions.catalog.TOKENIZER_FROM: swap-embeddings' donor). A run's
        data is tokenized with it: ids of another vocabulary would index unrelated rows of the table."""
        ref = self.model
        for step in self.interventions:
            key = TOKENIZER_FROM.get(step.name)
            if key is not None and isinstance(step.params_dict.get(key), str):
                ref = step.params_dict[key]
        return ref


@dataclass(frozen=True)
class DatasetSpec:
    """A task's examples, subset and tokenized for one tokenizer: prepared once, reused by every run."""

    task: str
    source: str = "hub"
    tokenizer: str = ""  # model reference whose tokenizer is used
    max_length: int = 128
    fraction: float | None = None
    count: int | None = None
    subset_seed: int = 0
    # Rows kept of each evaluation split (seeded; the cross-lingual report cuts XNLI to the size of its
    # Dutch set); None: all.
    eval_count: int | None = None
    # SQuAD windows: tokens shared by consecutive windows of a long context; None: the task's default.
    doc_stride: int | None = None

    # Left out of the id at their defaults, so ids made before they existed still hold.
    OPTIONAL: ClassVar[tuple[str, ...]] = ("eval_count", "doc_stride")

    @classmethod
    def from_dict(cls, d: Any) -> DatasetSpec:
        d = check_keys(d, {f.name for f in dataclasses.fields(cls)}, "dataset")
        fraction = d.get("fraction")
        count = d.get("count")
        if fraction is not None and count is not None:
            raise BadInput(f"give a training fraction or a count, not both (fraction={fraction}, count={count})")
        return cls(
            task=str(require_key(d, "task", "dataset")),
            source=str(d.get("source", "hub")),
            tokenizer=str(require_key(d, "tokenizer", "dataset")),
            max_length=as_int(d.get("max_length", 128), "max_length", 8),
            fraction=None if fraction is None else as_float(fraction, "fraction", 0.0, 1.0, low_open=True),
            count=None if count is None else as_int(count, "count", 1),
            subset_seed=as_int(d.get("subset_seed", 0), "subset_seed", 0),
            eval_count=None if d.get("eval_count") is None else as_int(d["eval_count"], "eval_count", 1),
            doc_stride=None if d.get("doc_stride") is None else as_int(d["doc_stride"], "doc_stride", 1),
        )

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in self.OPTIONAL or v is not None}

    @property
    def id(self) -> str:
        return content_id("dataset", self)


@dataclass(frozen=True)
class Regime:
    """How to fine-tune: the optimisation settings and which parameters train (bertology.train.regimes)."""

    name: str = "full"
    lr: float = 2e-5
    batch_size: int = 32
    epochs: int = 3
    # Hugging Face's run_glue / run_mlm defaults, which the reports' scripts ran with: no report states either
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    eval_batch_size: int = 128
    eval_every: int = 0  # steps between evaluations besides each epoch's end (the forgetting curve: 50)
    checkpoint_every: int = 1000  # steps between resume states; 0: none
    log_every: int = 50  # steps per point of the training-loss series (curves, kind "train"); 0: none
    compile: bool = False  # torch.compile the model (train.device.compile_model; cached: train.compile_cache)
    cuda_graph: bool = True  # on a GPU, the whole training step as CUDA graphs (train.graphs)
    tracker: str = ""  # experiment tracking (bertology.tracking): wandb, mlflow, tensorboard; "": none
    train_layers: str | tuple[int, ...] | None = None  # freeze: from:K, last:K or a list
    train_embeddings: bool = False  # freeze: also train the embeddings
    unfreeze_per_epoch: int = 4  # gradual-unfreeze: layers opened from the top per epoch
    # A "native" model (a model reference) whose hidden states every evaluation point compares with the
    # fine-tuned model's, per layer, on a fixed batch of 16 sentences (the cross-lingual report's Fig. 1).
    reference: str | None = None
    # Which evaluation point's weights are the run's result (evaluated, analysed, a sequential run's start):
    # "best" on the first eval split, or "last" (bertology.train.loop). Part of the id: a run made with one
    # rule is never reused for the other.
    selection: str = "best"
    # Trained fused with other runs as one stacked model (bertology.train.fused; the study parameter `fuse`):
    # eager attention, and one dropout mask per dropout call shared by the group, so the result differs from
    # the run trained alone (float noise, other dropout draws) but not with the group's size or its other
    # runs. Part of the id; how many train at once (K) is how the run executes, not part of it.
    fused: bool = False
    # Training batches of similar-length examples (bertology.data.length_grouped_batches; run_glue's
    # --group_by_length), or random ones as run_glue draws them by default (false). A spec without it (every
    # run before the setting) trained length-grouped, so true is the value left out of the id; a study's
    # default is false (the study parameter group_by_length).
    group_by_length: bool = True

    SELECTIONS = ("best", "last")
    NAMES = ("full", "freeze", "gradual-unfreeze", "probe", "none")
    # The schedule's settings (and the selection, fusing and batching) are part of the id, but left out at the
    # value every run had before they existed (all `full`, all selecting the best point, all trained alone and
    # length-grouped), so that those runs' ids still hold.
    SCHEDULE: ClassVar[dict[str, Any]] = {"train_layers": None, "train_embeddings": False, "unfreeze_per_epoch": 4,
                                          "eval_every": 0, "reference": None, "selection": "best", "fused": False,
                                          "group_by_length": True}
    # How a run executes, not what it computes (like the device): never part of a run id, and left out of
    # to_dict at their defaults, so every id made before they existed still holds.
    EXECUTION: ClassVar[dict[str, Any]] = {"checkpoint_every": 1000, "log_every": 50, "compile": False,
                                           "cuda_graph": True, "tracker": ""}

    @classmethod
    def from_dict(cls, d: Any) -> Regime:
        d = check_keys(d, {f.name for f in dataclasses.fields(cls)}, "regime")
        name = d.get("name", "full")
        if name not in cls.NAMES:
            raise unknown("regime", name, cls.NAMES)
        return cls(
            name=name,
            lr=as_float(d.get("lr", 2e-5), "lr", 0.0, 1.0, low_open=True),
            batch_size=as_int(d.get("batch_size", 32), "batch_size", 1),
            epochs=as_int(d.get("epochs", 3), "epochs", 1),
            warmup_ratio=as_float(d.get("warmup_ratio", 0.0), "warmup_ratio", 0.0, 1.0),
            weight_decay=as_float(d.get("weight_decay", 0.0), "weight_decay", 0.0, 1.0),
            max_grad_norm=as_float(d.get("max_grad_norm", 1.0), "max_grad_norm", 0.0, 1e6, low_open=True),
            eval_batch_size=as_int(d.get("eval_batch_size", 128), "eval_batch_size", 1),
            eval_every=as_int(d.get("eval_every", 0), "eval_every", 0),
            checkpoint_every=as_int(d.get("checkpoint_every", 1000), "checkpoint_every", 0),
            log_every=as_int(d.get("log_every", 50), "log_every", 0),
            compile=as_bool(d.get("compile", False), "compile"),
            cuda_graph=as_bool(d.get("cuda_graph", True), "cuda_graph"),
            tracker=check_name(d.get("tracker")),
            train_layers=_layers(d.get("train_layers")),
            train_embeddings=as_bool(d.get("train_embeddings", False), "train_embeddings"),
            unfreeze_per_epoch=as_int(d.get("unfreeze_per_epoch", 4), "unfreeze_per_epoch", 1),
            reference=_reference(d.get("reference")),
            selection=_selection(d.get("selection", "best")),
            fused=as_bool(d.get("fused", False), "fused"),
            group_by_length=as_bool(d.get("group_by_length", True), "group_by_length"),
        )

    def to_dict(self, *, execution: bool = True) -> dict:
        d = dataclasses.asdict(self)
        if isinstance(d["train_layers"], tuple):
            d["train_layers"] = list(d["train_layers"])
        return {k: v for k, v in d.items()
                if (k not in self.EXECUTION or (execution and v != self.EXECUTION[k]))
                and (k not in self.SCHEDULE or v != self.SCHEDULE[k])}


def check_final_head(value: Any) -> str:
    """A sequential run's task head, one of RunSpec.FINAL_HEADS, with a one-line error naming the value."""
    if value in RunSpec.FINAL_HEADS:
        return value
    raise BadInput(f"final_head must be one of {', '.join(RunSpec.FINAL_HEADS)} (a new task head for the final "
                   f"task, or the intermediate run's), got {value!r}{_hint(value, RunSpec.FINAL_HEADS)}")


def _selection(value: Any) -> str:
    if value in Regime.SELECTIONS:
        return value
    raise BadInput(f"selection must be one of {', '.join(Regime.SELECTIONS)} (the best evaluation point or the "
                   f"last), got {value!r}{_hint(value, Regime.SELECTIONS)}")


def _hint(value: Any, allowed) -> str:
    """`; did you mean 'best'?` after a message that already lists what is allowed, or nothing."""
    match = did_you_mean(value, allowed)
    return f"; did you mean {match!r}?" if match is not None else ""


def _reference(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise BadInput(f"reference must be a model reference (a hub id, dir:PATH, …), got {value!r}")


def _layers(value: Any) -> str | tuple[int, ...] | None:
    """train_layers: None, `from:K` / `last:K`, or a list of layer indices (checked against depth later)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise BadInput(f"train_layers must be from:K, last:K or a list of layer indices, got {value!r}")


@dataclass(frozen=True)
class RunSpec:
    """One cell of a study: checkpoint x dataset x regime x training seed.

    `after` makes it sequential fine-tuning (the college report's Experiment 1): the run starts from the
    weights `after` (the intermediate run, on the same checkpoint) ended with, and with the task head
    `final_head` names: a new one, or the intermediate run's. The intermediate run and the head are part of
    the id, so each (intermediate, final) pair is its own run, and a run made with one head is never reused
    for the other."""

    checkpoint: CheckpointSpec
    dataset: DatasetSpec
    regime: Regime = field(default_factory=Regime)
    seed: int = 1
    after: RunSpec | None = None
    # A sequential run's task head: "new" (drawn afresh) or "carried" (the intermediate run's, which must
    # fit the final task). Left out of the id at "new", the only head before the setting existed, so the
    # runs stored then keep their ids, and are reused for "new" only.
    final_head: str = "new"

    FINAL_HEADS: ClassVar[tuple[str, ...]] = ("new", "carried")

    def __post_init__(self):
        if self.after is not None and self.after.checkpoint != self.checkpoint:
            raise BadInput(f"a sequential run and its intermediate run must start from one checkpoint "
                           f"(got {self.checkpoint.model} and {self.after.checkpoint.model})")
        check_final_head(self.final_head)
        if self.after is None and self.final_head != "new":
            raise BadInput(f"final_head {self.final_head} needs an intermediate run (`after`): a direct run "
                           "starts from its checkpoint")

    @classmethod
    def from_dict(cls, d: Any) -> RunSpec:
        d = check_keys(d, {"checkpoint", "dataset", "regime", "seed", "after", "final_head"}, "run")
        after = d.get("after")
        return cls(CheckpointSpec.from_dict(require_key(d, "checkpoint", "run")),
                   DatasetSpec.from_dict(require_key(d, "dataset", "run")),
                   Regime.from_dict(d.get("regime", {})),
                   as_int(d.get("seed", 1), "seed", 0),
                   None if after is None else RunSpec.from_dict(after),
                   d.get("final_head", "new"))

    def to_dict(self, *, execution: bool = True) -> dict:
        d = {"checkpoint": self.checkpoint.to_dict(), "dataset": self.dataset.to_dict(),
             "regime": self.regime.to_dict(execution=execution), "seed": self.seed}
        if self.after is not None:  # left out when absent, so ids made before it existed still hold
            d["after"] = self.after.to_dict(execution=execution)
        if self.final_head != "new":  # see final_head
            d["final_head"] = self.final_head
        return d

    @property
    def id(self) -> str:
        return content_id("run", self.to_dict(execution=False))


@dataclass(frozen=True)
class Cell:
    """A run as one study sees it: the run plus the labels its tables group by (not part of the id)."""

    study: str
    variant: str
    model: str
    run: RunSpec
    # Keep the fine-tuned weights in the store (the study asks for them, or a sequential run starts from
    # them); otherwise finetune evaluates and analyzes them in memory, in its pod, and never writes them.
    keep_weights: bool = False

    @classmethod
    def from_dict(cls, d: Any) -> Cell:
        d = check_keys(d, {"study", "variant", "model", "run", "keep_weights"}, "cell")
        return cls(str(require_key(d, "study", "cell")), str(require_key(d, "variant", "cell")),
                   str(require_key(d, "model", "cell")), RunSpec.from_dict(require_key(d, "run", "cell")),
                   as_bool(d.get("keep_weights", False), "keep_weights"))

    def to_dict(self) -> dict:
        d = {"study": self.study, "variant": self.variant, "model": self.model, "run": self.run.to_dict()}
        if self.keep_weights:  # left out when false, so plans written before it existed read the same
            d["keep_weights"] = True
        return d

    def labels(self) -> dict[str, Any]:
        """The factor columns every results row of this run carries."""
        ds = self.run.dataset
        return {"study": self.study, "variant": self.variant, "model": self.model, "task": ds.task,
                "source": ds.source, "fraction": ds.fraction, "count": ds.count, "seed": self.run.seed,
                "run_id": self.run.id, "checkpoint_id": self.run.checkpoint.id, "dataset_id": ds.id,
                "intermediate": None if self.run.after is None else self.run.after.dataset.task}


def parse_json_arg(text: str, what: str) -> Any:
    """Parse a JSON command-line value with a one-line error that names it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        snippet = text if len(text) <= 60 else text[:57] + "..."
        raise BadInput(f"{what} is not valid JSON ({e.msg} at char {e.pos}): {snippet!r}") from None
