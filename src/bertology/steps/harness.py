"""The shared entry point of every job: arguments, logging, and the exit-code contract.

Exit codes: 0 done (or cached), 2 bad input (never retried), 75 transient (retried by
Argo's retryStrategy; SIGTERM from a preempted or evicted pod, a full disk (ENOSPC, EDQUOT) and a damaged
artifact the step could not rebuild also map here). A step may fail with its
own documented code by raising a BertologyError subclass (regress: 1 = the results drifted).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bertology import chaos, leftovers, tiny_pretrain
from bertology.errors import EXIT_BAD_INPUT, EXIT_TRANSIENT, BadInput, BertologyError, Transient
from bertology.process_exit import exit_process
from bertology.spec import parse_json_arg
from bertology.steps import planned
from bertology.store import Store, is_disk_full, open_store

log = logging.getLogger("bertology")


def _on_sigterm(signum, frame):
    raise Transient("terminated by SIGTERM (preemption or eviction); the step will be retried")


def parser(step: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m jobs.{step}", description=f"bertology step: {step}")
    p.add_argument("--store", default=None, help="store root URI (file://PATH, PATH or s3://BUCKET/PREFIX)")
    p.add_argument("--spec", default=None, help="the step's spec as JSON (by hand; workflows pass --plan and --ids)")
    p.add_argument("--plan", default=None, metavar="NAME:STUDY_ID", help="the stored plan the step's work is in")
    p.add_argument("--ids", default=None, metavar="ID[,ID...]", help="the ids of the step's work in --plan")
    p.add_argument("--study", default=None, help="study name (plan)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a study parameter (plan) or option (regress); repeatable")
    p.add_argument("--outputs", default="/tmp/outputs", help="directory for Argo output parameters")
    p.add_argument("--baseline-store", default=None, metavar="URI",
                   help="(plan) a second store to fix for later steps, handed on as output baseline_store")
    p.add_argument("--platform-store", default=None, metavar="URI",
                   help="(plan) the store when --store is empty: the platform's (the ConfigMap's)")
    p.add_argument("--scratch", default=None, metavar="PATH",
                   help="(plan) run the study in <store>/PATH; <store> becomes the baseline store")
    return p


# plan's refusal when the Workflow names no store at all: `store` empty and the platform's ConfigMap missing
# (e.g. after `helm uninstall`), without its key or label, or empty (the WorkflowTemplates' `platform_store`
# then takes its valueFrom.default "", operator.go setGlobalParameters)
NO_STORE = ("no store: the Workflow's parameter store is empty and so is platform_store (ConfigMap "
            "bertology-config, key store, with label workflows.argoproj.io/configmap-type: Parameter: missing or "
            "empty); set the chart's store.uri (helm upgrade --set store.uri=s3://BUCKET/PREFIX), or submit "
            "with -p store=s3://BUCKET/PREFIX")


def store_root(args: argparse.Namespace) -> str | None:
    """The step's store URI: --store, else (plan, when --store is empty) --platform-store; with --scratch
    (plan) the study's own store <store>/PATH, the store itself then being the baseline store.

    A Workflow's `store` parameter is a plain value, empty unless the user sets it, and `platform_store` the
    ConfigMap's: on Argo before 3.7 a WorkflowTemplate parameter's valueFrom wins over the value given with
    `argo submit -p` (operator.go setGlobalParameters), so a ConfigMap-backed `store` could not be overridden.
    Both empty (the ConfigMap gone: `platform_store` takes its default "") is BadInput naming both, before plan
    does anything."""
    uri = args.store
    if uri is not None and not uri.strip() and (args.platform_store or "").strip():
        uri = args.platform_store.strip()
    elif uri is not None and not uri.strip() and args.platform_store is not None:
        raise BadInput(NO_STORE)
    scratch = (args.scratch or "").strip().strip("/")
    if scratch and uri is not None and uri.strip():
        args.baseline_store = uri.strip()
        uri = f"{uri.strip().rstrip('/')}/{scratch}"
    return uri


class _ArgParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other bad input
        raise BadInput(f"{self.prog}: {message}")


# Read by the Hugging Face libraries when they are first imported; a user's own setting wins.
QUIET_LIBRARIES = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                   "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


def quiet_libraries() -> None:
    """Our log lines are the progress report; library progress bars and load reports are noise in pod logs.

    Set through the libraries' environment variables, so a step that never loads a model never imports
    transformers (docs/development.md, "Heavy libraries are imported where they are used"); a process
    that imported it already (the runner's zygote, a test) is quieted directly."""
    for name, value in QUIET_LIBRARIES.items():
        os.environ.setdefault(name, value)
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()


def main(step: str, run: Callable[[Store, argparse.Namespace], None], argv: list[str] | None = None) -> int:
    quiet_libraries()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, force=True,
                        format=f"%(asctime)s {step} %(message)s", datefmt="%H:%M:%S")
    signal.signal(signal.SIGTERM, _on_sigterm)
    chaos.step = step
    leftovers.sweep(("stage",))  # staged files of a step killed earlier on this machine
    start = time.time()
    try:
        p = parser(step)
        p.__class__ = _ArgParser
        args = p.parse_args(argv)
        if args.spec is not None:
            args.spec = parse_json_arg(args.spec, "--spec")
        store = open_store(store_root(args))
        store.check_writable()  # every step writes: a file or a read-only directory is refused up front
        chaos.point("start")
        tiny_pretrain.use_store(store)  # tiny:bert is the store's pre-trained tiny BERT, for this step only
        try:
            run(store, args)
        finally:
            tiny_pretrain.use_store(None)
        chaos.point("end")
    except BadInput as e:
        return _fail(f"error: {e}", EXIT_BAD_INPUT)
    except Transient as e:
        return _fail(f"transient error (will be retried): {e}", EXIT_TRANSIENT)
    except BertologyError as e:  # a step's own failure, with the exit code it documents
        return _fail(f"error: {e}", e.exit_code)
    except Exception as e:
        if not is_disk_full(e):
            leave_cause(f"{type(e).__name__}: {e}")
            raise
        # the artifact being written was not published (no marker): a retry on a node with room redoes it
        return _fail(f"transient error (will be retried): disk full (ENOSPC/EDQUOT) while writing: {e}",
                     EXIT_TRANSIENT)
    log.info("done in %.1fs", time.time() - start)
    return 0


