"""A child that dies with its parent: Linux's PR_SET_PDEATHSIG, for forked and host-process steps.

Its own module so that the runner can use it without importing the zygote, which runs as
`python -m bertology.argo.zygote` (importing it from the package first makes runpy warn on stderr).
"""

from __future__ import annotations

import os
import signal


def _prctl():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None


_PRCTL = _prctl()  # resolved before any fork: a forked child of a threaded parent only calls it


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` when the parent exits (a no-op elsewhere); exit now if it already has.

    Also a `preexec_fn`: a step started with its own process group is not reached by a kill of the
    runner's group, so without this a step outlived a SIGKILLed runner and published its artifact. The
    "parent" is the thread that forked: the runner's thread that starts a step waits for it."""
    parent = os.getppid()
    if _PRCTL is None:
        return
    _PRCTL(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
