"""K fine-tuning runs trained side by side in one process: one host thread steps each in turn, each run on
its own CUDA stream, and each run ends bit for bit as it ends trained alone.

Why: one run's training step, replayed as CUDA graphs (bertology.train.graphs), is one launch for the
host, and on an H200 it ran at 2,706 seq/s (BERT-base, batch 32, length 128, bf16), bound by memory
bandwidth rather than by the host. Kernels of other runs, queued on other streams, can fill what one run's
step leaves idle. Unlike K processes sharing the GPU (bertology.steps.shared_gpu), the runs share one CUDA
context, one allocator and one host thread, and pay start-up and imports once.

How:
- a run is the fine-tuning loop as a generator (bertology.train.loop.training) that yields after every
  training step; `side_by_side` steps the runs round-robin: for run r, enter its lane, step it once (copy
  its next batch in, replay its step, whatever bookkeeping follows the step), leave its lane, next run. A
  run that ends gives its place to the next waiting one; evaluation points, resume states, saving and
  publishing happen in the run's own turns, as when it trains alone (an evaluation point waits for the
  device: the other runs' queued steps drain meanwhile);
- a run's `Lane` is what makes it independent of the others: its RNG states, its CUDA stream and its graph
  memory pool;
- RNG: dropout draws from torch's global generators, so each run keeps its own states and the scheduler
  switches them at every turn. The host's generators (torch's CPU one, which dropout uses on CPU, and
  Python's and NumPy's global ones) are saved when the run leaves its lane and restored when it enters.
  On CUDA the device's default generator is pointed at the run's own generator state
  (`Generator.graphsafe_set_state`: a pointer swap, no copy and no sync). A CUDA graph registers the state
  the default generator points at when its capture begins, and each replay advances that state, so a
  run's graphs capture and replay with its own state, and its eager draws (a graph's warm-up) come from it
  too. Each run seeds its states itself (`torch.manual_seed(seed)` in the loop), so it draws exactly what
  it draws alone;
- streams: everything a run queues between entering and leaving its lane goes to its own stream
  (`torch.cuda.stream`): its model is loaded, its memory allocated and freed, its batches copied in and
  its graphs replayed there, so the caching allocator never hands one run's freed memory to another run's
  kernels still in flight. Each run trains on an engine of its own (bertology.train.engine: never kept for
  another run) whose graphs go to the lane's own memory pool (`torch.cuda.graph_pool_handle()`): two
  runs' replays in flight at once never share a pool. Its graphs are captured on its stream
  (bertology.train.graphs), so they use the cuBLAS workspace PyTorch keeps for that stream, never another
  run's.

The CUDA calls are all in `CudaLanes`; `CpuLanes` is the same scheduler on CPU, where stepping in turn is
plain interleaving, and what the tests drive (with a stand-in that records whose turn each graph replay
was in). A run that fails ends alone: the others go on, no waiting run starts after it, and
`raise_failure` raises the worst failure once every run has ended.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertology.errors import BadInput, BertologyError, Transient

# What a run of `side_by_side` is made from: given its lane, a generator such as bertology.train.loop.training.
Start = Callable[["Lane"], Generator[None, None, Any]]


@dataclass
class Lane:
    """One run's own RNG states, CUDA stream and graph memory pool (the last two: None on CPU)."""

    name: str
    host_rng: tuple  # the host generators' states while the run is out of its lane (`host_rng_state`)
    cuda_rng: torch.Generator | None = None  # a state of the default CUDA generator's, the run's own
    stream: Any = None  # torch.cuda.Stream
    pool: Any = None  # torch.cuda.graph_pool_handle(): where the run's CUDA graphs allocate


@dataclass
class Outcome:
    """How a run of `side_by_side` ended: what its generator returned, or the exception that ended it (or
    that it never started, after another run failed)."""

    name: str
    value: Any = None
    error: BaseException | None = None


def host_rng_state() -> tuple:
    """The host generators a run may draw from: torch's CPU generator (dropout on CPU), Python's, NumPy's."""
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def set_host_rng_state(state: tuple) -> None:
    cpu, python, numpy = state
    torch.set_rng_state(cpu)
    random.setstate(python)
    np.random.set_state(numpy)


class CpuLanes:
    """Lanes on CPU: each run's host RNG states, switched at every turn; no streams, no graph pools."""

    kind = "interleaved on CPU"

    def lane(self, name: str) -> Lane:
        return Lane(name, host_rng_state())

    def enter(self, lane: Lane) -> Any:
        """Make `lane` the current one; returns what `leave` needs to put back what was current."""
        outside = host_rng_state()
        set_host_rng_state(lane.host_rng)
        return outside

    def leave(self, lane: Lane, outside: Any) -> None:
        lane.host_rng = host_rng_state()
        set_host_rng_state(outside)

    @contextmanager
    def turn(self, lane: Lane):
        outside = self.enter(lane)
        try:
            yield lane
        finally:
            self.leave(lane, outside)


