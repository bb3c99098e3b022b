"""Run an Argo Workflow YAML on this machine, as DESIGN §8 describes: `bertology run workflows/<study>.yaml`.

The YAML is executed itself, not translated: `workflowTemplateRef` / `templateRef` resolve against the
templates directory, DAG tasks run in dependency order, and each container's `command + args` runs as a
host process with cwd = the project root (the image is not used; `python`/`python3` is this interpreter).

The one path rewrite: each node gets its own directory `<workdir>/<node>/` (`<node>` is the node's name,
e.g. `cell(3).finetune`), and every occurrence of the literal path prefix `/tmp/outputs` in a container's
command, args and env values and in its output parameters' `valueFrom.path` becomes
`<workdir>/<node>/outputs`. So two fan-out children writing "/tmp/outputs/x.json" never clash, as two pods
would not. The node's combined stdout/stderr is kept in `<workdir>/<node>/log.txt`.

Semantics kept from Argo, because the prototype broke on each of them:
- fan-out outputs (`tasks.T.outputs.parameters.P` of a withParam/withItems task) aggregate as Argo does:
  the values of the succeeded children in item order, as a JSON list of parsed values when every value is a
  JSON object or array, else as a JSON list of strings;
- concurrency: at most `parallelism` processes at once. A slot is held only while a process runs, never by
  a DAG waiting on its children (a pool of DAG workers deadlocks when a DAG waits on its own fan-out);
- failFast (Argo's default): after a failure in a DAG no new task of it starts; running ones finish;
- retryStrategy: limit, retryPolicy, the exit-code/status subset of `expression`, backoff (capped locally).

Anything outside the supported subset is refused by name (see ALLOWED) before anything runs.
"""

from __future__ import annotations

import heapq
import json
import os
import queue
import random
import re
import shlex
import shutil
import string
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bertology.argo.expressions import (
    ExpressionError,
    TaskOutcome,
    evaluate_depends,
    evaluate_retry,
    parse_retry,
    task_names,
)
from bertology.argo.validate import (
    TAG,
    Source,
    effective_spec,
    load_documents,
    load_library,
    resolve_task_template,
    task_dependencies,
    validate_or_raise,
)
from bertology.errors import EXIT_BAD_INPUT, BadInput

# --- what the local runner supports ----------------------------------------------------------------------

_SCHEDULING = (
    "metadata",
    "nodeSelector",
    "tolerations",
    "affinity",
    "securityContext",
    "synchronization",
    "activeDeadlineSeconds",
    "serviceAccountName",
    "automountServiceAccountToken",
    "volumes",
    "priorityClassName",
    "schedulerName",
    "parallelism",
)

# object -> (executed, accepted and ignored)
ALLOWED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "workflow spec": (
        ("entrypoint", "arguments", "templates", "workflowTemplateRef"),
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
    "workflow parameter": (("name", "value", "enum", "description"), ()),
    "workflowTemplateRef": (("name",), ()),
    "template": (
        ("name", "inputs", "outputs", "container", "dag", "retryStrategy"),
        _SCHEDULING + ("priority",),
    ),
    "inputs": (("parameters",), ()),
    "input parameter": (("name", "value", "default", "enum", "description"), ()),
    "outputs": (("parameters",), ()),
    "output parameter": (("name", "valueFrom", "default", "description"), ()),
    "output valueFrom": (("path", "default"), ()),
    "container": (
        ("command", "args", "env"),
        ("name", "image", "imagePullPolicy", "resources", "volumeMounts", "securityContext"),
    ),
    "env variable": (("name", "value", "valueFrom"), ()),
    "env valueFrom": (("secretKeyRef", "configMapKeyRef"), ()),
    "dag": (("tasks", "failFast"), ()),
    "dag task": (
        ("name", "template", "templateRef", "arguments", "depends", "dependencies", "withParam", "withItems"),
        (),
    ),
    "task arguments": (("parameters",), ()),
    "task argument": (("name", "value"), ()),
    "templateRef": (("name", "template"), ()),
    "retryStrategy": (("limit", "retryPolicy", "expression", "backoff"), ()),
    "backoff": (("duration", "factor", "maxDuration"), ()),
}
RETRY_POLICIES = ("Always", "OnFailure", "OnError")


