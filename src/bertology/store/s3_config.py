"""The S3 client's settings, read from the environment: timeouts, retries and a log line per retry.

Apart from `S3Store` because these are operator knobs (BERTOLOGY_S3_*), each checked like any other bad
input (one line naming the variable, exit 2) before a client exists.
"""

from __future__ import annotations

import logging
import os

from bertology.errors import BadInput, choices

log = logging.getLogger("bertology")


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    try:
        return float(value) if value else default
    except ValueError:
        raise BadInput(f"{name}={value!r} is not a number of seconds") from None


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise BadInput(f"{name}={value!r} is not a positive whole number")
    return int(value)


def s3_config():
    """botocore's client settings: explicit timeouts and bounded retries with backoff and jitter.

    BERTOLOGY_S3_CONNECT_TIMEOUT (s, default 10), BERTOLOGY_S3_READ_TIMEOUT (s, default 30: a stalled
    endpoint costs at most that per attempt, not botocore's 60), BERTOLOGY_S3_MAX_ATTEMPTS (default AWS_MAX_ATTEMPTS or 5,
    first try included) and BERTOLOGY_S3_RETRY_MODE (standard or adaptive; default standard: exponential backoff
    with full jitter on throttling, 5xx, connection errors and timeouts)."""
    from botocore.config import Config

    mode = os.environ.get("BERTOLOGY_S3_RETRY_MODE", "standard")
    attempts = env_int("AWS_MAX_ATTEMPTS", 5)  # botocore's own variable, as a fallback
    if mode not in ("standard", "adaptive"):
        raise BadInput(f"BERTOLOGY_S3_RETRY_MODE={mode!r} ({choices(mode, ('standard', 'adaptive'), 'allowed')})")
    return Config(connect_timeout=env_float("BERTOLOGY_S3_CONNECT_TIMEOUT", 10.0),
                  read_timeout=env_float("BERTOLOGY_S3_READ_TIMEOUT", 30.0),
                  retries={"max_attempts": env_int("BERTOLOGY_S3_MAX_ATTEMPTS", attempts), "mode": mode})


def log_retry(max_attempts: int):
    """A `needs-retry` hook that logs one line for each failed attempt botocore will retry."""

    def hook(attempts=0, response=None, caught_exception=None, operation=None, **_):
        if caught_exception is not None:
            why = f"{type(caught_exception).__name__}: {str(caught_exception)[:120]}"
        elif response is not None and response[0].status_code >= 500 or response is not None and \
                response[0].status_code == 429:
            code = (response[1] or {}).get("Error", {}).get("Code", "")
            why = f"HTTP {response[0].status_code} {code}".strip()
        else:
            return
        if attempts < max_attempts:
            log.warning("S3 %s attempt %d of %d failed (%s); retrying with backoff",
                        getattr(operation, "name", "request"), attempts, max_attempts, why)

    return hook
