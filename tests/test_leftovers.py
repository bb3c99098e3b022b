"""What killed runs leave behind is swept, and a local store is readable by the team (umask modes)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from bertology import leftovers
from bertology.store import LocalStore


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_sweep_removes_what_dead_processes_left_and_keeps_the_newest_runs(tmp_path):
    dead, live = _dead_pid(), os.getppid()
    made = {}
    for name in [f"bertology-stage-{dead}-a", f"bertology-zygote-{dead}-b", f"bertology-stage-{live}-c",
                 f"bertology-run-{live}-study-d", "bertology-stage-notapid-e", "other-dir"]:
        made[name] = tmp_path / name
        made[name].mkdir()
    (made[f"bertology-stage-{dead}-a"] / "model.safetensors").write_bytes(b"x" * 100)
    runs = []
    for i in range(leftovers.KEEP_RUNS + 2):  # finished runs' work directories, oldest first
        runs.append(tmp_path / f"bertology-run-{dead}-study-{i}")
        runs[-1].mkdir()
        os.utime(runs[-1], (time.time() - 100 + i, time.time() - 100 + i))
    removed = set(leftovers.sweep(tmpdir=str(tmp_path)))
    assert removed == {made[f"bertology-stage-{dead}-a"], made[f"bertology-zygote-{dead}-b"], *runs[:2]}
    assert all(p.exists() for p in runs[2:])  # the newest KEEP_RUNS logs stay readable
    assert all(made[n].exists() for n in made if str(dead) not in n)  # a live process's, or not ours


def test_made_directories_carry_the_pid(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    path = leftovers.make("stage")
    assert path.parent == tmp_path and path.name.startswith(f"bertology-stage-{os.getpid()}-")
    assert leftovers.sweep(tmpdir=str(tmp_path)) == []  # this process lives


def test_published_files_get_the_umask_mode(tmp_path):
    store = LocalStore(tmp_path / "store")
    previous = os.umask(0o022)
    try:
        with store.artifact("checkpoints/x") as out:
            (out / "model.safetensors").write_bytes(b"weights")
            os.chmod(out / "model.safetensors", 0o600)  # as some writers make them
            (out / "sub").mkdir()
            (out / "sub" / "a.json").write_text("{}")
        modes = {p.relative_to(store.root).as_posix(): stat.S_IMODE(p.stat().st_mode)
                 for p in Path(store.root).rglob("*")}
    finally:
        os.umask(previous)
    assert modes["checkpoints/x"] == 0o755 and modes["checkpoints/x/sub"] == 0o755
    assert modes["checkpoints/x/model.safetensors"] == 0o644 and modes["checkpoints/x/_SUCCESS.json"] == 0o644
    assert modes["checkpoints/x/sub/a.json"] == 0o644


def test_a_private_umask_keeps_the_store_private(tmp_path):
    store = LocalStore(tmp_path / "store")
    previous = os.umask(0o077)
    try:
        with store.artifact("a") as out:
            (out / "f").write_text("x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((store.root / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((store.root / "a" / "f").stat().st_mode) == 0o600
