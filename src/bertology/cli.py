"""The `bertology` command: run studies locally, validate workflow YAML, build checkpoints by hand.

    bertology run workflows/reversed-layers.yaml -p preset=tiny [--store s3://bucket/prefix] [-f params.yaml]
                  [--tracker wandb|mlflow|tensorboard]
    bertology studies [-o json]
    bertology validate workflows/*.yaml workflows/templates/*.yaml
    bertology checkpoint google-bert/bert-base-uncased --apply remove-layers:layers=last:6 --out ./bert-6
    bertology interventions [-o json]
    bertology report reversed-layers --store s3://bucket/prefix [--id STUDY_ID] [--out DIR]

Every command exits 0 (done), 1 (failed), 2 (bad input: one line naming the bad value), 75 (transient:
retry), 130 / 143 (stopped by Ctrl-C / SIGTERM). The store defaults to $BERTOLOGY_STORE, else ./.bertology.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from bertology import leftovers
from bertology.errors import EXIT_BAD_INPUT, BadInput, BertologyError
from bertology.store import DEFAULT_ROOT, check_writable_dir, open_store

STORE_ENV = "BERTOLOGY_STORE"
# Defaults for `run --parallelism` and `--semaphore`: how many pods this machine runs at once.
PARALLELISM_ENV, SEMAPHORES_ENV = "BERTOLOGY_PARALLELISM", "BERTOLOGY_SEMAPHORES"
TEMPLATES_HINT = "pass --templates DIR (the WorkflowTemplates, e.g. a checkout's workflows/templates)"


class Stopped(BaseException):
    """SIGTERM or SIGINT reached `bertology run`: unwinds the run (its steps are stopped on the way)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # bad flags are bad input: one line, exit 2
        raise BadInput(f"{self.prog}: {message}")


def _project_root(workflow: Path, templates: Path | None = None) -> Path:
    """The directory holding `jobs/` (the containers' working directory in the images): above the
    workflow, else above the templates directory (a study YAML outside the checkout), else the cwd."""
    above = [*([templates.resolve(), *templates.resolve().parents] if templates else [])]
    for parent in [workflow.resolve().parent, *workflow.resolve().parents, *above, Path.cwd()]:
        if (parent / "jobs" / "__init__.py").exists():
            return parent
    raise BadInput(f"cannot find the jobs/ package above '{workflow}' (run from a bertology checkout, "
                   f"or {TEMPLATES_HINT} inside one)")


def _local_limits(args) -> tuple[int, dict[str, int]]:
    """--parallelism and every --semaphore CONFIGMAP/KEY=N, else their environment defaults (a CPU
    machine running tiny studies: BERTOLOGY_PARALLELISM=2 BERTOLOGY_SEMAPHORES=bertology-semaphores/gpu=2)."""
    where = "--parallelism"
    parallelism = args.parallelism
    if parallelism is None and os.environ.get(PARALLELISM_ENV):
        where, value = f"${PARALLELISM_ENV}", os.environ[PARALLELISM_ENV].strip()
        if not value.isdigit():
            raise BadInput(f"{where}={value!r}: parallelism must be an integer, at least 1")
        parallelism = int(value)
    if parallelism is not None and parallelism < 1:
        raise BadInput(f"{where} {parallelism}: parallelism must be at least 1")
    pairs, where = args.semaphore, "--semaphore"
    if not pairs and os.environ.get(SEMAPHORES_ENV):
        pairs, where = [p.strip() for p in os.environ[SEMAPHORES_ENV].split(",") if p.strip()], f"${SEMAPHORES_ENV}"
    semaphores = {}
    for pair in pairs:
        name, sep, limit = pair.partition("=")
        if not sep or "/" not in name or not limit.isdigit() or int(limit) < 1:
            raise BadInput(f"{where} {pair!r}: expected CONFIGMAP/KEY=N with N >= 1 (e.g. bertology-semaphores/gpu=2)")
        semaphores[name] = int(limit)
    return parallelism or 1, semaphores


