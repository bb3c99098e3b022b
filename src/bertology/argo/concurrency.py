"""How many pods run at once: `spec.parallelism` and `synchronization.semaphores`, as Argo counts them.

Follows, in argoproj/argo-workflows (v3.6 to v4.1):
- workflow/controller/operator.go `checkParallelism` with node_counters.go `getActivePodsCounter`: the
  workflow's `spec.parallelism` caps its Pending or Running pods; a pod waiting for a lock does not count.
  (Template-level `parallelism` on a DAG is refused by the runner; the validator refuses it on a leaf.)
- `executeTemplate` and workflow/sync (semaphore.go): a template's `synchronization.semaphores` are
  acquired before its pod is created, all of them, and held until its node is fulfilled (a Retry node:
  through every attempt and backoff wait); a node that cannot get them waits (phase Pending,
  "Waiting for <lock> lock"). The pod cap applies to each attempt's pod. The limit is the integer in ConfigMap key `<name>/<key>`. There is no
  ConfigMap locally: `bertology run --semaphore NAME/KEY=N` sets a limit, and an unset one is 1 (this
  machine is one device), said in the run's first lines.

A node still waiting when the Workflow's activeDeadlineSeconds passes gives up its place and fails
(deadlines.py: operator.go `failNodesWithoutCreatedPodsAfterDeadlineOrShutdown`).

Within a run, waiters are served in tree order (depth first: a started cell finishes before the next
starts), so a run at parallelism 1 is reproducible. Across runs, a semaphore is this machine's, shared by
every `bertology run` (semaphores.py), and runs are served as Argo serves Workflows: by the Workflow's
spec.priority, then its age. A GPU semaphore (`gpu_semaphores`) is shared only where the steps holding it
would run on a GPU; elsewhere it stays the run's own.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager

from bertology.argo.semaphores import Holder, Queue, WaitExpired

DEFAULT_SEMAPHORE_LIMIT = 1
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")  # the device plugins' resource names a pod requests a GPU by


class DeadlinePassed(Exception):
    """The Workflow's deadline passed while a node waited for a lock (`what`: its name) or a parallelism
    slot, after `waited` seconds."""

    def __init__(self, what: str, waited: float = 0.0):
        super().__init__(what)
        self.what, self.waited = what, waited


class OrderedPool:
    """At most `size` holders at once; waiters are served in key order (tree order of the nodes).

    A fan-out reserves its children's places in line before their threads start, so the order does not
    depend on which thread happens to ask first."""

    def __init__(self, size: int, name: str = "parallelism"):
        self.size, self.name = size, name
        self._free = size
        self._waiting: list[tuple[int, ...]] = []
        self._reserved: set[tuple[int, ...]] = set()
        self._cond = threading.Condition()

    def reserve(self, key: tuple[int, ...]) -> None:
        with self._cond:
            self._reserved.add(key)
            heapq.heappush(self._waiting, key)

    def cancel(self, key: tuple[int, ...]) -> None:
        """Give up a reservation that was not used (no-op once the node held a place)."""
        with self._cond:
            if key in self._reserved:
                self._reserved.discard(key)
                self._waiting.remove(key)
                heapq.heapify(self._waiting)
                self._cond.notify_all()

    @contextmanager
    def hold(self, key: tuple[int, ...], deadline: float | None = None) -> Iterator[None]:
        began = time.time()
        with self._cond:
            if key in self._reserved:
                self._reserved.discard(key)
            else:
                heapq.heappush(self._waiting, key)
            ready = lambda: self._free > 0 and self._waiting[0] == key
            while not ready():
                left = None if deadline is None else deadline - time.time()
                if left is not None and left <= 0:
                    self._waiting.remove(key)
                    heapq.heapify(self._waiting)
                    self._cond.notify_all()
                    raise DeadlinePassed(self.name, time.time() - began)
                self._cond.wait(left)
            heapq.heappop(self._waiting)
            self._free -= 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._free += 1
                self._cond.notify_all()


def semaphore_names(template: dict) -> list[str]:
    """`NAME/KEY` of each ConfigMap semaphore a template holds (v3.6+ `semaphores`; v3.5 `semaphore`)."""
    sync = template.get("synchronization") or {}
    refs = list(sync.get("semaphores") or []) + ([sync["semaphore"]] if sync.get("semaphore") else [])
    names = []
    for ref in refs:
        selector = ref.get("configMapKeyRef") or {}
        names.append(f"{selector.get('name')}/{selector.get('key')}")
    return names


def requests_gpu(template: dict) -> bool:
    """Whether the template's pod asks for a GPU: a GPU resource in its container's requests or limits."""
    resources = (template.get("container") or {}).get("resources") or {}
    return any(str((resources.get(part) or {}).get(name, "0")).strip() not in ("0", "")
               for part in ("requests", "limits") for name in GPU_RESOURCES)


def gpu_semaphores(templates: Iterable[dict]) -> set[str]:
    """The semaphores that guard a GPU: each held only by templates whose pods request one (steps.yaml's
    finetune and evaluate hold `bertology-semaphores/gpu`)."""
    holders: dict[str, list[bool]] = {}
    for template in templates:
        for name in semaphore_names(template):
            holders.setdefault(name, []).append(requests_gpu(template))
    return {name for name, gpu in holders.items() if all(gpu)}


class Limits:
    """The pod cap and the semaphores of one run; with `machine`, each semaphore is also this machine's,
    shared with every other run (semaphores.py), except a GPU semaphore (`gpu`) on a machine where the
    steps run on no GPU (`gpu_here` false), which only orders and caps the run's own steps."""

    def __init__(self, parallelism: int, semaphores: dict[str, int], machine: Queue | None = None,
                 gpu: Iterable[str] = (), gpu_here: bool = True):
        self.pods = OrderedPool(parallelism)
        self.machine = machine
        self.gpu = frozenset(gpu)
        self.own = frozenset() if gpu_here else self.gpu
        self._limits = dict(semaphores)
        self._semaphores: dict[str, OrderedPool] = {}
        self._lock = threading.Lock()

    def semaphore(self, name: str) -> OrderedPool:
        with self._lock:
            if name not in self._semaphores:
                self._semaphores[name] = OrderedPool(self._limits.get(name, DEFAULT_SEMAPHORE_LIMIT), name)
            return self._semaphores[name]

    def reserve(self, key: tuple[int, ...], semaphores: list[str]) -> None:
        """A fan-out child's place in line, before its thread starts: in its semaphores' queues (a node waiting
        for a lock holds no pod slot), else in the pod queue."""
        for pool in [self.semaphore(name) for name in semaphores] or [self.pods]:
            pool.reserve(key)

    def cancel(self, key: tuple[int, ...], semaphores: list[str]) -> None:
        for pool in [self.semaphore(name) for name in semaphores] or [self.pods]:
            pool.cancel(key)

    def shared(self, name: str) -> bool:
        """Whether semaphore `name` is this machine's, shared with every other run."""
        return self.machine is not None and name not in self.own

    @contextmanager
    def locks(self, key: tuple[int, ...], semaphores: list[str], deadline: float | None = None, holder: str = "",
              waiting: Callable[[str, tuple[Holder, ...]], None] | None = None, label: str = "") -> Iterator[float]:
        """The template's semaphores, for the node's whole life: the controller acquires them for the node
        (operator.go executeTemplate: TryAcquire with the node's id, which for a template with a
        retryStrategy is the Retry node's) before it makes any pod, and releases them once it is fulfilled,
        so a Retry node keeps them through its backoff waits (upstream #9875). Yields the seconds the node
        waited; `waiting(lock, holders)` is called when it has to wait for another run's slot, and again
        when those holders change; `label` says what the node does to the runs that wait behind it. Raises
        DeadlinePassed (the lock's name, the seconds waited) as `hold` does."""
        began = time.time()
        who = holder or "/".join(map(str, key))
        with ExitStack() as stack:
            for name in sorted(semaphores):
                queued = False
                machine = self.machine if self.shared(name) else None
                try:
                    if machine is not None:  # the run's place in the machine's queue, from the start
                        machine.join(name)
                        queued = True
                    stack.enter_context(self.semaphore(name).hold(key, deadline))  # the run's own order
                    if machine is not None:
                        queued = False  # acquire leaves the queue, whatever happens
                        machine.acquire(name, self.semaphore(name).size, who, deadline,
                                        None if waiting is None else (lambda held, name=name: waiting(name, held)),
                                        label)
                        stack.callback(machine.release, name, who)
                except BaseException as e:
                    if queued and machine is not None:
                        machine.unjoin(name)
                    if isinstance(e, (DeadlinePassed, WaitExpired)):
                        raise DeadlinePassed(name, time.time() - began) from None
                    raise
            yield time.time() - began if semaphores else 0.0