def _keys(obj: dict | None, what: str, where: str) -> None:
    supported, ignored = ALLOWED[what]
    for key in obj or {}:
        if key not in supported and key not in ignored:
            also = f"; ignores: {', '.join(ignored)}" if ignored else ""
            raise BadInput(
                f"unsupported Argo feature '{key}' in {what} {where} "
                f"(the local runner supports: {', '.join(supported)}{also})"
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
    _each((spec.get("arguments") or {}).get("parameters"), "workflow parameter", f"of {source.label}")
    seen: set[tuple[int, str]] = set()
    stack = [(templates, templates.template(spec["entrypoint"]))]
    while stack:
        owner, template = stack.pop()
        if (id(owner.doc), template["name"]) in seen:
            continue
        seen.add((id(owner.doc), template["name"]))
        _template(template, f"'{template['name']}' ({owner.label})")
        for task in (template.get("dag") or {}).get("tasks") or []:
            target = resolve_task_template(task, owner, library)
            if isinstance(target, str):  # the validator reports these; nothing to run
                raise BadInput(f"{owner.label}: task '{task.get('name')}': {target}")
            stack.append((target[1], target[0]))


def _template(template: dict, where: str) -> None:
    _keys(template, "template", where)
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
            _keys(task.get("arguments"), "task arguments", f"of task {at}")
            _each((task.get("arguments") or {}).get("parameters"), "task argument", f"of task {at}")


def _retry(strategy: dict, where: str) -> None:
    _keys(strategy, "retryStrategy", f"of template {where}")
    _keys(strategy.get("backoff"), "backoff", f"of template {where}")
    if strategy.get("limit") is None:
        raise BadInput(
            f"retryStrategy of template {where} has no 'limit' (unlimited retries are refused locally)"
        )
    for key in ("duration", "maxDuration"):
        value = (strategy.get("backoff") or {}).get(key)
        if value is not None and not TAG.search(str(value)):
            try:
                _seconds(value)
            except _NodeError as e:
                raise BadInput(f"template {where}: {e}") from e
    policy = strategy.get("retryPolicy", "OnFailure")
    if policy not in RETRY_POLICIES:
        raise BadInput(
            f"unsupported retryPolicy '{policy}' in template {where} (supported: {', '.join(RETRY_POLICIES)})"
        )
    if strategy.get("expression"):
        try:
            parse_retry(str(strategy["expression"]))
        except ExpressionError as e:
            raise BadInput(f"template {where}: {e}") from e


# --- results ---------------------------------------------------------------------------------------------

FAILED = ("Failed", "Error")
MAX_LOCAL_BACKOFF_S = 2.0  # Argo's backoffs are minutes on a cluster; locally a retry is a rerun
_OUTPUTS_PATH = re.compile(r"(?<![\w./-])/tmp/outputs(?![\w.-])")


@dataclass
class NodeResult:
    """One node of the run: a container, a DAG, a fan-out task group, or a task that never ran."""

    name: str  # e.g. "plan", "cell", "cell(3)", "cell(3).finetune"; the root node has the workflow's name
    template: str
    phase: str  # Argo's node phases: Succeeded, Failed, Error, Omitted
    exit_code: int | None = None
    attempts: int = 0
    message: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class RunResult:
    workflow: str
    phase: str
    exit_code: int  # 0 succeeded; 2 when a step exited 2 (bad input); else 1
    nodes: dict[str, NodeResult]  # in the order nodes finished

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"


class _NodeError(Exception):
    """A node that cannot run as written (unresolved variable, bad withParam, missing input): phase Error."""


# --- variables -------------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """How Argo renders a value into a template: strings as they are, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True)


def _render(value: Any, scope: dict[str, str]) -> Any:
    def substitute(match: re.Match) -> str:
        if match.group(1) not in scope:
            raise _NodeError(f"unresolved '{match.group(0)}'")
        return scope[match.group(1)]

    if isinstance(value, str):
        return TAG.sub(substitute, value)
    if isinstance(value, list):
        return [_render(v, scope) for v in value]
    if isinstance(value, dict):
        return {k: _render(v, scope) for k, v in value.items()}
    return value


def _item_scope(item: Any) -> dict[str, str]:
    scope = {"item": _text(item)}
    if isinstance(item, dict):
        scope.update({f"item.{k}": _text(v) for k, v in item.items()})
    return scope


def _aggregate(values: list[str]) -> str:
    """Argo's fan-out output: parsed JSON only if every value is a JSON object or array."""
    parsed = []
    for value in values:
        try:
            parsed.append(json.loads(value))
        except ValueError:
            parsed.append(None)
    if values and all(isinstance(p, (dict, list)) for p in parsed):
        return json.dumps(parsed, separators=(",", ":"), sort_keys=True)
    return json.dumps(values, separators=(",", ":"))


# --- retries ---------------------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(duration: Any) -> float:
    """A Go duration ("30s", "1m30s") or a plain number of seconds."""
    text = str(duration).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    if not re.fullmatch(f"(?:{_DURATION.pattern})+", text):
        raise _NodeError(f"retryStrategy.backoff duration {text!r} is not a duration like 30s or 1m")
    return sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(text))


