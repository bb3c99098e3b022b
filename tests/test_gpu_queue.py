"""The GPU queue: deadlines measure work, not the wait for the `gpu` semaphore; runs on one machine share
its slots as Workflows in one namespace do; the nightly goes first.

Each rule names the argoproj/argo-workflows function it follows, the same at v3.6.19, v3.7.18 and v4.1.2
unless said otherwise:
- operator.go `executeTemplate`: `syncManager.TryAcquire(ctx, woc.wf, woc.wf.NodeID(nodeName),
  processedTmpl.Synchronization)` comes before `executeContainer` (and so `createWorkflowPod`): a node that
  waits for a lock has no pod, and a pod's activeDeadlineSeconds, which the kubelet counts from the pod's
  start on its node (kubernetes pkg/kubelet/active_deadline.go), never counts the wait.
- workflow/sync/sync_manager.go `TryAcquire` (v3.6) / `prepAcquire` (v3.7, v4.1): `if wf.Spec.Priority
  != nil { priority = *wf.Spec.Priority } else { priority = 0 }`, `creationTime := wf.CreationTimestamp`,
  `lock.addToQueue(holderKey, priority, creationTime.Time)`; multi_throttler.go `priorityQueue.Less`:
  `if pq.items[i].priority == pq.items[j].priority { return
  pq.items[i].creationTime.Before(pq.items[j].creationTime) }; return pq.items[i].priority >
  pq.items[j].priority`; semaphore.go `checkAcquire`: a holder not of the front item's Workflow
  (`!isSameWorkflowNodeKeys(holderKey, item.key)`) waits.
- sync_manager.go `CheckWorkflowExistence`: the holds and places of a Workflow that is gone are released.
- operator.go `failNodesWithoutCreatedPodsAfterDeadlineOrShutdown`: at the Workflow's deadline a node
  still Pending (waiting for its lock) is marked Failed "Step exceeded its deadline"; `markNodePhase` leaves
  its `SynchronizationStatus.Waiting` (the lock, set by `markNodeWaitingForLock`) as it was.
- workflow/common/convert.go `toWorkflow`: `Spec: cronWf.Spec.WorkflowSpec`.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from bertology import cli
from bertology.argo import deadlines
from bertology.argo import semaphores as queue
from bertology.argo.runner import RunEvent, prepare, run_workflow
from bertology.cli.outcome import step_errors
from bertology.console import Progress
from bertology.errors import BadInput

REPO = Path(__file__).resolve().parents[1]
GPU = "bertology-semaphores/gpu"
GPU_LOCK = {"semaphores": [{"configMapKeyRef": {"name": "bertology-semaphores", "key": "gpu"}}]}

# A study in miniature: a CPU step, two GPU steps (the library's semaphore and GPU request, each pod `deadline`
# (6) seconds of its own), a CPU step after them. A GPU step appends "<run> <item> <start> <end>" to the log; the one of
# item "0" of the run tagged `gated` first waits for the gate file, so the test decides when it ends.
GPU_STEP = """
import os, sys, time
tag, item, gated, log, gate = sys.argv[1:6]
start = time.time()
if tag == gated and item == "0":
    while not os.path.exists(gate) and time.time() - start < 60:
        time.sleep(0.05)
time.sleep(0.3)
with open(log, "a") as f:
    f.write(f"{tag} {item} {start} {time.time()}\\n")
