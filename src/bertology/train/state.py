"""Resume state: what a killed fine-tuning run needs to go on as if it had never stopped, and where it lives.

The loop hands a plain dict (weights, optimizer, scheduler, counters, curves, best epoch so far, RNG
states) to a `StateSink` every N steps and asks it for the last one at start; loop.py knows nothing of
stores. `StoreSlots` keeps the state in a store in two slots, `a/` and `b/`, each a normal artifact
(files first, `_SUCCESS.json` last). A save always overwrites the slot *not* holding the newest good
state, so a kill at any moment (mid-write, mid-publish, while the store deletes the slot's old files)
leaves the other slot's state readable. One slot would not do: `Store.artifact` clears the prefix before
it publishes, and a kill between the two would lose the only state.

The loop hands over a snapshot (CPU copies), so `StoreSlots` writes and uploads it in a background thread
while training goes on: a BERT-base state is ~1.75 GB, seconds to write, and the GPU need not wait.
"""

from __future__ import annotations

import io
import random
import threading
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

SLOTS = ("a", "b")
STATE_FILE = "state.pt"


class StateSink(Protocol):
    """Where the loop's resume state goes: `load` the newest usable one (or None), `save` a new one (a
    snapshot the sink may keep while the loop goes on)."""

    def load(self) -> dict | None: ...
    def save(self, state: dict) -> None: ...


def rng_state() -> dict:
    """Every RNG a training step may draw from: dropout is torch's (CPU and each GPU)."""
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": [version, list(mt), gauss], "numpy": [kind, keys.tolist(), pos, has_gauss, cached],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, mt, gauss = state["python"]
    random.setstate((version, tuple(mt), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def snapshot(obj):
    """`obj` with every tensor copied to the CPU: what the live model and optimizer were at this step."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(snapshot(v) for v in obj)
    return obj


def to_bytes(state: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def from_bytes(data: bytes) -> dict:
    """Tensors and plain Python values only (`weights_only`): a state file is data, never code."""
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise TypeError(f"expected a dict, found {type(state).__name__}")
    return state


class StoreSlots:
    """A run's resume state in a store, under `prefix`/{a,b}/ (see the module docstring)."""

    def __init__(self, store, prefix: str, log: Callable[[str], None] = print):
        self.store, self.prefix, self.log = store, prefix.rstrip("/"), log
        self.newest: str | None = None  # the slot holding the newest good state
        self._writer: threading.Thread | None = None

    def _key(self, slot: str) -> str:
        return f"{self.prefix}/{slot}"

    def load(self) -> dict | None:
        finished = []
        for slot in SLOTS:
            if self.store.is_done(self._key(slot)):
                finished.append((int(self.store.marker(self._key(slot)).get("step", -1)), slot))
            elif self.store.list(self._key(slot)):
                self.log(f"resume state {self.store.url(self._key(slot))} is unfinished; ignored")
        for step, slot in sorted(finished, reverse=True):
            try:
                state = from_bytes(self.store.read_member(self._key(slot), STATE_FILE))  # verified
            except Exception as e:  # noqa: BLE001 - any unreadable state is skipped, never fatal
                self.log(f"resume state {self.store.url(self._key(slot))} (step {step}) is unreadable "
                         f"({type(e).__name__}: {str(e)[:200]}); ignored")
                continue
            self.newest = slot
            return state
        return None

    def save(self, state: dict) -> None:
        """Write `state` in the background; a save still in flight is waited for first (one at a time)."""
        self.flush()
        self._writer = threading.Thread(target=self._write, args=(state,), name="resume-state", daemon=True)
        self._writer.start()

    def _write(self, state: dict) -> None:
        slot = "b" if self.newest == "a" else "a"
        try:
            with self.store.artifact(self._key(slot), {"step": state["step"], "epoch": state["epoch"]},
                                     replace=True) as out:  # a slot is rewritten on purpose
                torch.save(state, out / STATE_FILE)
        except Exception as e:  # noqa: BLE001 - training goes on; the next save tries again
            self.log(f"resume state at step {state['step']} not saved ({type(e).__name__}: {e})")
            return
        self.newest = slot

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer = None

    def clear(self) -> None:
        """Delete every state (the run is published); waits for a save in flight first."""
        self.flush()
        self.store.delete_prefix(self.prefix)