def _should_retry(strategy: dict, retries_done: int, phase: str, exit_code: int | None) -> bool:
    if not strategy or retries_done >= int(strategy["limit"]):
        return False
    policy = strategy.get("retryPolicy", "OnFailure")
    if not (phase == "Failed" and policy in ("Always", "OnFailure")) and not (
        phase == "Error" and policy in ("Always", "OnError")
    ):
        return False
    expression = strategy.get("expression")
    return not expression or evaluate_retry(parse_retry(str(expression)), exit_code, phase)


def _backoff(strategy: dict, retries_done: int) -> float:
    backoff = strategy.get("backoff") or {}
    if not backoff.get("duration"):
        return 0.0
    delay = _seconds(backoff["duration"]) * float(backoff.get("factor") or 1) ** retries_done
    if backoff.get("maxDuration"):
        delay = min(delay, _seconds(backoff["maxDuration"]))
    return min(delay, MAX_LOCAL_BACKOFF_S)


# --- concurrency -----------------------------------------------------------------------------------------


class _Slots:
    """At most `size` processes at once; waiting nodes are served in tree order (depth first), so a
    started cell finishes before the next one starts and runs are reproducible at parallelism 1.

    A fan-out reserves its children's places in line before their threads start, so the order does not
    depend on which thread happens to ask first.
    """

    def __init__(self, size: int):
        self._free = size
        self._waiting: list[tuple[int, ...]] = []
        self._reserved: set[tuple[int, ...]] = set()
        self._cond = threading.Condition()

    def reserve(self, key: tuple[int, ...]) -> None:
        with self._cond:
            self._reserved.add(key)
            heapq.heappush(self._waiting, key)

    def cancel(self, key: tuple[int, ...]) -> None:
        """Give up a reservation that was not used (no-op once the node held a slot)."""
        with self._cond:
            if key in self._reserved:
                self._reserved.discard(key)
                self._waiting.remove(key)
                heapq.heapify(self._waiting)
                self._cond.notify_all()

    @contextmanager
    def hold(self, key: tuple[int, ...]) -> Iterator[None]:
        with self._cond:
            if key in self._reserved:
                self._reserved.discard(key)
            else:
                heapq.heappush(self._waiting, key)
            self._cond.wait_for(lambda: self._free > 0 and self._waiting[0] == key)
            heapq.heappop(self._waiting)
            self._free -= 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._free += 1
                self._cond.notify_all()


