"""Every intervention's name and parameters, without torch: what a study's variants are checked against
before any model is read (bertology.study.checks.check_names: `bertology run` and plan refuse a misspelt
name in about a second), and what the registry checks first, so both say it the same way.

An entry holds what a check needs no model config for: the defaults (the parameters, None for a
required one), whether it draws random numbers, the parameters whose values are a fixed list, and those
that are true or false. The registry takes each intervention's defaults and randomness from here, and a
module (bertology.interventions.<module>, which imports torch) its value lists, so they are said once; the
registry is built in this table's order. The checks that need the model's config (layer and head
indices against its depth, tensor globs against its parameter names, a donor's hidden size) stay in the
modules.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bertology.errors import BadInput, choices


@dataclass(frozen=True)
class Entry:
    module: str  # bertology.interventions.<module>: the code
    defaults: dict  # every parameter, None for a required one
    random: bool  # draws from the chain's generator: a new seed gives a new checkpoint
    enums: dict[str, tuple[str, ...]] = field(default_factory=dict)  # a parameter's allowed values
    flags: tuple[str, ...] = ()  # the parameters that are true or false


CATALOG: dict[str, Entry] = {
    "reverse-layers": Entry("reverse_layers", {}, False),
    "remove-layers": Entry("remove_layers", {"layers": None}, False),
    "reinit": Entry("reinit", {"scope": "all", "std": 0.02, "layers": None, "layer_norms": False, "biases": True,
                               "heads": None, "output_columns": False}, True,
                    enums={"scope": ("all", "word-embeddings", "layers", "heads", "pooler")},
                    flags=("layer_norms", "biases", "output_columns")),
    "shuffle-embeddings": Entry("shuffle_embeddings", {"english_only": False, "others": "shuffle"}, True,
                                enums={"others": ("shuffle", "keep")}, flags=("english_only",)),
    "swap-embeddings": Entry("swap_embeddings", {"donor": None}, False),
    "permute-within": Entry("permute_within", {"tensors": ["*"]}, True),
    "match-moments": Entry("match_moments", {"match": None, "std": 0.02, "tensors": ["*"]}, True,
                           enums={"match": ("norm", "variance")}),
}

# The interventions that give the checkpoint another model's tokenizer, and the parameter naming that model:
# a run's data is tokenized with the checkpoint's own tokenizer (bertology.spec.CheckpointSpec.tokenizer), so
# a foreign BERT with English embeddings reads English word-pieces, as the monolingual report's Table 5 does.
TOKENIZER_FROM: dict[str, str] = {"swap-embeddings": "donor"}


def check_step(item: Any) -> tuple[str, dict]:
    """One step of a chain, `{"name": …, "params": {…}}`, by what needs no model config: a known name, known
    parameters, and each true-or-false or listed value allowed. Returns (name, params with defaults filled)."""
    if not isinstance(item, dict) or "name" not in item or set(item) - {"name", "params"}:
        raise BadInput(f"intervention {item!r} must be a mapping with 'name' and optional 'params'")
    name = item["name"]
    entry = CATALOG.get(name) if isinstance(name, str) else None
    if entry is None:
        raise BadInput(f"intervention {name!r} is unknown; {choices(name, CATALOG, 'allowed')}")
    return name, check_params(name, item.get("params") or {})


def check_params(name: str, params: Any) -> dict:
    """An intervention's parameters by what needs no model config; returns them with defaults filled."""
    entry = CATALOG[name]
    if not isinstance(params, dict):
        raise BadInput(f"{name} params {params!r} must be a mapping of parameter names to values")
    unknown = sorted(set(params) - set(entry.defaults))
    if unknown:
        raise BadInput(f"{name} has no parameter {unknown[0]!r}; {choices(unknown[0], sorted(entry.defaults), 'allowed')}")
    resolved = {**copy.deepcopy(entry.defaults), **params}
    for key, allowed in entry.enums.items():
        value = resolved[key]
        if not isinstance(value, str) or value not in allowed:
            raise BadInput(f"{name} {key} {value!r} is not allowed; {choices(value, allowed, 'allowed')}")
    for key in entry.flags:
        if not isinstance(resolved[key], bool):
            raise BadInput(f"{name} {key} {resolved[key]!r} is not allowed; allowed: true or false")
    return resolved


def check_chain(chain: Any) -> None:
    """A whole chain by `check_step`."""
    if not isinstance(chain, list):
        raise BadInput(f"intervention chain {chain!r} must be a list of {{name, params}} items")
    for item in chain:
        check_step(item)


def is_random(names: Iterable[str]) -> bool:
    """Whether a chain of these interventions draws random numbers (so its seed changes its bytes)."""
    return any(CATALOG[name].random for name in names if name in CATALOG)
