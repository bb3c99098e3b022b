"""What `bertology run` shows while a study runs: one progress line, the errors, a short ending.

The runner reports RunEvents (a container started, a fan-out expanded, a node finished, an attempt
failed and will be retried); this module turns them into one line of study progress: each top-level
fan-out's children done/total under its own name (`datasets 3/3 · checkpoints 2/6 · cells 2/12`), failed,
steps running, ETA. On a terminal the line is a tqdm bar redrawn in place; elsewhere (Argo pods, CI logs)
it is a plain line printed at most every `interval_s` seconds and only when something changed. Every
step's own output stays in its node log (`<workdir>/<node>/log.txt`); `-v` echoes it as well, `-q` drops
the progress line.

A study's fan-outs are named by what they make (prepare-data: datasets, build-checkpoint: checkpoints,
cell: cells); any other by its task name. The ETA comes from the cells once they exist (a workflow with
none of a study's fan-outs: from all of its fan-outs). A `label` callable names a node by what it runs
(`bertology run` reads the study's plan for it); a node it does not know keeps its Argo name.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from bertology.argo.exit_handler import EXIT_NODE
from bertology.argo.runner import RunEvent
from bertology.errors import EXIT_BAD_INPUT

QUIET, NORMAL, VERBOSE = -1, 0, 1
FAILED = ("Failed", "Error")
# a study's top-level fan-outs, by what they make (bertology's study template); another keeps its task name
GROUP_NAMES = {"prepare-data": "datasets", "build-checkpoint": "checkpoints", "cell": "cells"}
CELLS = "cell"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """The counts behind the line; fed RunEvents, safe to call from the runner's threads."""

    def __init__(self, clock=time.monotonic, label: Callable[[str], str | None] | None = None):
        self._clock = clock
        self._label = label
        self.groups: dict[str, int] = {}  # top-level fan-out -> number of children, in the order they expanded
        self.parent: dict[str, str] = {}  # fan-out child -> its fan-out
        self.done: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.running: dict[str, float] = {}  # container node -> when it started
        self.failures: list[RunEvent] = []  # the containers that failed, in order
        self.started_at: dict[str, float] = {}  # fan-out -> when it expanded
        self.waiting: dict[str, str] = {}  # container node -> the semaphore it waits for (another run holds it)

    def feed(self, event: RunEvent) -> bool:
        """Count the event; True when it is a container that failed (an error to show now)."""
        failed_container = False
        if event.kind == "fanout" and "." not in event.node:
            self.groups[event.node] = event.count
            self.started_at.setdefault(event.node, self._clock())
            self.parent.update({child: event.node for child in event.children})
        elif event.kind == "waiting":
            self.waiting[event.node] = event.message
        elif event.kind == "started":
            self.waiting.pop(event.node, None)
            self.running[event.node] = self._clock()
        elif event.kind == "finished":
            self.waiting.pop(event.node, None)
            was_container = self.running.pop(event.node, None) is not None
            if was_container and event.phase in FAILED:
                self.failures.append(event)
                failed_container = True
            group = self.parent.get(event.node)
            if group is not None:
                self.done[group] = self.done.get(group, 0) + 1
                if event.phase in FAILED:
                    self.failed[group] = self.failed.get(group, 0) + 1
        return failed_container

    def name(self, node: str) -> str:
        """The node by what it runs and by its Argo name (its log's folder), or its Argo name alone."""
        label = self._label(node) if self._label is not None else None
        return f"{label} ({node})" if label else node

    def counts(self) -> tuple[int, int | None, int]:
        """(children finished, children in all or None before any fan-out, failed), over every top-level
        fan-out: the finished count never falls as fan-outs expand."""
        if not self.groups:
            return 0, None, 0
        return (sum(self.done.get(g, 0) for g in self.groups), sum(self.groups.values()),
                sum(self.failed.get(g, 0) for g in self.groups))

    def _eta_groups(self) -> list[str]:
        if CELLS in self.groups:
            return [CELLS]
        if any(g in GROUP_NAMES for g in self.groups):  # a study before its cells: no ETA from its other work
            return []
        return list(self.groups)

    def eta(self) -> float | None:
        groups = self._eta_groups()
        done = sum(self.done.get(g, 0) for g in groups)
        total = sum(self.groups[g] for g in groups)
        if not done or done >= total:
            return None
        elapsed = self._clock() - min(self.started_at[g] for g in groups)
        return elapsed / done * (total - done)

    def line(self) -> str:
        parts = [f"{GROUP_NAMES.get(g, g)} {self.done.get(g, 0)}/{n}" for g, n in self.groups.items()]
        if not parts:
            parts.append("cells 0/?")
        failed = self.counts()[2]
        if failed:
            parts.append(f"{failed} failed")
        running = sorted(self.running)
        if len(running) == 1:
            label = self._label(running[0]) if self._label is not None else None
            parts.append(f"running {label or running[0]}")
        else:
            parts.append(f"{len(running)} steps running")
        if self.waiting:  # for a semaphore another run on this machine holds
            locks = sorted(set(self.waiting.values()))
            parts.append(f"{len(self.waiting)} waiting for {', '.join(locks)}")
        eta = self.eta()
        if eta is not None:
            parts.append(f"ETA {_duration(eta)}")
        return " · ".join(parts)