class _FailFast:
    """The failFast scope of one DAG: after a failure in it, or in any enclosing DAG, nothing new starts.

    With `failFast: false` a failure does not stop the DAG's own tasks (enclosing scopes still apply).
    """

    def __init__(self, parent: _FailFast | None = None, enabled: bool = True):
        self._parent = parent
        self._enabled = enabled
        self._event = threading.Event()

    def fail(self) -> None:
        if self._enabled:
            self._event.set()

    def stopped(self) -> bool:
        return self._event.is_set() or (self._parent is not None and self._parent.stopped())


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
        parallelism: int,
        log: Callable[[str], None],
    ):
        self.workflow = workflow
        self.globals = globals_
        self.library = library
        self.workdir = workdir
        self.project_root = project_root
        self.slots = _Slots(parallelism)
        self.nodes: dict[str, NodeResult] = {}
        self.processes: set[subprocess.Popen] = set()
        self.zygote = None  # a bertology.argo.zygote.Zygote when python -m steps fork from a warm interpreter
        self._lock = threading.Lock()
        self._log = log

    def emit(self, node: str, text: str) -> None:
        with self._lock:
            self._log(f"[{node}] {text}")

    def record(self, node: NodeResult) -> NodeResult:
        with self._lock:
            self.nodes[node.name] = node
        return node

    def template(
        self,
        template: dict,
        source: Source,
        name: str,
        args: dict[str, str],
        key: tuple[int, ...],
        fail_fast: _FailFast,
    ) -> NodeResult:
        """Run one template invocation to completion (in the calling thread)."""
        try:
            inputs = self._bind_inputs(template, args)
        except _NodeError as e:
            self.emit(name, f"Error: {e}")
            fail_fast.fail()
            return self.record(NodeResult(name, template["name"], "Error", message=str(e)))
        if template.get("dag") is None:
            return self.container(template, name, inputs, key, fail_fast)
        result = self.dag(template, source, name, inputs, key, fail_fast)
        if result.phase in FAILED:
            fail_fast.fail()
        return result

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

    # -- DAG

    def dag(
        self,
        template: dict,
        source: Source,
        name: str,
        inputs: dict[str, str],
        key: tuple[int, ...],
        fail_fast: _FailFast,
    ) -> NodeResult:
        tasks = template["dag"]["tasks"]
        depends = {t["name"]: task_dependencies(t) for t in tasks}
        upstream = {n: task_names(expr) for n, expr in depends.items()}
        scope = {**self.globals, **{f"inputs.parameters.{k}": v for k, v in inputs.items()}}
        own = _FailFast(fail_fast, enabled=template["dag"].get("failFast", True))
        outcomes: dict[str, TaskOutcome] = {}
        outputs: dict[str, dict[str, str]] = {}
        pending = [t["name"] for t in tasks]
        finished: queue.Queue = queue.Queue()
        running = 0
        while True:
            progressed = True
            while progressed and not own.stopped():
                progressed = False
                for index, task in enumerate(tasks):
                    task_name = task["name"]
                    if task_name not in pending or any(d not in outcomes for d in upstream[task_name]):
                        continue
                    pending.remove(task_name)
                    progressed = True
                    node_name = f"{name}.{task_name}" if name else task_name
                    if depends[task_name] is not None and not evaluate_depends(depends[task_name], outcomes):
                        outcomes[task_name] = TaskOutcome("Omitted")
                        self.record(
                            NodeResult(
                                node_name,
                                _template_name(task),
                                "Omitted",
                                message="omitted: depends condition not met",
                            )
                        )
                        continue
                    task_scope = {
                        **scope,
                        **{
                            f"tasks.{t}.outputs.parameters.{p}": v
                            for t, params in outputs.items()
                            for p, v in params.items()
                        },
                    }

                    def run_task(task=task, node_name=node_name, task_scope=task_scope, index=index) -> None:
                        try:
                            result = self.task(task, source, node_name, task_scope, key + (index,), own)
                        except Exception as e:  # noqa: BLE001 - a bug must fail the node, never hang the DAG
                            self.emit(node_name, f"Error: {type(e).__name__}: {e}")
                            own.fail()
                            result = (TaskOutcome("Error"), {})
                        finished.put((task["name"], result))

                    _spawn(run_task)
                    running += 1
            if running == 0:
                break
            task_name, (outcome, task_outputs) = finished.get()
            running -= 1
            outcomes[task_name] = outcome
            outputs[task_name] = task_outputs
        for task_name in pending:  # never started: stopped by a failure (failFast)
            outcomes[task_name] = TaskOutcome("Omitted")
            self.record(
                NodeResult(
                    f"{name}.{task_name}" if name else task_name,
                    _template_name(next(t for t in tasks if t["name"] == task_name)),
                    "Omitted",
                    message="not started: failFast after a failure",
                )
            )
        phase = _dag_phase([t["name"] for t in tasks], upstream, outcomes, stopped=bool(pending))
        return self.record(NodeResult(name or self.workflow, template["name"], phase))

    def task(
        self,
        task: dict,
        source: Source,
        name: str,
        scope: dict[str, str],
        key: tuple[int, ...],
        fail_fast: _FailFast,
    ) -> tuple[TaskOutcome, dict[str, str]]:
        """One DAG task: a single invocation, or a fan-out over withParam / withItems."""
        target = resolve_task_template(task, source, self.library)
        assert not isinstance(target, str), target  # the validator guarantees templates resolve
        template, target_source = target
        fan_out = task.get("withParam") is not None or task.get("withItems") is not None
        try:
            items = _items(task, scope) if fan_out else [None]
            arguments = [
                {
                    p["name"]: _text(
                        _render(p["value"], {**scope, **_item_scope(item)} if fan_out else scope)
                    )
                    for p in (task.get("arguments") or {}).get("parameters") or []
                }
                for item in items
            ]
        except _NodeError as e:
            self.emit(name, f"Error: {e}")
            fail_fast.fail()
            return TaskOutcome("Error"), self.record(
                NodeResult(name, template["name"], "Error", message=str(e))
            ).outputs
        if not fan_out:
            result = self.template(template, target_source, name, arguments[0], key, fail_fast)
            return TaskOutcome(result.phase), result.outputs

        children: list[NodeResult | None] = [None] * len(items)

        def run_child(i: int) -> None:
            try:
                children[i] = self.template(
                    template, target_source, f"{name}({i})", arguments[i], key + (i,), fail_fast
                )
            except Exception as e:  # noqa: BLE001 - a bug must fail the node, never hang the DAG
                self.emit(f"{name}({i})", f"Error: {type(e).__name__}: {e}")
                fail_fast.fail()
                children[i] = NodeResult(f"{name}({i})", template["name"], "Error", message=str(e))
            finally:
                self.slots.cancel(key + (i,))

        if template.get("container") is not None:
            for i in range(len(items)):
                self.slots.reserve(key + (i,))
        for thread in [_spawn(lambda i=i: run_child(i)) for i in range(len(items))]:
            thread.join()
        phases = tuple(c.phase for c in children)
        failed = [p for p in phases if p in FAILED]
        phase = failed[0] if failed else ("Omitted" if "Omitted" in phases else "Succeeded")
        succeeded = [c for c in children if c.phase == "Succeeded"]
        outputs = {
            p["name"]: _aggregate([c.outputs[p["name"]] for c in succeeded if p["name"] in c.outputs])
            for p in (template.get("outputs") or {}).get("parameters") or []
        }
        self.record(
            NodeResult(
                name,
                template["name"],
                phase,
                outputs=outputs,
                message=f"{len(succeeded)}/{len(items)} children succeeded",
            )
        )
        return TaskOutcome(phase, children=phases), outputs

    # -- container

    def container(
        self, template: dict, name: str, inputs: dict[str, str], key: tuple[int, ...], fail_fast: _FailFast
    ) -> NodeResult:
        node_name = name or self.workflow
        node_dir = self.workdir / node_name
        out_dir = node_dir / "outputs"
        node_dir.mkdir(parents=True, exist_ok=True)
        log_path = node_dir / "log.txt"
        log_path.write_text("")
        strategy = template.get("retryStrategy") or {}
        result = NodeResult(
            node_name, template["name"], "Omitted", message="not started: failFast after a failure"
        )
        for attempt in range(int(strategy.get("limit") or 0) + 1):
            scope = {
                **self.globals,
                **{f"inputs.parameters.{k}": v for k, v in inputs.items()},
                "pod.name": _pod_name(self.workflow, node_name),
                "retries": str(attempt),
            }
            try:
                container = _render(template["container"], scope)
                outputs = _render((template.get("outputs") or {}).get("parameters") or [], scope)
                delay = _backoff(strategy, attempt)
            except _NodeError as e:
                self.emit(node_name, f"Error: {e}")
                fail_fast.fail()
                return self.record(
                    NodeResult(node_name, template["name"], "Error", attempts=attempt, message=str(e))
                )
            argv = [
                _outputs_path(str(a), out_dir)
                for a in [*container["command"], *(container.get("args") or [])]
            ]
            if argv[0] in ("python", "python3"):
                argv[0] = sys.executable
            shutil.rmtree(out_dir, ignore_errors=True)
            out_dir.mkdir(parents=True)
            with self.slots.hold(key):
                if fail_fast.stopped():  # no new process, not even a retry
                    return self.record(result)
                phase, exit_code, message = self._process(
                    node_name, argv, self._env(container, out_dir), log_path, attempt
                )
                values: dict[str, str] = {}
                if phase == "Succeeded":
                    try:
                        values = _read_outputs(outputs, out_dir)
                    except _NodeError as e:
                        phase, message = "Error", str(e)
                result = NodeResult(
                    node_name, template["name"], phase, exit_code, attempt + 1, message, values
                )
                retry = phase != "Succeeded" and _should_retry(strategy, attempt, phase, exit_code)
                if phase != "Succeeded" and not retry:
                    fail_fast.fail()  # before the slot is released, so no waiting node starts after it
            if not retry:
                break
            self.emit(
                node_name, f"{phase} ({message}); retry {attempt + 1}/{strategy['limit']} in {delay:g}s"
            )
            time.sleep(delay)
        self.emit(node_name, f"{result.phase}" + (f" ({result.message})" if result.message else ""))
        return self.record(result)

    def _env(self, container: dict, out_dir: Path) -> dict[str, str]:
        """Host env + the container's values. A secretKeyRef / configMapKeyRef variable keeps the host's
        same-named variable (locally, secrets come from your environment) and is left unset otherwise."""
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")  # stream the child's lines as they come
        for var in container.get("env") or []:
            if var.get("valueFrom") is None:
                env[var["name"]] = _outputs_path(_text(var.get("value", "")), out_dir)
        return env

    def _process(
        self, node: str, argv: list[str], env: dict[str, str], log_path: Path, attempt: int
    ) -> tuple[str, int | None, str]:
        """Run one attempt, streaming its output; returns (phase, exit code, message)."""
        self.emit(node, f"started (attempt {attempt + 1}, command in {log_path})")
        with log_path.open("a") as log_file:
            log_file.write(f"--- attempt {attempt + 1}: {shlex.join(argv)}\n")
            try:
                if self.zygote is not None and argv[0] == sys.executable and argv[1:2] == ["-m"]:
                    process = self.zygote.spawn(argv[2], argv[3:], env, self.project_root)
                else:
                    process = subprocess.Popen(
                        argv,
                        cwd=self.project_root,
                        env=env,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                        errors="replace",
                    )
            except OSError as e:
                log_file.write(f"cannot start: {e}\n")
                return "Error", None, f"cannot start {argv[0]!r}: {e.strerror or e}"
            with self._lock:
                self.processes.add(process)
            try:
                for line in process.stdout:  # type: ignore[union-attr]
                    log_file.write(line)
                    log_file.flush()
                    self.emit(node, line.rstrip("\n"))
                code = process.wait()
            finally:
                with self._lock:
                    self.processes.discard(process)
        if code == 0:
            return "Succeeded", 0, ""
        return "Failed", code, f"exit code {code}"

    def terminate(self) -> None:
        with self._lock:
            for process in self.processes:
                process.terminate()


