"""How a container's end reaches its Argo node: exit code, termination message, and the node's message.

Follows:
- Kubernetes: a container may write one message to its `terminationMessagePath` (default
  /dev/termination-log, at most 4096 bytes are kept); the kubelet puts it in the container's terminated
  state (`state.terminated.message`), with reason "Error" for a non-zero exit. Argo's emissary leaves the
  file to the user's process when that process merely exits non-zero (cmd/argoexec/main.go `run`).
- argo-workflows workflow/controller/operator.go `inferFailedReason` (v4.1): a pod with a status message
  of its own (a deadline, an eviction) gives the node that message; otherwise the failed main container
  gives "main: <reason> (exit code N)" and, when it wrote one, ": <termination message>". (v3.6 writes the
  same without the "main: " prefix; the local runner writes v4.1's.)

Locally the step gets the node directory's `termination-log` wherever its container's env names
/dev/termination-log, as it gets its own outputs directory for /tmp/outputs.
"""

from __future__ import annotations

from pathlib import Path

TERMINATION_LOG = "/dev/termination-log"
MAX_BYTES = 4096  # kubelet: kubecontainer.MaxContainerTerminationMessageLength


def read(path: Path) -> str:
    """The message the container left (what the kubelet keeps of it), or ""."""
    try:
        return path.read_bytes()[:MAX_BYTES].decode("utf-8", errors="replace")
    except OSError:
        return ""


def node_message(exit_code: int, message: str = "") -> str:
    """inferFailedReason's message for a pod whose main container exited non-zero."""
    text = f"main: Error (exit code {exit_code})"
    return f"{text}: {message}" if message else text