def retry_line(event: RunEvent, name: str) -> str:
    """A failed attempt the runner retries: which step, why, and which attempt of how many."""
    why = event.message or (f"exit code {event.exit_code}" if event.exit_code is not None else "")
    of = f" of {event.max_attempts}" if event.max_attempts else ""
    return f"{name}: attempt {event.count}{of} {event.phase}" + (f" ({why})" if why else "") + "; retrying"


class Console:
    """The runner's `log` and `events` callbacks for one run; `close()` ends the progress line."""

    def __init__(self, verbosity: int = NORMAL, out: TextIO | None = None, err: TextIO | None = None,
                 tty: bool | None = None, interval_s: float = 30.0,
                 label: Callable[[str], str | None] | None = None):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.verbosity = verbosity
        self.progress = Progress(label=label)
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last = ""
        self._bar = None
        tty = self.out.isatty() if tty is None else tty
        if verbosity == NORMAL:
            if tty:
                from tqdm import tqdm

                self._bar = tqdm(total=0, file=self.out, dynamic_ncols=True, leave=True,
                                 bar_format="{desc}{bar:20} {elapsed}")
                interval_s = 1.0
            self._ticker = threading.Thread(target=self._tick, args=(interval_s,), daemon=True)
            self._ticker.start()

    def log(self, line: str) -> None:
        """A runner line (`[node] text`): the node log has it already; echoed only with -v."""
        if self.verbosity >= VERBOSE:
            with self._lock:
                print(line, file=self.out, flush=True)

    def event(self, event: RunEvent) -> None:
        with self._lock:
            # a bad input (exit 2) is not echoed here: `bertology run` ends with the step's one-line error
            # naming the bad value, so a refused study leaves exactly that line on stderr; nor is the exit
            # handler's verdict, which restates the steps' failures (the Workflow's message, printed last)
            if (self.progress.feed(event) and self.verbosity < VERBOSE and event.exit_code != EXIT_BAD_INPUT
                    and event.node != EXIT_NODE):
                self._write_error(f"{self.progress.name(event.node)}: {event.phase}"
                                  + (f" ({event.message})" if event.message else ""))
            elif event.kind == "retry" and self.verbosity < VERBOSE:  # -v echoes the runner's own line
                self._write_error(retry_line(event, self.progress.name(event.node)))
            if self._bar is not None:
                self._draw()

    def _write_error(self, text: str) -> None:
        if self._bar is not None:
            self._bar.clear()
        print(text, file=self.err, flush=True)

    def _draw(self) -> None:
        done, total, _ = self.progress.counts()
        self._bar.total = total or 0
        self._bar.n = done
        self._bar.set_description_str(self.progress.line() + " ", refresh=False)
        self._bar.refresh()

    def _tick(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            with self._lock:
                if self._bar is not None:
                    self._draw()
                else:
                    self._print_if_changed()

    def _print_if_changed(self) -> None:
        line = self.progress.line()
        if line.split(" · ETA")[0] != self._last.split(" · ETA")[0]:
            print(line, file=self.out, flush=True)
            self._last = line

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            elif self.verbosity == NORMAL:
                self._print_if_changed()
