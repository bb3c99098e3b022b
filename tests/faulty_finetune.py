"""The finetune step, failing (exit 1) for the pod that holds the plan's smallest run id until
$BERTOLOGY_TEST_HEAL is set: tests/test_failed_cells.py runs it as `python -m tests.faulty_finetune` in
place of `jobs.finetune`, so it forks from the runner's warm interpreter like every other step."""

import os
import runpy
import sys

from bertology.spec import Cell
from bertology.steps.planned import load_plan
from bertology.store import open_store


def arg(flag: str) -> str:
    return sys.argv[sys.argv.index(flag) + 1]


plan = load_plan(open_store(arg("--store")), arg("--plan"))
first = min(Cell.from_dict(c).run.id for c in plan.doc["cells"])
if first in arg("--ids").split(",") and not os.environ.get("BERTOLOGY_TEST_HEAL"):
    print(f"injected failure of run {first}")
    sys.exit(1)
sys.argv = ["jobs.finetune", *sys.argv[1:]]
runpy.run_module("jobs.finetune", run_name="__main__")
