"""Fan-out (`withParam`, `withItems`): items, child names, and the aggregated outputs of the children.

Follows, in argoproj/argo-workflows (v3.6 to v4.1):
- workflow/controller/dag.go `expandTask`: `withParam` must be a JSON list ("withParam value could not be
  parsed as a JSON list"); `withItems: []` is no fan-out at all (`ShouldExpand` is false for an empty
  list; the validator refuses its `{{item}}`); one child per item, named by operator.go `generateNodeName`
  as `task(i:desc)`.
- dag.go `executeDAGTask`: an empty `withParam` makes one node of phase Skipped, message "Skipped, empty
  params"; otherwise a TaskGroup whose phase is Succeeded, or the phase of the last Failed/Error child in
  item order.
- operator.go `processAggregateNodeOutputs` and `aggregatedJSONValueList`: `tasks.T.outputs.parameters.P`
  is the list of the Succeeded children's values in item order: the parsed values when every one is a
  JSON object or array (re-marshalled by Go: keys sorted, numbers as float64), else the strings. With no
  Succeeded child that has P, it is not set at all; a task that references it then waits forever on a
  cluster (util/template `failed to resolve`, which the controller requeues), so the local run fails it.
"""

from __future__ import annotations

import json
from typing import Any

from bertology.argo.substitution import RawNumber, go_json, item_description, parse_items

SKIPPED_EMPTY = "Skipped, empty params"


class FanOutError(ValueError):
    """A fan-out Argo cannot expand (the node is an Error)."""


def items(task: dict, render) -> list[Any] | None:
    """The task's items, or None when it is no fan-out. `render` substitutes the task's scope."""
    if task.get("withItems"):  # a non-empty list (an empty one is omitted from the task's JSON)
        return [_raw_numbers(i) for i in render(task["withItems"])]
    if task.get("withParam") is None or task.get("withParam") == "":
        return None
    text = render(str(task["withParam"]))
    try:
        parsed = parse_items(text)
    except ValueError as e:
        raise FanOutError(f"withParam value could not be parsed as a JSON list: {text.strip()[:200]}: {e}") from None
    if not isinstance(parsed, list):
        raise FanOutError(f"withParam value could not be parsed as a JSON list: {text.strip()[:200]}")
    return [[] if i is None else i for i in parsed]  # a null item is typed List: GetListVal gives []


def _raw_numbers(value: Any) -> Any:
    """YAML numbers of withItems as the text the Kubernetes API would hand Argo."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return RawNumber(go_json(value))
    if isinstance(value, list):
        return [_raw_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _raw_numbers(v) for k, v in value.items()}
    return value


def child_name(task_node: str, index: int, item: Any) -> str:
    return f"{task_node}({index}:{item_description(item)})"


def group_phase(children: list[str]) -> str:
    """The TaskGroup's phase from its children's, in item order (executeDAGTask)."""
    phase = "Succeeded"
    for child in children:
        if child in ("Failed", "Error"):
            phase = child
    return phase


def _object_or_array(value: str) -> Any:
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, (dict, list)) else None


def aggregate(values: list[str]) -> str:
    """aggregatedJSONValueList over the Succeeded children's values of one output parameter."""
    parsed = [_object_or_array(v) for v in values]
    if all(p is not None for p in parsed):
        return go_json(parsed)
    return go_json(values)


def aggregate_outputs(children: list[tuple[str, dict[str, str]]], declared: list[str]) -> dict[str, str]:
    """`{P: aggregated}` for each declared output P that a Succeeded child has (others are not set)."""
    out = {}
    for name in declared:
        values = [outputs[name] for phase, outputs in children if phase == "Succeeded" and name in outputs]
        if values:
            out[name] = aggregate(values)
    return out
