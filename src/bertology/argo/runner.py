"""Run an Argo Workflow YAML on this machine: `bertology run workflows/<study>.yaml`.

The YAML is executed itself, not translated: `workflowTemplateRef` / `templateRef` resolve against the
templates directory, DAG tasks run in dependency order, and each container's `command + args` runs as a
host process with cwd = the project root (the image is not used; `python`/`python3` is this interpreter).
Each Argo behaviour the YAML depends on lives in its own module, which names the Argo source it follows:

- substitution.py  `{{…}}` substitution and fan-out item values (util/template, operator.go processItem)
- fanout.py        withParam / withItems, child names, aggregated outputs, empty fan-outs
- dag.py           when a task starts or is omitted, and the DAG's phase (dag.go)
- retries.py       retryStrategy: policy, expression, limit, backoff and maxDuration (processNodeRetries)
- concurrency.py   spec.parallelism and synchronization.semaphores
- expressions.py   the `depends` and retry-expression languages
- deadlines.py     activeDeadlineSeconds of a template and of the Workflow
- termination.py   a step's termination message in its node's message (inferFailedReason)
- exit_handler.py  spec.onExit, workflow.status / workflow.failures, the Workflow's phase and message

The path rewrites: each node gets its own directory under the run's work directory, and every
occurrence of the literal path prefix `/tmp/outputs` in a container's command, args and env values and in
its output parameters' `valueFrom.path` points there, so two fan-out children writing
"/tmp/outputs/x.json" never clash, as two pods would not; /dev/termination-log in an env value points to
the node's `termination-log` file. The node's output is kept in `log.txt` there.

Anything outside what is emulated is refused by name (ALLOWED, and the checks below) before anything runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import random
import re
import shlex
import signal
import string
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bertology.argo import dag as dags
from bertology.argo import deadlines, exit_handler, fanout, termination
from bertology.argo.concurrency import DeadlinePassed, Limits, semaphore_names
from bertology.argo.dag import FAILED, dag_phase
from bertology.argo.documents import (
    TAG,
    Source,
    effective_spec,
    load_documents,
    load_library,
    resolve_task_template,
    task_dependencies,
)
from bertology.argo.expressions import (
    ExpressionError,
    TaskOutcome,
    evaluate_depends,
    task_names,
)
from bertology.argo.parent_death import die_with_parent
from bertology.argo.reaper import Reaper
from bertology.argo.retries import Attempt, RetryError, RetryStrategy, exit_code
from bertology.argo.substitution import SubstitutionError, item_scope, render
from bertology.argo.validate import validate_or_raise
from bertology.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT, BadInput

# --- what the local runner supports ----------------------------------------------------------------------

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
         "onExit"),
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
        ),
    ),
    "workflow arguments": (("parameters",), ()),
    "workflow parameter": (("name", "value", "valueFrom", "enum", "description"), ()),
    "workflow parameter valueFrom": (("configMapKeyRef", "default"), ()),
    "workflowTemplateRef": (("name",), ()),
    "template": (
        ("name", "inputs", "outputs", "container", "dag", "retryStrategy", "synchronization", "activeDeadlineSeconds"),
        _SCHEDULING,
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
    "retryStrategy": (("limit", "retryPolicy", "expression", "backoff"), ()),
    "backoff": (("duration", "factor", "cap"), ()),
}
# Why a key is refused, where a reason helps more than the list of supported keys.
WHY = {
    ("template", "parallelism"): "template-level parallelism is not emulated (spec.parallelism is)",
    ("template", "failFast"): "template-level failFast (operator.go checkParallelism) is not emulated",
    ("output parameter", "default"): "Argo ignores it on outputs (only valueFrom.default is read: "
                                     "workflow/executor/executor.go SaveParameters); use valueFrom.default",
    ("dag", "target"): "dag.target is not emulated",
    ("template", "timeout"): deadlines.REFUSED["timeout"],
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


def _template(template: dict, where: str) -> None:
    _keys(template, "template", where)
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
    if template.get("dag") is not None:
        _keys(template["dag"], "dag", f"of template {where}")
        for task in template["dag"].get("tasks") or []:
            at = f"'{task.get('name')}' of template {where}"
            _keys(task, "dag task", at)
            _keys(task.get("templateRef"), "templateRef", f"of task {at}")
            _keys(task.get("continueOn"), "continueOn", f"of task {at}")
            _keys(task.get("arguments"), "task arguments", f"of task {at}")
            _each((task.get("arguments") or {}).get("parameters"), "task argument", f"of task {at}")


def _retry(strategy: dict, where: str) -> None:
    _keys(strategy, "retryStrategy", f"of template {where}")
    _keys(strategy.get("backoff"), "backoff", f"of template {where}")
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


# --- results ---------------------------------------------------------------------------------------------

MAX_LOCAL_BACKOFF_S = 2.0  # Argo waits minutes between attempts; locally the wait is shortened (and logged)
LOCAL_GRACE_S = 5.0  # a pod's terminationGracePeriodSeconds is 30 s; locally SIGKILL follows SIGTERM sooner
_OUTPUTS_PATH = re.compile(r"(?<![\w./-])/tmp/outputs(?![\w.-])")


@dataclass
class NodeResult:
    """One node of the run: a container, a DAG, a fan-out task group, or a task that never ran."""

    name: str  # Argo's node name: "plan", "cell", "cell(3:ID)", "cell(3:ID).finetune"; the root: the workflow
    template: str
    phase: str  # Argo's node phases: Succeeded, Failed, Error, Skipped, Omitted
    exit_code: int | None = None
    attempts: int = 0
    message: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    tries: list[Attempt] = field(default_factory=list)  # a container's attempts (its pods), in order
    retried: bool = False  # a container with a retryStrategy: a Retry node, its attempts its children
    finished: float | None = None  # when it was fulfilled (epoch seconds)


@dataclass
class PodCall:
    """A container node as Argo would start it: its argv after substitution, and the fan-out item
    variables (`item`, `item.KEY`) of the items it descends from."""

    node: str
    template: str
    argv: list[str]
    inputs: dict[str, str]
    items: dict[str, str]


@dataclass
class RunResult:
    workflow: str
    phase: str  # the Workflow's phase: its entry node's, or Failed when only its exit handler failed
    message: str
    exit_code: int  # 0 succeeded; 2 when a step exited 2 (bad input); 75 when a step still failed transiently
    nodes: dict[str, NodeResult]  # in the order nodes finished
    pods: list[PodCall] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"


@dataclass(frozen=True)
class RunEvent:
    """What a progress display needs, without parsing log lines: a container `started`, a fan-out
    expanded into `count` children (`fanout`), or any node `finished` with its phase."""

    kind: str  # started | fanout | finished
    node: str
    phase: str = ""
    count: int = 0
    message: str = ""
    children: tuple[str, ...] = ()  # fanout: the children's node names
    exit_code: int | None = None  # finished: the container's exit code (None: not a container, or none)


class _NodeError(Exception):
    """A node that cannot run as written (unresolved variable, bad withParam, missing input): phase Error."""


def _render(value: Any, scope: dict[str, str]) -> Any:
    try:
        return render(value, scope)
    except SubstitutionError as e:
        raise _NodeError(str(e)) from None


def _text(value: Any) -> str:
    """A YAML scalar as Argo's AnyString holds it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _spawn(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


