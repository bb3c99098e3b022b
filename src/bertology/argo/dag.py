"""A DAG template's scheduling and phase, as the Argo controller decides them.

Follows workflow/controller/dag.go (v3.6 to v4.1):
- `executeDAGTask`: a task starts once every task it depends on is fulfilled and its `depends`
  expression (`evaluateDependsLogic`, expressions.py) holds; otherwise it is Omitted ("omitted: depends
  condition not met"). A failure stops nothing: tasks that become ready are still started.
- `assessDAGPhase`: the DAG's phase comes from its target tasks (the tasks nothing depends on). A target
  that ran has its own phase; a Skipped or Omitted one inherits its branch's (a failure upstream wins
  over success). With `failFast` (the default) the first failing target decides, without it the last.
  The controller also holds a DAG Running while any of its nodes runs, so `failFast` cannot cut a DAG
  short while work is in flight; it could only drop a target that was waiting for a parallelism slot
  when everything else had finished, a timing the local runner does not reproduce. Our workflows state
  `failFast: false`, where no timing matters.

Template-level `failFast` (operator.go `checkParallelism`, a different flag) is refused by the runner.
"""

from __future__ import annotations

from bertology.argo.expressions import TaskOutcome

FAILED = ("Failed", "Error")
COMPLETED = ("Succeeded", "Failed", "Error")  # NodePhase.Completed: Skipped and Omitted are not


def targets(order: list[str], upstream: dict[str, list[str]]) -> list[str]:
    """findLeafTaskNames: the tasks no other task depends on, in template order."""
    return [t for t in order if not any(t in upstream[other] for other in order)]


def dag_phase(order: list[str], upstream: dict[str, list[str]], outcomes: dict[str, TaskOutcome],
              fail_fast: bool = True) -> str:
    """assessDAGPhase once every task is fulfilled."""
    branch: dict[str, str] = {}

    def branch_phase(task: str) -> str:
        if task not in branch:
            phase = outcomes[task].phase
            if phase not in COMPLETED:  # Skipped or Omitted: the branch's last completed phase
                parents = [branch_phase(d) for d in upstream[task]]
                phase = next((p for p in parents if p in FAILED), "Succeeded")
            branch[task] = phase
        return branch[task]

    result = "Succeeded"
    for task in targets(order, upstream):
        if branch_phase(task) in FAILED:
            result = branch_phase(task)
            if fail_fast:
                break
    return result