"""


def _study(tmp: Path, **spec) -> Path:
    python = [sys.executable, "-I", "-S", "-c"]
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"generateName": "mini-"},
           "spec": {"entrypoint": "main", **spec, "arguments": {"parameters": [
               {"name": "tag", "value": "x"}, {"name": "gated", "value": ""}, {"name": "deadline", "value": "6"},
               {"name": "store", "value": ""}]},
               "templates": [
                   {"name": "main", "dag": {"failFast": False, "tasks": [
                       {"name": "plan", "template": "cpu"},
                       {"name": "gpu", "template": "gpu", "depends": "plan", "withItems": ["0", "1"],
                        "arguments": {"parameters": [{"name": "item", "value": "{{item}}"}]}},
                       {"name": "aggregate", "template": "cpu", "depends": "gpu"}]}},
                   {"name": "cpu", "container": {"image": "x:1", "command": [*python, "pass"]}},
                   {"name": "gpu", "inputs": {"parameters": [{"name": "item"}]}, "activeDeadlineSeconds": "{{workflow.parameters.deadline}}",
                    "synchronization": GPU_LOCK, "retryStrategy": {"limit": "1", "retryPolicy": "Always"},
                    "container": {"image": "x:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}, "command": [
                        *python, textwrap.dedent(GPU_STEP), "{{workflow.parameters.tag}}", "{{inputs.parameters.item}}",
                        "{{workflow.parameters.gated}}", str(tmp / "gpu.log"), str(tmp / "gate")]}}]}}
    (tmp / "templates").mkdir(exist_ok=True)
    path = tmp / f"mini-{len(list(tmp.glob('mini-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _wait_for(what, timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, why
        time.sleep(0.05)


def _owner(run: str, priority: int, created: float) -> queue.Owner:
    return queue.Owner.this_process(run, f"workflow-{run}", priority, created)


# --- semaphores.py: the machine's queue, in Argo's order ---------------------------------------------------


def test_the_queue_serves_the_higher_priority_then_the_older_workflow(tmp_path):
    # multi_throttler.go priorityQueue.Less, sync_manager.go prepAcquire: priority first, then creation time,
    # whatever the order they began to wait in
    holder = queue.Queue(tmp_path, _owner("holder", 0, 1.0))
    holder.join(GPU)
    holder.acquire(GPU, 1, "gpu")
    served: list[str] = []
    waiters = {"newer": _owner("newer", 0, 20.0), "urgent": _owner("urgent", 7, 30.0), "older": _owner("older", 0, 10.0)}

    def wait(name: str) -> None:
        q = queue.Queue(tmp_path, waiters[name])
        q.join(GPU)
        q.acquire(GPU, 1, "gpu", deadline=time.time() + 30)
        served.append(name)
        q.release(GPU, "gpu")

    threads = [threading.Thread(target=wait, args=(name,)) for name in waiters]
    for thread in threads:
        thread.start()
    state = tmp_path / "bertology-semaphores%2Fgpu.json"
    _wait_for(lambda: len(json.loads(state.read_text())["waiting"]) == 3, 10, "three runs in the queue")
    assert served == []  # one slot, held
    holder.release(GPU, "gpu")
    for thread in threads:
        thread.join(30)
    assert served == ["urgent", "older", "newer"]


def test_a_workflow_s_waiting_node_keeps_its_place_and_a_wait_can_expire(tmp_path):
    # semaphore.go checkAcquire: while the front item is a node of another Workflow, a free slot is not
    # taken; the front Workflow's nodes take the slots one after another (isSameWorkflowNodeKeys)
    front, behind = queue.Queue(tmp_path, _owner("front", 0, 1.0)), queue.Queue(tmp_path, _owner("behind", 0, 2.0))
    front.join(GPU)
    front.join(GPU)  # two of its nodes wait
    behind.join(GPU)
    with pytest.raises(queue.WaitExpired):
        behind.acquire(GPU, 2, "n0", deadline=time.time() + 0.3)  # two slots free, but not its turn
    front.acquire(GPU, 2, "n0")
    front.acquire(GPU, 2, "n1")
    behind.join(GPU)
    with pytest.raises(queue.WaitExpired):
        behind.acquire(GPU, 2, "n0", deadline=time.time() + 0.3)  # its turn, no slot
    front.release(GPU, "n0")
    behind.join(GPU)
    assert behind.acquire(GPU, 2, "n0", deadline=time.time() + 5) >= 0
    state = json.loads((tmp_path / "bertology-semaphores%2Fgpu.json").read_text())
    assert state["waiting"] == {} and sorted(state["holders"]) == ["behind/n0", "front/n1"]


def test_a_run_that_ended_leaves_no_slot_behind(tmp_path):
    # sync_manager.go CheckWorkflowExistence: `if !sm.isWFDeleted(wfKey) { lock.release(holderKeys);
    # lock.removeFromQueue(holderKeys) }` (v3.6; v4.1: `if !sm.workflowExists(wfKey)`); locally a run is gone
    # when its process is
    ended = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    gone = queue.Owner("gone", "workflow-gone", 0, 1.0, ended.pid, queue._process_start(ended.pid))
    dead = queue.Queue(tmp_path, gone)
    dead.join(GPU)
    dead.acquire(GPU, 1, "gpu")
    dead.join(GPU)  # and a node still in the queue, ahead of the next run
    ended.communicate(b"")
    q = queue.Queue(tmp_path, _owner("next", 0, 5.0))
    q.join(GPU)
    assert q.acquire(GPU, 1, "gpu", deadline=time.time() + 5) < 5


def test_a_gpu_is_found_without_torch_and_only_gpu_steps_make_a_semaphore_the_gpu_s(tmp_path, monkeypatch):
    """The runner asks what train/device.py's pick_device asks (is there a CUDA device for this torch?) without
    importing torch: $BERTOLOGY_GPU says so outright; CUDA_VISIBLE_DEVICES "" or "-1" hides every device; else
    the NVIDIA driver's list of devices. A semaphore is the GPU's when every template holding it requests a
    GPU (steps.yaml: finetune and evaluate)."""
    from bertology.argo.concurrency import gpu_semaphores

    monkeypatch.setattr(queue, "_torch_has_cuda", lambda: True)  # as on a machine whose torch has CUDA
    (tmp_path / "dev").mkdir()
    assert not queue.gpu_present({}, tmp_path)
    (tmp_path / "dev" / "nvidiactl").touch()
    assert not queue.gpu_present({}, tmp_path)  # the driver's control device is no GPU
    (tmp_path / "dev" / "nvidia0").touch()
    assert queue.gpu_present({}, tmp_path) and queue.gpu_present({"CUDA_VISIBLE_DEVICES": "0"}, tmp_path)
    for hidden in ("", "-1", "-1,0"):
        assert not queue.gpu_present({"CUDA_VISIBLE_DEVICES": hidden}, tmp_path)
    assert not queue.gpu_present({queue.GPU_ENV: "0"}, tmp_path) and queue.gpu_present({queue.GPU_ENV: "1"}, "/nowhere")
    with pytest.raises(BadInput, match=r"\$BERTOLOGY_GPU='yes': expected 1 .* or 0"):
        queue.gpu_present({queue.GPU_ENV: "yes"})
    monkeypatch.setattr(queue, "_torch_has_cuda", lambda: False)  # a CPU build of torch trains on the CPU
    assert not queue.gpu_present({}, tmp_path)

    library = prepare(REPO / "workflows" / "reversed-layers.yaml", params={"store": "file:///nowhere"},
                      templates_dir=REPO / "workflows" / "templates")
    assert library.gpu_semaphores == {GPU}
    gpu_step = {"name": "g", "synchronization": GPU_LOCK, "container": {"resources": {"limits": {"nvidia.com/gpu": 1}}}}
    cpu_step = {"name": "c", "synchronization": GPU_LOCK, "container": {"resources": {"requests": {"cpu": "1"}}}}
    assert gpu_semaphores([gpu_step]) == {GPU} and gpu_semaphores([gpu_step, cpu_step]) == set()


# --- bertology run: runs on one machine share the GPU as Workflows in one namespace ------------------------


def _bertology(workflow: Path, tmp: Path, *args: str, env: dict) -> subprocess.Popen:
    out = (tmp / f"{args[1]}.out").open("w")  # -p tag=NAME
    return subprocess.Popen([sys.executable, "-m", "bertology.cli", "run", "-v", str(workflow), "--templates",
                             str(tmp / "templates"), "--store", str(tmp / "store"), "--semaphore", f"{GPU}=1", *args],
                            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def _printed(tmp: Path, tag: str) -> str:
    path = tmp / f"tag={tag}.out"
    return path.read_text() if path.exists() else ""


def test_two_studies_share_one_gpu_slot_in_argo_s_order_and_the_wait_is_no_step_s_deadline(tmp_path, subprocess_env):
    """Three `bertology run` processes, one GPU slot: `first` holds it; `second` (older) and `urgent` (newer,
    --priority 5) wait. No two GPU steps overlap; `urgent`'s steps go before `second`'s, and each of a
    run's steps follows the other (its place in the queue is kept); `second` waits far longer than its steps'
    6-second deadline and succeeds: the deadline counts from the pod's start."""
    workflow = _study(tmp_path)
    env = {**subprocess_env, queue.DIR_ENV: str(tmp_path / "semaphores"), queue.GPU_ENV: "1"}
    runs = {"first": _bertology(workflow, tmp_path, "-p", "tag=first", "-p", "gated=first", "-p", "deadline=120",
                                env=env)}
    log = tmp_path / "gpu.log"
    try:
        _wait_for(lambda: "[gpu(0:0)] started" in _printed(tmp_path, "first"), 120, "first's GPU step started")
        runs["second"] = _bertology(workflow, tmp_path, "-p", "tag=second", env=env)
        _wait_for(lambda: "running " in _printed(tmp_path, "second"), 120, "second was created")
        runs["urgent"] = _bertology(workflow, tmp_path, "-p", "tag=urgent", "--priority", "5", env=env)
        for tag in ("second", "urgent"):
            _wait_for(lambda tag=tag: f"waiting for semaphore {GPU} (held by mini-" in _printed(tmp_path, tag), 120,
                      f"{tag} waits for the slot first holds")
        time.sleep(6.5)  # longer than a GPU step's own deadline
        (tmp_path / "gate").touch()
        for tag, process in runs.items():
            assert process.wait(120) == 0, _printed(tmp_path, tag)
    finally:
        for process in runs.values():
            if process.poll() is None:
                process.kill()
    steps = sorted((float(start), float(end), tag, item) for tag, item, start, end in
                   (line.split() for line in log.read_text().splitlines()))
    assert [(tag, item) for _, _, tag, item in steps] == [
        ("first", "0"), ("urgent", "0"), ("urgent", "1"), ("first", "1"), ("second", "0"), ("second", "1")]
    for (_, end, *_), (start, *_) in itertools.pairwise(steps):
        assert end <= start  # one GPU step at a time, across the three runs
    second = tmp_path / "tag=second.out"
    status = json.loads((Path(second.read_text().split("step logs in ", 1)[1].split(")", 1)[0]) / "status.json")
                        .read_text())
    waited = status["nodes"]["gpu(0:0)"]
    assert waited["phase"] == "Succeeded" and waited["queued_s"] > 6.5 and waited["attempts"] == 1
    assert f"acquired semaphore {GPU} after " in second.read_text()


