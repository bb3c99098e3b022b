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
- semaphores.py    a semaphore shared by every run on this machine, in Argo's queue order (spec.priority)
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
import re
import string
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bertology.argo import deadlines, exit_handler
from bertology.argo import semaphores as shared_semaphores
from bertology.argo.concurrency import Limits, gpu_semaphores, semaphore_names
from bertology.argo.containers import LOCAL_GRACE_S, MAX_LOCAL_BACKOFF_S, pod_name
from bertology.argo.dag import FAILED
from bertology.argo.documents import (
    VALUE_WINS_FROM,
    Source,
    effective_spec,
    join_parameter,
    load_documents,
    load_library,
)
from bertology.argo.execute import Run
from bertology.argo.nodes import NodeResult, PodCall, RunEvent, RunResult
from bertology.argo.reaper import Reaper
from bertology.argo.schema import ARGO_NEWEST, ARGO_OLDEST
from bertology.argo.support import ALLOWED, WHY, check_supported, reachable
from bertology.argo.validate import validate_or_raise
from bertology.argo.values import any_string
from bertology.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT, BadInput

# what callers import from here (the entry point), wherever it is defined
__all__ = [
    "ALLOWED", "LOCAL_GRACE_S", "MAX_LOCAL_BACKOFF_S", "WHY", "NodeResult", "PodCall", "Prepared", "RunEvent",
    "RunResult", "check_supported", "configmap_value", "local_configmaps", "parameter_configmaps", "parse_argo_version",
    "prepare", "reachable", "run_workflow",
]


def _configmap_documents(templates_dir: Path | None) -> list[dict]:
    if templates_dir is None or not Path(templates_dir).is_dir():
        return []
    return [doc for path in sorted(Path(templates_dir).glob("*.y*ml")) for doc in load_documents(path)
            if doc.get("kind") == "ConfigMap"]


def local_configmaps(templates_dir: Path | None) -> dict[str, dict[str, str]]:
    """The ConfigMaps a cluster would have, from the ConfigMap documents beside the WorkflowTemplates
    (workflows/templates/platform.yaml): name -> data."""
    return {str((doc.get("metadata") or {}).get("name")): {k: str(v) for k, v in (doc.get("data") or {}).items()}
            for doc in _configmap_documents(templates_dir)}


# workflow/common/common.go LabelKeyConfigMapType, LabelValueTypeConfigMapParameter
PARAMETER_LABEL = ("workflows.argoproj.io/configmap-type", "Parameter")


def parameter_configmaps(templates_dir: Path | None) -> dict[str, dict[str, str] | None]:
    """The ConfigMaps a workflow parameter's valueFrom.configMapKeyRef may read: name -> data, or None for one
    without the label Argo requires of a parameter ConfigMap."""
    out: dict[str, dict[str, str] | None] = {}
    for doc in _configmap_documents(templates_dir):
        meta = doc.get("metadata") or {}
        labelled = (meta.get("labels") or {}).get(PARAMETER_LABEL[0]) == PARAMETER_LABEL[1]
        out[str(meta.get("name"))] = {k: str(v) for k, v in (doc.get("data") or {}).items()} if labelled else None
    return out


def configmap_value(configmaps: dict[str, dict[str, str] | None], name: str, key: str) -> tuple[str | None, str]:
    """workflow/common/configmap.go `GetConfigMapValue` (v3.6.19, v3.7.18, v4.1.2): the value, or None and
    Argo's error: the ConfigMap missing, without the Parameter label, or without the key."""
    if name not in configmaps:
        return None, (f"ConfigMap '{name}' does not exist. Please make sure it has the label "
                      f"{PARAMETER_LABEL[0]}: {PARAMETER_LABEL[1]} to be detectable by the controller")
    data = configmaps[name]
    if data is None:
        return None, (f"ConfigMap '{name}' needs to have the label {PARAMETER_LABEL[0]}: {PARAMETER_LABEL[1]} "
                      f"to load parameters")
    if key not in data:
        return None, f"ConfigMap '{name}' does not have the key '{key}'"
    return data[key], ""


