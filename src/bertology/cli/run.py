"""`bertology run`: a study workflow on this machine (each step a process here, or each pod in its image),
then the outcome: the workflow's status, each failed step's cause, the study's main table and its report."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from bertology import leftovers
from bertology.cli.dry_run import dry_run
from bertology.cli.locations import find_project_root, store_uri, with_hint
from bertology.cli.run_inputs import local_limits, parameter_file
from bertology.cli.stopping import Stopped, stop_run
from bertology.errors import BadInput
from bertology.store import open_store


def _step_errors(result, workdir: Path) -> list[str]:
    """Each failed step's cause, so it ends the output: the last `error: …` line the step printed; for a
    step that failed otherwise (a transient error after every retry, a kill, a deadline) the runner's
    message, the attempts, and the step's last `transient error …` line (else its last line)."""
    lines = []
    for node in result.nodes.values():
        log = workdir / node.name / "log.txt"
        if node.phase not in ("Failed", "Error") or not log.exists():
            continue
        printed = [x for x in log.read_text(errors="replace").splitlines() if x.strip() and not x.startswith("--- ")]
        errors = [x for x in printed if x.startswith("error: ")]
        if errors:
            lines.append(f"{node.name}: {errors[-1]}")
            continue
        cause = ([x for x in printed if x.startswith("transient error")] or printed or [""])[-1]
        cause = cause.replace("transient error (will be retried)", "transient error")  # it was, in vain
        tries = f" ({node.attempts} attempts)" if node.attempts > 1 else ""
        last = node.tries[-1].message if node.tries and node.tries[-1].message != node.message else ""
        what = "; ".join(filter(None, [last, node.message])) or node.phase
        lines.append(f"{node.name}: " + ": ".join(filter(None, [what + tries, cause])))
    return lines


def cmd_run(args: argparse.Namespace) -> int:
    from bertology.argo.runner import run_workflow
    from bertology.console import NORMAL, QUIET, VERBOSE, Console
    from bertology.study import parse_pairs

    workflow = Path(args.workflow)
    if not workflow.is_file():
        raise BadInput(f"workflow file '{workflow}' not found")
    params = {**parameter_file(args.parameter_file), **parse_pairs(args.p, "-p")}  # -p wins, as in Argo
    if args.tracker is not None:
        params["tracker"] = args.tracker
    if params.get("tracker", "").strip():  # the steps run here, in this environment: is its library here?
        from bertology.tracking import check

        check(params["tracker"].strip())
    if "store" in params and not params["store"].strip():
        raise BadInput(f"-p store='{params['store']}' is empty (expected a store URI)")
    store = open_store(params.get("store") or store_uri(args.store))
    store.check_writable()
    params["store"] = store.uri
    templates = Path(args.templates) if args.templates else workflow.resolve().parent / "templates"
    if args.templates and not templates.is_dir():
        raise BadInput(f"--templates '{args.templates}' is not a directory")
    parallelism, semaphores = local_limits(args)
    if args.dry_run:
        return dry_run(workflow, params, templates, args, semaphores)
    project_root = find_project_root(workflow, Path(args.templates) if args.templates else None)
    engine = None
    if args.engine != "local":  # every pod in its image (bertology.argo.engines); checked before anything runs
        from bertology.argo.engines import for_workflow

        engine = for_workflow(args.engine, workflow, params, templates, project_root, store.uri)
    leftovers.sweep()  # what killed runs left in $TMPDIR; the newest work directories are kept
    workdir = leftovers.make("run", workflow.stem)
    print(f"bertology run {workflow} (store {store.uri}, step logs in {workdir})", flush=True)
    console = Console(VERBOSE if args.verbose else QUIET if args.quiet else NORMAL)
    previous = {sig: signal.signal(sig, stop_run) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = run_workflow(workflow, params=params, templates_dir=templates, workdir=workdir,
                              project_root=project_root, parallelism=parallelism,
                              semaphores=semaphores, fork_server=not args.no_fork_server and engine is None,
                              max_backoff_s=args.max_backoff, log=console.log, events=console.event,
                              engine=engine)
    except BadInput as e:
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
    for line in _step_errors(result, workdir):
        print(line, file=sys.stderr)
    report = _report_location(result, store)
    if result.exit_code == 0:
        print(f"results (Parquet, hive-partitioned by study): {store.url('results/')}")
        if report is None:
            print(f"study tables and reports: {store.url('studies/')}")
    if report is not None:
        from bertology.results.summary import study_result

        name, study_id, location = report
        for line in study_result(store, name, study_id):  # the main table and the report's orderings
            print(line)
        print(f"report: {location}", flush=True)
    return result.exit_code


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
