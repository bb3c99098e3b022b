"""The run's nodes as its caller reads them: results (NodeResult, RunResult), the pods it made (PodCall),
and progress events (RunEvent).

A NodeResult holds what Argo's node status holds (pkg/apis/workflow/v1alpha1/workflow_types.go
`NodeStatus`: name, templateName, phase, message, outputs; the phases are `NodePhase`'s: Succeeded,
Failed, Error, Skipped, Omitted), and a RunResult what the Workflow's `WorkflowStatus` does (phase,
message, its nodes). A PodCall is the main container's argv as workflowpod.go `createWorkflowPod` would
give it, after substitution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bertology.argo.exit_handler import EXIT_NODE
from bertology.argo.retries import Attempt
from bertology.argo.semaphores import Holder

_CHILD = re.compile(r"\((\d+):[^()]*\)")  # a fan-out child's `(index:item)` (fanout.child_name)


def readable_name(node: str, template: str = "") -> str:
    """A node's name as a person reads it: a fan-out child numbered from 1 (`gpu #2`, not `gpu(1:ID)`), the
    exit handler by its template (`verdict`, not `onExit`)."""
    if node == EXIT_NODE:
        return template or "the exit handler"
    return _CHILD.sub(lambda m: f" #{int(m.group(1)) + 1}", node)


@dataclass
class NodeResult:
    """One node of the run: a container, a DAG, a fan-out task group, or a task that never ran."""

    name: str  # Argo's node name: "plan", "cell", "cell(3:ID)", "cell(3:ID).finetune"; the root: the workflow
    template: str
    phase: str  # Argo's node phases: Succeeded, Failed, Error, Skipped, Omitted
    exit_code: int | None = None
    attempts: int = 0
    message: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    tries: list[Attempt] = field(default_factory=list)  # a container's attempts (its pods), in order
    retried: bool = False  # a container with a retryStrategy: a Retry node, its attempts its children
    finished: float | None = None  # when it was fulfilled (epoch seconds)
    # a container's wait for its semaphores before its first pod (not part of any pod's deadline); a node
    # that failed still waiting keeps the lock it waited for (NodeStatus.synchronizationStatus.waiting)
    queued_s: float = 0.0
    waiting_for: str = ""


@dataclass
class PodCall:
    """A container node as Argo would start it: its argv after substitution, and the fan-out item
    variables (`item`, `item.KEY`) of the items it descends from."""

    node: str
    template: str
    argv: list[str]
    inputs: dict[str, str]
    items: dict[str, str]


@dataclass
class RunResult:
    workflow: str
    phase: str  # the Workflow's phase: its entry node's, or Failed when only its exit handler failed
    message: str
    exit_code: int  # 0 succeeded; 2 when a step exited 2 (bad input); 75 when a step still failed transiently
    nodes: dict[str, NodeResult]  # in the order nodes finished
    pods: list[PodCall] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"


@dataclass(frozen=True)
class RunEvent:
    """What a progress display needs, without parsing log lines: a container `started`, a fan-out whose
    size is known before it starts (`planned`: `count` children, once the outputs its items come from
    exist), a fan-out expanded into `count` children (`fanout`), a container `waiting` for a semaphore
    that another run holds (`message`: what it waits for, `holders`: who holds it, as that run recorded
    it), any node `finished` with its phase, or a container's attempt that failed and will be retried
    (`retry`: its phase, message and exit code, `count` the attempt that failed, `max_attempts` how many
    its retryStrategy allows, None without a limit)."""

    kind: str  # started | planned | fanout | waiting | finished | retry
    node: str
    phase: str = ""
    count: int = 0
    message: str = ""
    children: tuple[str, ...] = ()  # fanout: the children's node names
    exit_code: int | None = None  # finished: the container's exit code (None: not a container, or none)
    max_attempts: int | None = None  # retry: the attempts the retryStrategy allows (None: no limit)
    template: str = ""  # started, waiting, finished: the node's template (the exit handler's names it)
    holders: tuple[Holder, ...] = ()  # waiting: the other runs' steps holding the slots