# --- execution -------------------------------------------------------------------------------------------


class _Run:
    def __init__(
        self,
        workflow: str,
        globals_: dict[str, str],
        library: dict[str, Source],
        workdir: Path,
        project_root: Path,
        limits: Limits,
        log: Callable[[str], None],
        max_backoff_s: float,
    ):
        self.workflow = workflow
        self.globals = globals_
        self.library = library
        self.workdir = workdir
        self.project_root = project_root
        self.limits = limits
        self.max_backoff_s = max_backoff_s
        self.nodes: dict[str, NodeResult] = {}
        self.graph: dict[str, dags.Node] = {}  # node name -> its node in the node graph (dag.py)
        self.processes: set = set()
        self.zygote = None  # a bertology.argo.zygote.Zygote when python -m steps fork from a warm interpreter
        self.reaper: Reaper | None = None  # kills the running steps' groups if this process dies
        self.dry_run = False  # run only the steps whose outputs the DAG needs (plan); the others are recorded
        self.pods: list[PodCall] = []  # every container node's argv, in the order they were reached
        self._item_values: dict[str, dict[str, str]] = {}  # fan-out child -> the item variables it used
        self._lock = threading.Lock()
        self._log = log
        self.events: Callable[[RunEvent], None] | None = None  # progress hook (bertology.console)
        self.stopping = False  # set by terminate(): no new attempt starts, no retry follows
        self.deadlines = deadlines.Deadlines()  # the Workflow's activeDeadlineSeconds (deadlines.py)
        self.on_exit = False  # running the exit handler: no Workflow deadline applies
        self.engine = None  # a bertology.argo.engines.ContainerEngine: each pod runs in its image

    def notify(self, event: RunEvent) -> None:
        if self.events is not None:
            self.events(event)

    def emit(self, node: str, text: str) -> None:
        with self._lock:
            self._log(f"[{node}] {text}")

    def record(self, node: NodeResult, graph: dags.Node | None = None) -> NodeResult:
        """Keep a finished node, and its node in the graph the DAG phase is assessed on (dag.py)."""
        if node.finished is None:
            node.finished = time.time()
        with self._lock:
            self.nodes[node.name] = node
            self.graph[node.name] = graph or dags.Node(node.name, dags.LEAF, node.phase)
        self.notify(RunEvent("finished", node.name, node.phase, message=node.message, exit_code=node.exit_code))
        return node

    def node_dir(self, name: str) -> Path:
        return self.workdir / re.sub(r"[^\w.,:()=+-]", "_", name or self.workflow)

    def template(self, template: dict, source: Source, name: str, args: dict[str, str], key: tuple[int, ...]) -> NodeResult:
        """Run one template invocation to completion (in the calling thread)."""
        try:
            inputs = self._bind_inputs(template, args)
        except _NodeError as e:
            self.emit(name, f"Error: {e}")
            return self.record(NodeResult(name, template["name"], "Error", message=str(e)))
        if template.get("dag") is None:
            return self.container(template, name, inputs, key)
        return self.dag(template, source, name, inputs, key)

    def _bind_inputs(self, template: dict, args: dict[str, str]) -> dict[str, str]:
        inputs = {}
        for param in (template.get("inputs") or {}).get("parameters") or []:
            name = param["name"]
            if name in args:
                value = args[name]
            elif param.get("value") is not None or param.get("default") is not None:
                chosen = param.get("value") if param.get("value") is not None else param["default"]
                value = _render(_text(chosen), self.globals)
            else:
                raise _NodeError(f"input parameter '{name}' of template '{template['name']}' has no value")
            if param.get("enum") and value not in [_text(v) for v in param["enum"]]:
                raise _NodeError(f"input parameter '{name}' = {value!r} is not one of {param['enum']}")
            inputs[name] = value
        return inputs

    # -- DAG (dag.py)

    def dag(self, template: dict, source: Source, name: str, inputs: dict[str, str], key: tuple[int, ...]) -> NodeResult:
        """Every task starts once its dependencies are fulfilled and its `depends` holds; a failure stops
        nothing (dag.go executeDAGTask); the phase is assessDAGPhase's once all are fulfilled."""
        tasks = template["dag"]["tasks"]
        depends = {t["name"]: task_dependencies(t) for t in tasks}
        upstream = {n: task_names(expr) for n, expr in depends.items()}
        scope = {**self.globals, **{f"inputs.parameters.{k}": v for k, v in inputs.items()}}
        continue_on = {t["name"]: _continue_on(t) for t in tasks}
        outcomes: dict[str, TaskOutcome] = {}
        outputs: dict[str, dict[str, str]] = {}
        pending = [t["name"] for t in tasks]
        finished: queue.Queue = queue.Queue()
        running = 0
        while True:
            progressed = True
            while progressed:
                progressed = False
                for index, task in enumerate(tasks):
                    task_name = task["name"]
                    if task_name not in pending or any(d not in outcomes for d in upstream[task_name]):
                        continue
                    pending.remove(task_name)
                    progressed = True
                    node_name = f"{name}.{task_name}" if name else task_name
                    if depends[task_name] is not None and not evaluate_depends(depends[task_name], outcomes):
                        outcomes[task_name] = TaskOutcome("Omitted", continue_on=continue_on[task_name])
                        self.record(NodeResult(node_name, _template_name(task), "Omitted",
                                               message="omitted: depends condition not met"))
                        continue
                    task_scope = {**scope, **{f"tasks.{t}.outputs.parameters.{p}": v
                                              for t, params in outputs.items() for p, v in params.items()}}

                    def run_task(task=task, node_name=node_name, task_scope=task_scope, index=index) -> None:
                        try:
                            result = self.task(task, source, node_name, task_scope, key + (index,))
                        except Exception as e:  # noqa: BLE001 - a bug must fail the node, never hang the DAG
                            self.emit(node_name, f"Error: {type(e).__name__}: {e}")
                            result = (TaskOutcome("Error"), {})
                        finished.put((task["name"], result))

                    _spawn(run_task)
                    running += 1
            if running == 0:
                break
            task_name, (outcome, task_outputs) = finished.get()
            running -= 1
            outcomes[task_name] = dataclasses.replace(outcome, continue_on=continue_on[task_name])
            outputs[task_name] = task_outputs
        assert not pending, pending  # every task is either run or omitted once its dependencies finish
        fail_fast = template["dag"].get("failFast", True) is not False
        node = dags.Node(name or self.workflow, dags.DAG, "")
        prefix = f"{name}." if name else ""
        node.phase = dag_phase(node, [t["name"] for t in tasks], upstream,
                               {t["name"]: self.graph[prefix + t["name"]] for t in tasks}, fail_fast, continue_on)
        return self.record(NodeResult(node.name, template["name"], node.phase), node)

    def task(self, task: dict, source: Source, name: str, scope: dict[str, str],
             key: tuple[int, ...]) -> tuple[TaskOutcome, dict[str, str]]:
        """One DAG task: a single invocation, or a fan-out over withParam / withItems (fanout.py)."""
        target = resolve_task_template(task, source, self.library)
        assert not isinstance(target, str), target  # the validator guarantees templates resolve
        template, target_source = target
        try:
            items = fanout.items(task, lambda v: _render(v, scope))
            arguments = [
                {p["name"]: _text(_render(p["value"], {**scope, **(item_scope(item) if items is not None else {})}))
                 for p in (task.get("arguments") or {}).get("parameters") or []}
                for item in (items if items is not None else [None])
            ]
        except (_NodeError, fanout.FanOutError, SubstitutionError) as e:
            self.emit(name, f"Error: {e}")
            return TaskOutcome("Error"), self.record(NodeResult(name, template["name"], "Error", message=str(e))).outputs
        if items is None:
            result = self.template(template, target_source, name, arguments[0], key)
            return TaskOutcome(result.phase), result.outputs
        names = [fanout.child_name(name, i, item) for i, item in enumerate(items)]
        self.notify(RunEvent("fanout", name, count=len(items), children=tuple(names)))
        if not items:
            self.record(NodeResult(name, template["name"], "Skipped", message=fanout.SKIPPED_EMPTY))
            self.emit(name, f"Skipped ({fanout.SKIPPED_EMPTY})")
            return TaskOutcome("Skipped"), {}

        children: list[NodeResult | None] = [None] * len(items)
        used = json.dumps(task.get("arguments") or {})
        self._item_values.update({names[i]: {k: v for k, v in item_scope(item).items() if f"{{{{{k}}}}}" in used}
                                  for i, item in enumerate(items)})

        def run_child(i: int) -> None:
            try:
                children[i] = self.template(template, target_source, names[i], arguments[i], key + (i,))
            except Exception as e:  # noqa: BLE001 - a bug must fail the node, never hang the DAG
                self.emit(names[i], f"Error: {type(e).__name__}: {e}")
                children[i] = NodeResult(names[i], template["name"], "Error", message=str(e))
            finally:
                self.limits.cancel(key + (i,), locks)

        locks = semaphore_names(template)
        if template.get("container") is not None:
            for i in range(len(items)):
                self.limits.reserve(key + (i,), locks)
        for thread in [_spawn(lambda i=i: run_child(i)) for i in range(len(items))]:
            thread.join()
        phases = tuple(c.phase for c in children)
        phase = fanout.group_phase(list(phases))
        declared = [p["name"] for p in (template.get("outputs") or {}).get("parameters") or []]
        outputs = fanout.aggregate_outputs([(c.phase, c.outputs) for c in children], declared)
        succeeded = sum(p == "Succeeded" for p in phases)
        self.record(NodeResult(name, template["name"], phase, outputs=outputs,
                               message=f"{succeeded}/{len(items)} children succeeded"),
                    dags.Node(name, dags.TASK_GROUP, phase, [self.graph[n] for n in names]))
        return TaskOutcome(phase, children=phases), outputs

    # -- container (retries.py, concurrency.py)

    def container(self, template: dict, name: str, inputs: dict[str, str], key: tuple[int, ...]) -> NodeResult:
        node_name = name or self.workflow
        node_dir = self.node_dir(node_name)
        out_dir = node_dir / "outputs"
        node_dir.mkdir(parents=True, exist_ok=True)
        log_path = node_dir / "log.txt"
        log_path.write_text("")
        strategy = RetryStrategy.parse(template.get("retryStrategy"))
        attempts: list[Attempt] = []
        # backoff waits are shortened locally, except in a workflow with a deadline (deadlines.py)
        max_backoff_s = self.max_backoff_s if self.deadlines.workflow is None else float("inf")
        workflow_deadline = None if self.on_exit else self.deadlines.workflow
        try:
            locks = self.limits.locks(key, semaphore_names(template), workflow_deadline)
            locks.__enter__()
        except DeadlinePassed:  # waited for a lock past the Workflow's deadline: no pod was made
            self.emit(node_name, f"Failed ({deadlines.WORKFLOW_MESSAGE})")
            return self.record(NodeResult(node_name, template["name"], "Failed", message=deadlines.WORKFLOW_MESSAGE))
        try:
            result = self._attempts(template, node_name, node_dir, out_dir, log_path, inputs, key, strategy,
                                    attempts, max_backoff_s, workflow_deadline)
        except _NodeError as e:
            self.emit(node_name, f"Error: {e}")
            return self.record(NodeResult(node_name, template["name"], "Error", attempts=len(attempts), message=str(e)))
        finally:
            locks.__exit__(None, None, None)
        if result.phase == "dry run":
            return self.record(dataclasses.replace(result, phase="Succeeded"))
        self.emit(node_name, f"{result.phase}" + (f" ({result.message})" if result.message else ""))
        result.tries, result.retried = attempts, strategy is not None
        graph = dags.retry_node(node_name, result.phase, [a.phase for a in attempts]) if strategy is not None else None
        return self.record(result, graph)

    def _attempts(self, template: dict, node_name: str, node_dir: Path, out_dir: Path, log_path: Path,
                  inputs: dict[str, str], key: tuple[int, ...], strategy: RetryStrategy | None,
                  attempts: list[Attempt], max_backoff_s: float, workflow_deadline: float | None) -> NodeResult:
        """The node's pods, one attempt after another as its retryStrategy decides (retries.py)."""
        skipped_s = 0.0  # backoff Argo would wait that the local run did not: Argo's clock runs ahead by this
        while True:
            scope = {
                **self.globals,
                **{f"inputs.parameters.{k}": v for k, v in inputs.items()},
                "pod.name": _pod_name(self.workflow, node_name),
                "retries": str(len(attempts)),
            }
            # a template that cannot be rendered raises _NodeError: no pod (container() records the node)
            container = _render(template["container"], scope)
            outputs = _render((template.get("outputs") or {}).get("parameters") or [], scope)
            own_deadline = _render(template.get("activeDeadlineSeconds"), scope)
            argv = [_outputs_path(str(a), out_dir) for a in [*container["command"], *(container.get("args") or [])]]
            self._called(node_name, template, container, inputs)
            if self.dry_run and not (template.get("outputs") or {}).get("parameters"):
                return NodeResult(node_name, template["name"], "dry run", 0, 0, "dry run: not started")
            if argv[0] in ("python", "python3"):
                argv[0] = sys.executable
            for stale in out_dir.glob("*") if out_dir.exists() else ():
                stale.unlink()
            _termination_log(node_dir).unlink(missing_ok=True)
            out_dir.mkdir(parents=True, exist_ok=True)
            values: dict[str, str] = {}
            started = time.time() + skipped_s
            try:
                own_seconds = deadlines.seconds(own_deadline)
                with self.limits.pods.hold(key, workflow_deadline):
                    started = time.time() + skipped_s
                    kill = self.deadlines.kill(own_seconds, time.time(), self.on_exit)
                    if kill is not None and kill[1] == deadlines.WORKFLOW_MESSAGE and kill[0] <= time.time():
                        raise DeadlinePassed("no pod is created past the Workflow's deadline")
                    launch = self.engine and self.engine.launcher(template, container, node_dir, out_dir,
                                                                  len(attempts))
                    phase, code, message = self._process(node_name, argv, self._env(container, out_dir), log_path,
                                                         len(attempts), kill, launch)
                    if phase == "Succeeded":
                        try:
                            values = _read_outputs(outputs, out_dir)
                        except _NodeError as e:
                            phase, message = "Error", str(e)
            except deadlines.DeadlineError as e:
                phase, code, message = "Error", None, str(e)
            except DeadlinePassed:
                phase, code, message = "Failed", None, deadlines.WORKFLOW_MESSAGE
            finished = time.time() + skipped_s
            attempts.append(Attempt(phase, code, started, finished, message))
            result = NodeResult(node_name, template["name"], phase, code, len(attempts), message, values)
            if phase == "Succeeded" or strategy is None or self.stopping:
                break
            decision = strategy.decide(attempts, time.time() + skipped_s, workflow_deadline)
            local = min(decision.wait_s, max_backoff_s)
            skipped_s += decision.wait_s - local
            if not decision.retry:
                if local:  # processNodeRetries waits out the backoff before it reads the policy and expression
                    self.emit(node_name, f"{phase} ({message}); not retried, after the backoff Argo waits first "
                                         f"({decision.wait_s:g}s, {local:g}s locally)")
                    time.sleep(local)
                result.message = decision.message or message  # the Retry node's message (processNodeRetries)
                break
            self.emit(node_name, f"{phase} ({message}); retry {len(attempts)}/{strategy.limit}: Argo backs off "
                                 f"{decision.wait_s:g}s, waiting {local:g}s locally")
            time.sleep(local)
        return result

    def _called(self, node: str, template: dict, container: dict, inputs: dict[str, str]) -> None:
        """Record the pod's argv as Argo would hand it (the container's own paths, /tmp/outputs)."""
        items: dict[str, str] = {}
        for prefix in [node[:i] for i, ch in enumerate(node) if ch == "."] + [node]:
            items.update(self._item_values.get(prefix, {}))
        with self._lock:
            self.pods.append(PodCall(node, template["name"], [*container["command"], *(container.get("args") or [])],
                                     dict(inputs), items))

    def _env(self, container: dict, out_dir: Path) -> dict[str, str]:
        """Host env + the container's values. A secretKeyRef / configMapKeyRef variable keeps the host's
        same-named variable (locally, secrets come from your environment) and is left unset otherwise."""
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")  # stream the child's lines as they come
        for var in container.get("env") or []:
            if var.get("valueFrom") is None:
                value = _outputs_path(_text(var.get("value", "")), out_dir)
                env[var["name"]] = value.replace(termination.TERMINATION_LOG, str(_termination_log(out_dir.parent)))
        return env

    def _process(self, node: str, argv: list[str], env: dict[str, str], log_path: Path, attempt: int,
                 kill: tuple[float, str] | None, launch: Callable | None = None) -> tuple[str, int | None, str]:
        """Run one attempt, streaming its output; returns (phase, exit code, message). `kill` (when, message)
        stops it as a pod past a deadline is stopped (deadlines.py); the node gets that message. `launch`
        starts it in its image instead of as a host process (engines.py)."""
        self.emit(node, f"started (attempt {attempt + 1}, command in {log_path})")
        with log_path.open("a") as log_file:
            log_file.write(f"--- attempt {attempt + 1}: {shlex.join(argv)}\n")
            if self.stopping:
                return "Error", None, "the local run was stopped"
            try:
                if launch is not None:  # in its image (engines.py)
                    process = launch()
                elif self.zygote is not None and argv[0] == sys.executable and argv[1:2] == ["-m"]:
                    process = self.zygote.spawn(argv[2], argv[3:], env, self.project_root)
                else:  # its own process group, as a pod: terminate() reaches the step's children too;
                    # it dies with the runner, as a pod with its node (a kill of the runner's group misses it)
                    process = subprocess.Popen(argv, cwd=self.project_root, env=env, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True, errors="replace",
                                               start_new_session=True, preexec_fn=die_with_parent)  # noqa: PLW1509 - takes no lock
            except OSError as e:
                log_file.write(f"cannot start: {e}\n")
                return "Error", None, f"cannot start {argv[0]!r}: {e.strerror or e}"
            if self.reaper is not None:
                self.reaper.watch(process.pid)
            with self._lock:
                self.processes.add(process)
                stopped = self.stopping
            if stopped:  # terminate() ran while this one was starting
                _signal(process, signal.SIGTERM)
            self.notify(RunEvent("started", node))
            expired = threading.Event()
            timer = None
            if kill is not None:
                def expire() -> None:
                    expired.set()
                    _signal(process, signal.SIGTERM)
                    time.sleep(LOCAL_GRACE_S)
                    _signal(process, signal.SIGKILL)
                timer = threading.Timer(max(0.0, kill[0] - time.time()), expire)
                timer.daemon = True
                timer.start()
            try:
                for line in process.stdout:  # type: ignore[union-attr]
                    log_file.write(line)
                    log_file.flush()
                    self.emit(node, line.rstrip("\n"))
                code = exit_code(process.wait())
            finally:
                if timer is not None:
                    timer.cancel()
                with self._lock:
                    self.processes.discard(process)
                if self.reaper is not None:
                    self.reaper.forget(process.pid)
        if expired.is_set():
            return "Failed", code, kill[1]  # type: ignore[index]
        if code == 0:
            return "Succeeded", 0, ""
        # a container engine's own reason (OOMKilled, an eviction) first, as Argo's inferFailedReason does
        return "Failed", code, getattr(process, "reason", "") or termination.node_message(
            code, termination.read(_termination_log(log_path.parent)))

    def terminate(self, grace_s: float = LOCAL_GRACE_S) -> None:
        """Stop the run as Argo stops a workflow: SIGTERM to every running step's process group, SIGKILL
        after `grace_s`; no new attempt starts afterwards."""
        with self._lock:
            self.stopping = True
            running = list(self.processes)
        for process in running:
            _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self.processes:
                    return
            time.sleep(0.05)
        with self._lock:
            running = list(self.processes)
        for process in running:
            _signal(process, signal.SIGKILL)


