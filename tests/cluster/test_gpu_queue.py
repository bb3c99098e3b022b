"""The GPU queue on the real controller: the chart's `gpu` semaphore (one slot here) served in priority
order, and the queue watch, run as its CronWorkflow runs it, stopping a study that waits past its limit
while another team's Workflow, waiting as long, is left alone."""

from __future__ import annotations

import json
import time

import pytest
from on_cluster import NAMESPACE, VENV_BIN, run, submitted_name, wait_phase, workflow

SEMAPHORE = {"semaphores": [{"configMapKeyRef": {"name": "bertology-semaphores", "key": "gpu"}}]}


def _kubectl(env: dict, *args: str, check: bool = True, input: str | None = None):
    return run([str(VENV_BIN / "kubectl"), *args], env, check=check, input=input)


def _holder(env: dict, prefix: str) -> str:
    """Another team's Workflow holding a slot of bertology's `gpu` semaphore (or queueing for it) until
    resumed or stopped: a suspend node takes the lock like any other (no pod: nothing to schedule)."""
    document = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": {"generateName": f"{prefix}-", "namespace": NAMESPACE},
                "spec": {"entrypoint": "hold", "templates": [{"name": "hold", "synchronization": SEMAPHORE,
                                                              "suspend": {}}]}}
    return json.loads(_kubectl(env, "create", "-o", "json", "-f", "-", input=json.dumps(document)).stdout)["metadata"][
        "name"]


def _waiting(document: dict) -> list[dict]:
    """The nodes waiting for a lock (operator.go markNodeWaitingForLock sets synchronizationStatus.waiting)."""
    return [n for n in document.get("status", {}).get("nodes", {}).values()
            if (n.get("synchronizationStatus") or {}).get("waiting")]


def _until(what: str, check, *, timeout: float = 900):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(2)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def _holds(env: dict, name: str) -> bool:
    held = workflow(env, name).get("status", {}).get("synchronization", {}).get("semaphore", {}).get("holding")
    return bool(held)


@pytest.fixture
def blocker(studies):
    env = studies["env"]
    name = _holder(env, "gpu-blocker")
    _until(f"{name} holds the gpu slot", lambda: _holds(env, name))
    yield name
    _release(env, name)


def _release(env: dict, name: str) -> None:
    """Deleted, which frees its slot or its place in the queue: `argo stop` leaves a suspend node that
    holds a lock (or takes it later) Running, holding it."""
    run(["argo", "delete", name], env, check=False)


def _study(env: dict, seeds: str, *extra: str) -> str:
    """reversed-layers, tiny, on SST-2 alone: 3 runs a seed (pre-trained, reversed, clean)."""
    return submitted_name(run(["argo", "submit", "workflows/reversed-layers.yaml", "-p", "preset=tiny",
                               "-p", f"seeds={seeds}", "-p", 'tasks=["sst2"]', *extra], env).stdout)


def _finetune_starts(document: dict) -> list[str]:
    """When each finetune pod of the study started: its pod node is created once its Retry node holds the
    lock (the Retry node itself is created at fan-out and waits)."""
    return sorted(n["startedAt"] for n in document["status"]["nodes"].values()
                  if n["displayName"] == "finetune(0)" and n["type"] == "Pod")


def test_two_studies_contending_for_one_gpu_slot_run_one_after_the_other_in_priority_order(studies, blocker):
    """With the slot held, `low` is submitted first and `high` later with `argo submit --priority 10`; once
    both queue, the slot is freed: every finetune of `high` runs before any of `low` (Argo serves a
    semaphore's waiters by their Workflow's spec.priority, then age: sync_manager.go, multi_throttler.go)."""
    env = studies["env"]
    low = _study(env, "[11]")
    high = _study(env, "[12]", "--priority", "10")
    for name in (low, high):
        _until(f"{name}'s finetunes queue for the gpu slot",
               lambda name=name: len([n for n in _waiting(workflow(env, name)) if n["templateName"] == "finetune"]) == 3)
    run(["argo", "resume", blocker], env)
    done = {name: wait_phase(env, name) for name in (high, low)}
    for name, document in done.items():
        assert document["status"]["phase"] == "Succeeded", (name, document["status"].get("message"))
    high_starts, low_starts = _finetune_starts(done[high]), _finetune_starts(done[low])
    assert len(high_starts) == len(low_starts) == 3
    assert high_starts[-1] < low_starts[0], (high_starts, low_starts)


