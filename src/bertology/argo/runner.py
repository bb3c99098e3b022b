"""Run an Argo Workflow YAML on this machine: `bertology run workflows/<study>.yaml`.

The YAML is executed itself, not translated: `workflowTemplateRef` / `templateRef` resolve against the
templates directory, DAG tasks run in dependency order, and each container's `command + args` runs as a
host process with cwd = the project root (the image is not used; `python`/`python3` is this interpreter).
This module is the entry point: `prepare` (validate, check the supported subset, bind the parameters) and
`run_workflow`. The run itself, and each Argo behaviour the YAML depends on, lives in its own module,
which names the Argo source it follows:

- support.py       what is executed, accepted and ignored, or refused by name (check_supported)
- nodes.py         the results and events a caller reads (NodeResult, RunResult, PodCall, RunEvent)
- values.py        parameter values as strings, substitution errors as Error nodes (executeTemplate)
- execute.py       the DAG walk: inputs, tasks in dependency order, fan-outs (dag.go executeDAG)
- containers.py    a container node's pods, attempt after attempt, each a process (executeContainer)
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

Anything outside what is emulated is refused by name (support.py) before anything runs.
"""

from __future__ import annotations

import json
import random
import string
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bertology.argo import deadlines, exit_handler
from bertology.argo.concurrency import Limits, semaphore_names
from bertology.argo.containers import LOCAL_GRACE_S, MAX_LOCAL_BACKOFF_S, pod_name
from bertology.argo.dag import FAILED
from bertology.argo.documents import Source, effective_spec, load_documents, load_library
from bertology.argo.execute import Run
from bertology.argo.nodes import NodeResult, PodCall, RunEvent, RunResult
from bertology.argo.reaper import Reaper
from bertology.argo.support import ALLOWED, WHY, check_supported, reachable
from bertology.argo.validate import validate_or_raise
from bertology.argo.values import any_string
from bertology.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT, BadInput

# what callers import from here (the entry point), wherever it is defined
__all__ = [
    "ALLOWED", "LOCAL_GRACE_S", "MAX_LOCAL_BACKOFF_S", "WHY", "NodeResult", "PodCall", "Prepared", "RunEvent",
    "RunResult", "check_supported", "local_configmaps", "prepare", "reachable", "run_workflow",
]


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
        value = any_string(value)
        if param.get("enum") and value not in [any_string(v) for v in param["enum"]]:
            raise BadInput(
                f"parameter {name}={value!r} is not allowed (allowed: {', '.join(map(any_string, param['enum']))})"
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
    run = Run(prepared.name, prepared.globals, prepared.library, workdir, Path(project_root),
               Limits(prepared.parallelism, prepared.semaphores), log, max_backoff_s)
    run.dry_run = dry_run
    run.events = events
    run.deadlines = deadlines.Deadlines.of(prepared.spec, time.time())
    run.engine = engine
    sems = ", ".join(f"{k}={v}" for k, v in sorted(prepared.semaphores.items()))
    run.emit(prepared.name, f"running {path} locally (at most {prepared.parallelism} containers at once"
                            + (f"; semaphores {sems}" if sems else "") + f"; node directories under {workdir})")
    if fork_server:
        from bertology.argo import zygote

        run.zygote = zygote.for_run(Path(project_root))  # BadInput for a shared server that is not there
    run.reaper = Reaper()
    try:
        entry = prepared.templates.template(prepared.spec["entrypoint"])
        root = run.template(entry, prepared.templates, "", prepared.values, ())
        exit_node = None
        if prepared.spec.get("onExit") and not run.stopping:  # exit_handler.py
            run.on_exit = True
            run.globals["workflow.status"] = exit_handler.PHASE_OF_WORKFLOW[root.phase]
            run.globals["workflow.failures"] = exit_handler.failures(
                list(run.nodes.values()), lambda node: pod_name(prepared.name, node))
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
