"""verdict: a workflow's exit handler; fails the Workflow, in one line, when any of its steps failed.

Argo shows a Workflow's status.message in `argo list`, but a Workflow whose DAG failed has none, and the
exit handler's message is used only when the DAG succeeded (bertology.argo.exit_handler). So the nightly's
DAG always succeeds and this step judges the night from `{{workflow.status}}` and `{{workflow.failures}}`:
every step that failed in the end (a Retry node or a pod without retries: not an attempt that a later one
made good, `<task>(<n>)`), grouped by step in pipeline order, each with its cause: the message its latest
failed pod left (the step's `error: …` line, from its termination message, else its exit code). It exits
1 with that line as its termination message, which becomes the Workflow's message, or 0 when nothing
failed. Exit 2: arguments it cannot read.
"""

from __future__ import annotations

import argparse
import re
import sys

from bertology.argo.exit_handler import parse_failures
from bertology.errors import EXIT_BAD_INPUT
from bertology.steps.harness import leave_cause

ORDER = ("plan", "vocab-plan", "prepare-data", "build-checkpoint", "finetune", "evaluate", "analyze",
         "vocab-overlap", "aggregate", "regress")
ATTEMPT = re.compile(r"\(\d+\)$")  # a retried step's pod: `analyze(2)` (the Retry node is `analyze`)
POD_MESSAGE = re.compile(r"^(?:main: )?\w+ \(exit code (-?\d+)\)(?:: (.*))?$", re.DOTALL)
MAX_CAUSE = 300


def cause(message: str) -> str:
    """A pod's node message as a short cause: its own line, else its exit code."""
    match = POD_MESSAGE.match(message or "")
    if match:
        message = match.group(2) or f"exit code {match.group(1)}"
    message = re.sub(r"^(error: |transient error \(will be retried\): )", "", message.strip())
    return message if len(message) <= MAX_CAUSE else message[:MAX_CAUSE - 1] + "…"


def judge(status: str, failures: list[dict]) -> str | None:
    """The one line naming what failed, or None when the workflow succeeded and no step failed."""
    final = [f for f in failures if not ATTEMPT.search(f.get("displayName") or "")]
    steps = [f for f in final if f.get("templateName") in ORDER]
    pods = sorted((f for f in failures if ATTEMPT.search(f.get("displayName") or "")),
                  key=lambda f: f.get("finishedAt") or "")
    parts = []
    for step in ORDER:
        failed = [f for f in steps if f["templateName"] == step]
        if not failed:
            continue
        latest = [p for p in pods if p.get("templateName") == step] or failed
        count = f" in {len(failed)} pods" if len(failed) > 1 else ""
        parts.append(f"{step} failed{count}: {cause(latest[-1].get('message', ''))}")
    if not parts and status == "Succeeded":
        return None
    return "; ".join(parts) or f"the workflow ended {status}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.verdict", description="bertology exit handler: verdict")
    p.add_argument("--status", required=True, help="{{workflow.status}}")
    p.add_argument("--failures", default="", help="{{workflow.failures}}")
    args = p.parse_args(argv)
    try:
        failures = parse_failures(args.failures)
    except ValueError as e:
        print(f"error: --failures is not the JSON Argo passes as {{{{workflow.failures}}}}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    line = judge(args.status, failures)
    if line is None:
        print(f"workflow {args.status}: no step failed", flush=True)
        return 0
    print(f"error: {line}", file=sys.stderr, flush=True)
    leave_cause(line)
    return 1
