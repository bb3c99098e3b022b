"""Several runs on one GPU at once: a bundle's cells fine-tuned `gpu_concurrency` at a time.

Why: a BERT-base run on a GLUE-sized set leaves the GPU idle while its process starts, loads the model and
data, evaluates, saves and publishes, and a small-batch step does not fill an H100 either. With K runs
sharing the device, one run's overhead overlaps another's steps. bench/gpu.py measures the aggregate
throughput for K = 1, 2, 4; the study parameter `gpu_concurrency` (default 1) picks K. Like `bundle`, it
is how the work executes, so it is part of no id.

Each cell runs as its own process (the finetune step with `--spec CELL`), exactly the step a single-cell
pod runs, so its result is the one it would have alone (tested on CPU: every row identical). Processes,
not threads: each has its own CUDA context, RNG state and allocator, and a crash or an out-of-memory error
fails its cell only. A sequential run's unfinished intermediate run is trained first, once: two cells
after one intermediate would otherwise train it at the same time, into the same resume slots.

Exit: 0 when every cell succeeded; otherwise the first failure's kind, the worst first: bad input (2),
a failure (1), then anything else as transient (75: a killed child, e.g. out of memory, is retried, and
the cells that finished are cached by then). After a failure no new cell starts; running ones finish.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable

from bertology.errors import EXIT_BAD_INPUT, BadInput, BertologyError, Transient
from bertology.spec import Cell, canonical_json
from bertology.steps import planned
from bertology.steps.common import checkpoint_key, dataset_key, run_key
from bertology.store import Store

log = logging.getLogger("bertology")

# The finetune step on one cell, as its own interpreter (independent of the working directory).
_CHILD = "from bertology.steps.finetune import run; from bertology.steps.harness import entry; entry('finetune', run)"
_POLL_SECONDS = 0.2


# The finetune step's execution settings: `--param NAME=K` by hand, else the plan's (the study parameter).
SETTINGS = {"gpu_concurrency": "runs at once per GPU", "fuse": "runs trained as one model"}


def concurrency(store: Store, args) -> int:
    """K: `--param gpu_concurrency=K` when given (by hand), else the plan's (the study parameter), else 1."""
    return execution_setting(store, args, "gpu_concurrency")


def execution_setting(store: Store, args, name: str) -> int:
    """The integer setting `name` (>= 1) of SETTINGS: `--param NAME=K`, else the plan's, else 1."""
    from bertology.study import parse_pairs

    params = parse_pairs(args.param or [], "--param")
    unknown = sorted(set(params) - set(SETTINGS))
    if unknown:
        raise BadInput(f"finetune --param takes {' and '.join(f'{s}=K' for s in SETTINGS)} only, got '{unknown[0]}'")
    if name in params:
        raw = params[name]
    elif args.plan is not None:
        raw = (planned.load_plan(store, args.plan).doc.get("execution") or {}).get(name, 1)
    else:
        return 1
    try:
        k = int(str(raw).strip() or 1)
    except ValueError:
        k = 0
    if k < 1:
        raise BadInput(f"{name} must be an integer >= 1 ({SETTINGS[name]}), got {raw!r}")
    return k


def waves(cells: list[Cell]) -> list[list[Cell]]:
    """The cells and their intermediate runs, each run once, in waves that can run side by side: the
    deepest intermediates first, the cells last."""
    depth: dict[str, tuple[int, Cell]] = {}

    def visit(cell: Cell, d: int) -> None:
        if cell.run.id not in depth or depth[cell.run.id][0] < d:
            depth[cell.run.id] = (d, cell)
        if cell.run.after is not None:
            visit(Cell(cell.study, cell.variant, cell.model, cell.run.after), d + 1)

    for cell in cells:
        visit(cell, 0)
    deepest = max(d for d, _ in depth.values())
    return [[c for d, c in depth.values() if d == level] for level in range(deepest, -1, -1)]


def run_cells(store: Store, cells: list[Cell], k: int, run_here: Callable[[Store, Cell], str]) -> None:
    """Fine-tune `cells` (a bundle) K at a time. Finished runs are handled here by `run_here` (the cached
    path: publishing only); the others each get a process."""
    plan = waves(cells)
    todo_by_wave = [[c for c in wave if not store.is_done(run_key(c.run.id, "finetune"))] for wave in plan]
    for cell in dict.fromkeys(c for wave in todo_by_wave for c in wave):  # fetched once (an S3 store's
        store.local_dir(dataset_key(cell.run.dataset.id))  # cache), not by K processes at once
        store.local_dir(checkpoint_key(cell.run.checkpoint.id))
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:  # K processes share the pod's CPUs (data batching, the optimizer on CPU)
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // k))
    for i, (wave, todo) in enumerate(zip(plan, todo_by_wave)):
        last = i == len(plan) - 1
        if todo:
            log.info("gpu_concurrency %d: %s %d runs side by side", k, "fine-tuning" if last else
                     "first the intermediate runs,", len(todo))
            _run_side_by_side(store, todo, k, env)
        if last:
            for cell in wave:
                if cell not in todo:
                    run_here(store, cell)


def _run_side_by_side(store: Store, cells: list[Cell], k: int, env: dict[str, str]) -> None:
    pending, running, codes = list(cells), {}, {}
    try:
        while pending or running:
            while pending and len(running) < k and not codes:
                cell = pending.pop(0)
                argv = [sys.executable, "-c", _CHILD, "--store", store.uri, "--spec", canonical_json(cell)]
                proc = subprocess.Popen(argv, env=env)
                log.info("run %s: started in process %d", cell.run.id, proc.pid)
                running[proc] = cell
            if not running:
                break
            time.sleep(_POLL_SECONDS)
            for proc in [p for p in running if p.poll() is not None]:
                cell = running.pop(proc)
                if proc.returncode:
                    codes[cell.run.id] = proc.returncode
                    log.info("run %s: process %d failed with exit code %d", cell.run.id, proc.pid, proc.returncode)
    finally:
        for proc in running:  # SIGTERM (preemption) or an error here: stop the children as a pod stops
            proc.terminate()
        for proc in running:
            proc.wait()
    if codes:
        _raise_worst(codes, skipped=len(pending))


def _raise_worst(codes: dict[str, int], skipped: int) -> None:
    summary = ", ".join(f"{run} exit {code}" for run, code in codes.items())
    more = f"; {skipped} runs not started" if skipped else ""
    values = set(codes.values())
    if EXIT_BAD_INPUT in values:
        raise BadInput(f"bad input in runs of the bundle ({summary}{more})")
    if 1 in values:
        raise BertologyError(f"runs of the bundle failed ({summary}{more})")
    raise Transient(f"runs of the bundle were interrupted ({summary}{more}); finished runs are kept")
