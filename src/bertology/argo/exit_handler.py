"""The Workflow's exit handler (`spec.onExit`), what it reads, and the Workflow's phase and status.message.

Follows workflow/controller/operator.go `operate` (v3.6 to v4.1):
- Once the entrypoint's node is fulfilled, `workflow.status` is its phase as a Workflow phase (Skipped and
  Omitted count as Succeeded), and `workflow.failures` lists every node whose phase is Failed or Error
  (struct `failedNodeStatus`: displayName, message, templateName, phase, podName, finishedAt, in the
  random order of the status.nodes map), marshalled to JSON and then quoted with strconv.Quote "so that
  the escaped quotes are not removed during parameter substitution": the exit handler receives a JSON
  string whose content is the JSON list (operator_test.go TestStepsOnExitFailures). The validator sets
  `workflow.failures` only for the onExit template (validate.go).
- The exit handler runs whatever the entry node's phase, as node `<workflow>.onExit`
  (common.GenerateOnExitNodeName); its pods are exempt from the Workflow's deadline (workflowpod.go
  `opts.onExitPod`).
- The Workflow's phase is the entry node's. When that Succeeded and the exit node Failed, the Workflow is
  Failed with the exit node's message (`markWorkflowFailed(ctx, onExitNode.Message)`; Error: Error).
  Otherwise status.message is the entry node's message, and a DAG node is marked without one
  (dag.go `markNodePhase(ctx, nodeName, dagPhase)`): a Workflow whose DAG failed shows no message in
  `argo list`. That is why a workflow that must say why it failed lets its DAG succeed (continueOn on its
  last task) and fails in its exit handler.

Locally a node's podName is the runner's pod name (Argo v2 pod names hash the node id), and a retried
step's attempts appear as Argo's do, `<task>(<n>)`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from bertology.argo.substitution import go_quote

EXIT_NODE = "onExit"
PHASE_OF_WORKFLOW = {"Succeeded": "Succeeded", "Skipped": "Succeeded", "Omitted": "Succeeded",
                     "Failed": "Failed", "Error": "Error"}


def display_name(node: str) -> str:
    """The last segment of a node name: `cell(0:x).analyze` -> `analyze` (dots inside an item's parentheses
    are part of it)."""
    depth, cut = 0, 0
    for i, ch in enumerate(node):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "." and depth == 0:
            cut = i + 1
    return node[cut:]


def _rfc3339(seconds: float | None) -> str | None:
    return None if seconds is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def go_marshal(value: Any) -> str:
    """encoding/json Marshal: struct fields in order (a Go map's keys come sorted: sort them before), and <, >,
    & escaped for HTML."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def failures(nodes: Iterable[Any], pod_name) -> str:
    """`workflow.failures`: strconv.Quote of the JSON list of Failed and Error nodes. `nodes` are the
    runner's NodeResults (name, template, phase, message, tries, finished); a retried container contributes
    its failed attempts too. No failure gives `null`, not `[]`: Argo marshals a nil slice (operator.go
    operate: `var failures []failedNodeStatus`, json.Marshal)."""
    entries = []

    def entry(name: str, template: str, phase: str, message: str, finished: float | None) -> dict:
        return {"displayName": display_name(name), "message": message, "templateName": template, "phase": phase,
                "podName": pod_name(name), "finishedAt": _rfc3339(finished)}

    for node in nodes:
        if node.phase in ("Failed", "Error"):
            entries.append(entry(node.name, node.template, node.phase, node.message, node.finished))
        if node.retried:
            entries += [entry(f"{node.name}({i})", node.template, a.phase, a.message, a.finished)
                        for i, a in enumerate(node.tries) if a.phase in ("Failed", "Error")]
    return go_quote(go_marshal(entries or None))


def parse_failures(text: str) -> list[dict]:
    """The list an exit handler gets in `{{workflow.failures}}` (a JSON string holding the JSON list, or
    `null` when no node failed)."""
    value = json.loads(text) if text.strip() else []
    return (json.loads(value) if isinstance(value, str) else value) or []


def outcome(entry_phase: str, entry_message: str, exit_node: Any | None) -> tuple[str, str]:
    """The Workflow's (phase, status.message) from its entry node and its exit node (None: no onExit)."""
    phase = PHASE_OF_WORKFLOW[entry_phase]
    if phase == "Succeeded" and exit_node is not None and exit_node.phase in ("Failed", "Error"):
        return exit_node.phase, exit_node.message
    return phase, entry_message

