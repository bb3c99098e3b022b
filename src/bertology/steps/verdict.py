"""verdict: the exit handler of every study workflow; fails the Workflow, in one line, when any step failed.

Argo shows a Workflow's status.message in `argo list`, but a Workflow whose DAG failed has none, and the
exit handler's message is used only when the DAG succeeded (bertology.argo.exit_handler). And Argo judges a
DAG by its target tasks only (dag.go assessDAGPhase), so a failed step that the study's last task does not
notice leaves the DAG Succeeded. So a study's DAG runs to its end and succeeds (its last task has
continueOn), and this step judges the run from `{{workflow.status}}` and `{{workflow.failures}}`: every
step that failed in the end (a Retry node or a pod without retries: not an attempt that a later one made
good, `<task>(<n>)`), grouped by step in pipeline order, each with its cause: the message its latest failed
pod left (the step's `error: …` line, from its termination message, else its exit code, else the reason
the kubelet or Argo gave). A pod killed for memory or evicted for its local storage is not retried (the
step library's retryStrategy): its cause names the limit to raise. It exits 1 with that line as its
termination message, which becomes the Workflow's message, or 0 when nothing failed. Exit 2: arguments it
cannot read. A Workflow that the queue watch stopped says so first, with the watch's own line (from the
Workflow's annotations, bertology.argo.queue_watch); the nodes that the stop failed ("Stopped with strategy
'Stop'") add nothing to it.
"""

from __future__ import annotations

import argparse
import re
import sys

from bertology.argo.exit_handler import parse_failures
from bertology.argo.queue_watch import reason_from_annotations
from bertology.errors import EXIT_BAD_INPUT
from bertology.steps.harness import leave_cause

ORDER = ("plan", "vocab-plan", "prepare-data", "build-checkpoint", "finetune", "evaluate", "analyze",
         "vocab-overlap", "aggregate", "regress")
DAGS = ("main", "nightly", "cell")  # the DAG templates: their nodes fail with a step, and say nothing
ATTEMPT = re.compile(r"\(\d+\)$")  # a retried step's pod: `analyze(2)` (the Retry node is `analyze`)
# operator.go inferFailedReason: "<container>: <reason> (exit code N)[: <termination message>]" (v3.7+; v3.6
# without the container's name)
POD_MESSAGE = re.compile(r"^(?:main: )?(\w+) \(exit code (-?\d+)\)(?:: (.*))?$", re.DOTALL)
MAX_CAUSE = 300
STOPPED = "Stopped with strategy "  # operator.go: every node a shutdown failed, and the Workflow's message
# The limits a pod can run into that a retry cannot help, by what the node's message says (the kubelet's
# eviction messages, pkg/kubelet/eviction/helpers.go emptyDirMessageFmt, podEphemeralStorageMessageFmt,
# containerEphemeralStorageMessageFmt; the container's reason OOMKilled) and what to raise.
LIMITS = (
    ("OOMKilled (exit code", ("out of memory: raise the chart's resources.{step}.limits.memory (the {step} "
                              "template's resources.limits.memory, workflows/templates/steps.yaml)")),
    ("Usage of EmptyDir volume", ("/tmp over its sizeLimit: raise the chart's tmp.sizeLimit (the /tmp "
                                  "emptyDir's sizeLimit in workflows/templates/steps.yaml)")),
    ("ephemeral local storage usage exceeds", "raise resources.limits.ephemeral-storage of the {step} template"),
    ("exceeded its local ephemeral storage limit", "raise resources.limits.ephemeral-storage of the {step} template"),
)


def limit_hint(message: str, step: str) -> str:
    """What to raise when a pod's message says it ran into a limit (not retried), else ""."""
    return next((hint.format(step=step) for marker, hint in LIMITS if marker in (message or "")), "")


def cause(message: str, step: str = "") -> str:
    """A pod's node message as a short cause: its own line, else its reason and exit code; for a limit
    a retry cannot help, which one to raise."""
    match = POD_MESSAGE.match(message or "")
    text = message or ""
    if match:
        reason, code, own = match.groups()
        text = own or (f"exit code {code}" if reason == "Error" else f"{reason} (exit code {code})")
    text = re.sub(r"^(error: |transient error \(will be retried\): )", "", text.strip())
    text = text if len(text) <= MAX_CAUSE else text[:MAX_CAUSE - 1] + "…"
    hint = limit_hint(message, step)
    return f"{text}; {hint}, not retried" if hint else text


def judge(status: str, failures: list[dict]) -> str | None:
    """The one line naming what failed, or None when the workflow succeeded and no step failed."""
    final = [f for f in failures if not ATTEMPT.search(f.get("displayName") or "")]
    names = [f.get("displayName") or "" for f in final]
    # a fan-out's TaskGroup node (`prepare-data`) fails with its child (`prepare-data(0:…)`): count the child
    steps = [f for f in final if f.get("templateName") not in DAGS
             and not any(n.startswith(f"{f.get('displayName')}(") for n in names)]
    pods = sorted((f for f in failures if ATTEMPT.search(f.get("displayName") or "")),
                  key=lambda f: f.get("finishedAt") or "")
    known = [s for s in ORDER if any(f.get("templateName") == s for f in steps)]
    others = sorted({str(f.get("templateName")) for f in steps} - set(ORDER))
    parts = []
    for step in known + others:
        failed = [f for f in steps if str(f.get("templateName")) == step]
        latest = [p for p in pods if p.get("templateName") == step] or failed
        count = f" in {len(failed)} pods" if len(failed) > 1 else ""
        parts.append(f"{step} failed{count}: {cause(latest[-1].get('message', ''), step)}")
    if not parts and status == "Succeeded":
        return None
    return "; ".join(parts) or f"the workflow ended {status}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.verdict", description="bertology exit handler: verdict")
    p.add_argument("--status", required=True, help="{{workflow.status}}")
    p.add_argument("--failures", default="", help="{{workflow.failures}}")
    p.add_argument("--annotations", default="", help="{{workflow.annotations.json}}")
    args = p.parse_args(argv)
    try:
        failures = parse_failures(args.failures)
    except ValueError as e:
        print(f"error: --failures is not the JSON Argo passes as {{{{workflow.failures}}}}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    stopped = reason_from_annotations(args.annotations)
    if stopped:
        rest = judge("Succeeded", [f for f in failures if not str(f.get("message", "")).startswith(STOPPED)])
        line = stopped + (f"; besides, {rest}" if rest else "")
    else:
        line = judge(args.status, failures)
    if line is None:
        print(f"workflow {args.status}: no step failed", flush=True)
        return 0
    print(f"error: {line}", file=sys.stderr, flush=True)
    leave_cause(line)
    return 1
