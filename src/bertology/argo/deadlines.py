"""activeDeadlineSeconds, of a container template and of the Workflow, as Argo and the kubelet enforce them.

Follows, in argoproj/argo-workflows (v3.6 to v4.1):
- A template's `activeDeadlineSeconds` (leaf templates only, validate.go `validateNonLeaf`; an int or a
  `{{…}}` variable that resolves to one, util/intstr `Int`: "value 'x' cannot be resolved to an int") is
  the pod's spec.activeDeadlineSeconds (workflowpod.go). The kubelet counts it from the pod's start on its
  node (status.startTime: after scheduling, image pulls included) and then fails the pod: phase Failed,
  reason DeadlineExceeded, message "Pod was active on the node longer than the specified deadline"
  (kubernetes pkg/kubelet/active_deadline.go; Argo's test/e2e/workflow_test.go asserts that node message).
  The node's message is the pod's (operator.go `inferFailedReason`: "Pod has a nice error message. Use
  that."). Its containers are stopped as a deleted pod's: SIGTERM, SIGKILL after the grace period, so the
  exit code is what the process returns (a step that handles SIGTERM exits 75). `processNodeRetries` has
  no rule for deadlines: the retryStrategy sees status Failed, that message and that exit code.
  A pod that is never scheduled has no startTime, so this deadline never starts for it.
- The Workflow's `spec.activeDeadlineSeconds` counts from status.startedAt truncated to the second
  (operator.go `getWorkflowDeadline`), and the controller requeues itself for that moment. Then every
  pod still Pending or Running is terminated and its node marked Failed "Step exceeded its deadline"
  (exec_control.go `applyExecutionControl`), and so is every node still waiting for a lock or a pod
  (`failNodesWithoutCreatedPodsAfterDeadlineOrShutdown`); no pod is created after it (workflowpod.go:
  `wfActiveDeadlineSeconds <= 0`); a failed node is not retried: "retry exceeded workflow deadline <time>"
  (`processNodeRetries`). Exit-handler pods are exempt (`opts.onExitPod`). A fulfilled node releases its
  semaphore (`handleNodeFulfilled`), which is how a Pending pod that holds the GPU lets the next one in.
- A template's `timeout` (a duration; validate.go refuses a whole number, "has invalid duration format in
  timeout", and a non-leaf template) counts from the node's StartedAt. While the node is Pending past it
  (no node for the pod, a full cluster), executeTemplate fails it with the message "timeout" (operator.go
  `checkTemplateTimeout`, v4: `checkTemplateTimeouts`; ErrTimeout); once the pod is made, the time left to
  it becomes the pod's activeDeadlineSeconds, replacing the template's own (workflowpod.go
  `createWorkflowPod`: `time.Since(*templateDeadline).Seconds() < float64(*pod.Spec.ActiveDeadlineSeconds)`
  holds whenever the deadline lies ahead), which the kubelet enforces as above. Unlike the Workflow's
  deadline it binds exit-handler pods too. The runner emulates it on a template without a semaphore and
  without a retryStrategy (the exit handlers' case): locally a pod is never Pending, so it is the pod's
  deadline, counted from the pod's start. With a semaphore the node's StartedAt is when it began to wait
  for the lock (executeTemplate initialises the node Pending before TryAcquire), and with retries whether
  the Retry node or its attempt is checked depends on the controller's pass: refused.
- `pendingTimeout` is refused: v4.1+ only, and it counts the semaphore wait too.

Locally a pod starts at once (no scheduling, no image pull), so the template's deadline counts from the
process start; backoff waits are not shortened in a workflow with a deadline, so both clocks agree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from bertology.argo import durations

KUBELET_MESSAGE = "Pod was active on the node longer than the specified deadline"
WORKFLOW_MESSAGE = "Step exceeded its deadline"
REFUSED = {
    "timeout": "template 'timeout' with a semaphore or a retryStrategy counts from the node's start, semaphore "
               "wait and earlier attempts included (operator.go checkTemplateTimeouts), which the local runner "
               "does not emulate; use activeDeadlineSeconds there",
    "pendingTimeout": "'pendingTimeout' is Argo v4.1+ only and counts the semaphore wait (checkTemplateTimeouts); "
                      "use the Workflow's activeDeadlineSeconds",
}


class DeadlineError(ValueError):
    """An activeDeadlineSeconds that does not resolve to an integer (the node errors)."""


def seconds(value: Any) -> int | None:
    """util/intstr `Int` of a substituted activeDeadlineSeconds: None when unset."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise DeadlineError(f"value '{value}' cannot be resolved to an int")
    if isinstance(value, int):
        return value
    text = str(value)
    if not re.fullmatch(r"[+-]?\d+", text):
        raise DeadlineError(f"value '{text}' cannot be resolved to an int")
    return int(text)


def timeout_seconds(value: Any) -> float | None:
    """A template's `timeout` in seconds (None when unset): a Go duration such as 10m or 90s
    (time.ParseDuration in v3.6's checkTemplateTimeout; v4's wfv1.ParseStringToDuration reads the same)."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    if isinstance(value, (int, float)) or re.fullmatch(r"[+-]?\d+", text):
        raise DeadlineError(f"timeout '{text}' is a whole number (allowed: a duration such as 10m or 90s; "
                            f"validate.go: 'has invalid duration format in timeout')")
    found = durations.seconds(text, number=r"\d+(?:\.\d+)?|\.\d+")
    if found is None:
        raise DeadlineError(f"timeout '{text}' is not a duration (allowed: a duration such as 10m or 90s)")
    return found


@dataclass(frozen=True)
class Deadlines:
    """The Workflow's deadline (epoch seconds, or None) and the clock both are read on."""

    workflow: float | None = None

    @classmethod
    def of(cls, spec: dict, started: float) -> Deadlines:
        limit = spec.get("activeDeadlineSeconds")
        if limit is None:
            return cls(None)
        return cls(math.floor(started) + int(limit))

    def kill(self, template_seconds: int | None, start: float, on_exit: bool = False) -> tuple[float, str] | None:
        """When a pod started at `start` is stopped, and its node's message: its own deadline (the kubelet's)
        or the Workflow's (the controller's), whichever comes first; exit-handler pods only by their own."""
        own = None if template_seconds is None else (start + template_seconds, KUBELET_MESSAGE)
        workflow = None if self.workflow is None or on_exit else (self.workflow, WORKFLOW_MESSAGE)
        candidates = [c for c in (own, workflow) if c is not None]
        return min(candidates, key=lambda c: c[0]) if candidates else None
