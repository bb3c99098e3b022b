"""The semaphores every `bertology run` on this machine shares, with Argo's queue order across runs.

On a cluster one controller keeps each ConfigMap semaphore for the whole namespace, so every study and the
nightly wait in one queue for the `gpu` key. Locally each `bertology run` is its own controller: the queue
lives in a directory that every run of this user on this machine reads (`$BERTOLOGY_SEMAPHORE_DIR`, else
`<tmp>/bertology-semaphores-<uid>`), one JSON state file per semaphore, changed only under an exclusive
`flock`. Follows, in argoproj/argo-workflows (v3.6.19, v3.7.18, v4.1.2):

- workflow/sync/sync_manager.go `TryAcquire` (v3.6), `prepAcquire` (v3.7, v4.1): a waiter joins the queue
  with its Workflow's own priority and creation time (`if wf.Spec.Priority != nil { priority =
  *wf.Spec.Priority } else { priority = 0 }`, `creationTime := wf.CreationTimestamp`). `wf` is the Workflow
  object (operator.go passes `woc.wf`, not the spec joined with its WorkflowTemplate, `woc.execWf`), so a
  priority set in a WorkflowTemplate is never read; a CronWorkflow's `workflowSpec` is its Workflows' spec
  (workflow/common/convert.go `toWorkflow`: `Spec: cronWf.Spec.WorkflowSpec`).
- workflow/sync/multi_throttler.go `priorityQueue.Less`: the higher priority first, then the older Workflow
  (`if pq.items[i].priority == pq.items[j].priority { return pq.items[i].creationTime.Before(...) }`).
- workflow/sync/semaphore.go `checkAcquire`: a node takes a free slot only when the front of the queue is a
  node of its own Workflow (`isSameWorkflowNodeKeys`), so every waiting node of an older Workflow of the
  same priority goes before any node of a newer one.
- sync_manager.go `CheckWorkflowExistence`: the holds and places of a Workflow that no longer exists are
  released (`lock.release(holderKeys)`, `lock.removeFromQueue(holderKeys)`). Locally: those of a run whose
  process has ended, so a killed run leaves no slot behind.

Within one run, concurrency.py orders the run's own nodes (tree order); this queue orders the runs. The
limit each run applies is its own (--semaphore, else the ConfigMap it read), as the controller applies the
ConfigMap's current value.

A GPU semaphore (one only templates that request a GPU hold: concurrency.gpu_semaphores) guards this
machine's GPU, so it is shared only where a step would train on one (`gpu_present`); on a machine without
one, each run keeps it to itself and independent runs proceed side by side. Whoever takes a slot records
who it is (workflow, step, pid, checkout, store, since when), so a run that waits can say what it waits
behind and for how long.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

from bertology.errors import BadInput

DIR_ENV = "BERTOLOGY_SEMAPHORE_DIR"
GPU_ENV = "BERTOLOGY_GPU"  # 1: this machine has a GPU, 0: it has none (else it is looked for)
POLL_S = 0.05  # how often a waiting node looks at the queue again
INT32 = (-(1 << 31), (1 << 31) - 1)  # Workflow.spec.priority is an int32


class WaitExpired(Exception):
    """The caller's deadline passed while a node waited in the queue; it has left the queue."""


def default_directory() -> Path:
    return Path(tempfile.gettempdir()) / f"bertology-semaphores-{os.getuid()}"


def open_directory(path: str | Path | None = None) -> Path:
    """The queue directory (created, mode 0700). BadInput when it is not a directory of this user's that no
    one else can write: another user could then take or hold this machine's slots."""
    directory = Path(path or os.environ.get(DIR_ENV) or default_directory())
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.stat()
    except OSError as e:
        raise BadInput(f"semaphore directory '{directory}' cannot be used: {e.strerror or e} "
                       f"(set ${DIR_ENV} to a directory of your own)") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise BadInput(f"semaphore directory '{directory}' must be a directory of your own that only you can "
                       f"write (mode {stat.filemode(info.st_mode)}, owner uid {info.st_uid}); set ${DIR_ENV} "
                       f"to another")
    return directory