@pytest.mark.parametrize("gpu", ["0", "1"])
def test_runs_from_two_checkouts_go_side_by_side_without_a_gpu_and_with_one_the_waiting_run_names_the_holder(
        tmp_path, subprocess_env, gpu):
    """Two `bertology run` processes, each from a checkout and into a store of its own, the first's GPU step
    held open. On a machine without a GPU ($BERTOLOGY_GPU=0, as a machine with no NVIDIA device or
    CUDA_VISIBLE_DEVICES="") the GPU semaphore is each run's own: the second runs to its end beside the
    first and never waits. With a GPU ($BERTOLOGY_GPU=1) the second waits, and its progress line (on a
    terminal, as a person sees it) names what it waits behind: the first's workflow, step, pid, checkout and
    store, how long it has held the slot, and how to run beside it."""
    from terminal import Terminal

    workflow = _study(tmp_path)
    env = {**subprocess_env, queue.DIR_ENV: str(tmp_path / "semaphores"), queue.GPU_ENV: gpu}
    clones = {tag: tmp_path / f"clone-{tag}" for tag in ("first", "second")}
    for clone in clones.values():
        clone.mkdir()
    common = [str(workflow), "--templates", str(tmp_path / "templates"), "--semaphore", f"{GPU}=1"]
    out = (tmp_path / "first.out").open("w")
    first = subprocess.Popen([sys.executable, "-m", "bertology.cli", "run", "-v", *common, "--store",
                              str(tmp_path / "store-first"), "-p", "tag=first", "-p", "gated=first", "-p", "deadline=120"],
                             cwd=clones["first"], env=env, stdout=out, stderr=subprocess.STDOUT)
    second = None
    try:
        _wait_for(lambda: "[gpu(0:0)] started" in (tmp_path / "first.out").read_text(), 120, "first's GPU step started")
        second = Terminal([sys.executable, "-m", "bertology.cli", "run", *common, "--store",
                           str(tmp_path / "store-second"), "-p", "tag=second"], clones["second"], env)
        if gpu == "0":
            assert second.wait(120) == 0, second.text
            assert first.poll() is None  # the second ended while the first still held its GPU step
            assert "waiting" not in second.text, second.text
        else:
            holder = (" by mini-", (f"(gpu #1, pid {first.pid}, checkout {clones['first']}, store "
                                    f"file://{tmp_path / 'store-first'}) · to run beside it, set {queue.DIR_ENV} to a "
                                    f"directory of your own"))
            _wait_for(lambda: any("gpu #1 waiting " in s and " for the GPU (bertology-semaphores/gpu), held " in s
                                  and all(h in s for h in holder) for s, _ in second.bars()), 120,
                      "the second's progress line names what it waits behind")
            def held() -> set[str]:  # how long, as the redraws say it
                return {s.split(" held ")[1].split(" by ")[0] for s, _ in second.bars() if "waiting" in s}

            _wait_for(lambda: len(held()) > 1, 60, "the held time to grow on the second's progress line")
            assert first.poll() is None and second.process.poll() is None
        (tmp_path / "gate").touch()
        assert first.wait(120) == 0, (tmp_path / "first.out").read_text()
        assert second.wait(120) == 0, second.text
    finally:
        for process in (first, second.process if second else None):
            if process is not None and process.poll() is None:
                process.kill()
        if second is not None:
            second.close()
    steps = sorted((float(start), float(end), tag, item) for tag, item, start, end in
                   (line.split() for line in (tmp_path / "gpu.log").read_text().splitlines()))
    gated = next(step for step in steps if step[2:] == ("first", "0"))
    others = [step for step in steps if step[2] == "second"]
    if gpu == "0":  # side by side
        assert all(gated[0] < start and end < gated[1] for start, end, *_ in others), steps
    else:  # one GPU step at a time, across both runs
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(steps)), steps


