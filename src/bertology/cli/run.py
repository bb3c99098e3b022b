"""`bertology run`: a study workflow, or any Argo Workflow the runner supports, on this machine (each step a
process here, or each pod in its image), then the outcome: the workflow's status, each failed step's cause,
and for a study its main table and its report."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import sys
from pathlib import Path

from bertology import leftovers
from bertology.cli import preflight
from bertology.cli.dry_run import dry_run
from bertology.cli.locations import find_project_root, store_uri, with_hint
from bertology.cli.outcome import refused, step_errors
from bertology.cli.run_inputs import local_limits, parameter_file
from bertology.cli.stopping import Stopped, stop_run
from bertology.errors import BadInput
from bertology.store import open_store


def cmd_run(args: argparse.Namespace) -> int:
    """Every check that needs no step first, each one line, before anything is made (a run folder, a store
    directory, a step): the flags, the file (a Workflow or CronWorkflow), the -p names it declares, the store
    (for a workflow that declares a `store` parameter, as a study does: `bertology run` passes it the
    store; a plain Argo workflow gets none), and a study's parameters as plan will check them first
    (preflight). Then the run; a run that only refused its input leaves no folder either."""
    from bertology.argo.runner import run_workflow
    from bertology.console import NORMAL, QUIET, VERBOSE, Console
    from bertology.study import parse_pairs

    workflow = Path(args.workflow)
    if not workflow.is_file():
        raise BadInput(f"workflow file '{workflow}' not found{_study_hint(args.workflow)}")
    params = {**parameter_file(args.parameter_file), **parse_pairs(args.p, "-p")}  # -p wins, as in Argo
    if args.tracker is not None:
        params["tracker"] = args.tracker
    if params.get("tracker", "").strip():  # the steps run here, in this environment: is its library here?
        from bertology.tracking import check

        check(params["tracker"].strip())
    if args.argo_version is not None:
        from bertology.argo.runner import parse_argo_version

        parse_argo_version(args.argo_version)  # one line naming a bad version before anything runs
    templates = Path(args.templates) if args.templates else workflow.resolve().parent / "templates"
    if args.templates and not templates.is_dir():
        raise BadInput(f"--templates '{args.templates}' is not a directory")
    parallelism, semaphores = local_limits(args)
    if args.priority is not None:  # one line before anything runs
        from bertology.argo.semaphores import check_priority

        args.priority = check_priority(args.priority, "--priority")
    shape = preflight.read(workflow, templates)  # a Workflow to run, before any folder or store is made
    preflight.check_parameters(shape, params)
    takes_store = shape.declared is None or "store" in shape.declared  # None: as the runner will find it
    store = None
    if takes_store or args.engine != "local":  # the engines' pods reach the store the steps name
        if "store" in params and not params["store"].strip():
            raise BadInput(f"-p store='{params['store']}' is empty (expected a store URI)")
        store = open_store(params.get("store") or store_uri(args.store))
        store.check_writable()
        if takes_store:
            params["store"] = store.uri
    elif args.store is not None:
        raise BadInput(f"--store '{args.store}': {shape.label} declares no 'store' parameter, so it uses no "
                       f"store (a bertology study does; leave --store out)")
    try:
        project_root = find_project_root(workflow, Path(args.templates) if args.templates else None)
    except BadInput:
        if shape.declared is None or preflight.runs_jobs(shape):
            raise
        project_root = Path.cwd()  # a plain Argo workflow, none of whose steps is ours: it runs here
    if args.engine == "local":  # a study's typo in about a second; the engines' steps see other paths
        preflight.check_study(shape, params, project_root)
    if args.dry_run:
        return dry_run(workflow, params, templates, args, semaphores, project_root)
    engine = None
    if args.engine != "local":  # every pod in its image (bertology.argo.engines); checked before anything runs
        from bertology.argo.engines import for_workflow

        engine = for_workflow(args.engine, workflow, params, templates, project_root, store.uri)
    leftovers.sweep()  # what killed runs left in $TMPDIR; the newest work directories are kept
    workdir = leftovers.make("run", workflow.stem)
    where = f"store {store.uri}, " if takes_store else ""
    print(f"bertology run {workflow} ({where}step logs in {workdir})", flush=True)
    study = params.get("study") or ((shape.declared or {}).get("study") or {}).get("value")
    labels = CellLabels(store, str(study)) if takes_store and study else None
    console = Console(VERBOSE if args.verbose else QUIET if args.quiet else NORMAL, label=labels)
    previous = {sig: signal.signal(sig, stop_run) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = run_workflow(workflow, params=params, templates_dir=templates, workdir=workdir,
                              project_root=project_root, parallelism=parallelism,
                              semaphores=semaphores, fork_server=not args.no_fork_server and engine is None,
                              max_backoff_s=args.max_backoff, log=console.log, events=console.event,
                              engine=engine, argo_version=args.argo_version, priority=args.priority, label=labels)
    except BadInput as e:  # refused before any step ran: no folder stays behind
        shutil.rmtree(workdir, ignore_errors=True)
        raise with_hint(e, templates) from None
    except Stopped as e:  # every step and the fork server are stopped by now (run_workflow's cleanup)
        console.close()
        name = signal.Signals(e.signum).name
        print(f"workflow {workflow.name}: stopped by {name}; every step stopped (step logs in {workdir})",
              file=sys.stderr, flush=True)
        return 128 + e.signum
    finally:
        console.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    status = "Succeeded" if result.exit_code == 0 else "Failed"
    # status.message, as `argo list` shows it (a DAG's failure has none; an exit handler's has its line)
    print(f"workflow {workflow.name}: {status}" + (f": {result.message}" if result.message else ""), flush=True)
    reuse = _reuse_line(result, store) if takes_store else None
    if reuse is not None:
        print(reuse, flush=True)
    errors = step_errors(result, workdir, labels)
    if refused(result):  # the input was refused and nothing else ran: the error line is the whole story
        shutil.rmtree(workdir, ignore_errors=True)
    for line in errors:
        print(line, file=sys.stderr)
    report = _report_location(result, store) if takes_store else None
    if result.exit_code == 0 and takes_store:
        print(f"results (Parquet, hive-partitioned by study): {store.url('results/')}")
        if report is None:
            print(f"study tables and reports: {store.url('studies/')}")
    if report is not None:
        from bertology.results.summary import study_result

        name, study_id, location = report
        for line in study_result(store, name, study_id):  # the main table and the report's orderings
            print(line)
        print(f"report: {location}", flush=True)
    if result.exit_code != 0 and not refused(result):  # the last line says so: a partial report is above it
        ref = result.nodes["plan"].outputs.get("study", "") if "plan" in result.nodes else ""
        what = f"study {ref.partition(':')[0] or study}" if ref or study else f"workflow {workflow.name}"
        why = result.message or (errors[0] if errors else f"exit code {result.exit_code}")
        print(f"{what} failed: {why} (step logs in {workdir})", file=sys.stderr, flush=True)
    return result.exit_code


def _study_hint(text: str) -> str:
    """`bertology run reversed-layers`: a study's name where its file was meant."""
    from bertology.workflow_header import default_workflows

    name = Path(text).name.removesuffix(".yaml").removesuffix(".yml")
    for directory in (Path("workflows"), default_workflows()):
        if (directory / f"{name}.yaml").is_file():
            return f" (did you mean {directory / (name + '.yaml')}? `bertology studies` lists the studies)"
    return " (`bertology studies` lists the studies: bertology run workflows/STUDY.yaml)"


