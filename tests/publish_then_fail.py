"""A study step that does its work and publishes it, then fails transiently (exit 75) for the pod that holds
the plan's smallest run id, on every attempt: tests/test_failed_cells.py runs it as `python -m
tests.publish_then_fail STEP ...` in place of `jobs.STEP`. The step's results are whole, so aggregate's
completeness check passes; only the Workflow's exit handler (verdict) sees the step that failed."""

import importlib
import sys

from bertology.process_exit import exit_process
from bertology.spec import Cell
from bertology.steps.harness import leave_cause, main
from bertology.steps.planned import load_plan
from bertology.store import open_store

step = sys.argv.pop(1)
code = main(step, importlib.import_module(f"bertology.steps.{step}").run, sys.argv[1:])
ids = sys.argv[sys.argv.index("--ids") + 1].split(",")
plan = load_plan(open_store(sys.argv[sys.argv.index("--store") + 1]), sys.argv[sys.argv.index("--plan") + 1])
first = min(Cell.from_dict(c).run.id for c in plan.doc["cells"])
if code == 0 and first in ids:
    line = f"transient error (will be retried): injected failure after publishing run {first}"
    print(line, file=sys.stderr, flush=True)
    leave_cause(line)
    code = 75
exit_process(code)
