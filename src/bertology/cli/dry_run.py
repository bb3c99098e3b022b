"""`bertology run --dry-run`: run only plan, then print what the study costs on a GPU and the argv each pod
would get.

The cost is counted from the plan the dry run wrote (its cells: the study as the parameters given with -p
and the preset made it), by bertology.study.cost, at the rates in bertology/study/measured_rates.json."""

from __future__ import annotations

import argparse
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

    workdir = Path(tempfile.mkdtemp(prefix=f"bertology-dry-run-{workflow.stem}-"))
    lines: list[str] = []
    try:
        result = run_workflow(workflow, params=params, templates_dir=templates, workdir=workdir,
                              project_root=project_root,
                              parallelism=1, semaphores=semaphores, fork_server=False, log=lines.append,
                              dry_run=True, argo_version=getattr(args, "argo_version", None))
        errors = step_errors(result, workdir)  # read before the folder goes
    except BadInput as e:
        raise with_hint(e, templates) from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    code = exit_code(result)
    if code == EXIT_BAD_INPUT and errors:  # plan refused the input: its one line says it all
        for line in errors:
            print(line, file=sys.stderr)
        return code
    if code != 0:
        for line in [*lines[-20:], *errors]:
            print(line, file=sys.stderr)
        print(f"dry run of {workflow}: Failed before any pod started (see above)", file=sys.stderr)
        return code
    groups: dict[str, list] = {}
    for pod in result.pods:
        groups.setdefault(re.sub(r"\(\d+:[^()]*\)", "(…)", pod.node), []).append(pod)
    ran = [n.name for n in result.nodes.values() if n.outputs]  # the steps whose outputs the DAG reads
    real = (" (plan ran for real: it wrote the plan)" if ran == ["plan"] else
            f" ({', '.join(ran)} ran for real, for the outputs the DAG reads)" if ran else "")
    print(f"dry run of {workflow}: {len(result.pods)} pods; the argv of the first {args.show} of each task, "
          f"as Argo substitutes it{real}")
    line = cost_line(result)
    if line:
        print(line)
    for group, pods in groups.items():
        pods.sort(key=lambda pod: [int(i) for i in re.findall(r"\((\d+):", pod.node)])
        print(f"\n{group}: {len(pods)} pod{'s' if len(pods) != 1 else ''}")
        for pod in pods[:args.show]:
            print(f"  {pod.node}\n    {shlex.join(pod.argv)}")
        if len(pods) > args.show:
            print(f"  … and {len(pods) - args.show} more")
    return 0


def cost_line(result) -> str | None:
    """`cost: R runs, S training sequences; H GPU-hours solo at T seq/s (device, measured date); fused: …`,
    counted from the plan the dry run wrote (the plan step's `study` and `store` outputs); None for a
    workflow without a plan. A study that fuses its runs (`fuse` K > 1) is priced at the fused rate, or says
    that it is not measured yet and gives the solo figure. A rates file that cannot be read is named in the
    line ("no measured rate"): the runs and sequences do not depend on it."""
    from bertology.spec import Cell
    from bertology.steps.planned import load_plan
    from bertology.store import open_store
    from bertology.study import cost

    plan_node = next((n for n in result.nodes.values() if {"study", "store"} <= set(n.outputs)), None)
    if plan_node is None:
        return None
    plan = load_plan(open_store(plan_node.outputs["store"]), plan_node.outputs["study"])
    work = cost.training_work(Cell.from_dict(raw) for raw in plan.doc.get("cells") or [])
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
    fuse = (plan.doc.get("execution") or {}).get("fuse", 1)
    if fuse > 1:  # the study trains its runs fused: the fused rate is its cost
        if rates.fused_seq_per_s is None:
            return f"{counted}; fused (fuse {fuse}): not measured yet; {solo}"
        return (f"{counted}; {_hours(cost.gpu_hours(work.sequences, rates.fused_seq_per_s))} GPU-hours fused "
                f"(fuse {fuse}) at {rates.fused_seq_per_s:,.0f} seq/s ({measured})")
    fused = ("fused: not measured yet" if rates.fused_seq_per_s is None else
             f"{_hours(cost.gpu_hours(work.sequences, rates.fused_seq_per_s))} GPU-hours fused at "
             f"{rates.fused_seq_per_s:,.0f} seq/s")
    return f"{counted}; {solo}; {fused}"


def _count(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1_000_000 else f"{n:,}"


def _hours(h: float) -> str:
    return f"{h:,.0f}" if h >= 10 else f"{h:.1f}" if h >= 0.1 else f"{h:.2g}"