ARGO_VERSION = ARGO_NEWEST.removeprefix("v")  # whose parameter merge the runner follows unless told otherwise
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_argo_version(text: str | None) -> tuple[int, int, int]:
    """`3.6.19`, `v3.7`, `4.1.2`: a supported Argo Workflows version (3.6.19 to 4.1.x); a bare minor
    version means its newest release. BadInput names anything else."""
    allowed = f"a version from {ARGO_OLDEST.removeprefix('v')} to {ARGO_NEWEST.removeprefix('v').rsplit('.', 1)[0]}.x"
    match = _VERSION.fullmatch((text if text is not None else ARGO_VERSION).strip())
    if not match:
        raise BadInput(f"Argo version {text!r} is not a version such as 3.6.19 or 4.1 (allowed: {allowed})")
    major, minor = int(match.group(1)), int(match.group(2))
    patch = int(match.group(3)) if match.group(3) is not None else 1 << 16
    oldest = tuple(int(n) for n in ARGO_OLDEST.removeprefix("v").split("."))
    newest = tuple(int(n) for n in ARGO_NEWEST.removeprefix("v").split(".")[:2])
    if (major, minor, patch) < oldest or (major, minor) > newest:
        raise BadInput(f"Argo version {text!r} is not supported (allowed: {allowed})")
    return major, minor, patch


def _workflow_parameters(spec: dict, params: dict[str, str], label: str,
                         configmaps: dict[str, dict[str, str] | None], source: Source | None = None,
                         base: Source | None = None, version: tuple[int, int, int] | None = None) -> dict[str, str]:
    """The workflow's parameter values as operator.go `setGlobalParameters` sets them, after the Workflow's
    parameters (`source`, a -p value replacing its own: util.go `overrideParameters`) are joined with its
    WorkflowTemplate's (`base`) by name as `version` joins them (documents.join_parameter). From v3.7.0:
    `value`, else `valueFrom.configMapKeyRef` (else its `default`); before, a `valueFrom.configMapKeyRef`
    comes first (`if param.ValueFrom != nil && param.ValueFrom.ConfigMapKeyRef != nil {` ... `} else if
    param.Value != nil {`), so a WorkflowTemplate's ConfigMap wins over -p. The ConfigMap is read as
    `GetConfigMapValue` reads it (`configmaps`: parameter_configmaps): when it is missing, lacks the label or
    the key, `valueFrom.default` is taken if there is one, else the Workflow fails with Argo's "failed to set
    global parameter …" (refused here before anything runs). An unknown -p is refused: Argo would add it and
    ignore it silently (workflow/util/util.go overrideParameters), hiding a typo."""
    version = version or parse_argo_version(None)
    declared = {p["name"]: p for p in (spec.get("arguments") or {}).get("parameters") or []}
    for name in params:
        if name not in declared:
            raise BadInput(f"unknown parameter '{name}' for {label} (declared: {', '.join(declared) or 'none'}; "
                           f"Argo would accept it and ignore it)")
    own = {p["name"]: p for p in ((source.spec if source else spec).get("arguments") or {}).get("parameters") or []}
    inherited = {p["name"]: p for p in ((base.spec if base and base is not source else {}).get("arguments") or {})
                 .get("parameters") or []}
    values = {}
    for name, param in declared.items():
        workflow = {"name": name, "value": params[name]} if name in params else own.get(name)
        joined = join_parameter(inherited.get(name), workflow, version) or param
        ref = (joined.get("valueFrom") or {}).get("configMapKeyRef")
        value = joined.get("value") if version >= VALUE_WINS_FROM or not ref else None
        if value is None and ref:
            value, error = configmap_value(configmaps, str(ref.get("name")), str(ref.get("key")))
            if value is None:
                value = joined["valueFrom"].get("default")
            if value is None:
                cure = (f"pass -p {name}=VALUE" if version >= VALUE_WINS_FROM else
                        f"on Argo {'.'.join(map(str, version[:2]))} a -p value does not replace it")
                raise BadInput(f"failed to set global parameter {name} from configmap with name {ref.get('name')} "
                               f"and key {ref.get('key')}: {error} (valueFrom has no default; {cure})")
        if value is None:
            raise BadInput(f"workflow parameter '{name}' has no value; pass -p {name}=VALUE")
        value = any_string(value)
        if param.get("enum") and value not in [any_string(v) for v in param["enum"]]:
            raise BadInput(
                f"parameter {name}={value!r} is not allowed (allowed: {', '.join(map(any_string, param['enum']))})"
            )
        values[name] = value
    return values


