"""Kill every running step's process group when the runner dies, however it dies (SIGKILL included).

Each step leads a process group of its own (as a pod is its own sandbox), so a kill of the runner's group
does not reach it. PR_SET_PDEATHSIG (parent_death.die_with_parent) takes the step itself down with its parent,
but not the step's own children (a shell's `sleep`, a data loader's workers): on a cluster the pod's
whole sandbox goes. The reaper is a small process in a session of its own that the runner tells, over a
pipe, which groups are running (`+PGID` / `-PGID` lines). When the pipe closes (the runner exited or was
killed: the kernel closes its end), the reaper SIGKILLs the groups still listed and exits. It costs one
bare interpreter start (no imports beyond os, signal and sys; json, subprocess and time for containers).

With a container engine, a pod's process is the engine's `run` client, and killing it leaves the container
running (podman's conmon, docker's daemon keep it). So the reaper is also given the engine's commands to
list and remove the run's containers (every one carries the run's own label, engines.py): unless the runner
said goodbye (a `.` line: it removed its containers itself), the reaper removes every container with that
label once the groups are killed, again until the list is empty (a container its dying client was still
creating appears late). Another run's containers carry another label and are not touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

_CODE = """
import os, signal, sys
groups = set()
ended = False
for line in sys.stdin:
    if line == ".\\n":
        ended = True
        continue
    sign, pgid = line[0], int(line[1:])
    (groups.add if sign == "+" else groups.discard)(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
if len(sys.argv) > 1 and not ended:
    import json, subprocess, time
    listing, removal = json.loads(sys.argv[1])
    for _ in range(10):
        try:
            ids = subprocess.run(listing, capture_output=True, text=True, timeout=60).stdout.split()
            if not ids:
                break
            subprocess.run([*removal, *ids], capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(0.2)
"""


class Reaper:
    def __init__(self, containers: tuple[list[str], list[str]] | None = None):
        """`containers`: the engine's command that prints the ids of this run's containers, and the one that
        removes the ids appended to it; run when the runner dies without `close()`."""
        extra = [json.dumps(containers)] if containers is not None else []
        self._process = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CODE, *extra], stdin=subprocess.PIPE,
                                         text=True, start_new_session=True)
        self._lock = threading.Lock()

    def _say(self, line: str) -> None:
        with self._lock:
            try:
                self._process.stdin.write(line + "\n")  # type: ignore[union-attr]
                self._process.stdin.flush()  # type: ignore[union-attr]
            except (BrokenPipeError, ValueError, OSError):  # the reaper is gone: PDEATHSIG still holds
                pass

    def watch(self, pgid: int) -> None:
        self._say(f"+{pgid}")

    def announcer(self):
        """A `preexec_fn` part: the new step writes its own group to the reaper before it execs, so a runner
        killed in the first milliseconds of a step (before `watch` ran) still takes the step's children
        along. One os.write of a line under PIPE_BUF is atomic and takes no lock, as a child of a threaded
        parent must; the pipe is still open there (subprocess closes fds after preexec_fn)."""
        fd = self._process.stdin.fileno()  # type: ignore[union-attr]

        def announce() -> None:
            try:
                os.write(fd, f"+{os.getpid()}\n".encode())
            except OSError:  # the reaper is gone: PDEATHSIG still holds
                pass

        return announce

    def forget(self, pgid: int) -> None:
        self._say(f"-{pgid}")

    def close(self) -> None:
        """The run ended: every step has ended too, and the run's containers are removed (the engine's
        close()), so the reaper exits without killing or removing anything."""
        self._say(".")
        with self._lock:
            try:
                self._process.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
        self._process.wait()
