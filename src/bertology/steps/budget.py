"""How big a study's Workflow gets on a cluster, and the bundle size that keeps it small.

Argo keeps one NodeStatus per node in the Workflow object. When the object's JSON passes 1 MiB the
controller gzips the nodes into `status.compressedNodes`, and fails the workflow if even that is too large
(workflow/packer/packer.go `CompressWorkflowIfNeeded`, `MAX_WORKFLOW_SIZE`, default 1024 * 1024); every
node is also re-read on each reconciliation. So a study should stay under about 1,000 nodes and well under
1 MiB without compression. `bundle` (runs per pod) is the one knob: a cell pod costs 7 nodes whatever it
holds, so plan picks the smallest bundle that fits (`auto_bundle`) unless the study sets one.

Node shapes of `bertology-study` (workflows/templates/study.yaml), as the controller builds them:
- a template with a retryStrategy is a Retry node plus one Pod node per attempt (operator.go
  `executeTemplate`), so a step that succeeds first time is 2 nodes;
- a fan-out is a TaskGroup node plus its children, named `task(i:item)` (operator.go `generateNodeName`:
  the item's text is part of every descendant's name); an empty one is a single Skipped node (dag.go
  `executeDAGTask`);
- a `cell` is a DAG node with finetune, evaluate and analyze: 1 + 3 × 2 nodes.

The size estimate serialises NodeStatus objects with the fields a finished node carries (id, names,
template reference, phase, boundary, times, progress, resource durations, input parameters, outputs,
children) at the lengths our names and values have, first attempts only: retries add nodes.
"""

from __future__ import annotations

import json

MAX_NODES = 1000
MAX_STATUS_BYTES = 512 * 1024  # half of Argo's 1 MiB, so retries and long names keep a margin
MAX_AUTO_BUNDLE = 64
_ID = "0123456789abcdef"  # a 16-hex-digit spec id


def _node(name: str, kind: str, template: str, children: int, params: dict[str, str]) -> dict:
    """A finished NodeStatus as the controller writes it (pkg/apis/workflow/v1alpha1 NodeStatus)."""
    node = {
        "id": "reversed-layers-x7k2p-1234567890", "name": name, "displayName": name.rsplit(".", 1)[-1],
        "type": kind, "templateName": template,
        "templateRef": {"name": "bertology-steps", "template": template}, "templateScope": "local/",
        "phase": "Succeeded", "boundaryID": "reversed-layers-x7k2p-1234567890",
        "startedAt": "2026-11-23T20:00:00Z", "finishedAt": "2026-11-23T20:00:00Z", "progress": "1/1",
        "resourcesDuration": {"cpu": 1234, "memory": 12345, "nvidia.com/gpu": 123},
        "inputs": {"parameters": [{"name": k, "value": v} for k, v in params.items()]},
        "children": ["reversed-layers-x7k2p-1234567890"] * children,
    }
    if kind == "Pod":
        node.update(outputs={"exitCode": "0"}, hostNodeName="ip-10-0-123-45.eu-west-1.compute.internal")
    return node


def workflow_nodes(datasets: int, checkpoints: int, pods: int) -> int:
    """Nodes of one study Workflow whose steps all succeed first time."""
    def fan_out(n: int, per_child: int) -> int:
        return 1 + n * per_child if n else 1  # TaskGroup + children, or one Skipped node

    return 1 + 2 + fan_out(datasets, 2) + fan_out(checkpoints, 2) + fan_out(pods, 7) + 2


def status_bytes(datasets: int, checkpoints: int, pod_items: list[str], store: str = "s3://bucket/store",
                 plan: str = "reversed-layers:" + _ID) -> int:
    """Estimated JSON size of the Workflow's `status.nodes` (see the module docstring)."""
    common = {"store": store, "plan": plan}
    size = 0

    def add(node: dict) -> None:
        nonlocal size
        size += len(json.dumps(node, separators=(",", ":"))) + 40  # + the map key (the node id)

    add(_node("reversed-layers-x7k2p", "DAG", "main", 1, {}))
    for kind in ("Retry", "Pod"):
        add(_node("reversed-layers-x7k2p.plan", kind, "plan", 1, {"study": "reversed-layers", "store": store}))
    for task, n in (("prepare-data", datasets), ("build-checkpoint", checkpoints)):
        add(_node(f"reversed-layers-x7k2p.{task}", "TaskGroup", task, n, {}))
        for i in range(n):
            for kind in ("Retry", "Pod"):
                add(_node(f"reversed-layers-x7k2p.{task}({i}:{_ID})", kind, task, 1, {**common, "ids": _ID}))
    add(_node("reversed-layers-x7k2p.cell", "TaskGroup", "cell", len(pod_items), {}))
    for i, ids in enumerate(pod_items):
        cell = f"reversed-layers-x7k2p.cell({i}:{ids})"
        add(_node(cell, "DAG", "cell", 3, {**common, "ids": ids}))
        for step in ("finetune", "evaluate", "analyze"):
            for kind in ("Retry", "Pod"):
                add(_node(f"{cell}.{step}", kind, step, 1, {**common, "ids": ids}))
    for kind in ("Retry", "Pod"):
        add(_node("reversed-layers-x7k2p.aggregate", kind, "aggregate", 0, common))
    return size


def pod_items(runs: int, bundle: int) -> list[str]:
    """The `runs` items of `runs` cells packed `bundle` to a pod, at the length real ids have."""
    return [",".join([_ID] * min(bundle, runs - i)) for i in range(0, runs, bundle)]


def fits(runs: int, bundle: int, datasets: int, checkpoints: int) -> bool:
    return pods_fit(datasets, checkpoints, pod_items(runs, bundle))


def pods_fit(datasets: int, checkpoints: int, items: list[str], store: str = "s3://bucket/store",
             plan: str = "reversed-layers:" + _ID) -> bool:
    """Whether a Workflow with these cell pods (`items`: each pod's ids, comma-joined) stays in the budget."""
    return (workflow_nodes(datasets, checkpoints, len(items)) <= MAX_NODES
            and status_bytes(datasets, checkpoints, items, store, plan) <= MAX_STATUS_BYTES)


def auto_bundle(runs: int, datasets: int = 0, checkpoints: int = 0) -> int:
    """The smallest number of runs per pod that keeps the Workflow inside the budget (1 when it fits).

    Bundling cannot shrink the dataset and checkpoint fan-outs; if those alone exceed the budget, the
    largest bundle is returned and the caller reports the overrun."""
    bundle = 1
    while bundle < MAX_AUTO_BUNDLE and not fits(runs, bundle, datasets, checkpoints):
        bundle += 1
    return bundle