class CudaLanes(CpuLanes):
    """Lanes on a CUDA device: besides the host's, each run's own state of the device's default generator,
    its own stream and its own graph memory pool. The only CUDA code of side-by-side training."""

    kind = "on CUDA streams"

    def __init__(self, device: torch.device):
        torch.cuda.init()  # the default generators exist once CUDA is initialised
        self.device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        self.generator = torch.cuda.default_generators[self.device.index]

    def lane(self, name: str) -> Lane:
        lane = super().lane(name)
        # A state of its own (the run seeds it: torch.manual_seed in the loop), graph-safe: graphs captured
        # while the default generator points at it register it, and advance it at each replay.
        lane.cuda_rng = self.generator.clone_state()
        lane.stream = torch.cuda.Stream(self.device)
        lane.pool = torch.cuda.graph_pool_handle()
        return lane

    def enter(self, lane: Lane) -> Any:
        outside = super().enter(lane)
        own = self.generator.graphsafe_get_state()  # the state the default generator points at outside lanes
        self.generator.graphsafe_set_state(lane.cuda_rng)
        stream = torch.cuda.stream(lane.stream)
        stream.__enter__()
        return outside, own, stream

    def leave(self, lane: Lane, outside: Any) -> None:
        host, own, stream = outside
        stream.__exit__(None, None, None)
        self.generator.graphsafe_set_state(own)
        super().leave(lane, host)


def lanes_for(device: torch.device) -> CpuLanes:
    return CudaLanes(device) if device.type == "cuda" else CpuLanes()


def side_by_side(starts: Sequence[Start], lanes: CpuLanes, names: Sequence[str], *, at_once: int | None = None,
                 log: Callable[[str], None] = print) -> list[Outcome]:
    """Step the runs that `starts` make (each given a new lane), at most `at_once` at a time (default: all),
    round-robin from this thread until every one has ended; a run that ends gives its place to the next.
    Returns each run's `Outcome`, in the order of `starts`. After a run fails no waiting run starts; the
    others go on to their end. An interrupt (KeyboardInterrupt, a SIGTERM raised as an exception) closes
    every run in its lane and goes on up."""
    if len(names) != len(starts):
        raise BadInput(f"side by side: {len(starts)} runs but {len(names)} names")
    at_once = len(starts) if at_once is None else at_once
    if isinstance(at_once, bool) or not isinstance(at_once, int) or at_once < 1:
        raise BadInput(f"side by side: runs at once must be an integer >= 1, got {at_once!r}")
    outcomes = [Outcome(name) for name in names]
    waiting = list(range(len(starts)))
    running: list[tuple[int, Lane, Generator]] = []
    failed = False
    try:
        while waiting or running:
            while waiting and not failed and len(running) < at_once:
                i = waiting.pop(0)
                lane = lanes.lane(names[i])
                with lanes.turn(lane):
                    running.append((i, lane, starts[i](lane)))
                log(f"side by side ({lanes.kind}): run {names[i]} started, {len(running)} at once")
            if failed and not running:
                break
            for entry in list(running):
                i, lane, run = entry
                try:
                    with lanes.turn(lane):
                        next(run)
                except StopIteration as done:
                    outcomes[i].value = done.value
                    running.remove(entry)
                except Exception as e:  # noqa: BLE001 - the run ends; the others go on, raise_failure decides
                    outcomes[i].error = e
                    running.remove(entry)
                    failed = True
                    log(f"side by side: run {names[i]} failed ({type(e).__name__}: {str(e)[:300]}); "
                        f"{len(running)} others go on, {len(waiting)} not started")
    finally:
        for i, lane, run in running:  # interrupted: each run's cleanup (its artifacts unpublished) in its lane
            try:
                with lanes.turn(lane):
                    run.close()
            except Exception as e:  # noqa: BLE001 - the interrupt goes on up; every run is still closed
                log(f"side by side: run {names[i]} failed while closing ({type(e).__name__}: {str(e)[:300]})")
    for i in waiting:
        outcomes[i].error = Transient(f"run {names[i]} was not started: another run of its group failed")
    return outcomes


def raise_failure(outcomes: Sequence[Outcome]) -> None:
    """Raise the worst failure among `outcomes`, if any: bad input first, then a run's own failure, then any
    other exception, then a transient one (as a pod's exit code would rank them)."""
    failures = [o for o in outcomes if o.error is not None]
    if not failures:
        return

    def rank(o: Outcome) -> int:
        e = o.error
        return (0 if isinstance(e, BadInput) else 3 if isinstance(e, Transient)
                else 1 if isinstance(e, BertologyError) else 2)

    raise min(failures, key=rank).error  # each failure is in the log already (side_by_side)
