"""Strict validation of our Argo YAML, before it reaches a cluster or the local runner.

Two layers, both reported as "file: location: message" lines:

1. Schema: every document is validated against hera's pydantic models of Argo's CRDs with unknown keys
   forbidden, so a misspelled key (which Argo itself silently drops) or a wrong type fails here.
2. References: entrypoint, template / templateRef targets (WorkflowTemplates in the templates directory),
   `depends` / `dependencies`, cycles, task arguments against the target's inputs, and every `{{...}}`
   variable (workflow / input parameters, ancestor task outputs, `item`, a few built-ins).

The document helpers here (loading, the WorkflowTemplate library, the effective spec of a Workflow) are
shared with the local runner, which must read the YAML exactly as this validator does.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bertology.argo.cron import CronError, load_location, parse_standard
from bertology.argo.expressions import ExpressionError, dependencies_to_expr, parse_depends, task_names
from bertology.errors import BadInput

API_VERSION = "argoproj.io/v1alpha1"
KINDS = ("Workflow", "WorkflowTemplate", "CronWorkflow")
# Argo's template variable syntax; whitespace inside the braces is allowed, as Argo trims it.
TAG = re.compile(r"\{\{\s*(.*?)\s*\}\}")
BUILTINS = ("workflow.name", "workflow.uid", "workflow.namespace", "workflow.status", "pod.name", "retries")
# validate.go: `workflow.failures` is set only for the onExit template (after the entrypoint is validated)
EXIT_ONLY = ("workflow.failures",)
TEMPLATE_TYPES = (
    "container",
    "dag",
    "steps",
    "script",
    "resource",
    "suspend",
    "http",
    "plugin",
    "containerSet",
    "data",
)
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
# Name rules of workflow/validate/validate.go (identical in v3.6.19 and v4.1.2): maxCharsInObjectName,
# maxCharsInCronWorkflowName (a CronWorkflow's runs append "-<unix time>"), workflowFieldMaxLength and
# workflowFieldNameFmt (template and DAG task names: isValidWorkflowFieldName), paramOrArtifactNameRegex
# (parameter names: isValidParamOrArtifactName, no length limit).
MAX_OBJECT_NAME, MAX_CRON_NAME, MAX_FIELD_NAME = 63, 52, 128
FIELD_NAME = re.compile(r"[a-zA-Z0-9][-a-zA-Z0-9]*")
PARAM_NAME = re.compile(r"[-a-zA-Z0-9_]+")
# metadata.name of a custom resource must be a DNS-1123 subdomain (Kubernetes apimachinery
# pkg/util/validation IsDNS1123Subdomain, via NameIsDNSSubdomain; at most 253 characters); a generateName
# is checked the same way once a trailing '-' is masked (maskTrailingDash).
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1123_HELP = "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
FIELD_NAME_HELP = (
    f"letters, digits and '-', starting with a letter or digit, at most {MAX_FIELD_NAME} characters"
)
PARAM_NAME_HELP = "letters, digits, '_' and '-'"


# Kubernetes kinds the step library's directory may hold beside the WorkflowTemplates.
PLATFORM_KINDS = ("ConfigMap", "ServiceAccount", "Role", "RoleBinding")


class ValidationFailed(BadInput):
    """All problems found in a workflow file; the message is the first one (one line)."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(errors[0] + more)


# --- documents -------------------------------------------------------------------------------------------


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


# --- schema ---------------------------------------------------------------------------------------------


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


# --- references -----------------------------------------------------------------------------------------


