"""`bertology run --dry-run`: run only plan, then print the argv each pod would get."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from bertology.cli.locations import find_project_root, with_hint
from bertology.errors import BadInput


def dry_run(workflow: Path, params: dict, templates: Path, args: argparse.Namespace,
            semaphores: dict[str, int]) -> int:
    """Run only the steps whose outputs the DAG needs (plan: it validates everything and writes the plan),
    and print the argv the first pods of every task would get, substituted as Argo substitutes it."""
    from bertology.argo.runner import run_workflow

    project_root = find_project_root(workflow, Path(args.templates) if args.templates else None)
    workdir = Path(tempfile.mkdtemp(prefix=f"bertology-dry-run-{workflow.stem}-"))
    lines: list[str] = []
    try:
        result = run_workflow(workflow, params=params, templates_dir=templates, workdir=workdir,
                              project_root=project_root,
                              parallelism=1, semaphores=semaphores, fork_server=False, log=lines.append,
                              dry_run=True)
    except BadInput as e:
        raise with_hint(e, templates) from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if result.exit_code != 0:
        for line in lines[-20:]:
            print(line, file=sys.stderr)
        print(f"dry run of {workflow}: {result.phase} before any pod started (see above)", file=sys.stderr)
        return result.exit_code
    groups: dict[str, list] = {}
    for pod in result.pods:
        groups.setdefault(re.sub(r"\(\d+:[^()]*\)", "(…)", pod.node), []).append(pod)
    print(f"dry run of {workflow}: {len(result.pods)} pods; the argv of the first {args.show} of each task, "
          f"as Argo substitutes it (plan ran for real: it wrote the plan)")
    for group, pods in groups.items():
        pods.sort(key=lambda pod: [int(i) for i in re.findall(r"\((\d+):", pod.node)])
        print(f"\n{group}: {len(pods)} pod{'s' if len(pods) != 1 else ''}")
        for pod in pods[:args.show]:
            print(f"  {pod.node}\n    {shlex.join(pod.argv)}")
        if len(pods) > args.show:
            print(f"  … and {len(pods) - args.show} more")
    return 0