def gpu_present(environ: dict[str, str] | None = None, root: str | Path = "/") -> bool:
    """Whether a step here would run on a GPU, as train/device.py pick_device decides (torch.cuda.is_available),
    without importing torch into the runner: $BERTOLOGY_GPU (1 or 0) when set; else none when
    CUDA_VISIBLE_DEVICES hides every device ("", or a first entry "-1"), when this interpreter's torch is a
    build without CUDA, or when the NVIDIA driver lists no device (`root`: where /proc and /dev are, for tests)."""
    environ = os.environ if environ is None else environ
    given = environ.get(GPU_ENV, "").strip()
    if given:
        if given not in ("0", "1"):
            raise BadInput(f"${GPU_ENV}={given!r}: expected 1 (this machine has a GPU) or 0 (it has none)")
        return given == "1"
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.split(",")[0].strip() in ("", "-1"):
        return False
    if not _torch_has_cuda():
        return False
    root = Path(root)
    listed = root / "proc/driver/nvidia/gpus"
    return (listed.is_dir() and any(listed.iterdir())) or any(
        p.name.removeprefix("nvidia").isdigit() for p in (root / "dev").glob("nvidia*"))


def _torch_has_cuda() -> bool:
    """False for a torch built without CUDA (its version.py says `cuda = None`); True when unsure."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        text = (Path(spec.origin).parent / "version.py").read_text() if spec and spec.origin else ""
    except (ImportError, OSError, ValueError):
        return True
    return not text or any(line.split("=", 1)[-1].strip() not in ("None", "")
                           for line in text.splitlines() if line.startswith(("cuda", "hip")) and "=" in line)


def check_priority(value: object, where: str) -> int:
    """A Workflow's spec.priority: an int32 (pkg/apis/workflow/v1alpha1/workflow_types.go `Priority *int32`)."""
    text = str(value).strip()
    if isinstance(value, bool) or not (isinstance(value, int) or text.lstrip("+-").isdigit()):
        raise BadInput(f"{where} {value!r} is not an integer (allowed: {INT32[0]} to {INT32[1]}; the higher "
                       f"is served first)")
    number = int(text)
    if not INT32[0] <= number <= INT32[1]:
        raise BadInput(f"{where} {number} is out of range (allowed: {INT32[0]} to {INT32[1]}, an int32)")
    return number


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks (/proc/PID/stat field 22), so a reused pid is not taken for
    the run that ended; "" where /proc is not there."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not start or _process_start(pid) in ("", start)


@dataclass(frozen=True)
class Owner:
    """A run as the queue sees it: Argo's queue item is a node of a Workflow with that Workflow's
    priority and creation time; where it runs from, so that a run waiting behind it can name it."""

    run: str  # the run's workflow.uid
    workflow: str  # its name, for messages
    priority: int
    created: float  # epoch seconds: the Workflow's creationTimestamp
    pid: int
    start: str
    checkout: str = ""  # the project root its steps run in
    store: str = ""  # the store its study writes to, if it has one
    workdir: str = ""  # its step logs

    @classmethod
    def this_process(cls, run: str, workflow: str, priority: int, created: float, checkout: str = "",
                     store: str = "", workdir: str = "") -> Owner:
        return cls(run, workflow, priority, created, os.getpid(), _process_start(os.getpid()), checkout, store,
                   workdir)


@dataclass(frozen=True)
class Holder:
    """A step of another run that holds a slot a waiting step needs, as that run recorded it."""

    workflow: str
    step: str  # what it does (its run's label for it), else its node name
    pid: int
    since: float  # epoch seconds: when it took the slot
    checkout: str = ""
    store: str = ""

    @classmethod
    def of(cls, entry: dict) -> Holder:
        """From a state file's holder entry (one an older bertology wrote lacks the newer keys)."""
        return cls(str(entry.get("workflow", "?")), str(entry.get("label") or entry.get("node") or "?"),
                   int(entry.get("pid", 0)), float(entry.get("since", time.time())), str(entry.get("checkout", "")),
                   str(entry.get("store", "")))

    def describe(self) -> str:
        where = [f"checkout {self.checkout}"] if self.checkout else []
        where += [f"store {self.store}"] if self.store else []
        return f"{self.workflow} ({', '.join([self.step, f'pid {self.pid}', *where])})"


