"""What `bertology run` shows while a study runs: one progress line, the errors, a short ending.

The runner reports RunEvents (a fan-out's size planned, a container started, a fan-out expanded, a node
finished, an attempt failed and will be retried, a step waits for another run's semaphore); this module
turns them into one line of study progress: each top-level fan-out's children done/total under its own name
(`datasets 3/3 · checkpoints 2/6 · cells 2/12`), failed, the step running, ETA. On a terminal the line is a
tqdm bar redrawn in place; elsewhere (Argo pods, CI logs) it is a plain line printed at most every
`interval_s` seconds and only when something changed. Every step's own output stays in its node log
(`<workdir>/<node>/log.txt`); `-v` echoes it as well, `-q` drops the progress line.

The bar is the run's known work done: every top-level fan-out's children, counted from the moment the plan
they come from exists (the runner announces their sizes then), so it fills once and never moves back; no
count is shown before it is known, and a fan-out with nothing to do is left out. A study's fan-outs are
named by what they make (prepare-data: datasets, build-checkpoint: checkpoints, cell: cells); any other by
its task name. The ETA comes from the cells once they exist (a workflow with none of a study's fan-outs:
from all of its fan-outs): the finishing time the cells done so far point to, counted down between them and
moved at each finished cell only as far as it must to stay within that estimate's own uncertainty. A `label`
callable names a node by what it does (`bertology run` reads the study's plan for it: `preparing sst2`,
`finetune of pre-trained · sst2 · seed 1`); any other is `running` its task name, the exit handler by its
template's. A step waiting for a semaphore another run holds names that run's step, its pid, its checkout
and store, and how long it has held the slot, and how to run beside it.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from bertology.argo.exit_handler import EXIT_NODE
from bertology.argo.nodes import readable_name
from bertology.argo.runner import RunEvent
from bertology.argo.semaphores import DIR_ENV
from bertology.errors import EXIT_BAD_INPUT

QUIET, NORMAL, VERBOSE = -1, 0, 1
FAILED = ("Failed", "Error")
# a study's top-level fan-outs, by what they make (bertology's study template); another keeps its task name
GROUP_NAMES = {"prepare-data": "datasets", "build-checkpoint": "checkpoints", "cell": "cells"}
CELLS = "cell"
BESIDE = f"to run beside it, set {DIR_ENV} to a directory of your own"
STEPS = 1000  # the bar's resolution
RUNNING_NAMED = 2  # steps named on the progress line when several run; the rest are counted


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """The counts behind the line; fed RunEvents, safe to call from the runner's threads. `clock` times
    this run (monotonic), `wall` reads the epoch seconds other runs record when they take a slot."""

    def __init__(self, clock=time.monotonic, label: Callable[[str], str | None] | None = None, wall=time.time):
        self._clock = clock
        self._wall = wall
        self._label = label
        self.groups: dict[str, int] = {}  # top-level fan-out -> number of children, in the order they were known
        self.parent: dict[str, str] = {}  # fan-out child -> its fan-out
        self.done: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.running: dict[str, float] = {}  # container node -> when it started
        self.templates: dict[str, str] = {}  # node -> its template
        self.failures: list[RunEvent] = []  # the containers that failed, in order
        self.started_at: dict[str, float] = {}  # fan-out -> when it expanded
        # container node -> (what it waits for, who holds it, since when): a semaphore another run holds
        self.waiting: dict[str, tuple[str, tuple, float]] = {}
        self.started_any = False  # any event yet: before it, the runner is still starting (its fork server)
        self._fraction: float | None = None
        self._finish: float | None = None  # the ETA's finishing time (clock)
        self._finished_at: list[float] = []  # when each child of the ETA's fan-outs finished

    def feed(self, event: RunEvent) -> bool:
        """Count the event; True when it is a container that failed (an error to show now)."""
        failed_container = False
        self.started_any = True  # the run's first step has started, or is waiting to
        if event.template:
            self.templates[event.node] = event.template
        if event.kind == "planned" and "." not in event.node:
            self.groups.setdefault(event.node, event.count)
        elif event.kind == "fanout" and "." not in event.node:
            self.groups[event.node] = event.count
            self.started_at.setdefault(event.node, self._clock())
            self.parent.update({child: event.node for child in event.children})
        elif event.kind == "waiting":
            since = self.waiting.get(event.node, (None, None, self._clock()))[2]
            self.waiting[event.node] = (event.message, event.holders, since)
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
                if group in self._eta_groups():
                    self._finished_at.append(self._clock())
                    self._estimate()
            elif event.node in self.groups:  # its children are done, or it never expanded (omitted, an error)
                self.groups[event.node] = self.done.get(event.node, 0)
        return failed_container

    def name(self, node: str) -> str:
        """The node by what it runs and by its Argo name (its log's folder), or its Argo name alone."""
        label = self._label(node) if self._label is not None else None
        return f"{label} ({node})" if label else node

    def step(self, node: str) -> str:
        """The node by what it does: its label, else `running` its task name (a fan-out child numbered from
        1, the exit handler by its template), never the ids in its Argo name."""
        label = self._label(node) if self._label is not None else None
        return label or f"running {readable_name(node, self.templates.get(node, ''))}"

    def what(self, node: str) -> str:
        """The node by what it does, where it is not running: its label, else its readable name."""
        label = self._label(node) if self._label is not None else None
        return label or readable_name(node, self.templates.get(node, ""))

    def counts(self) -> tuple[int, int | None, int]:
        """(children finished, children in all or None before any fan-out is known, failed), over every
        top-level fan-out."""
        if not self.groups:
            return 0, None, 0
        return (sum(self.done.get(g, 0) for g in self.groups), sum(self.groups.values()),
                sum(self.failed.get(g, 0) for g in self.groups))

    def fraction(self) -> float | None:
        """The share of the known work done (None before any is known), never less than it was: a fan-out
        whose size only becomes known later (its items come from another fan-out's outputs) adds work."""
        done, total, _ = self.counts()
        if total is None:
            return None
        self._fraction = max(self._fraction or 0.0, done / total if total else 1.0)
        return self._fraction

    def _eta_groups(self) -> list[str]:
        if CELLS in self.groups:
            return [CELLS]
        if any(g in GROUP_NAMES for g in self.groups):  # a study before its cells: no ETA from its other work
            return []
        return list(self.groups)

    def _estimate(self) -> None:
        """At a finished child: the finishing time the pace so far points to, the shown one moved only as
        far as it must to stay within that estimate's uncertainty (the spread of the gaps between finished
        children, over the square root of their number)."""
        groups = [g for g in self._eta_groups() if g in self.started_at]
        done = sum(self.done.get(g, 0) for g in groups)
        total = sum(self.groups[g] for g in groups)
        if not done or done >= total:
            self._finish = None
            return
        began = min(self.started_at[g] for g in groups)
        now = self._clock()
        finish = began + (now - began) / done * total
        gaps = [b - a for a, b in zip([began, *self._finished_at], self._finished_at)]
        mean = sum(gaps) / len(gaps) if gaps else 0.0
        spread = 0.5  # relative, until three gaps say otherwise
        if len(gaps) >= 3 and mean > 0:
            spread = min(1.0, max(0.1, math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)) / mean))
        margin = (finish - now) * spread / math.sqrt(done)
        shown = finish if self._finish is None else self._finish
        self._finish = min(max(shown, finish - margin), finish + margin)

    def eta(self) -> float | None:
        """Seconds left by the cells' pace; None before the first cell is done, and once overdue."""
        if self._finish is None:
            return None
        left = self._finish - self._clock()
        return left if left > 0 else None

    def line(self, timed: bool = True) -> str:
        """The progress line; without `timed`, without the parts that change with the clock alone (the ETA,
        how long a wait has lasted), to tell whether anything happened."""
        parts = [f"{GROUP_NAMES.get(g, g)} {self.done.get(g, 0)}/{n}" for g, n in self.groups.items() if n]
        if self.groups and not parts:
            parts.append("nothing to run")
        failed = self.counts()[2]
        if failed:
            parts.append(f"{failed} failed")
        running = sorted(self.running, key=self.running.get)  # the longest running first
        if running:  # each by what it does: the first two, then how many more
            more = len(running) - RUNNING_NAMED
            parts.append(", ".join(self.step(node) for node in running[:RUNNING_NAMED])
                         + (f" and {more} more step{'s' if more > 1 else ''}" if more > 0 else ""))
        elif not self.waiting:
            parts.append("0 steps running" if self.started_any else "starting")
        if self.waiting:  # for a semaphore another run on this machine holds
            parts.extend(self._waits(timed))
        eta = self.eta() if timed else None
        if eta is not None:
            parts.append(f"ETA {_duration(eta)}")
        return " · ".join(parts)

    def _waits(self, timed: bool) -> list[str]:
        """Each wait: the steps, for what, behind whom and for how long; then how to run beside it."""
        by_lock: dict[tuple, list[str]] = {}
        for node, (what, holders, since) in sorted(self.waiting.items(), key=lambda kv: kv[1][2]):
            by_lock.setdefault((what, holders), []).append(node)
        parts = []
        now, wall = self._clock(), self._wall()
        for (what, holders), nodes in by_lock.items():
            who = self.what(nodes[0]) if len(nodes) == 1 else f"{len(nodes)} steps"
            began = min(self.waiting[n][2] for n in nodes)
            text = f"{who} waiting" + (f" {_duration(now - began)}" if timed else "") + f" for {what}"
            if holders:
                first = holders[0]
                held = f" {_duration(max(0.0, wall - first.since))}" if timed else ""
                text += f", held{held} by {first.describe()}" + (f" and {len(holders) - 1} more" if len(holders) > 1
                                                                 else "")
            else:
                text += ", behind runs ahead of it in the queue"
            parts.append(text)
        return [*parts, BESIDE]


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
        self._told: dict[str, tuple] = {}  # waiting node -> the wait last told on stderr (a terminal)
        tty = self.out.isatty() if tty is None else tty
        if verbosity == NORMAL:
            if tty:
                from tqdm import tqdm

                # no bar until the work is known (the plan's); then a bar of its share done
                self._bar = tqdm(total=STEPS, file=self.out, dynamic_ncols=True, leave=True,
                                 bar_format="{desc}{elapsed}")
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
            elif event.kind == "waiting" and self._bar is not None:
                self._tell_wait(event)
            if self._bar is not None:
                self._draw()

    def _write_error(self, text: str) -> None:
        if self._bar is not None:
            self._bar.clear()
        print(text, file=self.err, flush=True)

    def _tell_wait(self, event: RunEvent) -> None:
        """On a terminal, a wait in full above the bar, once per holder (the bar may be cut to its width)."""
        told = (event.message, event.holders)
        if self._told.get(event.node) == told:
            return
        self._told[event.node] = told
        who = (f"held by {'; '.join(h.describe() for h in event.holders)}" if event.holders
               else "behind runs ahead of it in the queue")
        self._write_error(f"{self.progress.what(event.node)}: waiting for {event.message}, {who}; {BESIDE}")

    def _draw(self) -> None:
        fraction = self.progress.fraction()
        if fraction is not None:
            self._bar.bar_format = "{desc}{bar:20} {percentage:3.0f}% {elapsed}"
            self._bar.n = round(fraction * STEPS)
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
        """The line, when more than the clock changed it."""
        if self.progress.line(timed=False) != self._last:
            print(self.progress.line(), file=self.out, flush=True)
            self._last = self.progress.line(timed=False)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._bar is not None:
                self._draw()
                self._bar.close()
                self._bar = None
            elif self.verbosity == NORMAL:
                self._print_if_changed()
