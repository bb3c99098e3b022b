"""The cluster's components as plain processes: started detached (their own session, so `make cluster` can
return and a terminal's Ctrl-C reaches none of them), each with its log and pid file, and stopped by the
pid file, after checking the pid is still that binary's (a pid can be reused)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bertology.localcluster.layout import Layout


class StartFailed(RuntimeError):
    """A component did not come up: the message names it, what was awaited, and its log's last lines."""


def start(layout: Layout, name: str, argv: list[str], *, env: dict[str, str] | None = None) -> int:
    layout.logs.mkdir(parents=True, exist_ok=True)
    layout.pids.mkdir(parents=True, exist_ok=True)
    with open(layout.log(name), "ab") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, env=env, cwd=layout.state)
    layout.pidfile(name).write_text(f"{process.pid} {argv[0]}\n")
    return process.pid


def pid_of(layout: Layout, name: str) -> int | None:
    """The component's pid if it is running as the binary it was started as, else None."""
    try:
        pid_text, binary = layout.pidfile(name).read_text().split(maxsplit=1)
        exe = os.readlink(f"/proc/{int(pid_text)}/exe")
    except (OSError, ValueError):
        return None
    state = Path(f"/proc/{pid_text}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return int(pid_text) if exe.removesuffix(" (deleted)") == binary.strip() and state != "Z" else None


def stop(layout: Layout, name: str, *, grace: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds, to the component's whole process group."""
    pid = pid_of(layout, name)
    if pid is not None:
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while pid_of(layout, name) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_of(layout, name) is not None:
            _signal_group(pid, signal.SIGKILL)
            time.sleep(0.5)
    layout.pidfile(name).unlink(missing_ok=True)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def wait_for(layout: Layout, name: str, what: str, ready: Callable[[], bool], *, timeout: float) -> None:
    """Polls `ready` until it holds; StartFailed when the component exits first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if pid_of(layout, name) is None:
            raise StartFailed(f"{name} exited before {what}:\n{tail(layout.log(name))}")
        time.sleep(0.5)
    raise StartFailed(f"{name}: no {what} after {timeout:.0f} s:\n{tail(layout.log(name))}")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def processes_from(binaries: list[Path]) -> list[tuple[int, str]]:
    """Every running process whose executable is one of `binaries` (shims outlive containerd by design)."""
    wanted = {str(b) for b in binaries}
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                exe = os.readlink(entry / "exe").removesuffix(" (deleted)")
            except OSError:
                continue
            if exe in wanted:
                found.append((int(entry.name), exe))
    return found