def test_the_workflow_s_deadline_is_what_ends_a_wait_for_the_gpu(tmp_path):
    """Argo has no bound of a node's own on its wait for a lock: the Workflow's activeDeadlineSeconds fails it
    ("Step exceeded its deadline", no pod made) and the node keeps the lock it waited for; the run says which
    and how long."""
    other = queue.Queue(queue.open_directory(os.environ[queue.DIR_ENV]), _owner("other", 1 << 20, 0.0))
    other.join(GPU)
    other.acquire(GPU, 1, "finetune")  # another run's GPU step holds the only slot
    lines: list[str] = []
    progress = Progress()
    seen: list[str] = []

    def event(e: RunEvent) -> None:
        progress.feed(e)
        seen.append(progress.line())

    try:
        result = run_workflow(_study(tmp_path, activeDeadlineSeconds=4), params={}, templates_dir=tmp_path / "templates",
                              workdir=tmp_path / "work", project_root=tmp_path, parallelism=2,
                              semaphores={GPU: 1}, log=lines.append, events=event, gpu=True)
    finally:
        other.release(GPU, "finetune")
    for item in ("0", "1"):
        node = result.nodes[f"gpu({item}:{item})"]
        assert (node.phase, node.message, node.attempts) == ("Failed", deadlines.WORKFLOW_MESSAGE, 0)
        assert node.waiting_for == GPU and 0 < node.queued_s <= 4.5  # from after plan to the deadline
    assert result.phase == "Failed" and result.nodes["plan"].queued_s == 0  # plan took no lock
    assert any("Failed (Step exceeded its deadline) after waiting " in line and f"s for semaphore {GPU}" in line
               for line in lines), lines
    # the progress line says why, and behind whom
    assert any(f"gpu #1 waiting 0s for the GPU ({GPU}), held " in line and " by workflow-other (finetune, pid "
               f"{os.getpid()}) · to run beside it, set {queue.DIR_ENV} to a directory of your own" in line
               for line in seen), seen
    ending = [line for line in step_errors(result, tmp_path / "work") if line.startswith("gpu(0:0): ")]
    assert ending and ending[0].startswith("gpu(0:0): Step exceeded its deadline after waiting ") and \
        ending[0].endswith(f"s for semaphore {GPU}"), ending  # what `bertology run` prints last