def _template_name(task: dict) -> str:
    return task.get("template") or (task.get("templateRef") or {}).get("template", "?")


def _pod_name(workflow: str, node: str) -> str:
    return f"{workflow}-" + re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")


def _outputs_path(text: str, out_dir: Path) -> str:
    return _OUTPUTS_PATH.sub(lambda _: str(out_dir), text)


def _items(task: dict, scope: dict[str, str]) -> list:
    if task.get("withItems") is not None:
        return _render(task["withItems"], scope)
    text = _render(str(task["withParam"]), scope)
    try:
        items = json.loads(text)
    except ValueError:
        items = None
    if not isinstance(items, list):
        raise _NodeError(f"withParam value could not be parsed as a JSON list: {text[:200]!r}")
    return items


def _read_outputs(outputs: list[dict], out_dir: Path) -> dict[str, str]:
    values = {}
    for param in outputs:
        value_from = param.get("valueFrom") or {}
        path = Path(_outputs_path(str(value_from["path"]), out_dir))
        if path.is_file():
            text = path.read_text()
            values[param["name"]] = text.removesuffix("\n")  # as Argo: one newline trimmed
        elif value_from.get("default") is not None or param.get("default") is not None:
            default = value_from.get("default") if value_from.get("default") is not None else param["default"]
            values[param["name"]] = _text(default)
        else:
            raise _NodeError(f"output parameter '{param['name']}': {path} was not written")
    return values


