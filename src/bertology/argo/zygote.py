"""A fork server for the local runner: `python -m MODULE …` steps start from a warm interpreter.

Importing torch and transformers costs ~10 s per process on a small CPU machine, and a study runs
dozens of steps. The zygote imports them once; for each step it forks, and the child sets the step's
environment, working directory and argv and runs the module as `__main__`. Each step is still its own
process with its own exit code, output pipe and signals, exactly as a container would be.

Protocol (one Unix-socket connection per step): the client sends a JSON request and the write end of
its output pipe (SCM_RIGHTS). The zygote forks a waiter, which forks the step, replies
`{"pid": …}`, waits, and replies `{"exit": …}`. The zygote itself stays single-threaded and never waits
(SIGCHLD is ignored, so waiters are reaped by the kernel), which keeps fork safe.

Stopping: the runner stops steps by their process group and then kills the server. Nothing is left
behind even when the runner dies without cleaning up (SIGKILL, a crash): the kernel closes the runner's
end of each step's connection, and the step's waiter, which watches it, SIGKILLs the step's process
group (a step leads a group of its own, which a kill of the runner's group does not reach). The server
and each step also ask the kernel for SIGKILL when their parent dies (PR_SET_PDEATHSIG), and the server
ignores SIGINT (a Ctrl-C in the terminal reaches its process group; the runner decides what stops).

Shared server: with BERTOLOGY_FORK_SERVER set to the socket of a running server
(`python -m bertology.argo.zygote PATH`), a run forks its steps there instead of starting its own,
and leaves it running. Since a step's death no longer depends on the server's, a runner that dies still
takes its steps with it. The test suite shares one per worker (each `bertology run` would otherwise pay
the imports again, ~5 s of CPU); it is not meant for studies whose runs need different import-time
variables.

Caveat: variables that libraries read at import time come from the environment the zygote was started
with (the runner's); variables read at call time (credentials, endpoints) come from the step's env.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

from bertology import chaos, leftovers
from bertology.argo.parent_death import die_with_parent
from bertology.errors import BadInput

# The step modules import torch, transformers and the rest where they are used (so that a container that
# only publishes never loads them: docs/development.md); the zygote loads them up front, by name, since
# in-process steps fork from it and pay nothing for what it holds.
PRELOAD = ("torch", "transformers", "datasets", "polars", "pyarrow.parquet", "sklearn.metrics", "scipy.stats",
           "boto3", "bertology.steps.plan", "bertology.steps.prepare_data", "bertology.steps.build_checkpoint",
           "bertology.steps.finetune", "bertology.steps.evaluate", "bertology.steps.analyze",
           "bertology.steps.aggregate", "bertology.interventions", "bertology.train",
           "bertology.train.activation_distance", "bertology.train.state", "bertology.tasks.corpora")
# Classes transformers resolves lazily; touching them here moves their import cost into the zygote.
PRELOAD_ATTRS = ("AutoConfig", "AutoTokenizer", "AutoModel", "AutoModelForSequenceClassification", "BertModel",
                 "DistilBertConfig")


def _send_json(conn: socket.socket, obj: dict) -> None:
    conn.sendall(json.dumps(obj).encode() + b"\n")


# -- server side ----------------------------------------------------------------------------------

def _run_step(request: dict, out_fd: int, runner: int) -> None:
    """In the forked step process: become the requested `python -m MODULE ARGS` and never return."""
    code = 1
    try:
        chaos.runner = runner  # a kill of "the runner's group" finds it even in a shared server
        os.setpgid(0, 0)  # own process group: terminate() reaches the step and its children
        die_with_parent(signal.SIGKILL)  # its waiter was killed (a kill of the whole tree): the pod is gone
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(request["env"])
        _threads_from_env()
        os.chdir(request["cwd"])
        sys.path[0:0] = [request["cwd"]]
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - report like an uncaught exception in a fresh interpreter
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _threads_from_env() -> None:
    """A fresh interpreter's torch takes its thread count from OMP_NUM_THREADS at import; a forked step
    inherited the server's, so it sets the one its own environment asks for."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))


def _serve_one(conn: socket.socket) -> None:
    """In the waiter process: fork the step, report its pid, wait for it, report its exit code."""
    msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 1)
    request = json.loads(msg)
    runner, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    pid = os.fork()
    if pid == 0:
        conn.close()
        _run_step(request, fds[0], runner)
    try:
        os.setpgid(pid, pid)  # as the step does itself: whichever runs first, killpg below reaches it
    except OSError:
        pass  # the step has already made its group (or exited)
    os.close(fds[0])
    _send_json(conn, {"pid": pid})
    _send_json(conn, {"exit": _wait_unless_orphaned(pid, conn)})