# --- the nightly's priority ---------------------------------------------------------------------------------


def test_the_nightly_queues_by_age_like_every_study_unless_given_a_priority():
    """No Workflow of ours sets spec.priority: a priority orders not only the `gpu` semaphore's queue
    (sync_manager.go: wf.Spec.Priority) but also the controller's queue of Workflows waiting to start, across
    every namespace (controller.go getWfPriority, throttler.Add; multi_throttler.go queueThrottled), so the
    nightly would jump ahead of other teams. A night is 0, as every study is; `--priority` (the chart's
    nightly.priority on a cluster) still puts it first. No WorkflowTemplate sets one (it would not be read)."""
    templates = REPO / "workflows" / "templates"
    nightly = prepare(REPO / "workflows" / "nightly-regression.yaml", params={}, templates_dir=templates)
    assert nightly.priority == 0
    assert prepare(REPO / "workflows" / "nightly-regression.yaml", params={}, templates_dir=templates,
                   priority=100).priority == 100
    studies = [p for p in sorted((REPO / "workflows").glob("*.yaml")) if yaml.safe_load(p.read_text())["kind"] == "Workflow"]
    assert studies
    for path in studies:
        study = prepare(path, params={"store": "file:///nowhere"}, templates_dir=templates)
        assert study.priority == 0, path
    for path in [*templates.glob("*.yaml"), *(REPO / "workflows").glob("*.yaml")]:
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec", {})
            assert "priority" not in spec and "priority" not in spec.get("workflowSpec", {}), path