def _dag_phase(
    order: list[str], upstream: dict[str, list[str]], outcomes: dict[str, TaskOutcome], stopped: bool
) -> str:
    """Argo's assessDAGPhase: the DAG fails when a leaf task's branch failed; an omitted task inherits the
    phase of its upstream branch (a failure wins). A DAG stopped before all its tasks ran never succeeds."""
    failures = [o.phase for o in outcomes.values() if o.phase in FAILED]
    if stopped:
        return failures[0] if failures else "Omitted"
    branch: dict[str, str] = {}

    def branch_phase(task: str) -> str:
        if task not in branch:
            phase = outcomes[task].phase
            if phase == "Omitted":
                parents = [branch_phase(d) for d in upstream[task]]
                phase = next((p for p in parents if p in FAILED), "Succeeded")
            branch[task] = phase
        return branch[task]

    leaves = [t for t in order if not any(t in upstream[other] for other in order)]
    failed = [branch_phase(t) for t in leaves if branch_phase(t) in FAILED]
    return failed[0] if failed else "Succeeded"


# --- entry point -----------------------------------------------------------------------------------------


def _workflow_parameters(spec: dict, params: dict[str, str], label: str) -> dict[str, str]:
    declared = {p["name"]: p for p in (spec.get("arguments") or {}).get("parameters") or []}
    for name in params:
        if name not in declared:
            raise BadInput(
                f"unknown parameter '{name}' for {label} (declared: {', '.join(declared) or 'none'})"
            )
    values = {}
    for name, param in declared.items():
        value = params.get(name, param.get("value"))
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


