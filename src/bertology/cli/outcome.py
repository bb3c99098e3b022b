"""How a local run's failure is told: each failed step's cause (`step_errors`), and whether the run did
nothing but refuse its input (`refused`), so that `bertology run` leaves no folder behind for it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bertology.argo.exit_handler import EXIT_NODE
from bertology.errors import EXIT_BAD_INPUT


def step_errors(result, workdir: Path, label: Callable[[str], str | None] | None = None) -> list[str]:
    """Each failed step's cause, so it ends the output: the last `error: …` line the step printed; for a
    step that failed otherwise (a transient error after every retry, a kill, a deadline) the runner's
    message, the attempts, and the step's last `transient error …` line (else its last line). A step
    `label` names by what it runs is named so, its node name (its log's folder) after it."""
    lines = []
    for node in result.nodes.values():
        named = label(node.name) if label is not None else None
        name = f"{named} ({node.name})" if named else node.name
        log = workdir / node.name / "log.txt"
        if node.phase not in ("Failed", "Error") or not log.exists():
            continue
        if node.name == EXIT_NODE and node.exit_code == 1:
            continue  # the exit handler's verdict: it restates the steps' failures (the Workflow's message)
        printed = [x for x in log.read_text(errors="replace").splitlines() if x.strip() and not x.startswith("--- ")]
        errors = [x for x in printed if x.startswith("error: ")]
        if errors:
            lines.append(f"{name}: {errors[-1]}")
            continue
        cause = ([x for x in printed if x.startswith("transient error")] or printed or [""])[-1]
        cause = cause.replace("transient error (will be retried)", "transient error")  # it was, in vain
        tries = f" ({node.attempts} attempts)" if node.attempts > 1 else ""
        last = node.tries[-1].message if node.tries and node.tries[-1].message != node.message else ""
        what = "; ".join(filter(None, [last, node.message])) or node.phase
        if node.waiting_for:  # it never got its semaphore: no pod was made
            what += f" after waiting {node.queued_s:.0f}s for semaphore {node.waiting_for}"
        lines.append(f"{name}: " + ": ".join(filter(None, [what + tries, cause])))
    return lines


def exit_code(result) -> int:
    """The run's exit code: the runner's, or, where a step failed and the runner still counts the run as
    succeeded (a dry run records its exit handler, which would fail it, without running it), the failed
    steps' (2 where one refused its input, else 1)."""
    if result.exit_code != 0:
        return result.exit_code
    codes = {n.exit_code for n in result.nodes.values() if n.phase in ("Failed", "Error") and n.name != EXIT_NODE}
    return 0 if not codes else EXIT_BAD_INPUT if EXIT_BAD_INPUT in codes else 1


def refused(result) -> bool:
    """Whether the run refused its input and did nothing else: it ended with exit code 2, and every step
    that ran, its exit handler aside, refused (exit code 2)."""
    ran = [n for n in result.nodes.values() if n.exit_code is not None and n.name != EXIT_NODE]
    return result.exit_code == EXIT_BAD_INPUT and all(n.exit_code == EXIT_BAD_INPUT for n in ran)
