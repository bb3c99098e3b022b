"""The `bertology` command: run a study's Argo workflow on this machine, and validate workflow YAML.

    bertology run workflows/reversed-layers.yaml -p preset=tiny [--store s3://bucket/prefix]
    bertology validate workflows/*.yaml workflows/templates/*.yaml
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bertology.errors import EXIT_BAD_INPUT, BadInput
from bertology.store import DEFAULT_ROOT, open_store


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # bad flags are bad input: one line, exit 2
        raise BadInput(f"{self.prog}: {message}")


def _parse_p(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"malformed -p '{pair}' (expected NAME=VALUE, e.g. -p preset=tiny)")
        params[name.strip()] = value
    return params


def _project_root(workflow: Path) -> Path:
    """The directory holding `jobs/` (the containers' working directory in the images)."""
    for parent in [workflow.resolve().parent, *workflow.resolve().parents, Path.cwd()]:
        if (parent / "jobs" / "__init__.py").exists():
            return parent
    raise BadInput(f"cannot find the jobs/ package above '{workflow}' (run from a bertology checkout)")


def _step_errors(result, workdir: Path) -> list[str]:
    """The one-line `error: …` each failed step printed, so the cause ends the output."""
    lines = []
    for node in result.nodes.values():
        log = workdir / node.name / "log.txt"
        if node.phase in ("Failed", "Error") and log.exists():
            errors = [x for x in log.read_text(errors="replace").splitlines() if x.startswith("error: ")]
            lines.append(f"{node.name}: {errors[-1] if errors else node.message or node.phase}")
    return lines


def cmd_run(args: argparse.Namespace) -> int:
    from bertology.argo.runner import run_workflow

    workflow = Path(args.workflow)
    if not workflow.is_file():
        raise BadInput(f"workflow file '{workflow}' not found")
    params = _parse_p(args.p)
    store = open_store(params.get("store") or args.store)
    params["store"] = store.uri
    templates = Path(args.templates) if args.templates else workflow.resolve().parent / "templates"
    workdir = Path(tempfile.mkdtemp(prefix=f"bertology-run-{workflow.stem}-"))
    print(f"bertology run {workflow} (store {store.uri}, step logs in {workdir})", flush=True)
    result = run_workflow(workflow, params=params, templates_dir=templates, workdir=workdir,
                          project_root=_project_root(workflow), parallelism=args.parallelism,
                          fork_server=not args.no_fork_server)
    status = "Succeeded" if result.exit_code == 0 else "Failed"
    print(f"workflow {workflow.name}: {status}", flush=True)
    for line in _step_errors(result, workdir):
        print(line, file=sys.stderr)
    if result.exit_code == 0:
        print(f"results (Parquet, hive-partitioned by study): {store.url('results/')}")
        print(f"study tables and reports: {store.url('studies/')}")
    return result.exit_code


def cmd_validate(args: argparse.Namespace) -> int:
    from bertology.argo.validate import validate_file

    errors = []
    for path in args.files:
        p = Path(path)
        templates = Path(args.templates) if args.templates else (
            p.resolve().parent if p.resolve().parent.name == "templates" else p.resolve().parent / "templates")
        errors += validate_file(p, templates)
    for e in errors:
        print(e)
    print(f"{len(args.files)} file(s), {len(errors)} error(s)")
    return 1 if errors else 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bertology", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="run a study workflow on this machine")
    r.add_argument("workflow", help="workflows/<study>.yaml")
    r.add_argument("-p", action="append", default=[], metavar="NAME=VALUE", help="workflow parameter")
    r.add_argument("--store", default=DEFAULT_ROOT, help=f"store URI used unless -p store=… (default ./{DEFAULT_ROOT})")
    r.add_argument("--parallelism", type=int, default=1, help="containers at once (default 1)")
    r.add_argument("--templates", default=None, help="WorkflowTemplate directory (default: beside the workflow)")
    r.add_argument("--no-fork-server", action="store_true",
                   help="start every step as a fresh interpreter instead of forking a warm one")
    r.set_defaults(fn=cmd_run)
    v = sub.add_parser("validate", help="strictly validate Argo YAML files")
    v.add_argument("files", nargs="+")
    v.add_argument("--templates", default=None)
    v.set_defaults(fn=cmd_validate)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.fn(args)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