def run_workflow(
    path: str | Path,
    *,
    params: dict[str, str],
    templates_dir: str | Path | None,
    workdir: Path,
    project_root: Path,
    parallelism: int = 1,
    log: Callable[[str], None] = print,
    fork_server: bool = False,
) -> RunResult:
    """Validate, check the local feature subset, then run the file's Workflow (or a CronWorkflow's
    workflowSpec, once). Raises BadInput before anything runs; a failed step is a result, not an error.

    With `fork_server`, `python -m MODULE` steps fork from a warm interpreter (see zygote.py) instead of
    paying the torch/transformers import in every process."""
    if parallelism < 1:
        raise BadInput(f"parallelism must be at least 1, got {parallelism}")
    path = Path(path)
    validate_or_raise(path, templates_dir)
    runnable = [
        Source(path, d) for d in load_documents(path) if d.get("kind") in ("Workflow", "CronWorkflow")
    ]
    if len(runnable) != 1:
        raise BadInput(f"{path}: expected exactly one Workflow or CronWorkflow to run, found {len(runnable)}")
    source = runnable[0]
    library = load_library(templates_dir)
    spec, templates = effective_spec(source, library)
    check_supported(source, spec, templates, library)
    values = _workflow_parameters(spec, params, source.label)
    name = _workflow_name(source)
    globals_ = {
        "workflow.name": name,
        "workflow.uid": str(uuid.uuid4()),
        "workflow.namespace": "local",
        **{f"workflow.parameters.{k}": v for k, v in values.items()},
    }
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    run = _Run(name, globals_, library, workdir, Path(project_root), parallelism, log)
    run.emit(name, f"running {path} locally (parallelism {parallelism}, node directories under {workdir})")
    if fork_server:
        from bertology.argo.zygote import Zygote

        run.zygote = Zygote(Path(project_root))
    try:
        root = run.template(templates.template(spec["entrypoint"]), templates, "", values, (), _FailFast())
    except BaseException:
        run.terminate()
        raise
    finally:
        if run.zygote is not None:
            run.zygote.close()
    exit_code = 0
    if root.phase != "Succeeded":
        exit_code = EXIT_BAD_INPUT if any(n.exit_code == EXIT_BAD_INPUT for n in run.nodes.values()) else 1
    result = RunResult(name, root.phase, exit_code, dict(run.nodes))
    (workdir / "status.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    run.emit(name, f"{root.phase} (exit code {exit_code})")
    return result
