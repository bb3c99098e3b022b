"""What `bertology run` checks before it makes anything (a run folder, a store, a step): the file holds one
Argo Workflow or CronWorkflow to run, each -p names a parameter the workflow declares, and, for a study,
the study's parameters as its plan step will get them, by plan's own checks that need neither a model nor
torch (typing, presets, names: bertology.study). A typo is then one line in about a second, not after the
runner has started its steps.

The workflow is read as the runner reads it (bertology.argo.documents), but not validated: the runner
validates it before any step. A file this cannot make out (a `workflowTemplateRef` to a template that is not
in the templates directory, a malformed spec) is left to the runner, whose message is the precise one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bertology.errors import BadInput, choices

if TYPE_CHECKING:
    from bertology.argo.documents import Source

RUNNABLE = ("Workflow", "CronWorkflow")
_PARAMETER = re.compile(r"\{\{\s*workflow\.parameters\.([^{}\s]+)\s*\}\}")
_TAG = re.compile(r"\{\{.*?\}\}")


@dataclass
class Workflow:
    """A workflow file as far as `bertology run` reads it before the runner: its document, the spec after
    its WorkflowTemplate (`workflowTemplateRef`), where its templates come from, and its declared parameters
    (None where they cannot be made out: the runner will say why)."""

    source: Source
    spec: dict
    templates: Source  # the document its templates come from
    library: dict[str, Source]
    declared: dict[str, dict] | None

    @property
    def label(self) -> str:
        return self.source.label


def read(path: Path, templates_dir: Path | None) -> Workflow:
    """The file's one Workflow or CronWorkflow; BadInput for a file that is not YAML, or holds none."""
    from bertology.argo.documents import Source, effective_spec, load_documents, load_library

    docs = load_documents(path)
    runnable = [d for d in docs if d.get("kind") in RUNNABLE]
    if len(runnable) != 1:
        kinds = ", ".join(str(d.get("kind")) if d.get("kind") else "a document without kind" for d in docs)
        found = f"it holds {kinds}" if docs else "it is empty"
        if len(runnable) > 1:
            found = f"it holds {len(runnable)} of them"
        raise BadInput(f"{path} is not a workflow to run: {found} (expected one Argo Workflow or CronWorkflow, "
                       f"e.g. workflows/reversed-layers.yaml; `bertology studies` lists the studies)")
    source = Source(path, runnable[0])
    library = load_library(templates_dir) if templates_dir is not None and templates_dir.is_dir() else {}
    outer = source.doc.get("spec")
    if not isinstance(outer, dict) or (source.kind == "CronWorkflow"
                                       and not isinstance(outer.get("workflowSpec"), dict)):
        return Workflow(source, {}, source, library, None)  # the runner's validation names what is wrong
    ref = source.spec.get("workflowTemplateRef")
    if ref is not None and (not isinstance(ref, dict) or ref.get("name") not in library):
        return Workflow(source, source.spec, source, library, None)  # the runner names the missing template
    if not all(_well_formed(s.spec) for s in (source, *([library[ref["name"]]] if ref is not None else []))):
        return Workflow(source, source.spec, source, library, None)
    spec, templates = effective_spec(source, library)
    params = (spec.get("arguments") or {}).get("parameters") or []
    return Workflow(source, spec, templates, library, {str(p["name"]): p for p in params})


def _well_formed(spec: dict) -> bool:
    """A spec whose arguments are named parameters and whose templates are mappings (or that has none), as
    this module reads them."""
    arguments, templates = spec.get("arguments") or {}, spec.get("templates") or []
    params = arguments.get("parameters") or [] if isinstance(arguments, dict) else None
    return (isinstance(params, list) and all(isinstance(p, dict) and "name" in p for p in params)
            and isinstance(templates, list) and all(isinstance(t, dict) for t in templates))


def check_parameters(workflow: Workflow, params: dict[str, str]) -> None:
    """Each -p (and -f) names a parameter the workflow declares, as the runner requires (Argo would accept
    any and ignore it); one line naming the closest declared one."""
    if workflow.declared is None:
        return
    for name in params:
        if name not in workflow.declared:
            listed = choices(name, workflow.declared, "declared")
            raise BadInput(f"unknown parameter '{name}' for {workflow.source.path} ({listed}; Argo would accept it and "
                           f"ignore it)")


def check_study(workflow: Workflow, params: dict[str, str], project_root: Path) -> None:
    """A study's parameters as its plan step will get them, by the checks plan makes first that need no model
    (bertology.study: StudySpec.from_params and check_names; the steps `deadlines` names), run in the
    project root, the steps' working directory (a relative model directory is found where plan looks for
    it). Nothing for a workflow without a `python -m jobs.plan` step, or whose plan arguments come from
    anything but its parameters."""
    from bertology.steps.timing import check as check_deadlines
    from bertology.study import PARAMS, StudySpec
    from bertology.study.checks import check_names

    given = plan_arguments(workflow, params)
    if given is None or any(value is None for name, value in given.items() if name in PARAMS or name == "study"):
        return
    if not given.get("study", "").strip():
        return  # plan names the missing study itself
    raw = {name: value for name, value in given.items() if name in PARAMS}
    here = Path.cwd()
    os.chdir(project_root)
    try:
        spec, _ = StudySpec.from_params(given["study"].strip(), raw)
        check_deadlines(spec.deadlines)
        check_names(spec)
        from bertology.argo.validate import validate_or_raise

        validate_or_raise(workflow.source.path, workflow_templates(workflow))  # the file's own faults first
        check_hub(spec)
    finally:
        os.chdir(here)