@pytest.mark.parametrize(("args", "must"), [
    (["--priority", "first"], ["--priority 'first' is not an integer", "allowed: -2147483648 to 2147483647"]),
    (["--priority", "3000000000"], ["--priority 3000000000 is out of range", "an int32"]),
])
def test_a_bad_priority_is_refused_in_one_line(tmp_path, capsys, args, must):
    workflow = _study(tmp_path)
    assert cli.main(["run", str(workflow), "--templates", str(tmp_path / "templates"), "--store",
                     str(tmp_path / "store"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(part in err[0] for part in must), err
    assert not (tmp_path / "gpu.log").exists()


def test_a_priority_in_a_workflow_template_is_refused_because_argo_never_reads_it(tmp_path):
    workflow = _study(tmp_path)
    doc = yaml.safe_load(workflow.read_text())
    template = {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate", "metadata": {"name": "mini"},
                "spec": {**doc["spec"], "priority": 9}}
    (tmp_path / "templates" / "mini.yaml").write_text(yaml.safe_dump(template))
    ref = tmp_path / "ref.yaml"
    ref.write_text(yaml.safe_dump({**doc, "spec": {"workflowTemplateRef": {"name": "mini"}}}))
    with pytest.raises(BadInput, match=r"spec.priority of WorkflowTemplate mini .* is not read by Argo.*"
                                       r"wf.Spec.Priority.*--priority"):
        prepare(ref, params={}, templates_dir=tmp_path / "templates")
    # the Workflow's own priority is its place in the queue; --priority replaces it, as argo submit's does
    ref.write_text(yaml.safe_dump({**doc, "spec": {**doc["spec"], "priority": 3}}))
    assert prepare(ref, params={}, templates_dir=tmp_path / "templates").priority == 3
    assert prepare(ref, params={}, templates_dir=tmp_path / "templates", priority=-1).priority == -1


def test_a_semaphore_directory_others_can_write_is_refused(tmp_path, monkeypatch, capsys):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv(queue.DIR_ENV, str(shared))
    monkeypatch.setenv(queue.GPU_ENV, "1")  # without a GPU the run would keep its GPU semaphore to itself
    workflow = _study(tmp_path)
    assert cli.main(["run", str(workflow), "--templates", str(tmp_path / "templates"), "--store",
                     str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(shared) in err[0] and "only you can write" in err[0] and queue.DIR_ENV in err[0]
    assert not (tmp_path / "gpu.log").exists()
