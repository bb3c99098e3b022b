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
  the lock's name (`NAMESPACE/ConfigMap/NAME/KEY`: sync/lock_name.go), and its message is the semaphore's
  (sync/semaphore.go `checkAcquire`: "Waiting for LOCK lock. Lock status: FREE/LIMIT"); once it holds the
  lock the field is cleared. The node is made, Pending, before its first try to acquire (`executeTemplate`),
  so its `startedAt` is when it began to wait. A retried step's Retry node stays Pending until it is done,
  so the phase alone does not say it waits: the field does.
- A wait counts only while the node's own Workflow holds no slot of that lock, and from the later of the
  node's `startedAt` and the last time its Workflow held the lock. Every finetune node of a study is made at
  the fan-out and waits while a sibling holds the `gpu` slot; that is the study making progress, not
  waiting for the GPU. sync_manager.go `TryAcquire` records each holder in the Workflow's own
  `status.synchronization.semaphore.holding[]` (`{semaphore: LOCK, holders: [...]}`: workflow_types.go
  `SemaphoreStatus.LockAcquired`), the holder key `NAMESPACE/WORKFLOW/NODE_ID` (`getHolderKey`; a bare node
  id as written before v3.5, which v3.6+ still reads: `CheckHolderKeyVersion`, `HoldingNameV1`), and
  `LockReleased` removes it, leaving an entry with no holders. No time is recorded there: the last hold is
  the latest `finishedAt` of the Workflow's nodes whose template takes the lock (a node releases when it is
  fulfilled: `executeTemplate`, `Release`), found through `status.storedTemplates` (the templates a
  templateRef or a WorkflowTemplate's own template resolved to: `SetStoredTemplate`,
  `resolveTemplateReference`) or `status.storedWorkflowTemplateSpec`, and from the nodes' template
  (`templateRef`, else `templateScope` and `templateName`: `initializeNode`).
