"""`bertology run --dry-run`: run only plan, then print what the study costs on a GPU and the argv each pod
would get.

The cost is counted from the plan the dry run wrote (its cells: the study as the parameters given with -p
and the preset made it), by bertology.study.cost, at the rates in bertology/study/measured_rates.json."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from bertology.cli.locations import with_hint
from bertology.cli.outcome import exit_code, step_errors
from bertology.errors import EXIT_BAD_INPUT, BadInput


def dry_run(workflow: Path, params: dict, templates: Path, args: argparse.Namespace,
            semaphores: dict[str, int], project_root: Path) -> int:
    """Run only the steps whose outputs the DAG needs (plan: it validates everything and writes the plan),
    and print what the study costs on a GPU (`cost_line`), then the argv the first pods of every task would
    get, substituted as Argo substitutes it."""
    from bertology.argo.runner import run_workflow
    from bertology.steps.plan import DRY_RUN_PLAN_ENV

    workdir = Path(tempfile.mkdtemp(prefix=f"bertology-dry-run-{workflow.stem}-"))
    lines: list[str] = []
    plan_file = workdir / "plan.json"  # plan writes its plan here, and nothing into the store
    previous = os.environ.get(DRY_RUN_PLAN_ENV)
    os.environ[DRY_RUN_PLAN_ENV] = str(plan_file)
    try:
        result = run_workflow(workflow, params=params, templates_dir=templates, workdir=workdir,
                              project_root=project_root,
                              parallelism=1, semaphores=semaphores, fork_server=False, log=lines.append,
                              dry_run=True, argo_version=getattr(args, "argo_version", None))
        errors = step_errors(result, workdir)  # read before the folder goes
        plan = json.loads(plan_file.read_text(encoding="utf-8")) if plan_file.is_file() else None
    except BadInput as e:
        raise with_hint(e, templates) from None
    finally:
        if previous is None:
            os.environ.pop(DRY_RUN_PLAN_ENV, None)
        else:
            os.environ[DRY_RUN_PLAN_ENV] = previous
        shutil.rmtree(workdir, ignore_errors=True)
    code = exit_code(result)
    if code == EXIT_BAD_INPUT and errors:  # plan refused the input: its one line says it all
        for line in errors:
            print(line, file=sys.stderr)
        return code
    if code != 0:
        # the runner's line for the Workflow itself says Succeeded (a dry run records its exit handler
        # without running it): not beside the failure this reports
        told = [line for line in lines if not re.match(r"\[[^\]]*\] Succeeded\b", line)]
        for line in [*told[-20:], *errors]:
            print(line, file=sys.stderr)
        print(f"dry run of {workflow}: Failed before any pod started (see above)", file=sys.stderr)
        return code
    plan_nodes = {n.name for n in result.nodes.values() if {"study", "store"} <= set(n.outputs)}
    groups: dict[str, list] = {}
    for pod in result.pods:
        groups.setdefault(re.sub(r"\(\d+:[^()]*\)", "(…)", pod.node), []).append(pod)
    ran = [n.name for n in result.nodes.values() if n.outputs]  # the steps whose outputs the DAG reads
    real = (" (plan ran for real, writing nothing)" if ran == ["plan"] else
            f" ({', '.join(ran)} ran for real, for the outputs the DAG reads)" if ran else "")
    print(f"dry run of {workflow}: {len(result.pods)} pods; the argv of the first {args.show} of each task, "
          f"as Argo substitutes it{real}")
    line = cost_line(result, plan)
    if line:
        print(line)
    line = stored_line(result, plan)
    if line:
        print(line)
    for group, pods in groups.items():
        pods.sort(key=lambda pod: [int(i) for i in re.findall(r"\((\d+):", pod.node)])
        print(f"\n{group}: {len(pods)} pod{'s' if len(pods) != 1 else ''}")
        for pod in pods[:args.show]:
            print(f"  {pod.node}\n    {shlex.join(pod.argv)}")
            if pod.node in plan_nodes and plan and plan.get("preset_changes"):  # what default:… resolves to
                preset = (plan.get("spec") or {}).get("preset", "?")
                print(f"    preset {preset} replaces default: values above: {'; '.join(plan['preset_changes'])}")
        if len(pods) > args.show:
            print(f"  … and {len(pods) - args.show} more")
    return 0


def cost_line(result, doc: dict | None = None) -> str | None:
    """`cost: R runs, S training sequences; H GPU-hours solo at T seq/s (device, measured date); fused: …`,
    counted from the plan the dry run wrote (the plan step's `study` and `store` outputs); None for a
    workflow without a plan. A study is priced at the rate of the way its pods train: fused (`fuse` K > 1),
    side by side (`gpu_concurrency` K > 1; compiled too with `compile: true`), compiled, else one run at a time; a way not
    measured yet says so and gives the solo figure. A rates file that cannot be read is named in the
    line ("no measured rate"): the runs and sequences do not depend on it."""
    from bertology.spec import Cell
    from bertology.steps.planned import load_plan
    from bertology.store import open_store
    from bertology.study import cost

    plan_node = next((n for n in result.nodes.values() if {"study", "store"} <= set(n.outputs)), None)
    if plan_node is None:
        return None
    if doc is None:  # the plan as the store holds it
        doc = load_plan(open_store(plan_node.outputs["store"]), plan_node.outputs["study"]).doc
    work = cost.training_work(Cell.from_dict(raw) for raw in doc.get("cells") or [])
    if work.runs == 0:
        return "cost: no fine-tuning runs (nothing trains on a GPU)"
    untrained = f" ({work.untrained} of them train nothing: regime none)" if work.untrained else ""
    runs = f"{work.runs:,} run{'s' if work.runs != 1 else ''}{untrained}"
    counted = f"cost: {runs}, {_count(work.sequences)} training sequences"
    try:
        rates = cost.load_rates()
    except BadInput as e:
        return f"{counted}; GPU-hours: no measured rate ({e})"
    measured = f"{rates.device}, measured {rates.measured}" + (f"; {rates.workload}" if rates.workload else "")
    solo = (f"{_hours(cost.gpu_hours(work.sequences, rates.solo_seq_per_s))} GPU-hours solo at "
            f"{rates.solo_seq_per_s:,.0f} seq/s ({measured})")
    execution = doc.get("execution") or {}
    fuse, side = execution.get("fuse", 1), execution.get("gpu_concurrency", 1)
    regime = (doc.get("spec") or {}).get("regime") or {}
    # the way its pods train is its cost: fused, side by side, compiled, else one run at a time
    compiled = bool(regime.get("compile"))
    way = (("fused", f"fuse {fuse}", rates.fused_seq_per_s) if fuse > 1 else
           ("compiled side by side", f"gpu_concurrency {side}, compile true", rates.compiled_side_by_side_seq_per_s)
           if side > 1 and compiled else
           ("side by side", f"gpu_concurrency {side}", rates.side_by_side_seq_per_s) if side > 1 else
           ("compiled", "compile true", rates.compiled_seq_per_s) if compiled else None)
    if way is not None:
        name, setting, rate = way
        if rate is None:
            return f"{counted}; {name} ({setting}): not measured yet; {solo}"
        return (f"{counted}; {_hours(cost.gpu_hours(work.sequences, rate))} GPU-hours {name} ({setting}) at "
                f"{rate:,.0f} seq/s in all ({measured})")
    fused = ("fused: not measured yet" if rates.fused_seq_per_s is None else
             f"{_hours(cost.gpu_hours(work.sequences, rates.fused_seq_per_s))} GPU-hours fused at "
             f"{rates.fused_seq_per_s:,.0f} seq/s")
    return f"{counted}; {solo}; {fused}"


def stored_line(result, doc: dict | None) -> str | None:
    """How many of the study's runs the store already holds, and how many a run would train, in how many
    pods (plan's `runs` output lists only the runs not finished); None without a plan."""
    plan_node = next((n for n in result.nodes.values() if "runs" in n.outputs), None)
    if plan_node is None or doc is None:
        return None
    try:
        pods = [[i for i in pod.split(",") if i] for pod in json.loads(plan_node.outputs["runs"])]
    except (ValueError, TypeError, AttributeError):
        return None
    total, todo = len(doc.get("cells") or []), sum(len(pod) for pod in pods)
    runs = f"{total:,} run{'s' if total != 1 else ''}"
    if todo == 0:
        return f"stored: all {runs} (every result is in the store: a run trains nothing)"
    return (f"stored: {total - todo:,} of the {runs}; {todo:,} would run, in {len(pods):,} "
            f"pod{'s' if len(pods) != 1 else ''} of finetune")


def _count(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1_000_000 else f"{n:,}"


def _hours(h: float) -> str:
    return f"{h:,.0f}" if h >= 10 else f"{h:.1f}" if h >= 0.1 else f"{h:.2g}"
