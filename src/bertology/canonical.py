"""The canonical JSON form that every content id hashes, and the hash itself.

Why apart from the specs (bertology.spec): the tiny BERT's recipe key is hashed the same way, and the
spec's ids include that key, so both need this below them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any

from bertology.errors import BadInput


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, floats in Python's shortest round-trip form, no NaN/inf."""
    return json.dumps(_normalise(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def _normalise(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return obj.to_dict()
    if isinstance(obj, dict):
        return {str(k): _normalise(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_normalise(v) for v in obj]
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise BadInput(f"non-finite number {obj!r} in a spec (only finite numbers are allowed)")
        # 3.0 and 3 must not give two ids for the same spec.
        return int(obj) if obj.is_integer() and abs(obj) < 2**53 else obj
    return obj


def hash_id(text: str) -> str:
    """A content id: the first 16 hex digits of the text's sha256."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
