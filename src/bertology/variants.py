"""A study's variants: the columns of its table, each an intervention chain (and optionally its own
regime or base model), written out one by one or generated from a grid.

A variant is `{"name": …, "interventions": […]}`, with optional keys:
- `regime`: overrides of the study's regime for this variant only (the cross-lingual report's freezing
  schemes are variants of one study: `{"name": "freeze", "train_layers": "last:3"}`);
- `model`: a model reference that replaces the study's model for this variant (layer-removal compares
  with distilbert/distilbert-base-uncased, which is a checkpoint of its own, not an intervention);
- `runs`: how many of the study's seeds this variant runs, the first `runs` of them (default: all). The
  monolingual report ran its §3–4 experiments three times and its §5–6 ones once (§7), and its Table 6 sets
  both side by side, so init-distribution runs the oracle once beside a pre-trained model run three times;
- `grid`: expand the variant over values. `{"k": [1, 2, 3]}` is one axis; several axes multiply
  (`{"layer": [0, 1], "head": [0, 1, 2]}` gives 6 variants, the first axis slowest); a list of objects
  (`[{"k": 1, "from": 0}, …]`) gives one variant per object. Every `{axis}` in the name, the chain, the
  regime and the model is replaced by the value: a string that is exactly `{axis}` becomes the value
  itself (a number stays a number), any other string gets the value's text. Each expanded variant keeps
  its grid values as `levels`, which the analysis plots against (partial-reinit by K, heads by layer).

So head-reinit's 96 variants are one line of YAML, and the report's curves know K without parsing names.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from bertology.errors import BadInput
from bertology.spec import Intervention

KEYS = {"name", "interventions", "regime", "model", "grid", "runs"}
# Grid axes become columns of the analysis tables next to these, so they may not take their names.
RESERVED_AXES = {"study", "variant", "model", "task", "source", "fraction", "count", "seed", "run_id", "split",
                 "metric", "value", "primary", "intermediate", "n", "mean", "sd", "ci_low", "ci_high", "p_value",
                 "delta", "baseline_mean", "step", "epoch", "index", "over"}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_SHAPE = ('{"name": str, "interventions": [...]} with optional "regime": {...}, "model": str, "runs": int, '
          '"grid": {axis: [values]} or [{axis: value}, ...]')


@dataclass(frozen=True)
class Variant:
    """A column of a study's table: a label, the intervention chain that produces it, and optionally its
    own regime overrides, base model and the grid values it was expanded from."""

    name: str
    interventions: tuple[Intervention, ...]
    regime: dict = field(default_factory=dict)
    model: str | None = None
    levels: dict = field(default_factory=dict)
    runs: int | None = None  # the first `runs` of the study's seeds (None: all of them)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"name": self.name, "interventions": [i.to_dict() for i in self.interventions]}
        if self.regime:
            d["regime"] = dict(self.regime)
        if self.model is not None:
            d["model"] = self.model
        if self.runs is not None:
            d["runs"] = self.runs
        if self.levels:
            d["levels"] = dict(self.levels)
            d["axes"] = list(self.levels)  # the grid's axis order (stores sort keys): the first is the x axis
        return d

    def seeds(self, study_seeds: tuple[int, ...]) -> tuple[int, ...]:
        """The seeds this variant runs: the study's, or the first `runs` of them."""
        return study_seeds if self.runs is None else study_seeds[:self.runs]

    @property
    def unmodified(self) -> bool:
        """The study's baseline: the model as pre-trained, fine-tuned under the study's own regime."""
        return not self.interventions and not self.regime and self.model is None


def parse_variants(value: Any, text: str, limit: int | None = None) -> tuple[Variant, ...]:
    """The `variants` parameter (already JSON-decoded) to variants, grids expanded in order.

    `limit` keeps only the first `limit` rows of each grid (the tiny preset's smaller matrix).
    """
    if not isinstance(value, list):
        raise BadInput(f"parameter 'variants' must be a JSON list of {_SHAPE}, got {text!r}")
    out = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or set(item) - KEYS:
            raise BadInput(f"each variant must be {_SHAPE}, got {json.dumps(item)}")
        rows = grid_rows(item) if "grid" in item else [{}]
        for levels in rows[:limit] if limit else rows:
            out.append(_variant({k: v for k, v in item.items() if k != "grid"}, levels))
    return tuple(out)


def grid_rows(item: dict) -> list[dict]:
    """A variant's grid as its list of {axis: value} rows."""
    grid, name = item["grid"], item["name"]
    axes = grid if isinstance(grid, dict) else grid[0] if isinstance(grid, list) and grid and isinstance(grid[0], dict) else {}
    reserved = sorted(set(axes) & RESERVED_AXES)
    if reserved:
        raise BadInput(f"variant '{name}' grid axis '{reserved[0]}' is a results column name; allowed: any other "
                       f"name (not {', '.join(sorted(RESERVED_AXES))})")
    if isinstance(grid, dict) and grid:
        for axis, values in grid.items():
            if not isinstance(values, list) or not values:
                raise BadInput(f"variant '{name}' grid axis '{axis}' must be a non-empty list, got {values!r}")
        axes = list(grid)
        return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*grid.values())]
    if isinstance(grid, list) and grid and all(isinstance(r, dict) and r for r in grid):
        if any(set(r) != set(grid[0]) for r in grid):
            raise BadInput(f"variant '{name}' grid rows must all have the axes {sorted(grid[0])}")
        return [dict(r) for r in grid]
    raise BadInput(f"variant '{name}' grid must be {{axis: [values]}} or a list of {{axis: value}}, got {grid!r}")


def _variant(item: dict, levels: dict) -> Variant:
    for axis, value in levels.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise BadInput(f"variant '{item['name']}' grid value {axis}={value!r} must be a number or a string")
    item = _substitute(item, levels, item["name"])
    name = item["name"]
    if not name.strip():
        raise BadInput(f"variant name {name!r} is empty")
    chain = item.get("interventions") or []
    if not isinstance(chain, list):
        raise BadInput(f"variant '{name}' interventions must be a list, got {chain!r}")
    regime = item.get("regime") or {}
    if not isinstance(regime, dict):
        raise BadInput(f"variant '{name}' regime must be an object of regime settings, got {regime!r}")
    model = item.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise BadInput(f"variant '{name}' model must be a model reference, got {model!r}")
    runs = item.get("runs")
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise BadInput(f"variant '{name}' runs must be a whole number >= 1 (how many of the study's seeds it runs), "
                       f"got {runs!r}")
    return Variant(name, tuple(Intervention.from_dict(i) for i in chain), regime, model, levels, runs)


def _substitute(value: Any, levels: dict, variant: str) -> Any:
    """Every `{axis}` in strings replaced by the level; unknown placeholders are refused by name."""
    if isinstance(value, dict):
        return {k: _substitute(v, levels, variant) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, levels, variant) for v in value]
    if not isinstance(value, str):
        return value
    for axis in _PLACEHOLDER.findall(value):
        if axis not in levels:
            known = ", ".join(levels) or "none (the variant has no grid)"
            raise BadInput(f"variant '{variant}' uses {{{axis}}} but its grid axes are: {known}")
    whole = _PLACEHOLDER.fullmatch(value)
    if whole:
        return levels[whole.group(1)]
    return _PLACEHOLDER.sub(lambda m: str(levels[m.group(1)]), value)
