"""A study's Workflow file made into the object a cluster is sent, checked first, here: the file is a
bertology study (a Workflow whose `workflowTemplateRef` is one of ours), each parameter is one the study
declares, and a study parameter's value types as plan will type it. A typo is then one line before any
request, not a Workflow that Argo accepts and ignores a parameter of, or a plan pod that fails.

The file is read as `bertology run` reads it (bertology.argo.documents: the file, its WorkflowTemplate in the
templates directory beside it), and the parameters are bound as `argo submit -p` binds them
(workflow/util/util.go `overrideParameters`): each given one becomes `{name, value}`, first and in the order
given, and the file's others follow unchanged, defaults (`default:VALUE`) included.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from bertology.errors import BadInput, choices

# The WorkflowTemplates a study Workflow refers to: every study's DAG, and vocab-overlap's.
STUDY_TEMPLATE = "bertology-study"
STUDY_TEMPLATES = (STUDY_TEMPLATE, "bertology-vocab-overlap")
TEMPLATES_HINT = "pass templates=DIR (--templates DIR): the WorkflowTemplates, e.g. a checkout's workflows/templates"


def study_workflow(path: str | Path, parameters: dict[str, Any] | None = None, *,
                   templates: str | Path | None = None, priority: int | str | None = None) -> dict:
    """The Workflow to create: the file's document with the parameters bound (and `spec.priority`, as `argo
    submit --priority` sets it). BadInput, one line, for anything a cluster would refuse or silently
    ignore."""
    from bertology.argo.documents import Source, effective_spec, load_documents, load_library

    path = Path(path)
    docs = load_documents(path)  # a missing file, or not YAML: one line naming it
    template = _template_ref(path, docs)
    where = Path(templates) if templates is not None else path.resolve().parent / "templates"
    if templates is not None and not where.is_dir():
        raise BadInput(f"templates '{templates}' is not a directory (the WorkflowTemplates' directory)")
    library = load_library(where)
    if template not in library:
        raise BadInput(f"WorkflowTemplate '{template}' not found in {where}, so {path}'s parameters cannot be "
                       f"checked; {TEMPLATES_HINT}")
    source = Source(path, docs[0])
    spec, _ = effective_spec(source, library)
    declared = [str(p["name"]) for p in (spec.get("arguments") or {}).get("parameters") or []]
    given = {str(name): as_parameter(name, value) for name, value in (parameters or {}).items()}
    for name in given:
        if name not in declared:
            raise BadInput(f"unknown parameter '{name}' for {path} ({choices(name, declared, 'declared')}; "
                           f"Argo would accept it and ignore it)")
    if template == STUDY_TEMPLATE:
        check_study_values(given)
    workflow = copy.deepcopy(docs[0])
    own = ((workflow.get("spec") or {}).get("arguments") or {}).get("parameters") or []
    for param in own:  # a YAML number or bool as the string Argo keeps it (AnyString), as both APIs take it
        for key in ("value", "default"):
            if param.get(key) is not None and not isinstance(param[key], str):
                param[key] = as_parameter(param.get("name"), param[key])
    if given:
        workflow.setdefault("spec", {}).setdefault("arguments", {})["parameters"] = [
            *({"name": name, "value": value} for name, value in given.items()),
            *(p for p in own if p.get("name") not in given)]
    if priority is not None:
        from bertology.argo.semaphores import check_priority

        workflow["spec"]["priority"] = check_priority(priority, "priority")
    return workflow


def _template_ref(path: Path, docs: list[dict]) -> str:
    """The study WorkflowTemplate the file's one Workflow refers to; BadInput for any other file."""
    if len(docs) == 1 and docs[0].get("kind") == "Workflow":
        ref = (docs[0].get("spec") or {}).get("workflowTemplateRef")
        name = ref.get("name") if isinstance(ref, dict) else None
        if name in STUDY_TEMPLATES:
            return name
        found = f"its workflowTemplateRef is {name!r}" if name else "it has no workflowTemplateRef"
    else:
        kinds = ", ".join(str(d.get("kind") or "a document without kind") for d in docs)
        found = f"it holds {kinds}" if docs else "it is empty"
    raise BadInput(f"{path} is not a bertology study Workflow: {found} (expected one Workflow with "
                   f"workflowTemplateRef {' or '.join(STUDY_TEMPLATES)}, e.g. workflows/reversed-layers.yaml; "
                   f"`bertology studies` lists the studies)")


def as_parameter(name: object, value: Any) -> str:
    """A parameter's value as Argo takes it, a string: lists and mappings as JSON (as `argo submit -f` passes
    a parameter file's), true / false, None as empty."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    if value is None:
        return ""
    if isinstance(value, (str, int, float)):
        return str(value)
    raise BadInput(f"parameter '{name}': a {type(value).__name__} is not a parameter value (allowed: a string, "
                   f"number, bool, None, or a list or mapping, passed as JSON)")


def check_study_values(given: dict[str, str]) -> None:
    """Each given study parameter typed as plan types it first (bertology.study.params, the checks `bertology
    run` makes before it starts that need neither a model nor this machine's files: a model directory or
    a data path is the pods', not this machine's), the study's name and the preset among the presets."""
    from bertology.errors import unknown
    from bertology.study import PARAMS, PRESETS, check_study_name, typed_param, unmark

    if "study" in given:
        check_study_name(given["study"].strip())
    for name, value in given.items():
        if name in PARAMS:
            text = unmark(value)[0] or PARAMS[name][1]  # empty: the study's default
            typed = typed_param(name, text)
            if name == "preset" and typed not in PRESETS:
                raise unknown("preset", typed, PRESETS)