def _signal(process, sig: int) -> None:
    """Signal a step's process group (steps lead their own), else the process alone."""
    pid = getattr(process, "pid", None)
    if not pid:
        return
    try:
        os.killpg(pid, sig)
        return
    except (ProcessLookupError, PermissionError, OSError):
        pass
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, OSError):
        pass


def _continue_on(task: dict) -> tuple[str, ...]:
    """The phases a task's continueOn lets its dependents and its DAG go on after (Failed, Error)."""
    flags = task.get("continueOn") or {}
    return tuple(phase for key, phase in (("failed", "Failed"), ("error", "Error")) if flags.get(key) is True)


def _template_name(task: dict) -> str:
    return task.get("template") or (task.get("templateRef") or {}).get("template", "?")


def _pod_name(workflow: str, node: str) -> str:
    return f"{workflow}-" + re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")


def _termination_log(node_dir: Path) -> Path:
    return node_dir / "termination-log"


def _outputs_path(text: str, out_dir: Path) -> str:
    return _OUTPUTS_PATH.sub(lambda _: str(out_dir), text)


def _read_outputs(outputs: list[dict], out_dir: Path) -> dict[str, str]:
    """executor.go SaveParameters: the file's text with one trailing newline trimmed, else
    valueFrom.default, else an error."""
    values = {}
    for param in outputs:
        value_from = param.get("valueFrom") or {}
        path = Path(_outputs_path(str(value_from["path"]), out_dir))
        if path.is_file():
            values[param["name"]] = path.read_text().removesuffix("\n")
        elif value_from.get("default") is not None:
            values[param["name"]] = _text(value_from["default"])
        else:
            raise _NodeError(f"output parameter '{param['name']}': {path} was not written")
    return values