- operator.go `getPendingReason`: a pod node whose pod the scheduler could not place is Pending with the
  message "Unschedulable", followed by ": " and the scheduler's message when it gave one (`0/3 nodes are
  available: …`); the node is made with the pod, so `startedAt` is when the pod was made.
- workflow/packer/packer.go `compressWorkflow`: a Workflow larger than MAX_WORKFLOW_SIZE (1 MiB by default)
  keeps its nodes as `status.compressedNodes`, the base64 (StdEncoding) of the gzip of the JSON of the nodes
  map (util/file `CompressEncodeString`), and no `status.nodes`; `DecompressWorkflow` reads them back. Still
  too large, or with ALWAYS_OFFLOAD_NODE_STATUS, the nodes go to the Argo database (workflow/hydrator
  `Dehydrate`: `status.offloadNodeStatusVersion` set, no nodes at all), which the watch cannot read: such a
  Workflow is named as unreadable, never taken for one with nothing waiting.
- util.go `StopWorkflow` / `patchShutdownStrategy`: stopping is a merge patch of `spec.shutdown`; Argo then
  fails every node not yet done with "Stopped with strategy 'Stop'", kills the running pods and runs the exit
  handler (operator.go `failNodesWithoutCreatedPodsAfterDeadlineOrShutdown`, `operate`), which is why the
  reason goes in an annotation: the exit handler `verdict` reads it from `{{workflow.annotations.json}}`
  (operator.go `setGlobalParameters` sets it on every reconcile from the Workflow's annotations).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
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
            return (f"{self.node} waited {duration(self.waited_s)} for semaphore {self.lock} while its Workflow "
                    f"held none of it, past the queue limit of {duration(self.limit_s)} (chart value "
                    f"queueWatch.queueLimit)")
        return (f"{self.node}'s pod found no node for {duration(self.waited_s)}, past the scheduling limit of "
                f"{duration(self.limit_s)} (chart value queueWatch.schedulingLimit): {self.reason}")


def watched(workflow: dict) -> bool:
    """A bertology Workflow still running that nobody has stopped yet."""
    spec = workflow.get("spec") or {}
    return ((spec.get("workflowTemplateRef") or {}).get("name") in WATCHED
            and not spec.get("shutdown")
            and (workflow.get("status") or {}).get("phase", "") in ACTIVE)


class NodesUnreadable(Exception):
    """A Workflow whose node statuses the watch cannot read; the message is one line saying why."""


# The controller setting that offloads node statuses (workflow-controller-configmap `persistence`)
OFFLOAD_SETTING = "persistence.nodeStatusOffLoad"


def workflow_nodes(workflow: dict) -> dict[str, dict]:
    """The Workflow's node statuses, by id: `status.nodes`, else `status.compressedNodes` decoded as
    packer.go `DecompressWorkflow` decodes it. NodesUnreadable when they are offloaded to Argo's database
    (`status.offloadNodeStatusVersion`, hydrator.go `Dehydrate`) or cannot be decoded."""
    status = workflow.get("status") or {}
    if status.get("nodes"):
        return status["nodes"]
    if status.get("compressedNodes"):
        try:
            nodes = json.loads(gzip.decompress(base64.b64decode(status["compressedNodes"], validate=True)))
        except (binascii.Error, OSError, EOFError, zlib.error, ValueError) as e:
            raise NodesUnreadable(f"its status.compressedNodes could not be decoded (base64 of gzip of JSON, "
                                  f"workflow/packer/packer.go): {e}") from None
        if not isinstance(nodes, dict):
            raise NodesUnreadable("its status.compressedNodes is not a map of node statuses")
        return nodes
    if status.get("offloadNodeStatusVersion"):
        raise NodesUnreadable(f"its node statuses are offloaded to the Argo controller's database "
                              f"(status.offloadNodeStatusVersion {status['offloadNodeStatusVersion']}; "
                              f"{OFFLOAD_SETTING}), which the queue watch cannot read: check it with "
                              f"`argo get`, or turn node status offloading off")
    return {}


def holder_node(holder: str) -> str:
    """The node id in a semaphore holder key: `NAMESPACE/WORKFLOW/NODE_ID` (sync_manager.go getHolderKey,
    v3.6.19 to v4.1.2), or a bare node id as written before v3.5 (HoldingNameV1); "" for a Workflow-level
    holder (`NAMESPACE/WORKFLOW`)."""
    parts = str(holder).split("/")
    return parts[2] if len(parts) == 3 else parts[0] if len(parts) == 1 else ""


def holders(workflow: dict, lock: str) -> list[str]:
    """The Workflow's own holders of a semaphore lock (status.synchronization.semaphore.holding: an entry
    LockReleased emptied holds nothing)."""
    holding = (((workflow.get("status") or {}).get("synchronization") or {}).get("semaphore") or {}).get("holding")
    return [h for entry in holding or [] if entry.get("semaphore") == lock for h in entry.get("holders") or []]


def _template_key(node: dict) -> tuple[str, ...]:
    """Which template a node runs, as its NodeStatus says (operator.go initializeNode: templateRef, else
    templateScope and templateName)."""
    ref = node.get("templateRef") or {}
    if ref.get("name"):
        return ("cluster" if ref.get("clusterScope") else "namespaced", str(ref["name"]), str(ref.get("template")))
    scope, _, resource = str(node.get("templateScope") or "").partition("/")
    return (scope, resource, str(node.get("templateName") or ""))


def _stored_template(workflow: dict, key: tuple[str, ...]) -> dict | None:
    """A template as the Workflow stored it: status.storedTemplates by `SCOPE/NAME/TEMPLATE`
    (resolveTemplateReference), or one of its own (scope `local`: the spec's, or the WorkflowTemplate's it
    references, status.storedWorkflowTemplateSpec)."""
    status = workflow.get("status") or {}
    scope, resource, template = key
    if scope != "local":
        return (status.get("storedTemplates") or {}).get(f"{scope}/{resource}/{template}")
    for spec in (workflow.get("spec") or {}, status.get("storedWorkflowTemplateSpec") or {}):
        for candidate in spec.get("templates") or []:
            if candidate.get("name") == template:
                return candidate
    return None


def template_locks(template: dict | None, namespace: str) -> set[str]:
    """The semaphore locks a template takes (sync/lock_name.go getSemaphoreLockName: the ConfigMap's
    namespace, else the Workflow's)."""
    sync = (template or {}).get("synchronization") or {}
    refs = [*(sync.get("semaphores") or []), *([sync["semaphore"]] if sync.get("semaphore") else [])]
    locks = set()
    for ref in refs:
        cm = ref.get("configMapKeyRef") or {}
        if cm.get("name") and cm.get("key"):
            locks.add(f"{ref.get('namespace') or namespace}/ConfigMap/{cm['name']}/{cm['key']}")
    return locks


def last_held(workflow: dict, nodes: dict[str, dict], lock: str) -> datetime | None:
    """When the Workflow last let go of `lock`: the latest finishedAt of its fulfilled nodes whose template
    takes the lock and that got it (no synchronizationStatus.waiting left); None when none did."""
    namespace = str((workflow.get("metadata") or {}).get("namespace") or "")
    takers = {_template_key(n) for n in nodes.values() if (n.get("synchronizationStatus") or {}).get("waiting") == lock}
    takers |= {_template_key(nodes[i]) for i in map(holder_node, holders(workflow, lock)) if i in nodes}
    latest = None
    for node in nodes.values():
        if node.get("phase") not in ("Succeeded", "Failed", "Error") or (node.get("synchronizationStatus") or {}).get(
                "waiting"):
            continue
        key = _template_key(node)
        if key not in takers and lock not in template_locks(_stored_template(workflow, key), namespace):
            continue
        finished = _time(node.get("finishedAt"))
        if finished is not None and (latest is None or finished > latest):
            latest = finished
    return latest


def breaches(workflow: dict, now: datetime, queue_limit_s: float, scheduling_limit_s: float) -> list[Breach]:
    """The nodes of one Workflow past a limit (0: no limit), longest wait first. NodesUnreadable when its
    node statuses are out of reach (workflow_nodes)."""
    name = (workflow.get("metadata") or {}).get("name", "")
    nodes = workflow_nodes(workflow)
    found = []
    for node in nodes.values():
        if node.get("phase") != "Pending":
            continue
        started = _time(node.get("startedAt"))
        if started is None:
            continue
        waited = (now - started).total_seconds()
        short = str(node.get("name", "")).removeprefix(f"{name}.")
        lock = (node.get("synchronizationStatus") or {}).get("waiting") or ""
        message = node.get("message") or ""
        if lock and SEMAPHORES in lock:
            if not queue_limit_s or holders(workflow, lock):
                continue  # its own Workflow holds a slot: it waits behind its own steps
            held = last_held(workflow, nodes, lock)
            since = max(started, held) if held is not None else started
            waited = (now - since).total_seconds()
            if waited > queue_limit_s:
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
