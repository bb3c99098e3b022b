"""How a bertology process ends: its exit code, with its output flushed, and without the interpreter's
own finalisation.

A process that has used torch, pyarrow or polars holds their native thread pools. At interpreter
finalisation a pool's std::thread can still be joinable when its destructor runs, and the C++ runtime then
aborts: "terminate called without an active exception", SIGABRT, exit -6 (134 in a shell or a pod), after
the work had finished and its output was written. Seen here in a step under load (harness.entry) and in
`bertology run` itself after it had printed a study's result (1 run in about 50 of a test suite); upstream
reports of the same teardown crash: apache/arrow#34314, pola-rs/polars#24169. Everything the process
writes is closed before it ends (stores publish atomically, files by context managers), and no
bertology code relies on atexit handlers.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def exit_process(code: int) -> NoReturn:
    """Flush the logging handlers and the standard streams, then end with `code` (os._exit)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`bertology studies | head`) or a closed stream
            pass
    os._exit(code)
