"""How long a finished Workflow is kept: its ttlStrategy, as Argo's garbage collector reads it.

Follows workflow/gccontroller/gc_controller.go `ttl` (v3.6 to v4.1): a Failed Workflow lives
secondsAfterFailure, a Succeeded one secondsAfterSuccess, and any completed one (Error too: WorkflowStatus
`Failed` is Phase == Failed only) secondsAfterCompletion when the phase's own field is unset; with none of
them it is never deleted. Its pods go with it (they are owned by the Workflow). The local runner deletes
nothing; this checks that every Workflow of ours is cleaned up whatever its outcome.
"""

from __future__ import annotations


def seconds(strategy: dict | None, phase: str) -> int | None:
    """The TTL of a Workflow that ended in `phase` (Succeeded, Failed, Error), or None: kept forever."""
    strategy = strategy or {}
    if phase == "Failed" and strategy.get("secondsAfterFailure") is not None:
        return int(strategy["secondsAfterFailure"])
    if phase == "Succeeded" and strategy.get("secondsAfterSuccess") is not None:
        return int(strategy["secondsAfterSuccess"])
    if phase in ("Succeeded", "Failed", "Error") and strategy.get("secondsAfterCompletion") is not None:
        return int(strategy["secondsAfterCompletion"])
    return None