# --- entry point -----------------------------------------------------------------------------------------


def local_configmaps(templates_dir: Path | None) -> dict[str, dict[str, str]]:
    """The ConfigMaps a cluster would have, from the ConfigMap documents beside the WorkflowTemplates
    (workflows/templates/platform.yaml): name -> data."""
    maps: dict[str, dict[str, str]] = {}
    if templates_dir is None or not Path(templates_dir).is_dir():
        return maps
    for path in sorted(Path(templates_dir).glob("*.y*ml")):
        for doc in load_documents(path):
            if doc.get("kind") == "ConfigMap":
                maps[str((doc.get("metadata") or {}).get("name"))] = {k: str(v) for k, v in (doc.get("data") or {}).items()}
    return maps


def _workflow_parameters(spec: dict, params: dict[str, str], label: str,
                         configmaps: dict[str, dict[str, str]]) -> dict[str, str]:
    """The workflow's parameter values (operator.go setGlobalParameters, v3.7+ precedence): a -p value,
    else `value`, else `valueFrom.configMapKeyRef` (else its `default`). An unknown -p is refused: Argo
    would add it and ignore it silently (workflow/util/util.go overrideParameters), hiding a typo."""
    declared = {p["name"]: p for p in (spec.get("arguments") or {}).get("parameters") or []}
    for name in params:
        if name not in declared:
            raise BadInput(f"unknown parameter '{name}' for {label} (declared: {', '.join(declared) or 'none'}; "
                           f"Argo would accept it and ignore it)")
    values = {}
    for name, param in declared.items():
        value = params.get(name, param.get("value"))
        if value is None and param.get("valueFrom"):
            ref = param["valueFrom"].get("configMapKeyRef") or {}
            data = configmaps.get(str(ref.get("name")), {})
            value = data.get(str(ref.get("key")), param["valueFrom"].get("default"))
            if value is None:
                raise BadInput(f"workflow parameter '{name}' comes from ConfigMap {ref.get('name')} key "
                               f"{ref.get('key')}, which this machine does not have; pass -p {name}=VALUE")
        if value is None:
            raise BadInput(f"workflow parameter '{name}' has no value; pass -p {name}=VALUE")
        value = _text(value)
        if param.get("enum") and value not in [_text(v) for v in param["enum"]]:
            raise BadInput(
                f"parameter {name}={value!r} is not allowed (allowed: {', '.join(map(_text, param['enum']))})"
            )
        values[name] = value
    return values