def _store_uri(value: str | None, flag: str = "--store") -> str:
    """An explicit --store, else $BERTOLOGY_STORE, else ./.bertology; an empty value is an error."""
    if value is None:
        value = os.environ.get(STORE_ENV)
        if value is not None and not value.strip():
            raise BadInput(f"{STORE_ENV}='{value}' is empty (unset it, or set a store URI: file://PATH, a "
                           f"local path, s3://BUCKET[/PREFIX])")
        return value or DEFAULT_ROOT
    if not value.strip():
        raise BadInput(f"{flag} '{value}' is empty (expected a store URI: file://PATH, a local path, "
                       f"s3://BUCKET[/PREFIX]; default ${STORE_ENV} or ./{DEFAULT_ROOT})")
    return value


def _parameter_file(path: str | None) -> dict[str, str]:
    """Argo's `-f FILE`: a YAML or JSON mapping of parameter name to value; lists and mappings are
    passed as JSON, as Argo passes them."""
    if path is None:
        return {}
    import yaml

    file = Path(path)
    if not file.is_file():
        raise BadInput(f"parameter file '{path}' not found")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise BadInput(f"parameter file '{path}' is not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                       f"{e.start}); allowed: YAML or JSON in UTF-8") from None
    except yaml.YAMLError as e:
        raise BadInput(f"parameter file '{path}' is not YAML/JSON: {str(e).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise BadInput(f"parameter file '{path}' must be a mapping of NAME: VALUE, got {type(data).__name__}")
    out = {}
    for name, value in data.items():
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, (list, dict)):
            out[name] = json.dumps(value)
        else:
            out[name] = "" if value is None else str(value)
    return out


def _with_hint(error: BadInput, templates: Path) -> BadInput:
    """A template that cannot be found: say where we looked and how to point elsewhere."""
    text = str(error)
    if "WorkflowTemplate" in text and "not found" in text and "--templates" not in text:
        return BadInput(f"{text}; looked in {templates}: {TEMPLATES_HINT}")
    return error


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
    params = {**_parameter_file(args.parameter_file), **parse_pairs(args.p, "-p")}  # -p wins, as in Argo
    if args.tracker is not None:
        params["tracker"] = args.tracker
    if params.get("tracker", "").strip():  # the steps run here, in this environment: is its library here?
        from bertology.tracking import check

        check(params["tracker"].strip())
    if "store" in params and not params["store"].strip():
        raise BadInput(f"-p store='{params['store']}' is empty (expected a store URI)")
    store = open_store(params.get("store") or _store_uri(args.store))
    store.check_writable()
    params["store"] = store.uri
    templates = Path(args.templates) if args.templates else workflow.resolve().parent / "templates"
    if args.templates and not templates.is_dir():
        raise BadInput(f"--templates '{args.templates}' is not a directory")
    parallelism, semaphores = _local_limits(args)
    if args.dry_run:
        return _dry_run(workflow, params, templates, args, semaphores)
    project_root = _project_root(workflow, Path(args.templates) if args.templates else None)
    engine = None
    if args.engine != "local":  # every pod in its image (bertology.argo.engines); checked before anything runs
        from bertology.argo.engines import for_workflow

        engine = for_workflow(args.engine, workflow, params, templates, project_root, store.uri)
    leftovers.sweep()  # what killed runs left in $TMPDIR; the newest work directories are kept
    workdir = leftovers.make("run", workflow.stem)
    print(f"bertology run {workflow} (store {store.uri}, step logs in {workdir})", flush=True)
    console = Console(VERBOSE if args.verbose else QUIET if args.quiet else NORMAL)
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = run_workflow(workflow, params=params, templates_dir=templates, workdir=workdir,
                              project_root=project_root, parallelism=parallelism,
                              semaphores=semaphores, fork_server=not args.no_fork_server and engine is None,
                              max_backoff_s=args.max_backoff, log=console.log, events=console.event,
                              engine=engine)
    except BadInput as e:
        raise _with_hint(e, templates) from None
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


