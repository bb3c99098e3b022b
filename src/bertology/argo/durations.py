"""Durations as Argo's fields write them: a sequence of numbers each with a unit (Go's time.ParseDuration:
`90s`, `1m30s`, `1.5h`), read into seconds. Each caller says which numbers and units it takes and words its
own refusal: a template's `timeout` and a retryStrategy's backoff (Go's units), the queue watch's limits
(also `d` for days)."""

from __future__ import annotations

import re

GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
DECIMAL = r"\d+(?:\.\d+)?"  # 1, 1.5 (Go also reads .5: a caller that takes it says so)


def seconds(text: str, units: dict[str, float] = GO_UNITS, number: str = DECIMAL) -> float | None:
    """The seconds `text` says, or None when it is not one number-and-unit after another, wholly."""
    names = "|".join(re.escape(u) for u in sorted(units, key=len, reverse=True))  # `ms` before `m`
    parts = re.findall(f"({number})({names})", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * units[u] for n, u in parts)