def test_the_queue_watch_stops_a_study_stuck_past_its_limit_and_leaves_another_team_alone(studies, blocker):
    """A study queues behind the held slot, and so does another team's Workflow on the same semaphore. The
    chart's CronWorkflow, submitted now with a 20-second limit (`argo submit --from cronwf/...`, its pod as
    the schedule would run it), stops the study (`spec.shutdown: Stop`, the reason in its annotation and
    its verdict's line) and leaves the other team's Workflow waiting."""
    env = studies["env"]
    stuck = _study(env, "[13]")
    other = _holder(env, "another-team")
    try:
        _until(f"{stuck} queues for the gpu slot", lambda: _waiting(workflow(env, stuck)))
        _until(f"{other} queues for the gpu slot", lambda: _waiting(workflow(env, other)))
        time.sleep(25)
        watch = run(["argo", "submit", "--from", "cronwf/bertology-queue-watch", "-p", "queue_limit=20s", "--watch"],
                    env, check=False, timeout=600)
        pass_ = workflow(env, submitted_name(watch.stdout))
        assert pass_["status"]["phase"] == "Failed" and stuck in pass_["status"]["message"], pass_["status"]
        assert other not in pass_["status"]["message"]

        stopped = wait_phase(env, stuck, timeout=600)
        assert stopped["spec"]["shutdown"] == "Stop"
        reason = stopped["metadata"]["annotations"]["bertology.io/stopped-by-queue-watch"]
        assert "waited" in reason and "bertology-semaphores/gpu" in reason, reason
        # Argo gives a stopped Workflow its own message, whatever its exit handler says (operator.go operate);
        # the reason is the verdict's, on its node, which `argo get` shows
        assert stopped["status"]["phase"] == "Failed"
        assert stopped["status"]["message"] == "Stopped with strategy 'Stop'", stopped["status"]["message"]
        (verdict,) = [n for n in stopped["status"]["nodes"].values() if n["displayName"].endswith(".onExit")]
        assert "stopped by the queue watch: " in verdict["message"] and reason in verdict["message"], verdict
        untouched = workflow(env, other)
        assert untouched["status"]["phase"] == "Running" and "shutdown" not in untouched["spec"]
    finally:
        _release(env, other)


def test_the_queue_watch_leaves_a_study_queued_behind_its_own_cells_alone(studies):
    """Every finetune node of a study is made at fan-out and waits for the slot while a sibling of the same
    study holds it: the study is making progress, not stuck. The watch, run with a 1-second limit while that
    study alone uses the slot and its other cells wait longer than that, stops nothing (a wait counts only
    while the Workflow holds no slot of the lock)."""
    env = studies["env"]
    study = _study(env, "[14, 15]")
    _until(f"{study} runs a finetune while its others wait",
           lambda: _holds(env, study) and len(_waiting(workflow(env, study))) >= 2)
    watch = run(["argo", "submit", "--from", "cronwf/bertology-queue-watch", "-p", "queue_limit=1s", "--watch"],
                env, check=False, timeout=600)
    pass_ = workflow(env, submitted_name(watch.stdout))
    assert pass_["status"]["phase"] == "Succeeded", pass_["status"].get("message")
    # a finetune still waiting now was waiting, made at fan-out, all through the pass
    assert [n for n in _waiting(workflow(env, study)) if n["templateName"] == "finetune"], "nothing waited"
    done = wait_phase(env, study)
    assert done["status"]["phase"] == "Succeeded" and "shutdown" not in done["spec"], done["status"].get("message")
