"""What bench/gpu.py has measured so far, kept on disk after every figure, and the time it may still take.

A lent GPU gives one call of a few minutes that can be cut off at its limit, so nothing may wait for the
end: every figure goes into `figures` (written as figures.json) and its line into `report` (report.md),
both replaced atomically in --out after each measurement. Parts run while the budget lasts: one that
would start after the deadline is skipped, and one still running at the deadline is interrupted
(SIGALRM raises `OutOfBudget` in the main thread, between two Python bytecodes) and recorded as stopped;
a child process it was waiting for is killed with its whole process group (`run_child`), also when the
process is terminated (SIGTERM, the device script's `timeout`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

REPORT, FIGURES = "report.md", "figures.json"


class OutOfBudget(BaseException):
    """The --budget-s deadline passed while a part was running (a BaseException, like KeyboardInterrupt,
    so that no library's `except Exception` swallows it)."""


class Terminated(BaseException):
    """SIGTERM (`timeout` around the whole call): record, kill the children, end."""


def raise_on_sigterm() -> None:
    """A SIGTERM raises `Terminated`, so that `run_child` kills its process group on the way out: a child
    in its own session would otherwise outlive the call and hold the GPU."""

    def terminate(signum, frame):
        raise Terminated

    signal.signal(signal.SIGTERM, terminate)


class Record:
    def __init__(self, out: Path | None, budget_s: float | None, render_extra: Callable[[dict], list[str]],
                 start: float | None = None):
        """`render_extra(figures)`: the report's closing lines, recomputed at every save (it may add
        derived figures, such as the targets, to `figures`); `start`: the `time.monotonic()` the budget
        counts from (default: now)."""
        self.out, self.budget_s, self.render_extra = out, budget_s, render_extra
        self.start = time.monotonic() if start is None else start
        self.report: list[str] = []
        self.figures: dict = {"meta": {}, "parts": {}}
        self._printed = 0

    def remaining(self) -> float | None:
        return None if self.budget_s is None else self.budget_s - (time.monotonic() - self.start)

    def put(self, *path_and_value) -> None:
        """figures[a][b]... = value, then save: `put("ours", "rte", "ours", {...})`."""
        *path, last, value = path_and_value
        node = self.figures
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
        self.save()

    def lines(self, *lines: str) -> None:
        self.report.extend(lines)
        self.save()

    def save(self) -> None:
        """Print the new report lines; rewrite report.md and figures.json (each via a rename, so a run
        killed mid-write leaves the previous version, never half a file)."""
        if len(self.report) > self._printed:
            print("\n".join(self.report[self._printed:]), flush=True)
        self._printed = len(self.report)
        if self.out is None:
            return
        self.figures["meta"]["elapsed_s"] = round(time.monotonic() - self.start, 1)
        report = "\n".join(self.report + self.render_extra(self.figures)) + "\n"  # may add to the figures
        for name, text in ((FIGURES, json.dumps(self.figures, indent=1)), (REPORT, report)):
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(text)
            tmp.replace(self.out / name)

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[bool]:
        """Runs the body if budget is left (yields False and records the skip otherwise); records the
        part's status ("done", "stopped at the budget", "failed: ...") and its seconds."""
        left = self.remaining()
        if left is not None and left <= 0:
            self.put("parts", name, {"status": "skipped: no budget left", "seconds": 0.0})
            self.lines(f"*{name}: skipped, the --budget-s of {self.budget_s:g} s was spent.*", "")
            yield False
            return
        start = time.monotonic()
        self.put("parts", name, {"status": "running"})
        status = "done"
        try:
            with self._alarm(left):
                yield True
        except OutOfBudget:
            status = "stopped at the budget"
            self.lines("", f"*{name}: stopped, the --budget-s of {self.budget_s:g} s ran out.*", "")
        except Terminated:
            self.lines("", f"*{name}: stopped, the process was terminated (SIGTERM).*", "")
            self.put("parts", name, {"status": "terminated", "seconds": round(time.monotonic() - start, 1)})
            raise
        except Exception as e:  # noqa: BLE001 - a broken part must not cost the others' figures on a device call
            status = f"failed: {type(e).__name__}: {e}"
            traceback.print_exc()
            self.lines("", f"*{name}: failed ({type(e).__name__}: {e}).*", "")
        self.put("parts", name, {"status": status, "seconds": round(time.monotonic() - start, 1)})

    @staticmethod
    @contextlib.contextmanager
    def _alarm(seconds: float | None) -> Iterator[None]:
        if seconds is None:
            yield
            return

        def expire(signum, frame):
            raise OutOfBudget

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def run_child(argv: list[str], cwd: Path, timeout: float | None) -> subprocess.CompletedProcess:
    """`subprocess.run` in a new process group, killed whole (the finetune step's own children too) when
    the budget's alarm or the timeout interrupts the wait."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
