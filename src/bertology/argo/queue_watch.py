"""What the queue watch stops: a Workflow whose step waited too long for a bertology semaphore, or whose pod
the scheduler could not place, read from the Workflow's own status.

A Workflow's deadline counts from its start, so alone it bounds a wait for the GPU only at 14 days, and a
pod that no node can take (a `gpu.nodeSelector` that matches nothing) holds its GPU slot as long. Argo 3.6
to 4.1 has no per-step bound on either that leaves a retried step's own deadline alone (docs/kubernetes.md,
"Sharing a cluster"). So the chart's CronWorkflow `bertology-queue-watch` reads every running bertology
Workflow of its namespace and stops one (`spec.shutdown: Stop`, as `argo stop` does) when a node of it is
past a limit, naming the node, the semaphore or the scheduler's reason, and the time waited.

Follows, in argoproj/argo-workflows (v3.6.19, v3.7.18, v4.1.2):
- operator.go `markNodeWaitingForLock`: a node waiting for a lock has `synchronizationStatus.waiting` set to
  the lock's name (`NAMESPACE/ConfigMap/NAME/KEY`), and its message is the semaphore's (sync/semaphore.go
  `checkAcquire`: "Waiting for LOCK lock. Lock status: FREE/LIMIT"); once it holds the lock the field is
  cleared. The node is made, Pending, before its first try to acquire (`executeTemplate`), so its
  `startedAt` is when it began to wait. A retried step's Retry node stays Pending until it is done, so the
  phase alone does not say it waits: the field does.
- operator.go `getPendingReason`: a pod node whose pod the scheduler could not place is Pending with the
  message "Unschedulable", followed by ": " and the scheduler's message when it gave one (`0/3 nodes are
  available: …`); the node is made with the pod, so `startedAt` is when the pod was made.
- util.go `StopWorkflow` / `patchShutdownStrategy`: stopping is a merge patch of `spec.shutdown`; Argo then
  fails every node not yet done with "Stopped with strategy 'Stop'", kills the running pods and runs the exit
  handler (operator.go `failNodesWithoutCreatedPodsAfterDeadlineOrShutdown`, `operate`), which is why the
  reason goes in an annotation: the exit handler `verdict` reads it from `{{workflow.annotations.json}}`
  (operator.go `setGlobalParameters` sets it on every reconcile from the Workflow's annotations).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from bertology.argo import durations
from bertology.errors import BadInput

# The annotation the watch leaves on a Workflow it stopped: the one line saying why.
ANNOTATION = "bertology.io/stopped-by-queue-watch"
# The WorkflowTemplates whose Workflows the watch may stop (spec.workflowTemplateRef.name): bertology's own.
WATCHED = ("bertology-study", "bertology-vocab-overlap", "bertology-nightly-regression")
SEMAPHORES = "/ConfigMap/bertology-semaphores/"  # the lock names of the chart's semaphores
UNSCHEDULABLE = "Unschedulable"  # operator.go getPendingReason: the PodScheduled condition's reason[: its message]
ACTIVE = ("", "Pending", "Running")  # WorkflowPhase values of a Workflow not yet done
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str, what: str) -> float:
    """Seconds from `3d`, `6h`, `1h30m`, `90s` (Go's time.ParseDuration units h, m, s, and d for days);
    `0` means no limit. BadInput names the value and what is allowed."""
    value = str(text).strip()
    if value == "0":
        return 0.0
    found = durations.seconds(value, _UNITS)
    if found is None:
        raise BadInput(f"{what} '{text}' is not a duration (allowed: a number with d, h, m or s, such as 30m, "
                       f"6h, 1h30m or 7d; 0 for no limit)")
    return found


def duration(seconds: float) -> str:
    """7d, 3d 4h, 1h 30m, 12m, 45s: two units at most, as a person would say it."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    out = []
    for unit, size in _UNITS.items():
        if whole >= size and unit != "s":
            out.append(f"{whole // size}{unit}")
            whole %= size
    return " ".join(out[:2])


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Breach:
    """A node of a Workflow past one of the watch's limits."""

    node: str  # the node's name below its Workflow: `cell(3:1f2e…).finetune`
    waited_s: float
    limit_s: float
    lock: str = ""  # the semaphore it waits for (`NAMESPACE/ConfigMap/bertology-semaphores/gpu`)
    reason: str = ""  # or the scheduler's message, for a pod no node takes

    def line(self) -> str:
        if self.lock:
            return (f"{self.node} waited {duration(self.waited_s)} for semaphore {self.lock}, past the queue "
                    f"limit of {duration(self.limit_s)} (chart value queueWatch.queueLimit)")
        return (f"{self.node}'s pod found no node for {duration(self.waited_s)}, past the scheduling limit of "
                f"{duration(self.limit_s)} (chart value queueWatch.schedulingLimit): {self.reason}")


def watched(workflow: dict) -> bool:
    """A bertology Workflow still running that nobody has stopped yet."""
    spec = workflow.get("spec") or {}
    return ((spec.get("workflowTemplateRef") or {}).get("name") in WATCHED
            and not spec.get("shutdown")
            and (workflow.get("status") or {}).get("phase", "") in ACTIVE)


def breaches(workflow: dict, now: datetime, queue_limit_s: float, scheduling_limit_s: float) -> list[Breach]:
    """The nodes of one Workflow past a limit (0: no limit), longest wait first."""
    name = (workflow.get("metadata") or {}).get("name", "")
    found = []
    for node in ((workflow.get("status") or {}).get("nodes") or {}).values():
        if node.get("phase") != "Pending":
            continue
        started = _time(node.get("startedAt"))
        if started is None:
            continue
        waited = (now - started).total_seconds()
        short = str(node.get("name", "")).removeprefix(f"{name}.")
        lock = (node.get("synchronizationStatus") or {}).get("waiting") or ""
        message = node.get("message") or ""
        if lock and SEMAPHORES in lock and queue_limit_s and waited > queue_limit_s:
            found.append(Breach(short, waited, queue_limit_s, lock=lock))
        elif (node.get("type") == "Pod" and message.split(":")[0] == UNSCHEDULABLE and scheduling_limit_s
              and waited > scheduling_limit_s):
            found.append(Breach(short, waited, scheduling_limit_s, reason=message))
    return sorted(found, key=lambda b: -b.waited_s)


def stop_reason(found: Iterable[Breach]) -> str:
    """The one line left on the stopped Workflow: the longest wait, and how many more nodes were past."""
    found = list(found)
    more = f" (and {len(found) - 1} more nodes past a limit)" if len(found) > 1 else ""
    return f"stopped by the queue watch: {found[0].line()}{more}"


def stop_patch(reason: str) -> dict:
    """The merge patch that stops a Workflow as `argo stop` does, with the reason as an annotation."""
    return {"metadata": {"annotations": {ANNOTATION: reason}}, "spec": {"shutdown": "Stop"}}


def reason_from_annotations(annotations_json: str) -> str:
    """The watch's line from `{{workflow.annotations.json}}` (json.Marshal of the Workflow's annotations:
    `null` when it has none), or ""."""
    try:
        annotations = json.loads(annotations_json or "null") or {}
    except json.JSONDecodeError:
        return ""
    return str(annotations.get(ANNOTATION, "")) if isinstance(annotations, dict) else ""


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