def _stop(signum, frame) -> None:
    """The first SIGTERM / SIGINT unwinds the run; more of them while it stops are ignored."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


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


def _dry_run(workflow: Path, params: dict, templates: Path, args: argparse.Namespace,
             semaphores: dict[str, int]) -> int:
    """Run only the steps whose outputs the DAG needs (plan: it validates everything and writes the plan),
    and print the argv the first pods of every task would get, substituted as Argo substitutes it."""
    from bertology.argo.runner import run_workflow

    workdir = Path(tempfile.mkdtemp(prefix=f"bertology-dry-run-{workflow.stem}-"))
    lines: list[str] = []
    try:
        result = run_workflow(workflow, params=params, templates_dir=templates, workdir=workdir,
                              project_root=_project_root(workflow, Path(args.templates) if args.templates else None),
                              parallelism=1, semaphores=semaphores, fork_server=False, log=lines.append,
                              dry_run=True)
    except BadInput as e:
        raise _with_hint(e, templates) from None
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


def cmd_validate(args: argparse.Namespace) -> int:
    from bertology.argo.validate import validate_file

    missing = next((path for path in args.files if not Path(path).exists()), None)
    if missing is not None:  # bad input; a file that is there but not valid (not YAML, …) is a failure: 1
        raise BadInput(f"workflow file '{missing}' not found (give Argo YAML files, e.g. workflows/*.yaml)")
    if args.templates and not Path(args.templates).is_dir():
        raise BadInput(f"--templates '{args.templates}' is not a directory (the WorkflowTemplates' directory)")
    errors = []
    for path in args.files:
        p = Path(path)
        templates = Path(args.templates) if args.templates else (
            p.resolve().parent if p.resolve().parent.name == "templates" else p.resolve().parent / "templates")
        errors += [str(_with_hint(BadInput(e), templates)) for e in validate_file(p, templates)]
    for e in errors:
        print(e)
    print(f"{len(args.files)} file(s), {len(errors)} error(s)")
    return 1 if errors else 0


def split_params(text: str) -> list[str]:
    """Split `a=1,b=[1,2],c="x,y"` on the commas that are not inside brackets or quotes."""
    parts, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += ch
    return [*parts, current] if current or parts else []


def parse_apply(text: str) -> dict:
    """`NAME[:key=value,...]` -> {"name", "params"}; values are JSON when they parse, else strings."""
    name, _, rest = text.partition(":")
    if not name.strip():
        raise BadInput(f"malformed --apply '{text}' (expected NAME[:key=value,...])")
    params = {}
    for pair in split_params(rest):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"malformed parameter '{pair}' in --apply '{text}' (expected key=value)")
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value
    return {"name": name.strip(), "params": params}


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """Build an intervened checkpoint into a directory; nothing is left half-written on failure."""
    from bertology.spec import CheckpointSpec
    from bertology.steps.build_checkpoint import make_checkpoint
    from bertology.steps.harness import quiet_libraries

    quiet_libraries()
    out = Path(args.out)
    check_writable_dir(out, f"--out '{out}'")  # the rule of a local store: a directory we can write
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"output directory '{out}' exists and is not empty (choose a new --out)")
    spec = CheckpointSpec.from_dict({"model": args.base, "interventions": [parse_apply(a) for a in args.apply],
                                     "seed": args.seed})
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        manifest, cpu_seconds = make_checkpoint(spec, staging)
        if out.exists():
            out.rmdir()
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    changed = sum(t["changed"] for t in manifest["tensors"])
    before, after = manifest["parameters"]["before"], manifest["parameters"]["after"]
    print(f"{out}: {args.base} + {[a['name'] for a in manifest['chain']] or 'nothing'} "
          f"(checkpoint id {spec.id}); {changed} of {len(manifest['tensors'])} tensors changed; "
          f"{before:,} -> {after:,} parameters; interventions took {cpu_seconds:.2f} CPU s")
    return 0


def cmd_interventions(args: argparse.Namespace) -> int:
    from bertology.interventions import REGISTRY

    if args.output == "json":
        print(json.dumps([{"name": name, "doc": entry.doc.removeprefix(f"{name}: "), "params": entry.defaults}
                          for name, entry in REGISTRY.items()], indent=2, default=str))
        return 0
    for name, entry in REGISTRY.items():
        params = ", ".join(f"{k}={json.dumps(v)}" for k, v in entry.defaults.items()) or "no parameters"
        doc = entry.doc.removeprefix(f"{name}: ")
        print(f"{name:20s} {doc}\n{'':20s} params: {params}")
    return 0


def _default_workflows() -> Path:
    """`workflows/` of the checkout this package runs from, else of the current directory."""
    here = Path(__file__).resolve().parents[2] / "workflows"
    return here if here.is_dir() else Path("workflows")


def study_entry(path: Path) -> dict | None:
    """A workflow file's name, title and report (its header comment's first line: `Title (report, section):
    …`), and its parameters with their defaults; None for a file that is not a Workflow/CronWorkflow."""
    import yaml

    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}; "
                       f"a workflow file is UTF-8 YAML)") from None
    except yaml.YAMLError as e:
        raise BadInput(f"{path}: not YAML: {str(e).splitlines()[0]}") from None
    doc = next((d for d in docs if d.get("kind") in ("Workflow", "CronWorkflow")), None)
    if doc is None:
        return None
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or not line.strip("# "):
            break
        header.append(line.lstrip("# ").strip())
    summary = " ".join(header)
    first = header[0] if header else ""
    title, _, rest = first.partition(" (")
    report = rest.split(")", 1)[0] if rest else ""
    spec = doc.get("spec") or {}
    spec = spec.get("workflowSpec", spec) if doc["kind"] == "CronWorkflow" else spec
    params = {p["name"]: p.get("value", "") for p in (spec.get("arguments") or {}).get("parameters") or []
              if isinstance(p, dict) and "name" in p}
    return {"study": path.stem, "file": str(path), "kind": doc["kind"], "title": title.strip(),
            "report": report.strip(), "summary": summary, "parameters": params}


def cmd_studies(args: argparse.Namespace) -> int:
    """Each workflow with the report it reproduces and its parameters."""
    directory = Path(args.dir) if args.dir else _default_workflows()
    if not directory.is_dir():
        raise BadInput(f"workflows directory '{directory}' not found (pass --dir DIR)")
    entries = [e for e in (study_entry(p) for p in sorted(directory.glob("*.yaml"))) if e is not None]
    if args.output == "json":
        print(json.dumps(entries, indent=2))
        return 0
    for e in entries:
        names = ", ".join(name for name in e["parameters"] if name not in ("study",))
        print(f"{e['study']:22s} {e['title']}" + (f" ({e['report']})" if e["report"] else ""))
        print(f"{'':22s} parameters: {names or 'none'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Rebuild a study's tables and report from the store (its latest plan unless --id names one)."""
    from bertology.results.study_results import latest_study_id
    from bertology.results.summary import study_result
    from bertology.steps.aggregate import aggregate
    from bertology.study import check_study_name

    check_study_name(args.study)
    store = open_store(_store_uri(args.store))
    study_id = args.id
    if study_id is None:
        study_id = latest_study_id(store, args.study)
        print(f"study {args.study}: latest plan {study_id} (choose another with --id)")
    written = aggregate(store, args.study, study_id, best_of_runs=args.best_of_runs,
                        out=Path(args.out) if args.out else None, echo=False)
    for line in study_result(store, args.study, study_id):  # the main table and the report's orderings
        print(line)
    for location in written:
        if location.endswith(("report.md", "report.html")):
            print(location)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bertology", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
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
    r.add_argument("--max-backoff", type=float, default=2.0, metavar="SECONDS",
                   help="wait at most this long between attempts (Argo's backoff is computed and logged)")
    r.add_argument("--dry-run", action="store_true",
                   help="run only plan, then print the argv each pod would get, as Argo substitutes it")
    r.add_argument("--show", type=int, default=3, metavar="N", help="pods shown per task with --dry-run (default 3)")
    r.add_argument("--tracker", default=None, metavar="NAME",
                   help="track each fine-tune in wandb, mlflow or tensorboard (sets -p tracker=NAME; default: none)")
    r.add_argument("--templates", default=None, help="WorkflowTemplate directory (default: beside the workflow)")
    r.add_argument("--engine", choices=("local", "podman", "docker"), default="local",
                   help="local: each step a process here (default); podman | docker: each pod in its image, as "
                        "its template says (images from `make images`; the store must be s3://)")
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
                   help="an intervention; repeat to chain (applied in order)")
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
    return p


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bertology")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    """Every command: 0 done, 1 failed, 2 bad input, 75 transient, 130 / 143 stopped; errors are one line."""
    try:
        args = build_parser().parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
