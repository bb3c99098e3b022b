"""A command on a pseudo-terminal, as a person at a terminal runs it: what it draws, redraw by redraw."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading
from pathlib import Path

_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BAR = re.compile(r" (\d+)% \d+:\d\d(?::\d\d)?$")  # the end of a progress bar: its percentage and elapsed time


class Terminal:
    """`argv` with a terminal of `columns` columns as its stdin, stdout and stderr, read as it writes."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], columns: int = 1000):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                                        start_new_session=True)
        os.close(slave)
        self._master = master
        self._data = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # the other end closed: the process and its children are gone
                break
            if not data:
                break
            with self._lock:
                self._data += data

    @property
    def text(self) -> str:
        with self._lock:
            return self._data.decode("utf-8", "replace")

    def screens(self) -> list[str]:
        """Each line as drawn: a redraw (after a carriage return) or a printed line, without escapes."""
        return [s.strip() for s in re.split(r"[\r\n]", _ESCAPE.sub("", self.text)) if s.strip()]

    def bars(self) -> list[tuple[str, int]]:
        """Each redraw of the progress bar: its line, and its percentage."""
        return [(s, int(m.group(1))) for s in self.screens() if (m := _BAR.search(s))]

    def wait(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code

    def close(self) -> None:
        """Kill it if it still runs, and close the terminal."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._reader.join(10)
        if self._master >= 0:
            os.close(self._master)
            self._master = -1
