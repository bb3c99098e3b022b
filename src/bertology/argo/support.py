"""What the local runner executes, what it accepts and ignores, and what it refuses by name.

`check_supported` reads the (effective) workflow spec and every template its entrypoint and onExit reach
(`reachable`: a task's `template` / `templateRef` resolved as workflow/templateresolution/context.go
`GetTemplateByName` and `GetTemplateFromRef` do, through documents.py) and raises BadInput naming the first
key outside ALLOWED, before anything runs. WHY gives the reason where Argo's own code makes a key mean what
the runner cannot emulate: an output parameter's `default` (workflow/executor/executor.go `SaveParameters`
reads only `valueFrom.default`), a backoff's `maxDuration` (workflow/controller/workflowpod.go
`getDeadline`), template-level `failFast` (operator.go `checkParallelism`), `pendingTimeout`, and a
template's `timeout` where it would count a semaphore wait or earlier attempts (deadlines.py). A
retryStrategy without `limit` is refused because operator.go `processNodeRetries` then retries without end.
A retryStrategy's `affinity` (`{nodeAntiAffinity: {}}`, the schema's only form; bertology's own templates set
none) changes nothing on one machine (retries.py). A `podSpecPatch` that only names Argo's own `init` and
`wait` containers is accepted and ignored (there are none here: pod_spec_patch.py); any other is refused.
"""

from __future__ import annotations

from bertology.argo import deadlines, pod_spec_patch
from bertology.argo.documents import TAG, Source, resolve_task_template
from bertology.argo.expressions import ExpressionError
from bertology.argo.retries import RetryError, RetryStrategy
from bertology.errors import BadInput

_SCHEDULING = (
    "metadata",
    "nodeSelector",
    "tolerations",
    "affinity",
    "securityContext",
    "serviceAccountName",
    "automountServiceAccountToken",
    "volumes",
    "priorityClassName",
    "schedulerName",
)

# object -> (executed, accepted and ignored)
ALLOWED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "workflow spec": (
        ("entrypoint", "arguments", "templates", "workflowTemplateRef", "parallelism", "activeDeadlineSeconds",
         "onExit", "priority"),
        _SCHEDULING
        + (
            "podGC",
            "ttlStrategy",
            "archiveLogs",
            "workflowMetadata",
            "podMetadata",
            "imagePullSecrets",
            "podDisruptionBudget",
            "podPriorityClassName",
            "dnsPolicy",
            "dnsConfig",
            "podSpecPatch",
        ),
    ),
    "workflow arguments": (("parameters",), ()),
    "workflow parameter": (("name", "value", "valueFrom", "enum", "description"), ()),
    "workflow parameter valueFrom": (("configMapKeyRef", "default"), ()),
    "workflowTemplateRef": (("name",), ()),
    "template": (
        ("name", "inputs", "outputs", "container", "dag", "retryStrategy", "synchronization", "activeDeadlineSeconds",
         "timeout"),
        _SCHEDULING + ("podSpecPatch",),
    ),
    "synchronization": (("semaphores", "semaphore"), ()),
    "inputs": (("parameters",), ()),
    "input parameter": (("name", "value", "default", "enum", "description"), ()),
    "outputs": (("parameters",), ()),
    "output parameter": (("name", "valueFrom", "description"), ()),
    "output valueFrom": (("path", "default"), ()),
    "container": (
        ("command", "args", "env"),
        ("name", "image", "imagePullPolicy", "resources", "volumeMounts", "securityContext"),
    ),
    "env variable": (("name", "value", "valueFrom"), ()),
    "env valueFrom": (("secretKeyRef", "configMapKeyRef"), ()),
    "dag": (("tasks", "failFast"), ()),
    "dag task": (
        ("name", "template", "templateRef", "arguments", "depends", "dependencies", "withParam", "withItems",
         "continueOn"),
        (),
    ),
    "continueOn": (("failed", "error"), ()),
    "task arguments": (("parameters",), ()),
    "task argument": (("name", "value"), ()),
    "templateRef": (("name", "template"), ()),
    "retryStrategy": (("limit", "retryPolicy", "expression", "backoff", "affinity"), ()),
    "retry affinity": (("nodeAntiAffinity",), ()),
    "backoff": (("duration", "factor", "cap"), ()),
}
# Why a key is refused, where a reason helps more than the list of supported keys.
WHY = {
    ("template", "parallelism"): "template-level parallelism is not emulated (spec.parallelism is)",
    ("template", "failFast"): "template-level failFast (operator.go checkParallelism) is not emulated",
    ("output parameter", "default"): "Argo ignores it on outputs (only valueFrom.default is read: "
                                     "workflow/executor/executor.go SaveParameters); use valueFrom.default",
    ("dag", "target"): "dag.target is not emulated",
    ("template", "pendingTimeout"): deadlines.REFUSED["pendingTimeout"],
    ("backoff", "maxDuration"): "its deadline reaches the pod as the executor's ARGO_DEADLINE (workflowpod.go "
                                "getDeadline), whose node message the local runner does not emulate",
}


