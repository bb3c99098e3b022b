"""kubectl against the local cluster, as its admin: the one way the other modules talk to the API server."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from bertology.errors import BadInput
from bertology.localcluster.layout import Layout


def binary() -> str:
    """kubectl: the project's (.venv/bin, beside this Python) or the PATH's."""
    beside = Path(sys.executable).with_name("kubectl")
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if not found:
        raise BadInput("kubectl is not installed: `make cluster` installs it into .venv/bin")
    return found


def kubectl(layout: Layout, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([binary(), f"--kubeconfig={layout.admin_kubeconfig}", *args], input=input,
                          check=check, capture_output=True, text=True, timeout=timeout)