def _reuse_line(result, store) -> str | None:
    """How many of the study's cells the store already held (the plan's `runs` list only the others)."""
    plan = result.nodes.get("plan")
    outputs = plan.outputs if plan else {}
    if "runs" not in outputs or "study" not in outputs:
        return None
    from bertology.steps.planned import load_plan

    try:
        ran = sum(len([i for i in pod.split(",") if i]) for pod in json.loads(outputs["runs"]))
        total = len(load_plan(store, outputs["study"]).doc.get("cells") or [])
    except (ValueError, TypeError, AttributeError, BadInput):
        return None
    return f"cells: {total} in the study, {total - ran} reused from the store, {ran} run"


_CELL_NODE = re.compile(r"cell\(\d+:([0-9a-f]{16}(?:,[0-9a-f]{16})*)\)(?:\.([\w-]+))?$")
_MADE_NODE = re.compile(r"(prepare-data|build-checkpoint)\(\d+:([0-9a-f]{16}(?:,[0-9a-f]{16})*)\)$")
_PLAN_TABLE = {"prepare-data": "datasets", "build-checkpoint": "checkpoints"}


class CellLabels:
    """Names a study's nodes by what they do: a cell (`cell(i:ID1,ID2,…)`) by what it runs, `variant · task ·
    seed N` (`· after TASK` for a sequential run, the model where the study has several), the first run's
    and `+N more` for a pod of several runs, `finetune of …` for its steps; a dataset it prepares
    (`preparing sst2`, the tokenizer's model where the study has several) and a checkpoint it builds
    (`building reversed`, the model where the study has several). From the study's plan in the store, found
    by the ids in the node's name; None for any other node, or without a plan."""

    def __init__(self, store, study: str):
        self.store, self.study = store, study
        self.plan = None
        self._labels: dict[str, str | None] = {}

    def __call__(self, node: str) -> str | None:
        if node not in self._labels:
            self._labels[node] = self._label(node)
        return self._labels[node]

    def _label(self, node: str) -> str | None:
        made = _MADE_NODE.match(node)
        match = made or _CELL_NODE.match(node)
        if match is None:
            return None
        table = _PLAN_TABLE[made.group(1)] if made else "cells"
        ids = match.group(2 if made else 1).split(",")
        if self.plan is None or not self._holds(self.plan, table, ids):
            self.plan = self._find(table, ids)
            if self.plan is None:
                return None
        try:
            if made:
                return _made_label(self.plan, table, ids[0])
            cells = self.plan.cells(ids)
        except (BadInput, KeyError, TypeError, ValueError):  # a label is a courtesy: never a reason to fail
            return None
        several_models = len({c["model"] for c in self.plan.doc["cells"]}) > 1
        label = _cell_label(cells[0], several_models) + (f" +{len(cells) - 1} more" if len(cells) > 1 else "")
        return f"{match.group(2)} of {label}" if match.group(2) else label

    @staticmethod
    def _holds(plan, table: str, ids: list[str]) -> bool:
        if table != "cells":
            return all(i in (plan.doc.get(table) or {}) for i in ids)
        try:
            plan.cells(ids)
        except BadInput:
            return False
        return True

    def _find(self, table: str, ids: list[str]):
        """The study's plan holding these ids (runs, datasets or checkpoints): its newest plan.json that does."""
        from bertology.steps.planned import Plan

        try:
            keys = [k for k in self.store.list(f"studies/{self.study}/") if k.endswith("/plan.json")]
            for key in sorted(keys, key=self.store.modified, reverse=True):
                _, _, study_id, _ = key.rsplit("/", 3)
                plan = Plan(self.study, study_id, self.store.read_json(key))
                if self._holds(plan, table, ids):
                    return plan
        except (OSError, ValueError, KeyError, BadInput):  # a label is a courtesy: never a reason to fail
            return None
        return None


