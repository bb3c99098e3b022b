"""Deterministic kill points for the kill/heal tests: `BERTOLOGY_CHAOS=STEP:POINT[:HOW][,…]`.

A kill at a chosen moment, not after a chosen delay, so a test that kills a study at ten places kills it
at the same ten places on every machine. Steps call `point(name)` at named moments; when the variable
names this step and point, the process kills as HOW says:

  tree     (default) SIGKILL the runner's process group (the `bertology run` process and a fork server
           of its own) and this step's own group: the whole process tree dies at once, as on a power cut
  runner   SIGKILL the runner's group only, then go on after 3 s deaf to SIGTERM (as a step busy in native
           code is): a step that outlived its runner would publish; it must die with it (PR_SET_PDEATHSIG)
  kill     SIGKILL this step's group only (an OOM kill): the runner lives and retries it (exit 137)
  term     SIGTERM this step alone (an eviction): it stops as a transient failure (75) and is retried

Points: `start` (arguments parsed, nothing written), `end` (the step's work done, before it exits), and
in Store.artifact `staged` (files staged locally, nothing published), `published` (files published,
marker not yet written) and `marked` (marker written). With `BERTOLOGY_CHAOS_ONCE=DIR` each entry fires
once: it creates DIR/STEP:POINT:HOW (holding the step's pid) first, so a retry or a rerun runs through.

The runner's group is that of `runner`, the pid of the runner that asked a fork server for this step (the
server sets it: its waiters have groups of their own, and a shared server is no child of the runner), or
else of this step's parent, the runner itself. Unset (always, outside tests), `point` is one dictionary
lookup.
"""

from __future__ import annotations

import os
import signal
import time

ENV = "BERTOLOGY_CHAOS"
ONCE = "BERTOLOGY_CHAOS_ONCE"
HOWS = ("tree", "kill", "runner", "term")

step = ""  # set by the step harness: the step this process runs (plan, finetune, …)
runner = 0  # set by the fork server in a forked step: the pid of the runner that asked for it


def point(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    for entry in spec.split(","):
        wanted_step, _, rest = entry.strip().partition(":")
        wanted_point, _, how = rest.partition(":")
        if (wanted_step, wanted_point) == (step, name) and (how or "tree") in HOWS and _first(entry.strip()):
            _fire(how or "tree", name)


def _first(entry: str) -> bool:
    """True unless BERTOLOGY_CHAOS_ONCE says this entry already fired."""
    once = os.environ.get(ONCE)
    if not once:
        return True
    try:
        fd = os.open(os.path.join(once, entry.replace("/", "_")), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def _fire(how: str, name: str) -> None:
    print(f"chaos: {how} at {step}:{name}", flush=True)
    if how == "term":
        os.kill(os.getpid(), signal.SIGTERM)  # the step's handler raises Transient at the next bytecode
        return
    if how in ("tree", "runner"):
        try:
            _killpg(os.getpgid(runner or os.getppid()))
        except ProcessLookupError:  # the runner is already gone
            pass
    if how == "runner":
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3.0)
        signal.signal(signal.SIGTERM, previous)
        return
    _killpg(os.getpgid(0))


def _killpg(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
