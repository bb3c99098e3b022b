"""A DAG template's scheduling and phase, as the Argo controller decides them.

Follows workflow/controller/dag.go (v3.6 to v4.1):
- `executeDAGTask`: a task starts once every task it depends on is fulfilled and its `depends`
  expression (`evaluateDependsLogic`, expressions.py) holds; otherwise it is Omitted ("omitted: depends
  condition not met"). A failure stops nothing: tasks that become ready are still started. A bare name in
  `depends` is `(T.Succeeded || T.Skipped || T.Daemoned)`, plus `T.Errored` / `T.Failed` when T has
  `continueOn: {error: true}` / `{failed: true}` (workflow/common/ancestry.go `expandDependency`). A
  fan-out's own phase is Failed when any child failed (the last failed child's phase, in item order), so a
  bare `depends` on a fan-out with one failed item omits the dependent (dag_test.go TestFailsWithParamDAG).
- The node graph: a task's node is the child of each outbound node of each task it depends on (a task with
  none: of the DAG's node), `connectDependencies`; outbound nodes are operator.go `getOutboundNodes`: a pod
  or skipped node itself, a Retry node's last attempt, a TaskGroup's children's (itself when it has none),
  a DAG's `OutboundNodes` (those of its target tasks, `updateOutboundNodesForTargetTasks`).
- `assessDAGPhase`: a breadth-first walk from the DAG's node over that graph carries a branch phase, which
  every completed node (Succeeded, Failed, Error) replaces with its own; a target task (one nothing depends
  on, `findLeafTaskNames`) that completed keeps its phase, one that was Skipped or Omitted gets the first
  Failed or Error branch phase that reaches it (else Succeeded). Walk entries are unique per (node, phase)
  (phase_node.go `uniquePhaseNodeQueue`). Then, over the targets in order, a failed one that has
  `continueOn` for its phase is passed over (`ContinuesOn`), else it decides: with `failFast` (the default)
  the first, without it the last. The controller holds a DAG Running while any of its nodes runs, so
  `failFast` cannot cut a DAG short while work is in flight; our workflows state `failFast: false`.
  Where Argo's order is a Go map's (a task with several dependencies: `GetTaskDependencies`), the local
  runner takes the order in which `depends` names them.

Template-level `failFast` (operator.go `checkParallelism`, a different flag) is refused by the runner.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

FAILED = ("Failed", "Error")
COMPLETED = ("Succeeded", "Failed", "Error")  # NodePhase.Completed: Skipped and Omitted are not

LEAF, RETRY, TASK_GROUP, DAG = "Leaf", "Retry", "TaskGroup", "DAG"  # Leaf: a pod, or a Skipped-type node


@dataclass(eq=False)
class Node:
    """A node of the Workflow's node graph (NodeStatus: type, phase, children, outboundNodes)."""

    name: str
    kind: str
    phase: str
    children: list[Node] = field(default_factory=list)
    outbound_nodes: list[Node] = field(default_factory=list)  # a DAG's OutboundNodes


def retry_node(name: str, phase: str, attempt_phases: list[str]) -> Node:
    """A template with a retryStrategy: a Retry node whose children are its attempts, `name(i)`."""
    return Node(name, RETRY, phase, [Node(f"{name}({i})", LEAF, p) for i, p in enumerate(attempt_phases)])


def outbound(node: Node) -> list[Node]:
    """operator.go getOutboundNodes."""
    if node.kind == RETRY:
        return node.children[-1:]
    if node.kind == TASK_GROUP:
        return [o for child in node.children for o in outbound(child)] if node.children else [node]
    if node.kind == DAG:
        return [o for n in node.outbound_nodes for o in outbound(n)]
    return [node]


def targets(order: list[str], upstream: dict[str, list[str]]) -> list[str]:
    """findLeafTaskNames: the tasks no other task depends on, in template order."""
    return [t for t in order if not any(t in upstream[other] for other in order)]


def connect(dag: Node, order: list[str], upstream: dict[str, list[str]], nodes: dict[str, Node]) -> None:
    """connectDependencies for every task, and the DAG's outbound nodes (its targets')."""
    for task in order:
        if not upstream[task]:
            dag.children.append(nodes[task])
        for dep in upstream[task]:
            for out in outbound(nodes[dep]):
                out.children.append(nodes[task])
    dag.outbound_nodes = [nodes[t] for t in targets(order, upstream)]


def dag_phase(dag: Node, order: list[str], upstream: dict[str, list[str]], nodes: dict[str, Node],
              fail_fast: bool = True, continue_on: dict[str, tuple[str, ...]] | None = None) -> str:
    """assessDAGPhase once every task is fulfilled; `dag` is connected first (connect)."""
    connect(dag, order, upstream, nodes)
    leaves = targets(order, upstream)
    deduced: dict[int, str] = {id(nodes[t]): "" for t in leaves}
    seen: set[tuple[int, str]] = set()
    queue: deque[tuple[Node, str]] = deque()

    def add(children: list[Node], phase: str) -> None:
        for child in children:
            if (id(child), phase) not in seen:
                seen.add((id(child), phase))
                queue.append((child, phase))

    add(dag.children, "Succeeded")
    while queue:
        node, branch = queue.popleft()
        if node.phase in COMPLETED:
            branch = node.phase
        if id(node) in deduced and deduced[id(node)] not in FAILED:
            deduced[id(node)] = branch
        add(node.children, branch)
    result = "Succeeded"
    for task in leaves:
        phase = deduced[id(nodes[task])] or "Succeeded"
        if phase in FAILED:
            if phase in (continue_on or {}).get(task, ()):
                continue
            result = phase
            if fail_fast:
                break
    return result