def _workflow_annotations(source: Source) -> dict[str, str]:
    """The Workflow's annotations: its own, or for a CronWorkflow's Workflow those of its workflowMetadata
    and the scheduled time (workflow/common/convert.go `ConvertCronWorkflowToWorkflowWithProperties`,
    `toWorkflow`)."""
    if source.kind == "CronWorkflow":
        meta = (source.doc.get("spec") or {}).get("workflowMetadata") or {}
        scheduled = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {"workflows.argoproj.io/scheduled-time": scheduled, **(meta.get("annotations") or {})}
    return dict((source.doc.get("metadata") or {}).get("annotations") or {})


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
    priority: int = 0  # the Workflow's own spec.priority: its place in a semaphore's queue (semaphores.py)
    gpu_semaphores: set[str] = field(default_factory=set)  # those that guard a GPU (concurrency.gpu_semaphores)


def _priority(source: Source, base: Source, given: int | None) -> int:
    """The Workflow's spec.priority as Argo's semaphore queue reads it: the Workflow's own (a CronWorkflow's
    workflowSpec), which `given` (`bertology run --priority`, as `argo submit --priority`) replaces. A
    WorkflowTemplate's is refused: the queue never reads it (sync_manager.go reads `wf.Spec.Priority` of
    `woc.wf`, not of the spec joined with the WorkflowTemplate), so it would be silently ignored."""
    if base is not source and base.spec.get("priority") is not None:
        raise BadInput(f"spec.priority of {base.label} ({base.path}) is not read by Argo: a semaphore's queue "
                       f"takes the priority of the Workflow itself (workflow/sync/sync_manager.go: "
                       f"wf.Spec.Priority); set it in {source.label}'s {source.spec_path} or pass --priority")
    if given is not None:
        return shared_semaphores.check_priority(given, "--priority")
    own = source.spec.get("priority")
    return 0 if own is None else shared_semaphores.check_priority(own, f"{source.label}: {source.spec_path}.priority")


