"""retryStrategy as Argo decides it, attempt by attempt.

Follows workflow/controller/operator.go `processNodeRetries` (v3.6 to v4.1), in its order:
0. past the Workflow's activeDeadlineSeconds no retry is made ("retry exceeded workflow deadline <time>");
1. `backoff.maxDuration` is a window from the first attempt's start, not a cap on each wait: once it has
   passed, a failure ends the node ("Max duration limit exceeded"); a retry whose wait would end after it
   is not made ("Backoff would exceed max duration limit"); retry attempts are given the window's end as
   their deadline (`opts.executionDeadline`), the first attempt none;
2. the wait before attempt n+1 is `duration × factor^(n-1)` after the last attempt finished (factor an
   integer; no wait when `limit` is unset), at most `cap` (v3.7+). The wait comes BEFORE steps 3 to 5:
   a failure that the policy, the limit or the expression will not retry still waits out the backoff
   before its node fails (unless the limit is already used up);
3. `retryPolicy` (`RetryPolicyActual`: OnFailure by default, Always when an expression is given);
4. `limit`: attempts = limit + 1;
5. `expression`, ANDed with the policy, over `lastRetry.exitCode` (a string, "-1" when there is none),
   `lastRetry.status`, `lastRetry.message` (buildRetryStrategyLocalScope), in expr-lang.

Exit codes: cmd/argoexec/commands/emissary.go `exitCodeFromErr` reports a process killed by any signal as
137, as `exit_code` does with a local process's negative return code.

`affinity: {nodeAntiAffinity: {}}` (none of bertology's own templates sets it): from v3.7.1 each retry's pod
gets a required node affinity `kubernetes.io/hostname NotIn` every node where a pod of its Retry node failed
(workflow/controller/retry_tweak.go `FindRetryNode`, `RetryOnDifferentHost`; workflow/util/retry
`GetFailHosts`, `AddHostnamesToAffinity`), so with no other node that can take it the retry stays Pending,
holding the step's semaphores. v3.6 looks the Retry node up by the template of the DAG or steps node around
the pod (`FindRetryNode` before upstream #14576, fixed in v3.7.1), so a step inside a DAG gets no affinity (or
the failed hosts of a Retry node that runs that DAG's template); only a retried step that is the Workflow's
entrypoint gets its own. It
changes where a retry runs, not whether: this machine is the only node, so locally the retry runs here
again, and the log says which node Argo would have avoided.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from bertology.argo import durations
from bertology.argo.expressions import evaluate_retry, parse_retry

POLICIES = ("Always", "OnFailure", "OnError")


class RetryError(ValueError):
    """A retryStrategy Argo would refuse at run time (a malformed duration or factor)."""


def seconds(duration: Any) -> float:
    """wfv1.ParseStringToDuration: a bare number of seconds, or a Go duration such as 30s or 1m30s."""
    text = str(duration).strip()
    if re.fullmatch(r"\d+", text):
        return float(text)
    found = durations.seconds(text)
    if found is None:
        raise RetryError(f"retryStrategy duration {text!r} is not a duration like 30s, 2m or 1h")
    return found


def exit_code(returncode: int) -> int:
    """The exit code Argo records for a process: its own, or 137 when a signal killed it."""
    return returncode if returncode >= 0 else 137


@dataclass(frozen=True)
class Attempt:
    phase: str  # Failed (non-zero exit) or Error
    exit_code: int | None
    started: float  # seconds, any clock
    finished: float
    message: str = ""


@dataclass(frozen=True)
class Decision:
    retry: bool
    wait_s: float = 0.0  # waited before the retry, or before the node ends (step 2 comes first)
    message: str = ""  # why the node ends, as Argo's node message
    deadline: float | None = None  # the next attempt's deadline (maxDuration), same clock as Attempt


@dataclass(frozen=True)
class RetryStrategy:
    limit: int | None
    policy: str
    expression: str | None
    duration_s: float | None
    factor: int | None
    max_duration_s: float | None
    cap_s: float | None
    other_node: bool = False  # affinity.nodeAntiAffinity: a retry kept off the nodes where one failed (v3.7.1+)

    @classmethod
    def parse(cls, raw: dict | None) -> RetryStrategy | None:
        if raw is None:
            return None
        backoff = raw.get("backoff")
        expression = str(raw["expression"]) if raw.get("expression") else None
        policy = raw.get("retryPolicy") or ("Always" if expression else "OnFailure")
        if policy not in POLICIES:
            raise RetryError(f"retryPolicy {policy!r} is not supported locally (supported: {', '.join(POLICIES)})")
        if expression:
            parse_retry(expression)
        factor = None
        if backoff is not None and backoff.get("factor") is not None:
            if not re.fullmatch(r"-?\d+", str(backoff["factor"]).strip()):
                raise RetryError(f"retryStrategy.backoff.factor {backoff['factor']!r} must be an integer")
            factor = int(str(backoff["factor"]))
        if backoff is not None and not backoff.get("duration"):
            raise RetryError("no base duration specified for retryStrategy")  # processNodeRetries
        return cls(
            limit=int(str(raw["limit"])) if raw.get("limit") is not None else None,
            policy=policy,
            expression=expression,
            duration_s=seconds(backoff["duration"]) if backoff else None,
            factor=factor,
            max_duration_s=seconds(backoff["maxDuration"]) if backoff and backoff.get("maxDuration") else None,
            cap_s=seconds(backoff["cap"]) if backoff and backoff.get("cap") else None,
            other_node=raw.get("affinity") is not None,
        )

    def wait_before(self, attempts: int) -> float:
        """The backoff after `attempts` attempts: duration × factor^(attempts-1), at most cap."""
        if self.duration_s is None:
            return 0.0
        wait = self.duration_s
        if self.factor is not None and self.factor > 0:
            wait = self.duration_s * self.factor ** (attempts - 1)
        return min(wait, self.cap_s) if self.cap_s is not None else wait

    def decide(self, attempts: list[Attempt], now: float, workflow_deadline: float | None = None) -> Decision:
        """After the last of `attempts` failed: retry or end the node, each after `wait_s`."""
        last = attempts[-1]
        if workflow_deadline is not None and now > workflow_deadline:
            return Decision(False, message=f"retry exceeded workflow deadline {go_time(workflow_deadline)}")
        deadline = None
        wait = 0.0
        if self.duration_s is not None:
            if self.max_duration_s is not None:
                deadline = attempts[0].started + self.max_duration_s
                if now > deadline:
                    return Decision(False, message="Max duration limit exceeded")
            waiting_deadline = last.finished + self.wait_before(len(attempts))
            if deadline is not None and waiting_deadline > deadline:
                return Decision(False, message="Backoff would exceed max duration limit")
            if now < waiting_deadline and self.limit is not None and len(attempts) <= self.limit:
                wait = waiting_deadline - now
        retry_failed = self.policy in ("Always", "OnFailure")
        retry_error = self.policy in ("Always", "OnError")
        if (last.phase == "Failed" and not retry_failed) or (last.phase == "Error" and not retry_error):
            return Decision(False, wait, message=last.message)
        if self.limit is not None and len(attempts) > self.limit:
            return Decision(False, wait, message="No more retries left")
        if self.expression and not evaluate_retry(parse_retry(self.expression), last.exit_code, last.phase,
                                                  last.message):
            return Decision(False, wait, message="retryStrategy.expression evaluated to false")
        return Decision(True, wait_s=wait, deadline=deadline)


def go_time(seconds: float) -> str:
    """A UTC time as Go's time.Time String() prints it (fmt `%s` of a time.Time), to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(seconds))