def _made_label(plan, table: str, spec_id: str) -> str:
    """`preparing TASK` for a dataset (`for MODEL`, the tokenizer's, where the plan has several), `building
    VARIANT` for a checkpoint (the variant of a cell that starts from it; `MODEL VARIANT` where the plan has
    several models)."""
    from bertology.spec import CheckpointSpec

    if table == "datasets":
        spec = plan.doc["datasets"][spec_id]
        several = len({d.get("tokenizer") for d in plan.doc["datasets"].values()}) > 1
        return f"preparing {spec['task']}" + (f" for {spec.get('tokenizer')}" if several else "")
    spec = plan.doc["checkpoints"][spec_id]
    several = len({c.get("model") for c in plan.doc["checkpoints"].values()}) > 1
    variants = [c["variant"] for c in plan.doc.get("cells") or []
                if CheckpointSpec.from_dict(c["run"]["checkpoint"]).id == spec_id]
    what = variants[0] if variants else "checkpoint"
    return f"building {spec['model'] + ' ' if several or not variants else ''}{what}"


def _cell_label(cell, several_models: bool) -> str:
    after = cell.run.after
    parts = [cell.variant, *([cell.model] if several_models else []), cell.run.dataset.task,
             f"seed {cell.run.seed}", *([f"after {after.dataset.task}"] if after is not None else [])]
    return " · ".join(str(p) for p in parts)


def _report_location(result, store) -> tuple[str, str, str] | None:
    """The study (the plan's `study` output is NAME:ID) and where its aggregate step wrote report.html (a path
    for a local store), if it did."""
    plan = result.nodes.get("plan")
    ref = (plan.outputs if plan else {}).get("study", "")
    name, sep, study_id = ref.partition(":")
    key = f"studies/{name}/{study_id}/report.html"
    if not sep or not store.exists(key):
        return None
    url = store.url(key)
    return name, study_id, url.removeprefix("file://") if url.startswith("file://") else url