def prepare(path: str | Path, *, params: dict[str, str], templates_dir: str | Path | None,
            parallelism: int | None = None, semaphores: dict[str, int] | None = None,
            argo_version: str | None = None, priority: int | None = None) -> Prepared:
    """Validate, check the local feature subset and bind the parameters as Argo `argo_version` (default: the
    newest supported) binds them. Raises BadInput."""
    path = Path(path)
    version = parse_argo_version(argo_version)
    validate_or_raise(path, templates_dir)
    runnable = [Source(path, d) for d in load_documents(path) if d.get("kind") in ("Workflow", "CronWorkflow")]
    if len(runnable) != 1:
        raise BadInput(f"{path}: expected exactly one Workflow or CronWorkflow to run, found {len(runnable)}")
    source = runnable[0]
    library = load_library(templates_dir)
    spec, templates = effective_spec(source, library)
    check_supported(source, spec, templates, library)
    configmaps = local_configmaps(Path(templates_dir) if templates_dir else None)
    values = _workflow_parameters(spec, params, source.label,
                                  parameter_configmaps(Path(templates_dir) if templates_dir else None),
                                  source, templates, version)
    if parallelism is not None and parallelism < 1:
        raise BadInput(f"parallelism must be at least 1, got {parallelism}")
    caps = [c for c in (parallelism, spec.get("parallelism")) if c]
    limits = {}
    used = [template for _, template in reachable(spec, templates, library)]
    for template in used:
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
                # operator.go setGlobalParameters: json.Marshal of the map (keys sorted; `null` when none)
                "workflow.annotations.json": exit_handler.go_marshal(
                    dict(sorted(_workflow_annotations(source).items())) or None),
                **{f"workflow.parameters.{k}": v for k, v in values.items()}}
    return Prepared(source, spec, templates, library, values, name, globals_, min(caps) if caps else 1 << 30, limits,
                    _priority(source, templates, priority), gpu_semaphores(used))


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
    argo_version: str | None = None,
    priority: int | None = None,
    semaphore_dir: str | Path | None = None,
    label: Callable[[str], str | None] | None = None,
    gpu: bool | None = None,
) -> RunResult:
    """Validate, check the local feature subset, then run the file's Workflow (or a CronWorkflow's
    workflowSpec, once). Raises BadInput before anything runs; a failed step is a result, not an error.

    At most min(`parallelism`, the YAML's spec.parallelism) containers run at once. With `fork_server`,
    `python -m MODULE` steps fork from a warm interpreter (see zygote.py) instead of paying the
    torch/transformers import in every process. With `dry_run`, only the steps whose output parameters the
    DAG reads (plan) run; every other container is recorded in `RunResult.pods` with the argv Argo would
    give it, and counted as succeeded. `events` receives a RunEvent as containers start and nodes finish.

    Semaphores are this machine's: every run shares their slots through `semaphore_dir` (default
    $BERTOLOGY_SEMAPHORE_DIR, else a directory of this user's under the temporary directory), queued by the
    Workflow's spec.priority (`priority` replaces it) and then its age (semaphores.py); a dry run keeps
    them to itself, and a run whose GPU steps would run on no GPU keeps its GPU semaphores to itself (`gpu`:
    whether they would run on one, default semaphores.gpu_present; never with an `engine`, which passes no
    GPU on). `label` names a node by what it does, for the runs that wait behind it.

    An exception in the calling thread (KeyboardInterrupt, or what a SIGTERM handler raises) stops every
    running step, then the fork server, and propagates."""
    created = time.time()  # the Workflow's creationTimestamp: its age in a semaphore's queue
    prepared = prepare(path, params=params, templates_dir=templates_dir, parallelism=parallelism,
                       semaphores=semaphores, argo_version=argo_version, priority=priority)
    machine = None
    workdir = Path(workdir)
    gpu_here = True
    if prepared.gpu_semaphores and not dry_run:  # read only where it matters: a bad $BERTOLOGY_GPU is refused
        gpu_here = engine is None and (shared_semaphores.gpu_present() if gpu is None else gpu)
    if set(prepared.semaphores) - (set() if gpu_here else prepared.gpu_semaphores) and not dry_run:
        owner = shared_semaphores.Owner.this_process(
            prepared.globals["workflow.uid"], prepared.name, prepared.priority, created,
            checkout=str(Path(project_root).resolve()), store=prepared.values.get("store", ""),
            workdir=str(workdir))
        machine = shared_semaphores.Queue(shared_semaphores.open_directory(semaphore_dir), owner)
    workdir.mkdir(parents=True, exist_ok=True)
    limits = Limits(prepared.parallelism, prepared.semaphores, machine, prepared.gpu_semaphores, gpu_here)
    run = Run(prepared.name, prepared.globals, prepared.library, workdir, Path(project_root), limits, log,
              max_backoff_s)
    run.label = label
    run.dry_run = dry_run
    run.events = events
    run.deadlines = deadlines.Deadlines.of(prepared.spec, time.time())
    run.engine = engine
    sems = ", ".join(f"{k}={v}" for k, v in sorted(prepared.semaphores.items()))
    if limits.own:
        sems += (f" ({', '.join(sorted(limits.own))} this run's own: its steps run on no GPU here"
                 + (", each in its image)" if engine is not None else ")"))
    shared = f", shared with every run on this machine through {machine.directory}" if machine is not None else ""
    queue = f", priority {prepared.priority}" if machine is not None and prepared.priority else ""
    run.emit(prepared.name, f"running {path} locally (at most {prepared.parallelism} containers at once"
                            + (f"; semaphores {sems}{shared}{queue}" if sems else "")
                            + f"; node directories under {workdir})")
    if fork_server:
        from bertology.argo import zygote

        run.zygote = zygote.for_run(Path(project_root))  # BadInput for a shared server that is not there
    run.reaper = Reaper(engine.sweep() if engine is not None else None)  # containers too, by their run label
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
        if machine is not None:
            machine.leave()  # a stopped run's waiting nodes leave the queue
    phase, message = exit_handler.outcome(root.phase, root.message, exit_node)
    code = 0
    if phase != "Succeeded":
        # the steps' own codes: an exit handler that failed because they did (verdict) says nothing new
        failed = [n for n in run.nodes.values() if n.phase in FAILED and n.exit_code is not None]
        codes = {n.exit_code for n in failed if n.name != exit_handler.EXIT_NODE} or {n.exit_code for n in failed}
        code = EXIT_BAD_INPUT if EXIT_BAD_INPUT in codes else EXIT_TRANSIENT if codes == {EXIT_TRANSIENT} else 1
    result = RunResult(prepared.name, phase, message, code, dict(run.nodes), list(run.pods))
    (workdir / "status.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    run.emit(prepared.name, f"{phase} (exit code {code})" + (f": {message}" if message else ""))
    return result