def workflow_templates(workflow: Workflow) -> Path | None:
    """The templates directory the workflow's WorkflowTemplates were read from, if any."""
    paths = {source.path.parent for source in workflow.library.values()}
    return next(iter(paths)) if len(paths) == 1 else None


def check_hub(spec) -> None:
    """Each hub model the study reads (after its preset), where it is not cached and the hub cannot be
    reached from here (bertology.models.check_hub_reachable): one line naming it, and the parameter that
    gives a local or cached model in its place, before anything is made, instead of the download's and the
    plan step's retries."""
    from bertology import models

    wanted: dict[str, str] = {}  # model -> the parameter it comes from
    for variant in spec.variants:
        for model in spec.models:
            wanted.setdefault(spec.model_of(model, variant), "variants" if variant.model else "models")
        reference = spec.regime_of(variant).reference
        if reference:
            wanted.setdefault(reference, "reference")
        for step in variant.interventions:
            donor = step.params_dict.get("donor")
            if isinstance(donor, str):
                wanted.setdefault(donor, "variants")
    for text, param in wanted.items():
        try:
            ref = models.parse_model_ref(text)
        except BadInput:
            continue  # plan names a malformed reference itself
        example = ("-p models='[\"dir:PATH\"]'" if param == "models" else
                   f"-p {param}=… naming dir:PATH in its place")
        models.check_hub_reachable(ref, f"run offline with -p preset=tiny, or give a local or cached model: "
                                        f"{example}")


def plan_arguments(workflow: Workflow, params: dict[str, str]) -> dict[str, str | None] | None:
    """The arguments the entry DAG's plan task passes (`python -m jobs.plan`), each `{{workflow.parameters.X}}`
    bound as Argo binds it here (-p, else the Workflow's own value, else its WorkflowTemplate's), None for one
    that cannot be bound before the run (a value from a ConfigMap, another step's output); None for a
    workflow without a plan task."""
    from bertology.argo.documents import resolve_task_template
    from bertology.argo.values import any_string

    if workflow.declared is None:
        return None
    entry = workflow.templates.template(workflow.spec.get("entrypoint"))
    tasks = ((entry or {}).get("dag") or {}).get("tasks") if isinstance((entry or {}).get("dag"), dict) else None
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict) or not isinstance(task.get("templateRef") or {}, dict):
            continue
        found = resolve_task_template(task, workflow.templates, workflow.library)  # str: why it is not found
        container = found[0].get("container") if isinstance(found, tuple) else None
        if not isinstance(container, dict) or "jobs.plan" not in map(str, container.get("command") or []):
            continue
        arguments = task.get("arguments") or {}
        arguments = arguments.get("parameters") or [] if isinstance(arguments, dict) else []
        return {str(arg.get("name")): _bind(any_string(arg.get("value", "")), workflow, params)
                for arg in arguments if isinstance(arg, dict)}
    return None


def _bind(text: str, workflow: Workflow, params: dict[str, str]) -> str | None:
    """`text` with each `{{workflow.parameters.X}}` bound; None if it holds any other tag, or X's value is not
    a plain one."""
    from bertology.argo.values import any_string

    def value(name: str) -> str | None:
        if name in params:
            return params[name]
        own = _parameter(workflow.source, name)
        inherited = _parameter(workflow.templates, name) if workflow.templates is not workflow.source else None
        if any(p is not None and "valueFrom" in p for p in (own, inherited)):
            return None  # a ConfigMap's value, which this machine may not have: the runner binds it
        for param in (own, inherited):  # the Workflow's own value, else its WorkflowTemplate's
            if param is not None and param.get("value") is not None:
                return any_string(param["value"])
        return None

    bound = {name: value(name) for name in _PARAMETER.findall(text)}
    if any(v is None for v in bound.values()):
        return None
    text = _PARAMETER.sub(lambda m: bound[m.group(1)], text)
    return None if _TAG.search(text) else text


def _parameter(source: Source, name: str) -> dict | None:
    """A parameter a document declares in its spec's arguments, by name (read() checked their shape)."""
    params = (source.spec.get("arguments") or {}).get("parameters") or []
    return next((p for p in params if p.get("name") == name), None)


def runs_jobs(workflow: Workflow) -> bool:
    """Whether a container of the workflow, or of a WorkflowTemplate it refers to (at any depth), runs
    `python -m jobs.…`: a step of ours, whose working directory is the project's (the jobs/ package)."""
    pending, seen = [workflow.source], set()
    while pending:
        source = pending.pop()
        if id(source.doc) in seen:
            continue
        seen.add(id(source.doc))
        for found in _walk(source.doc):
            if isinstance(found, str):  # a WorkflowTemplate it refers to
                pending.extend([workflow.library[found]] if found in workflow.library else [])
            elif any(str(word).startswith("jobs.") for word in [*(found.get("command") or []),
                                                               *(found.get("args") or [])]):
                return True
    return False


def _walk(value):
    """Each `container` mapping in a document, and the name of each WorkflowTemplate it refers to."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("templateRef", "workflowTemplateRef") and isinstance(item, dict) and item.get("name"):
                yield str(item["name"])
            elif key == "container" and isinstance(item, dict):
                yield item
            else:
                yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)
