"""The schema layer: every document against hera's pydantic models of Argo's CRDs, unknown keys forbidden.

A misspelled key (which Argo itself silently drops) or a wrong type fails here. hera's models are
generated from Argo's api/jsonschema/schema.json (v4.0.5), i.e. from pkg/apis/workflow/v1alpha1/
workflow_types.go; keys that differ between the Argo versions we support get a hint (RENAMED) or are
refused with the version they need (LATER_FIELDS).
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from bertology.argo.documents import Source

API_VERSION = "argoproj.io/v1alpha1"
KINDS = ("Workflow", "WorkflowTemplate", "CronWorkflow")
# Keys Argo dropped, renamed or added after hera's models (Argo v4.0.5 schema); hinted at when the schema
# reports them as unknown. From a diff of api/jsonschema/schema.json at v3.6.19, v4.0.5 and v4.1.0.
_V41 = "only in Argo v4.1.0 and later; our workflows must also run on v3.6.19"
RENAMED = {
    "semaphore": "removed in Argo v4.0.0; Argo 3.6+ and 4.x use 'semaphores: [...]'",
    "mutex": "removed in Argo v4.0.0; Argo 3.6+ and 4.x use 'mutexes: [...]'",
    "schedule": "removed in Argo v4.0.0; Argo 3.6+ and 4.x use 'schedules: [...]'",
    "podPriority": "removed in Argo v4.0.0; use 'podPriorityClassName'",
    "priority": "removed from templates in Argo v4.0.0; use 'priorityClassName'",
    **{
        key: _V41
        for key in (
            "pendingTimeout",
            "podResources",
            "resourceClaims",
            "executorPlugins",
            "restartPolicyRules",
            "saveStreamViaFile",
            "addressingStyle",
        )
    },
}
# The Argo versions our YAML supports (README, "Argo"). Fields that hera's models (generated from Argo
# v4.0.5) accept but v3.6.19 does not know are refused: v3.6 would drop them silently. Keyed by hera's model
# class, then the YAML key, with the first Argo version that has it (the schema.json diff above, and e.g.
# `git show v3.6.19:pkg/apis/workflow/v1alpha1/workflow_types.go | grep Cap`: nothing; v4.0.0 has Backoff.Cap).
ARGO_OLDEST, ARGO_NEWEST = "v3.6.19", "v4.1.2"
LATER_FIELDS = {
    "Backoff": {"cap": "v4.0.0"},
    "Template": {"annotations": "v4.0.0"},
    "Mutex": {"database": "v4.0.0"},
    "SemaphoreRef": {"database": "v4.0.0"},
    "Artifact": {"plugin": "v4.0.0"},
    "ArtifactLocation": {"plugin": "v4.0.0"},
    "ArtifactPaths": {"plugin": "v4.0.0"},
    "ArtifactRepository": {"plugin": "v4.0.0"},
    "Link": {"target": "v4.0.0"},
}


@functools.lru_cache(maxsize=1)
def _strict_models() -> dict[str, Any]:
    """hera's Argo models with unknown keys forbidden.

    The flag must be set before the model classes are created (pydantic copies the config at class
    creation). If something imported them earlier, they are imported afresh; either way the flag is
    checked, since a silently lenient schema would defeat the purpose.
    """
    from hera.shared._pydantic import APIBaseModel

    APIBaseModel.model_config["extra"] = "forbid"
    module = "hera.workflows.models.io.argoproj.workflow.v1alpha1"
    models = importlib.import_module(module)
    if not _forbids_unknown_keys(models):
        for name in [m for m in sys.modules if m.startswith("hera.workflows.models")]:
            del sys.modules[name]
        models = importlib.import_module(module)
        if not _forbids_unknown_keys(models):
            raise RuntimeError("hera's models still accept unknown keys; strict validation is not possible")
    return {kind: getattr(models, kind) for kind in KINDS}


def _forbids_unknown_keys(models) -> bool:
    from pydantic import ValidationError

    try:
        models.WorkflowSpec.model_validate({"templates": [{"name": "probe", "container": {"imagee": "x"}}]})
    except ValidationError:
        return True
    return False


def _location(doc: Any, loc: tuple) -> tuple[str, list]:
    """Render a pydantic error location against the document: list items that have a name show it.

    Returns the rendered path and the part of `loc` that does not index into the document (union
    member tags, or the name of a missing key).
    """
    out, node = "", doc
    for i, key in enumerate(loc):
        if isinstance(node, dict) and key in node:
            out += f".{key}" if out else str(key)
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            item = node[key]
            name = item.get("name") if isinstance(item, dict) else None
            out += f"[{name}]" if isinstance(name, str) else f"[{key}]"
            node = item
        else:
            return out, list(loc[i:])
    return out, []


def schema_errors(source: Source) -> list[str]:
    """Errors of the strict schema layer for one document."""
    from pydantic import ValidationError

    doc = source.doc
    if doc.get("apiVersion") != API_VERSION:
        return [
            f"{source.path}: {source.label}: apiVersion: is {doc.get('apiVersion')!r}, must be {API_VERSION}"
        ]
    if doc.get("kind") not in KINDS:
        return [f"{source.path}: document: kind: {doc.get('kind')!r} is not one of {', '.join(KINDS)}"]
    try:
        _strict_models()[source.kind].model_validate(doc)
    except ValidationError as e:
        messages: dict[str, list[str]] = {}
        for err in e.errors():
            where, rest = _location(doc, tuple(err["loc"]))
            if err["type"] == "extra_forbidden":
                key = where.rsplit(".", 1)[-1]
                where = where.rsplit(".", 1)[0] if "." in where else "(top level)"
                hint = f"; {RENAMED[key]}" if key in RENAMED else ""
                msg = f"unknown field '{key}' (not in Argo's schema{hint})"
            elif err["type"] == "missing":
                msg = f"missing required field '{rest[0]}'" if rest else "missing required field"
            else:
                msg = f"{err['msg']} (got {json.dumps(err.get('input'), default=str)})"
            if msg not in messages.setdefault(where, []):
                messages[where].append(msg)
        return [
            f"{source.path}: {source.label}: {where}: {' / '.join(msgs)}" for where, msgs in messages.items()
        ]
    return []


def later_fields(source: Source) -> Iterator[tuple[str, str]]:
    """(where, message) for each field hera's models accept that Argo v3.6.19 does not know (it would
    drop them): refused. The document must have passed `schema_errors`."""
    model = _strict_models()[source.kind].model_validate(source.doc)
    for loc, key, version in _later_fields(model, ()):
        where, _ = _location(source.doc, loc[:-1])
        yield (
            where or "(top level)",
            (
                f"field '{key}' needs Argo {version} or later; these workflows support Argo "
                f"{ARGO_OLDEST} to {ARGO_NEWEST} and {ARGO_OLDEST} drops it silently"
            ),
        )


def _later_fields(model: Any, loc: tuple) -> Iterator[tuple[tuple, str, str]]:
    """(location, key, first Argo version) of every LATER_FIELDS key set in a validated hera model."""
    from pydantic import BaseModel

    if isinstance(model, BaseModel):
        later = LATER_FIELDS.get(type(model).__name__, {})
        for attr in model.model_fields_set:
            info = type(model).model_fields.get(attr)
            key = (info.alias if info is not None else None) or attr
            if key in later:
                yield (*loc, key), key, later[key]
            yield from _later_fields(getattr(model, attr), (*loc, key))
    elif isinstance(model, list):
        for i, item in enumerate(model):
            yield from _later_fields(item, (*loc, i))
    elif isinstance(model, dict):
        for key, item in model.items():
            yield from _later_fields(item, (*loc, key))