def _fail(line: str, code: int) -> int:
    print(line, file=sys.stderr, flush=True)
    leave_cause(line)
    return code


def leave_cause(line: str) -> None:
    """Leave the failure's one line where the container's termination message is read
    ($BERTOLOGY_TERMINATION_LOG, the YAML's /dev/termination-log): Argo shows it as the node's message
    (bertology.argo.termination), so `argo get` and an exit handler say why a step failed."""
    path = os.environ.get("BERTOLOGY_TERMINATION_LOG", "").strip()
    if not path:
        return
    try:
        Path(path).write_text(line.splitlines()[0] if line else "", encoding="utf-8")
    except OSError:
        pass  # not in a pod, or the file is not writable: the log keeps the line anyway


def entry(step: str, run: Callable[[Store, argparse.Namespace], None]) -> None:
    """Run the step and end the process with its exit code, skipping the interpreter's own shutdown
    (bertology.process_exit: torch's C++ thread pools were seen to abort at finalisation, SIGABRT, after a
    step had finished and published, which a pod would report as a failure)."""
    exit_process(main(step, run))


def require_spec(args: argparse.Namespace, step: str) -> dict:
    if args.spec is None:
        raise BadInput(f"{step} needs --spec JSON")
    return args.spec


def write_outputs(directory: str, outputs: dict) -> None:
    """Argo output parameters, one `<name>.json` file each (a string as it is, anything else as JSON)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for name, value in outputs.items():
        (out / f"{name}.json").write_text(value if isinstance(value, str) else json.dumps(value))


def require_cells(store: Store, args: argparse.Namespace, step: str) -> list:
    """The step's cells: one cell, or a bundle that one pod runs in order, so a study of hundreds of runs
    stays far below Argo's node limits. From the stored plan (`--plan`, `--ids`), or a `--spec` given by
    hand (a cell or a non-empty list of cells). Every cell is checked before any runs."""
    from bertology.spec import Cell

    if args.plan is not None:
        cells = planned.load_plan(store, args.plan).cells(planned.parse_ids(args.ids, step))
    else:
        spec = require_spec(args, step)
        if isinstance(spec, list) and not spec:
            raise BadInput(f"{step} --spec is an empty list (give a cell or a list of cells)")
        cells = [Cell.from_dict(c) for c in (spec if isinstance(spec, list) else [spec])]
    if len(cells) > 1:
        for i, cell in enumerate(cells, 1):
            log.info("bundle: cell %d of %d is run %s", i, len(cells), cell.run.id)
    return cells


def require_one(store: Store, args: argparse.Namespace, step: str, kind: str):
    """The one dataset or checkpoint spec a step makes: `--plan` + `--ids ID`, or `--spec` by hand."""
    from bertology.spec import CheckpointSpec, DatasetSpec

    if args.plan is not None:
        ids = planned.parse_ids(args.ids, step)
        if len(ids) != 1:
            raise BadInput(f"{step} makes one {kind} per pod, got --ids {args.ids!r}")
        plan = planned.load_plan(store, args.plan)
        return plan.dataset(ids[0]) if kind == "dataset" else plan.checkpoint(ids[0])
    spec = require_spec(args, step)
    return DatasetSpec.from_dict(spec) if kind == "dataset" else CheckpointSpec.from_dict(spec)


def require_study(args: argparse.Namespace, step: str) -> tuple[str, str, dict]:
    """(name, study id, options) of a whole-study step: `--plan NAME:ID`, or by hand
    `--spec '{"name": …, "id": …}'` (options: the spec's other keys)."""
    if args.plan is not None:
        return (*planned.parse_plan_ref(args.plan), {})
    spec = require_spec(args, step)
    if not isinstance(spec, dict) or not {"name", "id"} <= set(spec):
        raise BadInput(f"{step} needs --plan NAME:STUDY_ID, or --spec '{{\"name\": …, \"id\": …}}'; got {spec!r}")
    return spec["name"], spec["id"], {k: v for k, v in spec.items() if k not in ("name", "id")}