def _keys(obj: dict | None, what: str, where: str) -> None:
    supported, ignored = ALLOWED[what]
    for key in obj or {}:
        if key not in supported and key not in ignored:
            why = WHY.get((what, key))
            also = f"; ignores: {', '.join(ignored)}" if ignored else ""
            raise BadInput(
                f"unsupported Argo feature '{key}' in {what} {where} "
                + (f"({why})" if why else f"(the local runner supports: {', '.join(supported)}{also})")
            )


def _each(items: list | None, what: str, where: str) -> None:
    for item in items or []:
        _keys(item, what, f"{where}, '{item.get('name')}'")


def check_supported(source: Source, spec: dict, templates: Source, library: dict[str, Source]) -> None:
    """Raise BadInput naming the first feature the local runner cannot honour.

    Checks the (effective) workflow spec and every template reachable from its entrypoint.
    """
    _keys(spec, "workflow spec", f"of {source.label}")
    _pod_spec_patch(spec, f"the workflow spec of {source.label}")
    _keys(spec.get("workflowTemplateRef"), "workflowTemplateRef", f"of {source.label}")
    _keys(spec.get("arguments"), "workflow arguments", f"of {source.label}")
    for param in (spec.get("arguments") or {}).get("parameters") or []:
        _keys(param, "workflow parameter", f"of {source.label}, '{param.get('name')}'")
        _keys(param.get("valueFrom"), "workflow parameter valueFrom", f"of parameter '{param.get('name')}'")
    for owner, template in reachable(spec, templates, library):
        _template(template, f"'{template['name']}' ({owner.label})")


def reachable(spec: dict, templates: Source, library: dict[str, Source]) -> list[tuple[Source, dict]]:
    """Every template the entrypoint reaches, once, with the document it comes from. A task whose template
    does not resolve is BadInput (the validator reports it first; nothing could run)."""
    seen: set[tuple[int, str]] = set()
    out = []
    stack = [(templates, templates.template(name)) for name in (spec.get("onExit"), spec["entrypoint"]) if name]
    while stack:
        owner, template = stack.pop()
        if (id(owner.doc), template["name"]) in seen:
            continue
        seen.add((id(owner.doc), template["name"]))
        out.append((owner, template))
        for task in (template.get("dag") or {}).get("tasks") or []:
            target = resolve_task_template(task, owner, library)
            if isinstance(target, str):
                raise BadInput(f"{owner.label}: task '{task.get('name')}': {target}")
            stack.append((target[1], target[0]))
    return out


def _pod_spec_patch(holder: dict, where: str) -> None:
    """A podSpecPatch is accepted (and ignored) only when it changes nothing but Argo's own `init` and `wait`
    containers, which a local pod does not have; anything else would change the step's own container or
    pod, which the runner would not do."""
    if not holder.get("podSpecPatch"):
        return
    patch = pod_spec_patch.parse(holder["podSpecPatch"], where)
    if not pod_spec_patch.argo_containers_only(patch):
        raise BadInput(f"unsupported Argo feature 'podSpecPatch' in {where} (the local runner accepts one that "
                       f"changes only Argo's own containers, initContainers 'init' and containers 'wait')")