def _wait_unless_orphaned(pid: int, conn: socket.socket) -> int:
    """Wait for the step; if the client's end of `conn` closes first (the runner died: it sends nothing
    after its request), SIGKILL the step's process group, as a pod's deletion would, then reap it."""
    if not hasattr(os, "pidfd_open"):  # not Linux: nothing to watch with (nor a death signal to ask for)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    step = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(step, select.POLLIN)
    poller.register(conn, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll()}
        if step in ready:
            break
        if conn.fileno() in ready and not conn.recv(1):
            poller.unregister(conn)
            for kill in (os.killpg, os.kill):  # the group, and the step should it have left it
                try:
                    kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    os.close(step)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def serve(path: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the runner's to handle
    die_with_parent(signal.SIGKILL)
    # listening before the imports: a shared server's clients may connect at once, and wait in the backlog.
    # Bound under a name of its own and renamed once it listens: a client that finds `path` finds a socket
    # that takes connections (between bind and listen it would refuse them).
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unlisted = f"{path}~" if len(path) + 1 < SOCKET_PATH_MAX else path
    server.bind(unlisted)
    server.listen(64)
    if unlisted != path:
        os.rename(unlisted, path)
    for name in PRELOAD:
        __import__(name)
    import transformers

    for attr in PRELOAD_ATTRS:
        getattr(transformers, attr)
    # transformers' table of checkpoint renamings (regexes for every architecture), which a process builds on
    # its first from_pretrained and keeps: every forked step built it again (1.7 of the 15.8 CPU-seconds of a
    # tiny reversed-layers study's steps). Pure Python, no torch work: nothing of torch's state (its random
    # generator, its thread pools) changes before the fork. Another transformers may lack it: nothing to warm.
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    except ImportError:
        pass
    else:
        get_checkpoint_conversion_mapping("bert")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the kernel
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the waiter must be able to wait for its step
            # no death signal, and a process group of its own (which a kill of the runner's group, where the
            # server is, does not reach): a waiter outlives a killed runner and server until the runner's
            # connection closes, so that it can take its step's whole process group with it
            os.setpgid(0, 0)
            code = 0
            try:
                _serve_one(conn)
            except BaseException:  # noqa: BLE001
                code = 1
            os._exit(code)
        conn.close()


# -- client side ----------------------------------------------------------------------------------

class ZygoteProcess:
    """The part of `subprocess.Popen` the runner uses: `stdout`, `wait()`, `terminate()`."""

    def __init__(self, conn: socket.socket, stdout):
        self._conn, self.stdout = conn, stdout
        self._replies = conn.makefile("r")
        self.pid = int(json.loads(self._replies.readline())["pid"])
        self.returncode: int | None = None

    def wait(self) -> int:
        if self.returncode is None:
            try:
                reply = self._replies.readline()
                # a waiter that died without replying: report it like a killed process
                self.returncode = int(json.loads(reply)["exit"]) if reply else -9
            finally:
                self._replies.close()
                self._conn.close()
        return self.returncode

    def terminate(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


# A Unix socket's path must fit sockaddr_un.sun_path (108 bytes on Linux, with its NUL).
SOCKET_PATH_MAX = 100


SHARED_ENV = "BERTOLOGY_FORK_SERVER"


def for_run(project_root: Path) -> SharedZygote:
    """The fork server a run uses: the shared one $BERTOLOGY_FORK_SERVER names, or one of its own."""
    shared = os.environ.get(SHARED_ENV)
    if not shared:
        return Zygote(project_root)
    if not os.path.exists(shared):
        raise BadInput(f"{SHARED_ENV}={shared}: no fork server's socket is there "
                       "(start one with python -m bertology.argo.zygote PATH, or unset it)")
    return SharedZygote(shared)


class SharedZygote:
    """A server listening at `path` that someone else started and stops: `spawn` connects to it, `close`
    leaves it running."""

    def __init__(self, path: str):
        self.path = path

    def spawn(self, module: str, args: list[str], env: dict[str, str], cwd: Path) -> ZygoteProcess:
        read_fd, write_fd = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            request = {"module": module, "args": args, "env": env, "cwd": str(cwd)}
            socket.send_fds(conn, [json.dumps(request).encode()], [write_fd])
        finally:
            os.close(write_fd)
        return ZygoteProcess(conn, os.fdopen(read_fd, "r", errors="replace"))

    def close(self) -> None:
        pass


class Zygote(SharedZygote):
    """A server of the run's own: started in the background at once; `spawn` waits for it to be ready,
    `close` stops it."""

    def __init__(self, project_root: Path):
        self._dir = str(leftovers.make("zygote"))  # swept by a later run if this one is SIGKILLed
        if len(os.path.join(self._dir, "sock")) >= SOCKET_PATH_MAX:  # a deep $TMPDIR: bind() would fail
            os.rmdir(self._dir)
            self._dir = str(leftovers.make("zygote", root="/tmp"))
        super().__init__(os.path.join(self._dir, "sock"))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(project_root), *filter(None, [os.environ.get("PYTHONPATH")])]))
        self._server = subprocess.Popen([sys.executable, "-m", "bertology.argo.zygote", self.path],
                                        cwd=project_root, env=env, stdout=subprocess.PIPE, text=True)
        self._ready = threading.Event()
        self._failed = False
        threading.Thread(target=self._await_ready, daemon=True).start()

    def _await_ready(self) -> None:
        line = self._server.stdout.readline()  # type: ignore[union-attr]
        self._failed = line.strip() != "ready"
        self._ready.set()

    def spawn(self, module: str, args: list[str], env: dict[str, str], cwd: Path) -> ZygoteProcess:
        self._ready.wait()
        if self._failed:
            raise OSError("the zygote failed to start")
        return super().spawn(module, args, env, cwd)

    def close(self) -> None:
        self._server.kill()
        self._server.wait()
        Path(self.path).unlink(missing_ok=True)
        os.rmdir(self._dir)


if __name__ == "__main__":
    serve(sys.argv[1])
