"""Temporary directories that carry their owner's pid, so a later run can tell a killed run's from a live one's.

A process killed by SIGKILL cleans nothing up. Each temporary directory of ours is named
`bertology-<kind>-<pid>-…` in $TMPDIR: `stage` (an artifact's files before they are published; at BERT-base
size, model files), `zygote` (the fork server's socket) and `run` (a local run's step logs). `sweep()` at
the start of every `bertology run` removes the stage and zygote directories of processes that no longer
exist and keeps only the newest KEEP_RUNS work directories of finished runs (their logs are what you read
after a failure); every step sweeps stage directories. A directory of a live process, or of another user,
is never touched. (A pid is only meaningful within one pid namespace: containers that share a $TMPDIR
but not their pids should not share it with a local run.)
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

KEEP_RUNS = 5
_NAME = re.compile(r"bertology-(stage|zygote|run)-(\d+)-")


def make(kind: str, label: str = "", root: str | None = None) -> Path:
    """A new private temporary directory named for this process (in `root`, else $TMPDIR)."""
    return Path(tempfile.mkdtemp(prefix=f"bertology-{kind}-{os.getpid()}-{label + '-' if label else ''}", dir=root))


def alive(pid: int) -> bool:
    """Whether a process of this pid namespace exists (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def sweep(kinds: tuple[str, ...] = ("stage", "zygote", "run"), tmpdir: str | None = None) -> list[Path]:
    """Remove what killed processes left behind (see the module docstring); returns what was removed."""
    root = Path(tmpdir or tempfile.gettempdir())
    runs, removed = [], []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _NAME.match(path.name)
        if not match or match[1] not in kinds or int(match[2]) == os.getpid() or alive(int(match[2])):
            continue
        try:
            if not path.is_dir() or path.is_symlink() or path.stat().st_uid != os.getuid():
                continue
        except OSError:  # removed meanwhile by another sweep
            continue
        if match[1] == "run":
            runs.append(path)
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    runs.sort(key=_mtime, reverse=True)
    for path in runs[KEEP_RUNS:]:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