def _template(template: dict, where: str) -> None:
    _keys(template, "template", where)
    _pod_spec_patch(template, f"template {where}")
    _keys(template.get("synchronization"), "synchronization", f"of template {where}")
    for ref in (template.get("synchronization") or {}).get("semaphores") or []:
        if set(ref) != {"configMapKeyRef"}:
            raise BadInput(f"template {where}: only ConfigMap semaphores (configMapKeyRef) are emulated, got {sorted(ref)}")
    _keys(template.get("inputs"), "inputs", f"of template {where}")
    _each((template.get("inputs") or {}).get("parameters"), "input parameter", f"of template {where}")
    if template.get("dag") is not None and template.get("outputs"):
        raise BadInput(
            f"unsupported Argo feature 'outputs' of a dag template {where} "
            f"(the local runner reads outputs of container templates only)"
        )
    _keys(template.get("outputs"), "outputs", f"of template {where}")
    for param in (template.get("outputs") or {}).get("parameters") or []:
        _keys(param, "output parameter", f"of template {where}")
        _keys(
            param.get("valueFrom"), "output valueFrom", f"of output '{param.get('name')}' of template {where}"
        )
        if not (param.get("valueFrom") or {}).get("path"):
            raise BadInput(
                f"output parameter '{param.get('name')}' of template {where} needs valueFrom.path "
                f"(the local runner reads output parameters from files)"
            )
    if template.get("container") is not None:
        container = template["container"]
        _keys(container, "container", f"of template {where}")
        if not container.get("command"):
            raise BadInput(
                f"container of template {where} has no 'command' (the local runner runs "
                f"command + args on the host; the image's entrypoint is not available)"
            )
        for var in container.get("env") or []:
            _keys(var, "env variable", f"'{var.get('name')}' of template {where}")
            _keys(var.get("valueFrom"), "env valueFrom", f"of env '{var.get('name')}' of template {where}")
    if template.get("retryStrategy") is not None:
        _retry(template["retryStrategy"], where)
    if template.get("timeout") is not None:
        _timeout(template, where)
    if template.get("dag") is not None:
        _keys(template["dag"], "dag", f"of template {where}")
        for task in template["dag"].get("tasks") or []:
            at = f"'{task.get('name')}' of template {where}"
            _keys(task, "dag task", at)
            _keys(task.get("templateRef"), "templateRef", f"of task {at}")
            _keys(task.get("continueOn"), "continueOn", f"of task {at}")
            _keys(task.get("arguments"), "task arguments", f"of task {at}")
            _each((task.get("arguments") or {}).get("parameters"), "task argument", f"of task {at}")


def _timeout(template: dict, where: str) -> None:
    if template.get("synchronization") is not None or template.get("retryStrategy") is not None:
        raise BadInput(f"unsupported Argo feature 'timeout' in template {where} ({deadlines.REFUSED['timeout']})")
    if TAG.search(str(template["timeout"])):
        raise BadInput(f"template {where}: 'timeout' uses {{{{…}}}} values, which are not emulated")
    try:
        deadlines.timeout_seconds(template["timeout"])
    except deadlines.DeadlineError as e:
        raise BadInput(f"template {where}: {e}") from e


def _retry(strategy: dict, where: str) -> None:
    _keys(strategy, "retryStrategy", f"of template {where}")
    _keys(strategy.get("backoff"), "backoff", f"of template {where}")
    _keys(strategy.get("affinity"), "retry affinity", f"of template {where}")
    if strategy.get("limit") is None:
        raise BadInput(
            f"retryStrategy of template {where} has no 'limit' (Argo retries without end; refused locally)"
        )
    if any(TAG.search(str(v)) for v in [*strategy.values(), *(strategy.get("backoff") or {}).values()]):
        raise BadInput(f"retryStrategy of template {where} uses {{{{…}}}} values, which are not emulated")
    try:
        RetryStrategy.parse(strategy)
    except (RetryError, ExpressionError) as e:
        raise BadInput(f"template {where}: {e}") from e
