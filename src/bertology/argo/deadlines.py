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
- `timeout` and `pendingTimeout` are refused by the runner: both count from the node's StartedAt, which for
  a template with a semaphore is when it began to wait for the lock (executeTemplate initialises the node
  Pending before TryAcquire), and whether the Retry node or its attempt is checked depends on the
  controller's pass; `pendingTimeout` is v4.1+ only besides.

Locally a pod starts at once (no scheduling, no image pull), so the template's deadline counts from the
process start; backoff waits are not shortened in a workflow with a deadline, so both clocks agree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

KUBELET_MESSAGE = "Pod was active on the node longer than the specified deadline"
WORKFLOW_MESSAGE = "Step exceeded its deadline"
REFUSED = {
    "timeout": "template 'timeout' counts from the node's start, semaphore wait included (operator.go "
               "checkTemplateTimeouts), which the local runner does not emulate; use activeDeadlineSeconds",
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
