"""The `bertology` command: run studies locally, validate workflow YAML, build checkpoints by hand.

    bertology run workflows/reversed-layers.yaml -p preset=tiny [--store s3://bucket/prefix] [-f params.yaml]
                  [--tracker wandb|mlflow|tensorboard]
    bertology studies [-o json]
    bertology validate workflows/*.yaml workflows/templates/*.yaml
    bertology checkpoint google-bert/bert-base-uncased --apply remove-layers:layers=last:6 --out ./bert-6
    bertology interventions [-o json]
    bertology report reversed-layers --store s3://bucket/prefix [--id STUDY_ID] [--out DIR]
    bertology submit workflows/reversed-layers.yaml -p preset=tiny [-n NAMESPACE] [--priority N] [--watch]
    bertology watch NAME [-n NAMESPACE]
    bertology results NAME [-n NAMESPACE] [--table runs] [-o table|csv|parquet:PATH]

Every command exits 0 (done), 1 (failed), 2 (bad input: one line naming the bad value), 75 (transient:
retry), 130 / 143 (stopped by Ctrl-C / SIGTERM). The store defaults to $BERTOLOGY_STORE, else ./.bertology.

Its modules, each one command or one idea: `run` (and `dry_run`, `run_inputs` for -f and the local limits,
`stopping` for SIGTERM / SIGINT), `validate`, `checkpoint`, `catalogue` (studies, interventions), `report`,
`submit` (submit, watch and results: a study on a cluster, through bertology.cluster) and `locations` (the store, the templates, jobs/). This module wires them into one parser and `main`;
`entry` is the command itself (the console script, `python -m bertology.cli`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from bertology.cli.catalogue import cmd_interventions, cmd_studies
from bertology.cli.checkpoint import cmd_checkpoint
from bertology.cli.locations import STORE_ENV
from bertology.cli.report import cmd_report
from bertology.cli.run import cmd_run
from bertology.cli.run_inputs import PARALLELISM_ENV, SEMAPHORES_ENV
from bertology.cli.stopping import Stopped
from bertology.cli.submit import OUTPUTS, cmd_results, cmd_submit, cmd_watch
from bertology.cli.validate import cmd_validate
from bertology.errors import EXIT_BAD_INPUT, BadInput, BertologyError, did_you_mean
from bertology.process_exit import exit_process
from bertology.store import DEFAULT_ROOT

__all__ = ["build_parser", "entry", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # bad flags are bad input: one line, exit 2
        raise BadInput(f"{self.prog}: {message}{_parameter_hint(message)}")

    def _check_value(self, action, value):  # argparse's own message, with the closest choice first
        if action.choices is not None and value not in action.choices:
            match = did_you_mean(value, action.choices)
            hint = f"did you mean {match!r}?; " if match is not None else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} ({hint}choose from "
                                                 f"{', '.join(map(repr, action.choices))})")


def _parameter_hint(message: str) -> str:
    """`--preset tiny` (or `--preset=tiny`) where a workflow parameter was meant: how -p gives it."""
    words = message.removeprefix("unrecognized arguments: ").split(" ") if "unrecognized arguments: " in message \
        else []
    if not words or not words[0].startswith("--") or len(words[0]) < 3:
        return ""
    name, sep, value = words[0][2:].partition("=")
    if not sep:
        value = words[1] if len(words) > 1 and not words[1].startswith("-") else "VALUE"
    from bertology.study import PARAMS

    if name.replace("-", "_") not in PARAMS:
        return ""
    return f" (a workflow parameter is set with -p: did you mean -p {name.replace('-', '_')}={value}?)"


def _at_least_zero(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r} (allowed: 0 or more)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative (allowed: 0 or more)")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bertology", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)  # none given: `main` says what to do
    r = sub.add_parser("run", help="run a study workflow on this machine")
    r.add_argument("workflow", help="workflows/<study>.yaml")
    r.add_argument("-p", action="append", default=[], metavar="NAME=VALUE", help="workflow parameter")
    r.add_argument("-f", "--parameter-file", default=None, metavar="FILE",
                   help="a YAML/JSON mapping of parameter name to value, as argo submit -f; -p wins over it")
    r.add_argument("--store", default=None,
                   help=f"store URI used unless -p store=… (default ${STORE_ENV}, else ./{DEFAULT_ROOT})")
    loud = r.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="store_true", help="echo every step's output lines")
    loud.add_argument("-q", "--quiet", action="store_true", help="no progress line: errors and the final lines")
    r.add_argument("--parallelism", type=int, default=None,
                   help=f"containers at once on this machine (default ${PARALLELISM_ENV}, else 1; the YAML's "
                        "spec.parallelism also caps it)")
    r.add_argument("--semaphore", action="append", default=[], metavar="CONFIGMAP/KEY=N",
                   help=f"the limit of a synchronization semaphore (default: ${SEMAPHORES_ENV}, a comma-separated "
                        "list of these, else the ConfigMap in the templates directory, else 1)")
    r.add_argument("--priority", default=None, metavar="N",
                   help="the Workflow's spec.priority, as argo submit --priority: its place in the queue of every "
                        "semaphore this machine's runs share (the higher first, then the older run)")
    r.add_argument("--max-backoff", type=float, default=2.0, metavar="SECONDS",
                   help="wait at most this long between attempts (Argo's backoff is computed and logged)")
    r.add_argument("--dry-run", action="store_true",
                   help="run only plan, then print what the study costs on a GPU (runs, training sequences, "
                        "GPU-hours at the last measured rate) and the argv each pod would get, as Argo substitutes it")
    r.add_argument("--show", type=_at_least_zero, default=3, metavar="N", help="pods shown per task with --dry-run (default 3)")
    r.add_argument("--tracker", default=None, metavar="NAME",
                   help="track each fine-tune in wandb, mlflow or tensorboard (sets -p tracker=NAME; default: none)")
    r.add_argument("--templates", default=None, help="WorkflowTemplate directory (default: beside the workflow)")
    r.add_argument("--engine", choices=("local", "podman", "docker"), default="local",
                   help="local: each step a process here (default); podman | docker: each pod in its image, as "
                        "its template says (images from `make images`; the store must be s3://)")
    r.add_argument("--argo-version", default=None, metavar="VERSION",
                   help="bind the workflow's parameters as this Argo Workflows version does, 3.6.19 to 4.1.x "
                        "(default: the newest; before 3.7 a WorkflowTemplate parameter's ConfigMap wins over -p)")
    r.add_argument("--no-fork-server", action="store_true",
                   help="start every step as a fresh interpreter instead of forking a warm one")
    r.set_defaults(fn=cmd_run)
    v = sub.add_parser("validate", help="strictly validate Argo YAML files")
    v.add_argument("files", nargs="+")
    v.add_argument("--templates", default=None)
    v.set_defaults(fn=cmd_validate)
    c = sub.add_parser("checkpoint", help="build an intervened checkpoint into a directory")
    c.add_argument("base", help="hub id, local HF directory, or store URI of a checkpoint")
    c.add_argument("--apply", action="append", default=[], metavar="NAME[:key=value,...]",
                   help="an intervention, its parameters' values JSON (e.g. "
                        "'reinit:scope=heads,heads=[\"0:3\",\"11:7\"]'; `bertology interventions` lists them); "
                        "repeat to chain (applied in order)")
    c.add_argument("--seed", type=int, default=0, help="intervention seed (default 0)")
    c.add_argument("--out", required=True, help="output directory (must be new or empty)")
    c.set_defaults(fn=cmd_checkpoint)
    i = sub.add_parser("interventions", help="list the intervention registry and its parameters")
    i.add_argument("-o", "--output", choices=["text", "json"], default="text")
    i.set_defaults(fn=cmd_interventions)
    s = sub.add_parser("studies", help="list the study workflows, the report each reproduces, their parameters")
    s.add_argument("--dir", default=None, help="workflows directory (default: the checkout's workflows/)")
    s.add_argument("-o", "--output", choices=["text", "json"], default="text")
    s.set_defaults(fn=cmd_studies)
    rep = sub.add_parser("report", help="rebuild a study's tables, report.md and report.html from a store")
    rep.add_argument("study", help="the study's name (e.g. reversed-layers)")
    rep.add_argument("--store", default=None, help=f"store URI (default ${STORE_ENV}, else ./{DEFAULT_ROOT})")
    rep.add_argument("--id", default=None, help="the study id (default: the study's most recently written plan)")
    rep.add_argument("--out", default=None, help="also write report.md and report.html into this directory")
    rep.add_argument("--best-of-runs", action="store_true",
                     help="add the best run of each group (the monolingual report's best epoch of the best run)")
    rep.set_defaults(fn=cmd_report)
    sb = sub.add_parser("submit", help="submit a study workflow to a cluster's Argo Workflows; print its name")
    sb.add_argument("workflow", help="workflows/<study>.yaml")
    sb.add_argument("-p", action="append", default=[], metavar="NAME=VALUE", help="workflow parameter")
    sb.add_argument("-f", "--parameter-file", default=None, metavar="FILE",
                    help="a YAML/JSON mapping of parameter name to value, as argo submit -f; -p wins over it")
    sb.add_argument("--priority", default=None, metavar="N",
                    help="the Workflow's spec.priority, as argo submit --priority (the higher first in the GPU queue)")
    sb.add_argument("--templates", default=None,
                    help="the WorkflowTemplates the parameters are checked against (default: beside the workflow)")
    sb.add_argument("--watch", action="store_true",
                    help="then follow it to its end: exit 0 when it Succeeded, 1 when it Failed or Errored")
    _cluster_flags(sb)
    sb.set_defaults(fn=cmd_submit)
    w = sub.add_parser("watch", help="follow a Workflow on the cluster to its end, a line per change")
    w.add_argument("name", help="the Workflow's name, as submit prints it")
    _cluster_flags(w)
    w.set_defaults(fn=cmd_watch)
    res = sub.add_parser("results", help="a study Workflow's results table, read from the store its plan fixed")
    res.add_argument("name", help="the Workflow's name, as submit prints it")
    res.add_argument("--table", default="runs", help="runs (default), curves, weight_distance, … or vocab_overlap")
    res.add_argument("-o", "--output", default="table", metavar="FORMAT", help=f"{OUTPUTS} (default: table)")
    _cluster_flags(res)
    res.set_defaults(fn=cmd_results)
    p.commands = tuple(sub.choices)  # what a bare `bertology` lists
    return p


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    """Where the cluster is, as kubectl and argo take it ($ARGO_SERVER: through Argo Server instead)."""
    p.add_argument("-n", "--namespace", default=None,
                   help="the namespace (default $ARGO_NAMESPACE, else the kubeconfig context's, else default)")
    p.add_argument("--kubeconfig", default=None, metavar="PATH",
                   help="default $KUBECONFIG, else ~/.kube/config; in a pod, its ServiceAccount")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bertology")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    """Every command: 0 done, 1 failed, 2 bad input, 75 transient, 130 / 143 stopped; errors are one line."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            raise BadInput(f"no command given (commands: {', '.join(parser.commands)}; `bertology --help` says "
                           f"what each does, `bertology COMMAND --help` its flags)")
        return args.fn(args)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BertologyError as e:  # Transient: 75, anything else of ours: 1
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except (KeyboardInterrupt, Stopped) as e:
        return 128 + (e.signum if isinstance(e, Stopped) else signal.SIGINT)
    except BrokenPipeError:  # `bertology studies | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def entry() -> None:
    """The `bertology` command: `main`, then the process ends with its exit code without the interpreter's
    finalisation (bertology.process_exit: a native thread pool aborted it once, SIGABRT, after a study's
    result was printed)."""
    exit_process(main())