def _workflow_name(source: Source) -> str:
    meta = source.doc.get("metadata") or {}
    if source.kind == "CronWorkflow":
        return f"{meta.get('name')}-{int(time.time())}"
    if meta.get("name"):
        return str(meta["name"])
    return str(meta.get("generateName", "workflow-")) + "".join(
        random.choices(string.ascii_lowercase + string.digits, k=5)
    )


@dataclass
class Prepared:
    """A workflow file checked and bound to its parameters, ready to run (or to print, `--dry-run`)."""

    source: Source
    spec: dict
    templates: Source
    library: dict[str, Source]
    values: dict[str, str]
    name: str
    globals: dict[str, str]
    parallelism: int
    semaphores: dict[str, int]


def prepare(path: str | Path, *, params: dict[str, str], templates_dir: str | Path | None,
            parallelism: int | None = None, semaphores: dict[str, int] | None = None) -> Prepared:
    """Validate, check the local feature subset and bind the parameters. Raises BadInput."""
    path = Path(path)
    validate_or_raise(path, templates_dir)
    runnable = [Source(path, d) for d in load_documents(path) if d.get("kind") in ("Workflow", "CronWorkflow")]
    if len(runnable) != 1:
        raise BadInput(f"{path}: expected exactly one Workflow or CronWorkflow to run, found {len(runnable)}")
    source = runnable[0]
    library = load_library(templates_dir)
    spec, templates = effective_spec(source, library)
    check_supported(source, spec, templates, library)
    configmaps = local_configmaps(Path(templates_dir) if templates_dir else None)
    values = _workflow_parameters(spec, params, source.label, configmaps)
    if parallelism is not None and parallelism < 1:
        raise BadInput(f"parallelism must be at least 1, got {parallelism}")
    caps = [c for c in (parallelism, spec.get("parallelism")) if c]
    limits = {}
    for _, template in reachable(spec, templates, library):
        for sem in semaphore_names(template):
            cm, _, key = sem.partition("/")
            configured = (semaphores or {}).get(sem, configmaps.get(cm, {}).get(key))
            try:
                limits[sem] = int(configured) if configured is not None else 1
            except ValueError:
                raise BadInput(f"semaphore {sem}: limit {configured!r} is not an integer") from None
    name = _workflow_name(source)
    globals_ = {"workflow.name": name, "workflow.uid": str(uuid.uuid4()), "workflow.namespace": "local",
                "workflow.status": "Running",
                **{f"workflow.parameters.{k}": v for k, v in values.items()}}
    return Prepared(source, spec, templates, library, values, name, globals_, min(caps) if caps else 1 << 30, limits)