@dataclass
class _Checker:
    library: dict[str, Source]
    errors: list[str] = field(default_factory=list)
    checked: set[int] = field(default_factory=set)

    def error(self, source: Source, where: str, message: str) -> None:
        self.errors.append(f"{source.path}: {source.label}: {where}: {message}")

    def document(self, source: Source) -> None:
        """Schema and references of one document, once; then of the WorkflowTemplates it references."""
        if id(source.doc) in self.checked:
            return
        self.checked.add(id(source.doc))
        schema = schema_errors(source)
        self.errors.extend(schema)
        if schema:
            return  # reference checks assume the shapes the schema guarantees
        spec, sp = source.spec, source.spec_path
        self.metadata(source)
        self.later_fields(source)
        if source.kind == "CronWorkflow":
            self.cron(source)
        # Each document's own arguments: a Workflow's replace its WorkflowTemplate's whole, by name
        # (util.MergeParameters), so checking both documents covers the merged list Argo checks.
        self.argument_list(source, f"{sp}.arguments", spec.get("arguments"), allow_empty=True)
        ref = spec.get("workflowTemplateRef")
        if ref is not None:
            if ref.get("clusterScope"):
                self.error(source, f"{sp}.workflowTemplateRef", "ClusterWorkflowTemplates are not supported")
            elif ref.get("name") not in self.library:
                known = ", ".join(sorted(self.library)) or "none"
                self.error(
                    source,
                    f"{sp}.workflowTemplateRef",
                    f"WorkflowTemplate '{ref.get('name')}' not found (known: {known})",
                )
            if spec.get("templates"):
                self.error(source, f"{sp}.templates", "not allowed together with workflowTemplateRef")
        merged, template_source = effective_spec(source, self.library)
        declared = parameter_names(merged.get("arguments"))
        for name in {n for n in declared if declared.count(n) > 1}:
            self.error(source, f"{sp}.arguments", f"parameter '{name}' is declared twice")
        runnable = source.kind != "WorkflowTemplate"
        # A library WorkflowTemplate declares no arguments: its callers' workflows provide them.
        workflow_params = declared if runnable or merged.get("arguments") else None
        entrypoint = merged.get("entrypoint")
        if entrypoint is None:
            if runnable:
                self.error(source, sp, "missing 'entrypoint'")
        elif template_source.template(entrypoint) is None:
            self.error(source, f"{sp}.entrypoint", f"template '{entrypoint}' not found")
        elif runnable:
            self.entrypoint_inputs(source, template_source.template(entrypoint), declared)
        on_exit = merged.get("onExit")
        if on_exit is not None and template_source.template(on_exit) is None:
            self.error(source, f"{sp}.onExit", f"template '{on_exit}' not found")
        names = [t.get("name") for t in spec.get("templates") or []]
        for name in {n for n in names if names.count(n) > 1}:
            self.error(source, f"{sp}.templates", f"template '{name}' is defined twice")
        for template in spec.get("templates") or []:
            self.template(source, template, workflow_params)
        if runnable and entrypoint is not None and template_source.template(entrypoint) is not None:
            self.reachable_workflow_params(source, template_source, entrypoint, declared)

    def metadata(self, source: Source) -> None:
        """metadata.name / generateName: a DNS-1123 subdomain (Kubernetes) no longer than Argo allows.

        Argo: workflow/validate/validate.go `Workflow`, `WorkflowTemplate` (maxCharsInObjectName, 63: the
        name becomes a label value) and `CronWorkflow` (maxCharsInCronWorkflowName, 52: each run is named
        "<name>-<unix time>"). A generateName gets 5 random characters and Kubernetes cuts it to 58
        (apiserver storage/names/generate.go), so only its characters are checked, after Kubernetes'
        `maskTrailingDash` (apimachinery api/validation/generic.go), reproduced verbatim.
        """
        meta = self.doc_meta(source)
        name, prefix = meta.get("name"), meta.get("generateName")
        limit = MAX_CRON_NAME if source.kind == "CronWorkflow" else MAX_OBJECT_NAME
        if not name and not prefix:
            self.error(source, "metadata", "name or generateName is required")
        if name:
            name = str(name)
            if len(name) > limit:
                why = (
                    " (its Workflows are named '<name>-<unix time>')" if source.kind == "CronWorkflow" else ""
                )
                self.error(
                    source,
                    "metadata.name",
                    f"'{name}' is {len(name)} characters; a {source.kind} name may have at most {limit}{why}",
                )
            if not DNS1123_SUBDOMAIN.fullmatch(name):
                self.error(source, "metadata.name", f"'{name}' is not a DNS-1123 subdomain ({DNS1123_HELP})")
        if prefix and not name:
            prefix = str(prefix)
            masked = prefix[:-2] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix
            if not DNS1123_SUBDOMAIN.fullmatch(masked):
                self.error(
                    source,
                    "metadata.generateName",
                    f"'{prefix}' is not a DNS-1123 subdomain prefix ({DNS1123_HELP}; a trailing '-' is allowed)",
                )

    @staticmethod
    def doc_meta(source: Source) -> dict:
        return source.doc.get("metadata") or {}

    def later_fields(self, source: Source) -> None:
        """Fields hera's models accept that Argo v3.6.19 does not know (it would drop them): refused."""
        model = _strict_models()[source.kind].model_validate(source.doc)
        for loc, key, version in _later_fields(model, ()):
            where, _ = _location(source.doc, loc[:-1])
            self.error(
                source,
                where or "(top level)",
                f"field '{key}' needs Argo {version} or later; these workflows support Argo "
                f"{ARGO_OLDEST} to {ARGO_NEWEST} and {ARGO_OLDEST} drops it silently",
            )

    def cron(self, source: Source) -> None:
        """Schedules and timezone as Argo's CronWorkflow validation checks them.

        Argo: workflow/validate/validate.go `CronWorkflow` (`ValidateCronWorkflow` in v3.6): at least one
        schedule, each accepted by robfig/cron's `ParseStandard` (ported in bertology.argo.cron), and
        `time.LoadLocation(timezone)`. The deprecated singular `schedule` is gone in v4.0.0, so the schema
        layer refuses it before this runs.
        """
        spec = source.doc.get("spec") or {}
        if not spec.get("schedules"):
            self.error(source, "spec.schedules", "missing: a CronWorkflow needs at least one schedule")
        for schedule in spec.get("schedules") or []:
            try:
                parse_standard(str(schedule))
            except CronError as e:
                self.error(
                    source,
                    "spec.schedules",
                    f"cron schedule '{schedule}' is malformed: {e} (allowed: 5 fields 'minute hour "
                    "day-of-month month day-of-week', or @yearly, @annually, @monthly, @weekly, @daily, "
                    "@midnight, @hourly, '@every <duration>')",
                )
        if spec.get("timezone"):
            try:
                load_location(str(spec["timezone"]))
            except CronError as e:
                self.error(
                    source, "spec.timezone", f"invalid timezone '{spec['timezone']}': {e} (an IANA zone)"
                )
        if "workflowSpec" not in spec:
            self.error(source, "spec", "missing 'workflowSpec'")

    def argument_list(self, source: Source, where: str, arguments: dict | None, allow_empty: bool) -> None:
        """Parameter names, valueFrom and enum of an `arguments` block.

        Argo: workflow/validate/validate.go `validateArguments` -> `validateArgumentsFieldNames`
        (isValidParamOrArtifactName) and `validateArgumentsValues`. Workflow-level arguments are checked as
        `argo lint` does (allowEmptyValues: a value may come at submission); task arguments are not.
        Unlike Argo, a parameter with an enum and no value does not end the check of the others.
        """
        for param in (arguments or {}).get("parameters") or []:
            name = param.get("name")
            self.parameter_name(source, f"{where}.parameters", name)
            value, value_from, enum = param.get("value"), param.get("valueFrom") or {}, param.get("enum")
            allowed_source = any(
                value_from.get(k) is not None for k in ("configMapKeyRef", "event", "supplied")
            )
            other_source = any(value_from.get(k) for k in ("path", "jsonPath", "parameter", "expression"))
            if param.get("valueFrom") is not None and (not allowed_source or other_source):
                self.error(
                    source,
                    f"{where}.parameters[{name}].valueFrom",
                    f"has {', '.join(sorted(value_from))}; arguments allow only: default, "
                    "configMapKeyRef and supplied",
                )
            if enum is None:
                continue
            if len(enum) == 0:
                self.error(source, f"{where}.parameters[{name}].enum", "should contain at least one value")
            elif value is None:
                if not allow_empty and param.get("valueFrom") is None:
                    self.error(source, f"{where}.parameters[{name}]", "has an enum, so a value is required")
            elif _any_string(value) not in [_any_string(v) for v in enum]:
                self.error(
                    source,
                    f"{where}.parameters[{name}].value",
                    f"'{_any_string(value)}' is not in the enum list "
                    f"({', '.join(repr(_any_string(v)) for v in enum)})",
                )

    def parameter_name(self, source: Source, where: str, name: Any) -> None:
        """validate.go `validateWorkflowFieldNames` on Parameters: required, isValidParamOrArtifactName."""
        if not name:
            self.error(source, where, "a parameter name is required")
        elif not PARAM_NAME.fullmatch(str(name)):
            self.error(source, where, f"parameter name '{name}' is invalid (allowed: {PARAM_NAME_HELP})")

    def field_name(self, source: Source, where: str, what: str, name: Any) -> None:
        """validate.go `validateWorkflowFieldNames` on Templates and DAGTasks: isValidWorkflowFieldName."""
        if not name:
            self.error(source, where, f"a {what} name is required")
        elif len(str(name)) > MAX_FIELD_NAME or not FIELD_NAME.fullmatch(str(name)):
            self.error(
                source,
                where,
                f"{what} name '{name}' is invalid ({len(str(name))} characters; allowed: {FIELD_NAME_HELP})",
            )

    def entrypoint_inputs(self, source: Source, template: dict, declared: list[str]) -> None:
        for param in (template.get("inputs") or {}).get("parameters") or []:
            if param["name"] not in declared and "value" not in param and "default" not in param:
                self.error(
                    source,
                    f"{source.spec_path}.entrypoint",
                    f"entrypoint '{template['name']}' needs input '{param['name']}', which "
                    f"spec.arguments.parameters does not declare",
                )

    def reachable_workflow_params(
        self, source: Source, start: Source, entrypoint: str, declared: list[str]
    ) -> None:
        """Templates reached through templateRef see this Workflow's parameters: check their uses."""
        seen: set[tuple[int, str]] = set()
        stack = [(start, start.template(entrypoint))]
        while stack:
            owner, template = stack.pop()
            if template is None or (id(owner.doc), template.get("name")) in seen:
                continue
            seen.add((id(owner.doc), template.get("name")))
            if owner is not source:
                self.document(owner)
                for tag in tags(template):
                    if tag.startswith("workflow.parameters.") and tag.split(".", 2)[2] not in declared:
                        self.error(
                            source,
                            f"(via {owner.label}) template '{template.get('name')}'",
                            f"uses '{{{{{tag}}}}}', which spec.arguments.parameters does not declare "
                            f"(declared: {', '.join(declared) or 'none'})",
                        )
            for task in (template.get("dag") or {}).get("tasks") or []:
                target = resolve_task_template(task, owner, self.library)
                if not isinstance(target, str):
                    stack.append((target[1], target[0]))

    def template(self, source: Source, template: dict, workflow_params: list[str] | None) -> None:
        where = f"{source.spec_path}.templates[{template.get('name')}]"
        types = [t for t in TEMPLATE_TYPES if template.get(t) is not None]
        if len(types) != 1:
            self.error(
                source,
                where,
                f"needs exactly one template type, has {', '.join(types) or 'none'} "
                f"(one of: {', '.join(TEMPLATE_TYPES)})",
            )
        self.field_name(source, where, "template", template.get("name"))
        if types and types[0] not in ("dag", "steps"):
            # validate.go validateLeaf (every type but steps and dag): Argo rejects the workflow.
            if template.get("parallelism") is not None:
                self.error(
                    source,
                    f"{where}.parallelism",
                    f"is only valid for steps and dag templates, not a {types[0]} template",
                )
        elif types and template.get("activeDeadlineSeconds") is not None:
            # validate.go validateNonLeaf
            self.error(
                source,
                f"{where}.activeDeadlineSeconds",
                f"is only valid for leaf templates, not a {types[0]} template",
            )
        for part in ("inputs", "outputs"):  # validate.go validateInputs / validateOutputs
            for param in (template.get(part) or {}).get("parameters") or []:
                self.parameter_name(source, f"{where}.{part}.parameters", param.get("name"))
                if param.get("globalName") is not None:
                    self.parameter_name(source, f"{where}.{part}.parameters", param["globalName"])
        inputs = parameter_names(template.get("inputs"))
        for name in {n for n in inputs if inputs.count(n) > 1}:
            self.error(source, f"{where}.inputs", f"parameter '{name}' is declared twice")
        outputs = parameter_names(template.get("outputs"))
        for name in {n for n in outputs if outputs.count(n) > 1}:
            self.error(source, f"{where}.outputs", f"parameter '{name}' is declared twice")
        scope = _Scope(template.get("name"), inputs, workflow_params,
                       exit_handler=template.get("name") == source.spec.get("onExit"))
        for key, value in template.items():
            if key != "dag":
                for tag in tags(value):
                    self.reference(source, f"{where}.{key}", tag, scope)
        if template.get("dag") is not None:
            self.dag(source, where, template, scope)

    def dag(self, source: Source, where: str, template: dict, scope: _Scope) -> None:
        tasks = template["dag"].get("tasks") or []
        names = [t.get("name") for t in tasks]
        for name in {n for n in names if names.count(n) > 1}:
            self.error(source, f"{where}.dag", f"task '{name}' is defined twice")
        if any(t.get("depends") for t in tasks) and any(t.get("dependencies") for t in tasks):
            self.error(source, f"{where}.dag", "cannot use both 'depends' and 'dependencies' in one DAG")
        deps: dict[str, list[str]] = {}
        targets: dict[str, dict] = {}
        uses_depends = any(t.get("depends") for t in tasks)
        for task in tasks:
            at = f"{where}.dag.tasks[{task.get('name')}]"
            # validate.go validateDAG: validateWorkflowFieldNames(tmpl.DAG.Tasks), the digit rule, and
            # validateArguments on each task's arguments (no empty values there).
            self.field_name(source, at, "task", task.get("name"))
            name = str(task.get("name") or "")
            if (uses_depends or task.get("dependencies")) and name[:1].isdigit() and name[:1].isascii():
                self.error(
                    source,
                    at,
                    f"task name '{name}' cannot begin with a digit when using either 'depends' or 'dependencies'",
                )
            self.argument_list(source, f"{at}.arguments", task.get("arguments"), allow_empty=False)
            given = [k for k in ("template", "templateRef", "inline") if task.get(k) is not None]
            if len(given) != 1:
                self.error(
                    source,
                    at,
                    f"needs exactly one of template, templateRef (has {', '.join(given) or 'none'})",
                )
            else:
                target = resolve_task_template(task, source, self.library)
                if isinstance(target, str):
                    self.error(source, f"{at}.{given[0]}", target)
                else:
                    targets[task["name"]] = target[0]
                    self.arguments(source, at, task, target[0])
            try:
                deps[task.get("name")] = task_names(task_dependencies(task))
            except ExpressionError as e:
                self.error(source, f"{at}.depends", str(e))
                deps[task.get("name")] = []
            for dep in deps[task.get("name")]:
                if dep not in names:
                    self.error(
                        source,
                        f"{at}.depends",
                        f"unknown task '{dep}' (tasks in this DAG: {', '.join(names)})",
                    )
        cycle = _find_cycle({n: [d for d in ds if d in deps] for n, ds in deps.items()})
        if cycle:
            self.error(source, f"{where}.dag", f"dependency cycle: {' -> '.join(cycle)}")
            return
        for task in tasks:
            at = f"{where}.dag.tasks[{task.get('name')}]"
            task_scope = scope.for_task(task, _ancestors(task.get("name"), deps), targets)
            for key, value in task.items():
                if key not in ("name", "template", "templateRef", "depends", "dependencies"):
                    for tag in tags(value):
                        self.reference(source, f"{at}.{key}", tag, task_scope)
        for tag in tags(template.get("outputs")):  # DAG outputs may name any of its tasks
            self.reference(source, f"{where}.outputs", tag, scope.for_task({}, set(names), targets))

    def arguments(self, source: Source, at: str, task: dict, target: dict) -> None:
        declared = (target.get("inputs") or {}).get("parameters") or []
        names = [p["name"] for p in declared]
        passed = parameter_names(task.get("arguments"))
        for param in (task.get("arguments") or {}).get("parameters") or []:
            if param["name"] not in names:
                self.error(
                    source,
                    f"{at}.arguments",
                    f"parameter '{param['name']}' is not an input of template "
                    f"'{target.get('name')}' (inputs: {', '.join(names) or 'none'})",
                )
            if param.get("value") is None and param.get("valueFrom") is None:
                self.error(source, f"{at}.arguments", f"parameter '{param['name']}' has no value")
        for name in {n for n in passed if passed.count(n) > 1}:
            self.error(source, f"{at}.arguments", f"parameter '{name}' is passed twice")
        for param in declared:
            if param["name"] not in passed and param.get("value") is None and param.get("default") is None:
                self.error(
                    source,
                    f"{at}.arguments",
                    f"missing parameter '{param['name']}' required by template '{target.get('name')}'",
                )

    def reference(self, source: Source, where: str, tag: str, scope: _Scope) -> None:
        problem = scope.check(tag)
        if problem:
            self.error(source, where, f"unresolved '{{{{{tag}}}}}': {problem}")


