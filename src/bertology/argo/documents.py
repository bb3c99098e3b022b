"""Our Argo YAML as documents: loading, the WorkflowTemplate library and template lookup.

The validator and the local runner both read the YAML through these helpers, so the runner runs exactly
what the validator checked. They follow Argo where it resolves templates: a Workflow's spec joined with
its `workflowTemplateRef` (workflow/util/merge.go `JoinWorkflowSpec`; arguments by name as util/util.go
`MergeParameters`; one parameter's fields as each Argo version joins them: `join_parameter`), and a task's
`template` / `templateRef` (workflow/templateresolution/context.go `GetTemplateByName`,
`GetTemplateFromRef`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bertology.argo.expressions import dependencies_to_expr, parse_depends
from bertology.errors import BadInput

# Argo's template variable syntax; whitespace inside the braces is allowed, as Argo trims it.
TAG = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def load_documents(path: str | Path) -> list[dict]:
    """All YAML documents of a file (empty ones dropped); each must be a mapping."""
    path = Path(path)
    expected = "expected UTF-8 YAML: Argo Workflow, CronWorkflow or WorkflowTemplate documents"
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except FileNotFoundError:
        raise BadInput(f"workflow file '{path}' not found") from None
    except OSError as e:
        raise BadInput(f"cannot read workflow file '{path}': {e.strerror} ({expected})") from None
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}; "
                       f"{expected})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise BadInput(f"{path}: invalid YAML{where}: {problem} ({expected})") from None
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise BadInput(f"{path}: document {i + 1} is a {type(doc).__name__}, expected a mapping")
        if not isinstance(doc.get("metadata", {}), (dict, type(None))):
            raise BadInput(f"{path}: document {i + 1}'s metadata is a {type(doc['metadata']).__name__}, "
                           f"expected a mapping (name, generateName, labels, ...)")
    return docs


@dataclass
class Source:
    """A document and the file it came from: the scope in which `template: x` names are looked up."""

    path: Path
    doc: dict

    @property
    def kind(self) -> str:
        return str(self.doc.get("kind"))

    @property
    def name(self) -> str:
        meta = self.doc.get("metadata") or {}
        return str(meta.get("name") or meta.get("generateName") or "?")

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"

    @property
    def spec(self) -> dict:
        """The WorkflowSpec: `spec`, or `spec.workflowSpec` of a CronWorkflow."""
        spec = self.doc.get("spec") or {}
        return (spec.get("workflowSpec") or {}) if self.kind == "CronWorkflow" else spec

    @property
    def spec_path(self) -> str:
        return "spec.workflowSpec" if self.kind == "CronWorkflow" else "spec"

    def template(self, name: str) -> dict | None:
        return next((t for t in self.spec.get("templates") or [] if t.get("name") == name), None)


def load_library(templates_dir: str | Path | None) -> dict[str, Source]:
    """The WorkflowTemplates of a directory (*.yaml, *.yml), by metadata.name."""
    library: dict[str, Source] = {}
    if templates_dir is None or not Path(templates_dir).is_dir():
        return library
    for path in sorted([*Path(templates_dir).glob("*.yaml"), *Path(templates_dir).glob("*.yml")]):
        for doc in load_documents(path):
            if doc.get("kind") == "WorkflowTemplate":
                name = (doc.get("metadata") or {}).get("name")
                if name in library:
                    raise BadInput(
                        f"{path}: WorkflowTemplate '{name}' is also defined in {library[name].path}"
                    )
                library[name] = Source(path, doc)
    return library


def effective_spec(source: Source, library: dict[str, Source]) -> tuple[dict, Source]:
    """A Workflow's spec after `workflowTemplateRef`, and the source its templates come from.

    As Argo does, the Workflow's own fields win and its arguments override the template's by name.
    """
    spec = source.spec
    ref = spec.get("workflowTemplateRef")
    if not ref or ref.get("name") not in library:
        return spec, source
    base = library[ref["name"]]
    merged = {**base.spec, **{k: v for k, v in spec.items() if k != "workflowTemplateRef"}}
    params = {p["name"]: p for p in (base.spec.get("arguments") or {}).get("parameters") or []}
    params.update({p["name"]: p for p in (spec.get("arguments") or {}).get("parameters") or []})
    merged["arguments"] = {"parameters": list(params.values())}
    return merged, base


# Argo 3.7.0 (upstream #14426, fixed by #14462) joins a parameter given in the Workflow (or with `argo submit
# -p`) with the WorkflowTemplate's of that name by replacing it, and reads its `value` before its `valueFrom`.
VALUE_WINS_FROM = (3, 7, 0)


def has_value(param: dict | None) -> bool:
    """pkg/apis/workflow/v1alpha1/workflow_types.go `Parameter.HasValue`: value, default or valueFrom."""
    return param is not None and any(param.get(k) is not None for k in ("value", "default", "valueFrom"))


def join_parameter(template: dict | None, workflow: dict | None, version: tuple[int, int, int]) -> dict | None:
    """One workflow parameter after workflow/util/merge.go `JoinWorkflowSpec`: the WorkflowTemplate's
    (`template`) joined with the Workflow's own of that name (`workflow`, where `argo submit -p` puts its
    value: util.go `overrideParameters` replaces the Workflow's parameter with `{name, value}`).

    Before v3.7.0 `MergeTo` is a strategic merge patch (the list merged by name, `patchMergeKey:"name"`):
    the Workflow's fields win and the template's others stay, so a submitted `value` sits beside the
    template's `valueFrom`. From v3.7.0 the joined parameter is replaced by the Workflow's own when it has a
    value (`if parameter.HasValue() { if param, ok := wfParamsMap[parameter.Name]; ok { ... = *param.DeepCopy()`),
    else by the template's."""
    if template is None or workflow is None:
        return workflow if template is None else template
    merged = {**template, **workflow}
    if version < VALUE_WINS_FROM:
        return merged
    if has_value(workflow):
        return dict(workflow)
    return dict(template) if has_value(template) else merged


def resolve_task_template(
    task: dict, source: Source, library: dict[str, Source]
) -> tuple[dict, Source] | str:
    """The template a DAG task runs and the source it lives in, or why it cannot be found."""
    if "templateRef" in task:
        ref = task["templateRef"] or {}
        if ref.get("clusterScope"):
            name = ref.get("name")
            return f"templateRef to ClusterWorkflowTemplate '{name}' (only WorkflowTemplates are supported)"
        target = library.get(ref.get("name"))
        if target is None:
            known = ", ".join(sorted(library)) or "none"
            return f"templateRef names WorkflowTemplate '{ref.get('name')}', not found (known: {known})"
        template = target.template(ref.get("template"))
        if template is None:
            return f"WorkflowTemplate '{ref.get('name')}' has no template '{ref.get('template')}'"
        return template, target
    template = source.template(task.get("template"))
    if template is None:
        return f"template '{task.get('template')}' not found in {source.label}"
    return template, source


def parameter_names(holder: dict | None) -> list[str]:
    return [p.get("name") for p in (holder or {}).get("parameters") or []]


def tags(value: Any) -> Iterator[str]:
    """Every `{{...}}` tag in a nested structure of strings."""
    if isinstance(value, str):
        yield from TAG.findall(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tags(v)
    elif isinstance(value, list):
        for v in value:
            yield from tags(v)


def task_dependencies(task: dict):
    """The parsed `depends` (or `dependencies` list) of a task, None when it has none."""
    if task.get("depends"):
        return parse_depends(str(task["depends"]))
    return dependencies_to_expr(list(task.get("dependencies") or []))