def run_workflow(
    path: str | Path,
    *,
    params: dict[str, str],
    templates_dir: str | Path | None,
    workdir: Path,
    project_root: Path,
    parallelism: int | None = 1,
    semaphores: dict[str, int] | None = None,
    log: Callable[[str], None] = print,
    fork_server: bool = False,
    max_backoff_s: float = MAX_LOCAL_BACKOFF_S,
    dry_run: bool = False,
    events: Callable[[RunEvent], None] | None = None,
    engine: Any = None,
) -> RunResult:
    """Validate, check the local feature subset, then run the file's Workflow (or a CronWorkflow's
    workflowSpec, once). Raises BadInput before anything runs; a failed step is a result, not an error.

    At most min(`parallelism`, the YAML's spec.parallelism) containers run at once. With `fork_server`,
    `python -m MODULE` steps fork from a warm interpreter (see zygote.py) instead of paying the
    torch/transformers import in every process. With `dry_run`, only the steps whose output parameters the
    DAG reads (plan) run; every other container is recorded in `RunResult.pods` with the argv Argo would
    give it, and counted as succeeded. `events` receives a RunEvent as containers start and nodes finish.

    An exception in the calling thread (KeyboardInterrupt, or what a SIGTERM handler raises) stops every
    running step, then the fork server, and propagates."""
    prepared = prepare(path, params=params, templates_dir=templates_dir, parallelism=parallelism,
                       semaphores=semaphores)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    run = _Run(prepared.name, prepared.globals, prepared.library, workdir, Path(project_root),
               Limits(prepared.parallelism, prepared.semaphores), log, max_backoff_s)
    run.dry_run = dry_run
    run.events = events
    run.deadlines = deadlines.Deadlines.of(prepared.spec, time.time())
    run.engine = engine
    sems = ", ".join(f"{k}={v}" for k, v in sorted(prepared.semaphores.items()))
    run.emit(prepared.name, f"running {path} locally (at most {prepared.parallelism} containers at once"
                            + (f"; semaphores {sems}" if sems else "") + f"; node directories under {workdir})")
    run.reaper = Reaper()
    if fork_server:
        from bertology.argo.zygote import Zygote

        run.zygote = Zygote(Path(project_root))
    try:
        entry = prepared.templates.template(prepared.spec["entrypoint"])
        root = run.template(entry, prepared.templates, "", prepared.values, ())
        exit_node = None
        if prepared.spec.get("onExit") and not run.stopping:  # exit_handler.py
            run.on_exit = True
            run.globals["workflow.status"] = exit_handler.PHASE_OF_WORKFLOW[root.phase]
            run.globals["workflow.failures"] = exit_handler.failures(
                list(run.nodes.values()), lambda node: _pod_name(prepared.name, node))
            exit_node = run.template(prepared.templates.template(prepared.spec["onExit"]), prepared.templates,
                                     exit_handler.EXIT_NODE, {}, (1 << 30,))
    except BaseException:
        run.terminate()
        raise
    finally:
        if run.zygote is not None:
            run.zygote.close()
        if engine is not None:
            engine.close()  # the containers of attempts a stop cut short
        run.reaper.close()
    phase, message = exit_handler.outcome(root.phase, root.message, exit_node)
    code = 0
    if phase != "Succeeded":
        codes = {n.exit_code for n in run.nodes.values() if n.phase in FAILED and n.exit_code is not None}
        code = EXIT_BAD_INPUT if EXIT_BAD_INPUT in codes else EXIT_TRANSIENT if codes == {EXIT_TRANSIENT} else 1
    result = RunResult(prepared.name, phase, message, code, dict(run.nodes), list(run.pods))
    (workdir / "status.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    run.emit(prepared.name, f"{phase} (exit code {code})" + (f": {message}" if message else ""))
    return result