@dataclass
class _Scope:
    """What `{{...}}` may name at one place: a template's body, or one DAG task."""

    template: str
    inputs: list[str]
    workflow_params: list[str] | None  # None: not known here (a library WorkflowTemplate)
    task: dict | None = None
    ancestors: set[str] = field(default_factory=set)
    targets: dict[str, dict] = field(default_factory=dict)
    exit_handler: bool = False  # the template spec.onExit names

    def for_task(self, task: dict, ancestors: set[str], targets: dict[str, dict]) -> _Scope:
        return _Scope(self.template, self.inputs, self.workflow_params, task, ancestors, targets, self.exit_handler)

    def check(self, tag: str) -> str | None:
        """None when the tag resolves here, else why not."""
        if tag.startswith("="):
            return "expression tags ('{{=...}}') are not supported"
        if tag in BUILTINS or (tag in EXIT_ONLY and self.exit_handler):
            return None
        if tag in EXIT_ONLY:
            return f"only the exit handler (the template spec.onExit names) can read '{tag}'"
        parts = tag.split(".")
        if tag.startswith("workflow.parameters.") and len(parts) == 3:
            if self.workflow_params is None or parts[2] in self.workflow_params:
                return None
            return (
                f"workflow parameter '{parts[2]}' is not declared in spec.arguments.parameters "
                f"(declared: {', '.join(self.workflow_params) or 'none'})"
            )
        if tag.startswith("inputs.parameters.") and len(parts) == 3:
            if parts[2] in self.inputs:
                return None
            return (
                f"template '{self.template}' declares no input '{parts[2]}' "
                f"(inputs: {', '.join(self.inputs) or 'none'})"
            )
        if parts[0] == "item":
            return self._item(parts[1:]) if self.task is not None else "'item' is only defined in DAG tasks"
        if (
            parts[0] == "tasks"
            and len(parts) == 5
            and parts[2:4] == ["outputs", "parameters"]
            and self.task is not None
        ):
            return self._task_output(parts[1], parts[4])
        allowed = (
            "workflow.parameters.NAME, inputs.parameters.NAME, tasks.TASK.outputs.parameters.NAME, "
            f"item, item.KEY, {', '.join(BUILTINS)}"
        )
        return f"not a supported variable (allowed: {allowed})"

    def _item(self, keys: list[str]) -> str | None:
        assert self.task is not None
        if self.task.get("withParam") is None and self.task.get("withItems") is None:
            name = self.task.get("name")
            return f"'item' is only defined in a task with withParam or withItems ('{name}' has neither)"
        items = self.task.get("withItems")
        if keys and items is not None:
            missing = [i for i in items if not isinstance(i, dict) or keys[0] not in i]
            if missing:
                return f"withItems entry {json.dumps(missing[0])} has no key '{keys[0]}'"
        return None

    def _task_output(self, task: str, param: str) -> str | None:
        if task not in self.targets and task not in self.ancestors:
            return f"no task '{task}' in this DAG"
        if task not in self.ancestors:
            return f"task '{task}' is not a dependency (direct or transitive) of '{self.task.get('name')}'"
        target = self.targets.get(task)
        if target is None:
            return None  # its template is unresolved, reported already
        outputs = parameter_names(target.get("outputs"))
        if param not in outputs:
            return (
                f"template '{target.get('name')}' of task '{task}' declares no output parameter '{param}' "
                f"(outputs: {', '.join(outputs) or 'none'})"
            )
        return None


