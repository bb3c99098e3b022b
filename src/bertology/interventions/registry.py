"""The registry of interventions, and how a chain of them is validated and applied.

Each intervention is an entry of bertology.interventions.catalog (its defaults, listing every parameter with
None for a required one, and whether it draws from the generator) and a module with a fixed shape (a
docstring whose first line says what it does, ALLOWED giving each parameter its type and allowed values in
words, as `bertology interventions` shows them (`check` enforces them), `check(params, config)` and
`apply(model, tokenizer, params, generator)`, plus `config_after(params, config)` where it changes the
config, e.g. the depth, and `facts(model, tokenizer, params)` where the manifest should record what the
comparison cannot see, e.g. which embedding rows a shuffle kept); the registry makes one Intervention of
the two. Whether it is random is what lets a study give each training seed
its own draw of a random intervention (the monolingual report ran each experiment "with no fixed random
seed") while a deterministic chain stays one checkpoint for all seeds. Validation needs only the config,
so a study is refused before any weights load; application snapshots the model first and compares
afterwards, so the manifest says exactly which tensors changed. The names, parameters and the checks that
need no config are also in bertology.interventions.catalog, without torch: the registry is built in its
order, takes each one's defaults and randomness from its entry (a module takes its listed values from it
too), and a step is checked by it before the module's own `check`.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.errors import BadInput, BertologyError
from bertology.interventions import catalog, manifest

Tokenizer = PreTrainedTokenizerBase
Apply = Callable[[nn.Module, Tokenizer, dict, torch.Generator], tuple[nn.Module, Tokenizer]]


@dataclass(frozen=True, eq=False)
class Intervention:
    """One registry entry: its name, a one-line doc, the allowed params with their defaults, each one's
    (type, allowed values), and its code."""

    name: str
    doc: str
    defaults: dict
    check: Callable[[dict, PretrainedConfig], None]
    transform: Apply
    random: bool
    config_after: Callable[[dict, PretrainedConfig], PretrainedConfig] | None = None
    facts: Callable[[nn.Module, Tokenizer, dict], dict] | None = None
    allowed: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def from_module(cls, name: str, entry: catalog.Entry, module: ModuleType) -> Intervention:
        doc = (module.__doc__ or "").strip().splitlines()[0]
        defaults = copy.deepcopy(entry.defaults)
        if set(module.ALLOWED) != set(defaults):
            raise AssertionError(f"{name}: ALLOWED must describe exactly the parameters of its catalog entry")
        return cls(name, doc, defaults, module.check, module.apply, entry.random,
                   getattr(module, "config_after", None), getattr(module, "facts", None), dict(module.ALLOWED))

    def validate(self, params: dict, config: PretrainedConfig) -> dict:
        """The params with defaults filled in; BadInput for unknown names or bad values (first those that
        need no config: interventions.catalog)."""
        resolved = catalog.check_params(self.name, params)
        self.check(resolved, config)
        return resolved

    def apply(
        self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
    ) -> tuple[nn.Module, PreTrainedTokenizerBase]:
        return self.transform(model, tokenizer, self.validate(params, model.config), generator)


REGISTRY: dict[str, Intervention] = {
    name: Intervention.from_module(name, entry, importlib.import_module(f"bertology.interventions.{entry.module}"))
    for name, entry in catalog.CATALOG.items()
}


def validate_chain(chain: list[dict], config: PretrainedConfig) -> list[dict]:
    """Check a chain against a config (no weights needed); return it with every default filled in.

    The returned form is canonical: `reinit` and `reinit` with `scope: all` come out the same. Each item
    is checked against the config as the items before it leave it (after `remove-layers last:6`, a
    12-layer model has 6 layers to re-initialise).
    """
    if not isinstance(chain, list):
        raise BadInput(f"intervention chain {chain!r} must be a list of {{name, params}} items")
    if chain and config.model_type != "bert":
        raise BadInput(f"interventions need a BERT checkpoint (model_type 'bert'); this one is "
                       f"{config.model_type!r}, which runs only unmodified (an empty chain)")
    resolved = []
    for item in chain:
        entry = REGISTRY[catalog.check_step(item)[0]]
        params = entry.validate(item.get("params") or {}, config)
        resolved.append({"name": entry.name, "params": params})
        if entry.config_after is not None:
            config = entry.config_after(params, config)
    return resolved


def is_random(names: Iterable[str]) -> bool:
    """Whether a chain of these interventions draws random numbers (so its seed changes its bytes)."""
    return catalog.is_random(names)


def chain_config(chain: list[dict], config: PretrainedConfig) -> PretrainedConfig:
    """The config a validated chain leaves behind (remove-layers changes the depth): what the
    fine-tuning regime is checked against."""
    for item in chain:
        entry = REGISTRY[item["name"]]
        if entry.config_after is not None:
            config = entry.config_after(item["params"], config)
    return config


def apply_chain(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, chain: list[dict], seed: int
) -> tuple[nn.Module, PreTrainedTokenizerBase, dict]:
    """Apply the chain in order; one generator seeded with `seed` drives all of its randomness.

    Returns the model, the tokenizer and the manifest (its chain is the validated chain, defaults filled;
    each step's facts, where its intervention has them, as the model and tokenizer are when it starts).
    """
    resolved = validate_chain(chain, model.config)
    before, count_before = manifest.snapshot(model), manifest.parameter_count(model)
    generator = torch.Generator().manual_seed(seed)
    facts = []
    for step, item in enumerate(resolved):
        entry = REGISTRY[item["name"]]
        if entry.facts is not None:
            facts.append({"step": step, "intervention": entry.name,
                          **entry.facts(model, tokenizer, item["params"])})
        model, tokenizer = entry.transform(model, tokenizer, item["params"], generator)
    record = manifest.build_manifest(resolved, seed, before, count_before, model, facts)
    if resolved and not any(t["changed"] for t in record["tensors"]):
        names = " + ".join(f"{i['name']} {i['params']}" if i["params"] else i["name"] for i in resolved)
        raise NoChange(f"intervention {names} (seed {seed}) changed 0 of {len(record['tensors'])} tensors: "
                       "the variant would be a copy of the unmodified model")
    return model, tokenizer, record


class NoChange(BertologyError):
    """A chain that left every tensor bit-identical: the variant would silently duplicate the baseline (as
    `reinit` did on a tiny BERT that was itself drawn by reinit with the same seed). Exit 1: a failed step."""
