"""The store's own failures, named so a step knows what to do: a key that is not there is bad input
(exit 2), an artifact that does not match its marker is transient (the step rebuilds it, or exits 75 and
the rerun does), and a full disk is told apart from other OS errors wherever a library wrapped it."""

from __future__ import annotations

import errno

from bertology.errors import BadInput, Transient


class Missing(BadInput):
    """A key that does not exist: bad input to a reader, a plain `False` to `exists`."""


class Damaged(Transient):
    """A finished artifact whose files do not match its marker (size or sha256), or whose marker is
    unreadable. Steps treat it as missing and rebuild it; uncaught it exits 75, and the rerun rebuilds."""

    def __init__(self, prefix_url: str, why: str, marker: bytes | None = None):
        super().__init__(f"artifact {prefix_url} is damaged ({why})")
        self.marker = marker


def is_disk_full(e: BaseException) -> bool:
    """ENOSPC or EDQUOT anywhere in the exception's chain (libraries wrap OSError in their own errors)."""
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(e) or "Disk quota exceeded" in str(e):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False
