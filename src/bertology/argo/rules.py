"""Argo's own rules, beyond the schema: what workflow/validate/validate.go rejects.

The same in Argo v3.6.19 and v4.1.2; each is tested in tests/test_argo_validate_rules.py against a value
from Argo's (or robfig/cron's) code and tests. Each rule yields (where, message) problems; the reference
walk (bertology.argo.references) decides where it applies and adds the file and document to each line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from bertology.argo.cron import CronError, load_location, parse_standard
from bertology.argo.documents import Source, parameter_names

Problem = tuple[str, str]  # (where in the document, message)

# validate.go validateTemplateType: exactly one of these.
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


def metadata(source: Source) -> Iterator[Problem]:
    """metadata.name / generateName: a DNS-1123 subdomain (Kubernetes) no longer than Argo allows.

    Argo: workflow/validate/validate.go `Workflow`, `WorkflowTemplate` (maxCharsInObjectName, 63: the
    name becomes a label value) and `CronWorkflow` (maxCharsInCronWorkflowName, 52: each run is named
    "<name>-<unix time>"). A generateName gets 5 random characters and Kubernetes cuts it to 58
    (apiserver storage/names/generate.go), so only its characters are checked, after Kubernetes'
    `maskTrailingDash` (apimachinery api/validation/generic.go), reproduced verbatim.
    """
    meta = source.doc.get("metadata") or {}
    name, prefix = meta.get("name"), meta.get("generateName")
    limit = MAX_CRON_NAME if source.kind == "CronWorkflow" else MAX_OBJECT_NAME
    if not name and not prefix:
        yield "metadata", "name or generateName is required"
    if name:
        name = str(name)
        if len(name) > limit:
            why = " (its Workflows are named '<name>-<unix time>')" if source.kind == "CronWorkflow" else ""
            yield (
                "metadata.name",
                f"'{name}' is {len(name)} characters; a {source.kind} name may have at most {limit}{why}",
            )
        if not DNS1123_SUBDOMAIN.fullmatch(name):
            yield "metadata.name", f"'{name}' is not a DNS-1123 subdomain ({DNS1123_HELP})"
    if prefix and not name:
        prefix = str(prefix)
        masked = prefix[:-2] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix
        if not DNS1123_SUBDOMAIN.fullmatch(masked):
            yield (
                "metadata.generateName",
                f"'{prefix}' is not a DNS-1123 subdomain prefix ({DNS1123_HELP}; a trailing '-' is allowed)",
            )


def cron(source: Source) -> Iterator[Problem]:
    """Schedules and timezone as Argo's CronWorkflow validation checks them.

    Argo: workflow/validate/validate.go `CronWorkflow` (`ValidateCronWorkflow` in v3.6): at least one
    schedule, each accepted by robfig/cron's `ParseStandard` (ported in bertology.argo.cron), and
    `time.LoadLocation(timezone)`. The deprecated singular `schedule` is gone in v4.0.0, so the schema
    layer refuses it before this runs.
    """
    spec = source.doc.get("spec") or {}
    if not spec.get("schedules"):
        yield "spec.schedules", "missing: a CronWorkflow needs at least one schedule"
    for schedule in spec.get("schedules") or []:
        try:
            parse_standard(str(schedule))
        except CronError as e:
            yield (
                "spec.schedules",
                (
                    f"cron schedule '{schedule}' is malformed: {e} (allowed: 5 fields 'minute hour "
                    "day-of-month month day-of-week', or @yearly, @annually, @monthly, @weekly, @daily, "
                    "@midnight, @hourly, '@every <duration>')"
                ),
            )
    if spec.get("timezone"):
        try:
            load_location(str(spec["timezone"]))
        except CronError as e:
            yield "spec.timezone", f"invalid timezone '{spec['timezone']}': {e} (an IANA zone)"
    if "workflowSpec" not in spec:
        yield "spec", "missing 'workflowSpec'"


def argument_list(where: str, arguments: dict | None, allow_empty: bool) -> Iterator[Problem]:
    """Parameter names, valueFrom and enum of an `arguments` block.

    Argo: workflow/validate/validate.go `validateArguments` -> `validateArgumentsFieldNames`
    (isValidParamOrArtifactName) and `validateArgumentsValues`. Workflow-level arguments are checked as
    `argo lint` does (allowEmptyValues: a value may come at submission); task arguments are not.
    Unlike Argo, a parameter with an enum and no value does not end the check of the others.
    """
    for param in (arguments or {}).get("parameters") or []:
        name = param.get("name")
        yield from parameter_name(f"{where}.parameters", name)
        value, value_from, enum = param.get("value"), param.get("valueFrom") or {}, param.get("enum")
        allowed_source = any(value_from.get(k) is not None for k in ("configMapKeyRef", "event", "supplied"))
        other_source = any(value_from.get(k) for k in ("path", "jsonPath", "parameter", "expression"))
        if param.get("valueFrom") is not None and (not allowed_source or other_source):
            yield (
                f"{where}.parameters[{name}].valueFrom",
                f"has {', '.join(sorted(value_from))}; arguments allow only: default, configMapKeyRef and supplied",
            )
        if enum is None:
            continue
        if len(enum) == 0:
            yield f"{where}.parameters[{name}].enum", "should contain at least one value"
        elif value is None:
            if not allow_empty and param.get("valueFrom") is None:
                yield f"{where}.parameters[{name}]", "has an enum, so a value is required"
        elif _any_string(value) not in [_any_string(v) for v in enum]:
            yield (
                f"{where}.parameters[{name}].value",
                (
                    f"'{_any_string(value)}' is not in the enum list "
                    f"({', '.join(repr(_any_string(v)) for v in enum)})"
                ),
            )


def parameter_name(where: str, name: Any) -> Iterator[Problem]:
    """validate.go `validateWorkflowFieldNames` on Parameters: required, isValidParamOrArtifactName."""
    if not name:
        yield where, "a parameter name is required"
    elif not PARAM_NAME.fullmatch(str(name)):
        yield where, f"parameter name '{name}' is invalid (allowed: {PARAM_NAME_HELP})"


def field_name(where: str, what: str, name: Any) -> Iterator[Problem]:
    """validate.go `validateWorkflowFieldNames` on Templates and DAGTasks: isValidWorkflowFieldName."""
    if not name:
        yield where, f"a {what} name is required"
    elif len(str(name)) > MAX_FIELD_NAME or not FIELD_NAME.fullmatch(str(name)):
        yield where, f"{what} name '{name}' is invalid ({len(str(name))} characters; allowed: {FIELD_NAME_HELP})"


def unique(where: str, names: list, message: str) -> Iterator[Problem]:
    """validate.go `validateWorkflowFieldNames`: "'%s' is not unique"; `message` formats the name."""
    for name in {n for n in names if names.count(n) > 1}:
        yield where, message.format(name)


def template(where: str, template: dict) -> Iterator[Problem]:
    """One template's own rules: validateTemplateType, validateWorkflowFieldNames (its name, its input
    and output parameters), validateLeaf (`parallelism`), validateNonLeaf (`activeDeadlineSeconds`) and
    the `timeout` checks of validateTemplate."""
    types = [t for t in TEMPLATE_TYPES if template.get(t) is not None]
    if len(types) != 1:
        yield (
            where,
            (
                f"needs exactly one template type, has {', '.join(types) or 'none'} "
                f"(one of: {', '.join(TEMPLATE_TYPES)})"
            ),
        )
    yield from field_name(where, "template", template.get("name"))
    if types and types[0] not in ("dag", "steps"):
        # validate.go validateLeaf (every type but steps and dag): Argo rejects the workflow.
        if template.get("parallelism") is not None:
            yield (
                f"{where}.parallelism",
                f"is only valid for steps and dag templates, not a {types[0]} template",
            )
    elif types and template.get("activeDeadlineSeconds") is not None:
        # validate.go validateNonLeaf
        yield f"{where}.activeDeadlineSeconds", f"is only valid for leaf templates, not a {types[0]} template"
    if template.get("timeout") not in (None, ""):
        # validate.go validateTemplate: `if !newTmpl.IsLeaf() { "%s template doesn't support timeout field" }`,
        # and `strconv.Atoi(newTmpl.Timeout)` succeeding: "%s has invalid duration format in timeout"
        if types and types[0] in ("dag", "steps"):
            yield f"{where}.timeout", f"a {types[0]} template doesn't support the timeout field (leaf templates only)"
        elif re.fullmatch(r"[+-]?\d+", _any_string(template["timeout"]).strip()):
            message = (f"{template['timeout']!r} has invalid duration format (a whole number; allowed: a duration "
                       f"such as 10m or 90s)")
            yield f"{where}.timeout", message
    for part in ("inputs", "outputs"):  # validate.go validateInputs / validateOutputs
        for param in (template.get(part) or {}).get("parameters") or []:
            yield from parameter_name(f"{where}.{part}.parameters", param.get("name"))
            if param.get("globalName") is not None:
                yield from parameter_name(f"{where}.{part}.parameters", param["globalName"])
    for part in ("inputs", "outputs"):
        yield from unique(f"{where}.{part}", parameter_names(template.get(part)), "parameter '{}' is declared twice")


def dag(where: str, tasks: list[dict]) -> Iterator[Problem]:
    """validate.go `validateDAG`: task names unique, not both `depends` and `dependencies`."""
    yield from unique(f"{where}.dag", [t.get("name") for t in tasks], "task '{}' is defined twice")
    if any(t.get("depends") for t in tasks) and any(t.get("dependencies") for t in tasks):
        yield f"{where}.dag", "cannot use both 'depends' and 'dependencies' in one DAG"


def dag_task(at: str, task: dict, uses_depends: bool) -> Iterator[Problem]:
    """validate.go `validateDAG` on one task: validateWorkflowFieldNames(tmpl.DAG.Tasks), the digit rule, no
    continueOn in a DAG that uses `depends` (its dependents' expressions say which phases they run after),
    and validateArguments on its arguments (no empty values there)."""
    yield from field_name(at, "task", task.get("name"))
    name = str(task.get("name") or "")
    if (uses_depends or task.get("dependencies")) and name[:1].isdigit() and name[:1].isascii():
        yield at, f"task name '{name}' cannot begin with a digit when using either 'depends' or 'dependencies'"
    if uses_depends and task.get("continueOn") is not None:
        yield at, ("cannot use 'continueOn' when using 'depends'. Instead use 'dep-task.Failed'/'dep-task.Errored' "
                   "(or `dependencies` with continueOn, where a last task's failure must not fail the DAG)")
    yield from argument_list(f"{at}.arguments", task.get("arguments"), allow_empty=False)


def _any_string(value: Any) -> str:
    """A parameter value as Argo's AnyString holds it: YAML true is "true", 2 is "2"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