def _any_string(value: Any) -> str:
    """A parameter value as Argo's AnyString holds it: YAML true is "true", 2 is "2"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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


def _ancestors(name: str, deps: dict[str, list[str]]) -> set[str]:
    found: set[str] = set()
    stack = list(deps.get(name, []))
    while stack:
        dep = stack.pop()
        if dep not in found:
            found.add(dep)
            stack.extend(deps.get(dep, []))
    return found


def _find_cycle(deps: dict[str, list[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in deps.get(node, []):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in deps:
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


# --- entry points ---------------------------------------------------------------------------------------


def validate_file(path: str | Path, templates_dir: str | Path | None) -> list[str]:
    """All problems of a workflow file and of the WorkflowTemplates it references ([] when valid)."""
    path = Path(path)
    try:
        library = load_library(templates_dir)
        docs = load_documents(path)
    except BadInput as e:
        return [str(e)]
    if not docs:
        return [f"{path}: no YAML documents"]
    checker = _Checker(library)
    for doc in docs:
        if doc.get("kind") in PLATFORM_KINDS and not str(doc.get("apiVersion", "")).startswith("argoproj.io/"):
            continue  # Kubernetes' own kinds (templates/platform.yaml): make lint runs kubernetes-validate on them
        name = (doc.get("metadata") or {}).get("name")
        known = library.get(name) if doc.get("kind") == "WorkflowTemplate" else None
        # Validating a library file itself: check the library's copy so it is not checked twice.
        checker.document(
            known if known is not None and known.path.resolve() == path.resolve() else Source(path, doc)
        )
    return checker.errors


def validate_or_raise(path: str | Path, templates_dir: str | Path | None) -> None:
    errors = validate_file(path, templates_dir)
    if errors:
        raise ValidationFailed(errors)
