"""A container node run on this machine: its pods, one attempt after another, each a process.

`Containers` holds the run's state (its nodes and their graph, the running processes, the log) and runs
container templates; execute.py's `Run` walks the DAGs on top of it. Follows, in argoproj/argo-workflows:
- workflow/controller/operator.go `executeTemplate`: the node's semaphores are taken before its first pod
  and held until it is fulfilled (concurrency.py), and `processNodeRetries`: a failed attempt is retried
  as its retryStrategy decides, after Argo's backoff, shortened locally to `max_backoff_s` and logged
  (retries.py);
- workflowpod.go `createWorkflowPod`: each attempt is a pod whose container is substituted again
  (`{{pod.name}}`, `{{retries}}`); its pod's deadline, and the Workflow's, stop it as the kubelet and
  exec_control.go `applyExecutionControl` do: SIGTERM, SIGKILL after a grace period (deadlines.py);
- workflow/executor/executor.go `SaveParameters`: output parameters are the files the step wrote, one
  trailing newline trimmed, else `valueFrom.default`, else the node is an Error;
- operator.go `inferFailedReason`: a failed pod's message (termination.py).
Pod names are `<workflow>-<node>`, not Argo's hashed ones (workflow/util/pod_name.go `GeneratePodName`).

A pod is a host process in its own process group (`terminate` reaches its children, and it dies with the
runner, parent_death.py), a fork of a warm interpreter (zygote.py), or a container in its image
(engines.py, through the `engine` hook).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bertology.argo import dag as dags
from bertology.argo import deadlines, termination
from bertology.argo.concurrency import DeadlinePassed, Limits, semaphore_names
from bertology.argo.documents import Source
from bertology.argo.nodes import NodeResult, PodCall, RunEvent, readable_name
from bertology.argo.parent_death import die_with_parent
from bertology.argo.reaper import Reaper
from bertology.argo.retries import Attempt, RetryStrategy, exit_code
from bertology.argo.values import NodeError, any_string, substitute

MAX_LOCAL_BACKOFF_S = 2.0  # Argo waits minutes between attempts; locally the wait is shortened (and logged)
LOCAL_GRACE_S = 5.0  # a pod's terminationGracePeriodSeconds is 30 s; locally SIGKILL follows SIGTERM sooner
_OUTPUTS_PATH = re.compile(r"(?<![\w./-])/tmp/outputs(?![\w.-])")


class Containers:
    """The run's state, and its container nodes (the DAG walk is execute.py's Run)."""

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
        self.label: Callable[[str], str | None] | None = None  # names a node by what it does (cli/run.py)

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
        self.notify(RunEvent("finished", node.name, node.phase, message=node.message, exit_code=node.exit_code,
                             template=node.template))
        return node

    def node_dir(self, name: str) -> Path:
        return self.workdir / re.sub(r"[^\w.,:()=+-]", "_", name or self.workflow)


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
        told: list[str] = []

        def waiting(lock: str, holders: tuple) -> None:  # another run holds the slots (semaphores.py)
            told.append(lock)
            who = "; ".join(h.describe() for h in holders) or "runs ahead of it in the queue"
            self.emit(node_name, f"waiting for semaphore {lock} (held by {who})")
            what = f"the GPU ({lock})" if lock in self.limits.gpu else f"semaphore {lock}"
            self.notify(RunEvent("waiting", node_name, message=what, template=template["name"], holders=holders))

        names = semaphore_names(template)
        label = ""  # what it does, for the runs that wait behind it
        if any(map(self.limits.shared, names)):
            label = (self.label(node_name) if self.label is not None else None) or readable_name(node_name,
                                                                                                  template["name"])
        try:
            locks = self.limits.locks(key, names, workflow_deadline, node_name, waiting, label)
            queued_s = locks.__enter__()
        except DeadlinePassed as e:  # waited for a lock past the Workflow's deadline: no pod was made
            # the node keeps the lock it waited for (NodeStatus.synchronizationStatus.waiting) and its wait
            self.emit(node_name, f"Failed ({deadlines.WORKFLOW_MESSAGE}) after waiting {e.waited:.1f}s for "
                                 f"semaphore {e.what}")
            return self.record(NodeResult(node_name, template["name"], "Failed", message=deadlines.WORKFLOW_MESSAGE,
                                          waiting_for=e.what, queued_s=e.waited))
        if told:
            self.emit(node_name, f"acquired semaphore {', '.join(dict.fromkeys(told))} after {queued_s:.1f}s")
        try:
            result = self._attempts(template, node_name, node_dir, out_dir, log_path, inputs, key, strategy,
                                    attempts, max_backoff_s, workflow_deadline)
        except NodeError as e:
            self.emit(node_name, f"Error: {e}")
            return self.record(NodeResult(node_name, template["name"], "Error", attempts=len(attempts), message=str(e)))
        finally:
            locks.__exit__(None, None, None)
        if result.phase == "dry run":
            return self.record(dataclasses.replace(result, phase="Succeeded"))
        self.emit(node_name, f"{result.phase}" + (f" ({result.message})" if result.message else ""))
        result.tries, result.retried, result.queued_s = attempts, strategy is not None, queued_s
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
                "pod.name": pod_name(self.workflow, node_name),
                "retries": str(len(attempts)),
            }
            # a template that cannot be rendered raises NodeError: no pod (container() records the node)
            container = substitute(template["container"], scope)
            outputs = substitute((template.get("outputs") or {}).get("parameters") or [], scope)
            own_deadline = substitute(template.get("activeDeadlineSeconds"), scope)
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
                timeout = deadlines.timeout_seconds(template.get("timeout"))
                if timeout is not None:  # the time left to it replaces activeDeadlineSeconds (workflowpod.go)
                    own_seconds = timeout
                with self.limits.pods.hold(key, workflow_deadline):
                    started = time.time() + skipped_s
                    kill = self.deadlines.kill(own_seconds, time.time(), self.on_exit)
                    if kill is not None and kill[1] == deadlines.WORKFLOW_MESSAGE and kill[0] <= time.time():
                        raise DeadlinePassed("no pod is created past the Workflow's deadline")
                    launch = self.engine and self.engine.launcher(template, container, node_dir, out_dir,
                                                                  len(attempts))
                    phase, code, message = self._process(node_name, argv, self._env(container, out_dir), log_path,
                                                         len(attempts), kill, launch, template["name"])
                    if phase == "Succeeded":
                        try:
                            values = _read_outputs(outputs, out_dir)
                        except NodeError as e:
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
            elsewhere = (" on a node where no attempt failed, or Pending until there is one (retryStrategy.affinity."
                         "nodeAntiAffinity, Argo 3.7.1+; this machine is the only node here)") if strategy.other_node else ""
            self.emit(node_name, f"{phase} ({message}); retry {len(attempts)}/{strategy.limit}{elsewhere}: Argo backs "
                                 f"off {decision.wait_s:g}s, waiting {local:g}s locally")
            self.notify(RunEvent("retry", node_name, phase, count=len(attempts), message=message, exit_code=code,
                                 max_attempts=None if strategy.limit is None else strategy.limit + 1))
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
                value = _outputs_path(any_string(var.get("value", "")), out_dir)
                env[var["name"]] = value.replace(termination.TERMINATION_LOG, str(_termination_log(out_dir.parent)))
        return env

    def _process(self, node: str, argv: list[str], env: dict[str, str], log_path: Path, attempt: int,
                 kill: tuple[float, str] | None, launch: Callable | None = None,
                 template: str = "") -> tuple[str, int | None, str]:
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
                    announce = self.reaper.announcer() if self.reaper is not None else (lambda: None)

                    def before_exec() -> None:  # in the child: no lock taken (PLW1509)
                        die_with_parent()
                        announce()

                    process = subprocess.Popen(argv, cwd=self.project_root, env=env, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True, errors="replace",
                                               start_new_session=True, preexec_fn=before_exec)  # noqa: PLW1509 - takes no lock
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
            self.notify(RunEvent("started", node, template=template))
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


def pod_name(workflow: str, node: str) -> str:
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
            values[param["name"]] = any_string(value_from["default"])
        else:
            raise NodeError(f"output parameter '{param['name']}': {path} was not written")
    return values
