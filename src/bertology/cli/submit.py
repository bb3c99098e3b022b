"""`bertology submit`, `watch` and `results`: a study on a cluster's Argo Workflows (bertology.cluster), from
the terminal. `submit` prints the Workflow's name, alone on its line (`NAME=$(bertology submit …)`); with
--watch, and `watch`, a line each time the Workflow's phase, progress or message changes, then its verdict,
exiting 0 when it Succeeded and 1 when it Failed or Errored. `results` prints a table of the study's runs
as the store holds them (or writes it as CSV or Parquet)."""

from __future__ import annotations

import argparse
import sys

from bertology.cli.run_inputs import parameter_file
from bertology.errors import BadInput

OUTPUTS = "table, csv, parquet:PATH"


def cmd_submit(args: argparse.Namespace) -> int:
    """Every check of bertology.cluster.submit before the cluster hears of it, then the Workflow's name."""
    from bertology.cluster import submit
    from bertology.study import parse_pairs

    params = {**parameter_file(args.parameter_file), **parse_pairs(args.p, "-p")}  # -p wins, as in Argo
    study = submit(args.workflow, params, namespace=args.namespace, kubeconfig=args.kubeconfig,
                   priority=args.priority, templates=args.templates)
    print(study.name, flush=True)
    if not args.watch:
        return 0
    return _follow(study.name, study.namespace, args.kubeconfig)


def cmd_watch(args: argparse.Namespace) -> int:
    return _follow(args.name, args.namespace, args.kubeconfig)


def _follow(name: str, namespace: str | None, kubeconfig: str | None) -> int:
    """A line per change, then `workflow NAME: PHASE[: verdict]` as `bertology run` ends; 0 only on Succeeded."""
    from bertology.cluster import watch

    last = None
    for last in watch(name, namespace=namespace, kubeconfig=kubeconfig):
        print(last, flush=True)
    print(f"workflow {name}: {last.phase}" + (f": {last.message}" if last.message else ""), flush=True)
    return 0 if last.succeeded else 1


def cmd_results(args: argparse.Namespace) -> int:
    """The study's table: Markdown on the terminal under a line naming the study, its plan and any runs it
    lacks; or CSV on stdout; or a Parquet file."""
    from bertology.cluster.plan import study_results, table
    from bertology.cluster.transport import connect

    output, _, path = args.output.partition(":")
    if output not in ("table", "csv", "parquet") or (output == "parquet") != bool(path.strip()):
        raise BadInput(f"-o {args.output!r} is not an output (allowed: {OUTPUTS})")
    found = study_results(connect(args.namespace, args.kubeconfig).get(args.name))
    frame = table(found, args.table)
    if output == "csv":
        sys.stdout.write(frame.write_csv())
        return 0
    lacking = f"; {found.shortfall()}" if not found.complete else ""
    header = f"{found.name} {found.study_id}: {args.table}, {frame.height} rows{lacking}"
    if output == "parquet":
        frame.write_parquet(path)
        print(f"{header}: {path}")
        return 0
    from bertology.results.report.render import markdown_table

    print(header)
    print(markdown_table(frame))
    return 0
