"""SIGTERM / SIGINT during `bertology run`: the first one unwinds the run, so its steps are stopped on the way."""

from __future__ import annotations

import signal


class Stopped(BaseException):
    """SIGTERM or SIGINT reached `bertology run`: unwinds the run (its steps are stopped on the way)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def stop_run(signum, frame) -> None:
    """The first SIGTERM / SIGINT unwinds the run; more of them while it stops are ignored."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)