class Queue:
    """This machine's semaphores, as one run takes and gives back their slots."""

    def __init__(self, directory: Path, owner: Owner):
        self.directory = Path(directory)
        self.owner = owner
        self._touched: set[str] = set()
        self._lock = threading.Lock()

    @contextmanager
    def _state(self, name: str) -> Iterator[dict]:
        base = self.directory / quote(name, safe="")
        with self._lock:
            self._touched.add(name)
        with open(f"{base}.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = Path(f"{base}.json")
            try:
                state = json.loads(path.read_text())
            except (FileNotFoundError, ValueError):
                state = {}
            before = json.dumps(state, sort_keys=True)
            state.setdefault("holders", {})
            state.setdefault("waiting", {})
            for part in ("holders", "waiting"):  # sync_manager.go CheckWorkflowExistence: ended runs let go
                for key, entry in list(state[part].items()):
                    if not _alive(entry["pid"], entry["start"]):
                        del state[part][key]
            yield state
            if json.dumps(state, sort_keys=True) != before:
                temporary = Path(f"{base}.json.{os.getpid()}.{threading.get_ident()}")
                temporary.write_text(json.dumps(state, indent=1, sort_keys=True))
                os.replace(temporary, path)

    def _front(self, state: dict) -> str | None:
        """The run whose node is first in the queue: multi_throttler.go priorityQueue.Less."""
        waiting = [(-w["priority"], w["created"], run) for run, w in state["waiting"].items() if w["nodes"] > 0]
        return min(waiting)[2] if waiting else None

    def _leave_queue(self, state: dict) -> None:
        mine = state["waiting"].get(self.owner.run)
        if mine is not None:
            mine["nodes"] -= 1
            if mine["nodes"] <= 0:
                del state["waiting"][self.owner.run]

    def join(self, name: str) -> None:
        """A node of this run starts to wait for semaphore `name`: from now on the run holds its place in
        the queue (as each of a Workflow's waiting nodes is an item of Argo's queue), also while the node
        still waits behind its own run's nodes (concurrency.py); `acquire` or `unjoin` ends it."""
        entry = {k: v for k, v in asdict(self.owner).items() if k != "run"}
        with self._state(name) as state:
            state["waiting"].setdefault(self.owner.run, {**entry, "nodes": 0})["nodes"] += 1

    def unjoin(self, name: str) -> None:
        with self._state(name) as state:
            self._leave_queue(state)

    def acquire(self, name: str, limit: int, holder: str, deadline: float | None = None,
                waiting: Callable[[tuple[Holder, ...]], None] | None = None, label: str = "") -> float:
        """Take a slot of semaphore `name` for node `holder` (which has joined the queue; `label`: what it
        does, for the messages of runs that wait behind it), waiting until this run is at the front; the
        seconds waited. `waiting(holders)` is called when it has to wait, and again whenever the holders
        change: the other runs' steps that hold the slots (none: runs ahead of it in the queue hold none
        yet). WaitExpired if `deadline` (epoch seconds) passes first. Either way the node has left the
        queue."""
        began = time.time()
        entry = {k: v for k, v in asdict(self.owner).items() if k != "run"}
        told: tuple[Holder, ...] | None = None
        try:
            while True:
                with self._state(name) as state:
                    if len(state["holders"]) < limit and self._front(state) == self.owner.run:
                        state["holders"][f"{self.owner.run}/{holder}"] = {
                            **entry, "node": holder, "label": label, "since": time.time()}
                        self._leave_queue(state)
                        return time.time() - began
                    holders = tuple(sorted((Holder.of(h) for key, h in state["holders"].items()
                                            if not key.startswith(f"{self.owner.run}/")), key=lambda h: h.since))
                if waiting is not None and holders != told:
                    told = holders
                    waiting(holders)
                left = None if deadline is None else deadline - time.time()
                if left is not None and left <= 0:
                    raise WaitExpired(name)
                time.sleep(POLL_S if left is None else max(0.0, min(POLL_S, left)))
        except BaseException:
            self.unjoin(name)
            raise

    def release(self, name: str, holder: str) -> None:
        with self._state(name) as state:
            state["holders"].pop(f"{self.owner.run}/{holder}", None)

    def leave(self) -> None:
        """The run ended: give back every slot and place it still has (none, unless a step's thread was
        still waiting when the run was stopped)."""
        with self._lock:
            touched = sorted(self._touched)
        for name in touched:
            with self._state(name) as state:
                state["waiting"].pop(self.owner.run, None)
                for key in [k for k in state["holders"] if k.startswith(f"{self.owner.run}/")]:
                    del state["holders"][key]
