"""The queue watch: which Workflows it stops and why (bertology.argo.queue_watch), read from statuses shaped as
Argo writes them, and one pass of the step (bertology.steps.queue_watch) through the real Kubernetes client
against an API server on loopback that serves Workflows and applies the merge patch as the real one does
(there is no cluster here: the server is the most real substitute, speaking the same HTTP)."""

from __future__ import annotations

import base64
import gzip
import json
import re
import threading
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from kube_api import FakeApiServer, write_kubeconfig

from bertology.argo import queue_watch as qw
from bertology.errors import BadInput
from bertology.steps import queue_watch as step

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)
LOCK = "studies/ConfigMap/bertology-semaphores/gpu"  # sync/lock_name.go encodeName: NAMESPACE/KIND/NAME/KEY
SCHEDULER = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."


def ago(**delta) -> str:
    return (NOW - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(wf: str, name: str, kind: str, phase: str, started: str, message: str = "", waiting: str = "",
         finished: str = "", scope: str = "namespaced/bertology-steps") -> dict:
    """A NodeStatus as the controller writes it (workflow_types.go: name, displayName, type, phase, startedAt,
    finishedAt, message, synchronizationStatus.waiting; operator.go initializeNode: templateName and
    templateScope, a retry's pods those of their Retry node)."""
    template = re.sub(r"\(\d+\)$", "", name.rsplit(".", 1)[-1])
    out = {"id": f"{wf}-{zlib.crc32(name.encode())}", "name": f"{wf}.{name}", "displayName": name.rsplit(".", 1)[-1],
           "type": kind, "templateName": template, "templateScope": scope, "phase": phase, "startedAt": started}
    if finished:
        out["finishedAt"] = finished
    if message:
        out["message"] = message
    if waiting:
        out["synchronizationStatus"] = {"waiting": waiting}
    return out


def workflow(name: str, *nodes: dict, template: str = "bertology-study", phase: str = "Running",
             shutdown: str = "") -> dict:
    spec = {"workflowTemplateRef": {"name": template}, "arguments": {"parameters": [{"name": "study", "value": "x"}]}}
    if shutdown:
        spec["shutdown"] = shutdown
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": "studies", "annotations": {"a": "b"}},
            "spec": spec, "status": {"phase": phase, "nodes": {n["id"]: n for n in nodes}}}


def waiting_for_gpu(wf: str, name: str, **since) -> dict:
    # a Retry node made Pending before its first try to acquire (operator.go executeTemplate), its message the
    # semaphore's (sync/semaphore.go checkAcquire) and its lock in synchronizationStatus (markNodeWaitingForLock)
    return node(wf, name, "Retry", "Pending", ago(**since), f"Waiting for {LOCK} lock. Lock status: 0/4", LOCK)


def test_durations_parse_as_go_s_with_days_and_refuse_anything_else():
    assert qw.parse_duration("7d", "queue limit") == 7 * 86400
    assert qw.parse_duration("1h30m", "x") == 5400 and qw.parse_duration("1.5h", "x") == 5400
    assert qw.parse_duration("90s", "x") == 90 and qw.parse_duration("0", "x") == 0
    for bad in ("", "7", "3 days", "-1h", "1h 30m", "1w", "h"):
        with pytest.raises(BadInput, match=f"queue limit '{bad}' is not a duration \\(allowed: a number with d, h"):
            qw.parse_duration(bad, "queue limit")
    assert [qw.duration(s) for s in (45, 720, 5400, 7 * 86400 + 7200 + 60)] == ["45s", "12m", "1h 30m", "7d 2h"]


def test_a_step_past_the_queue_limit_is_found_with_its_semaphore_and_its_wait():
    wf = workflow("reversed-layers-x7k2p",
                  waiting_for_gpu("reversed-layers-x7k2p", "cell(3:1f2e).finetune", days=7, hours=2),
                  waiting_for_gpu("reversed-layers-x7k2p", "cell(4:9a0b).finetune", days=1))
    (found,) = qw.breaches(wf, NOW, 7 * 86400, 3600)
    assert (found.node, found.lock, found.waited_s) == ("cell(3:1f2e).finetune", LOCK, 7 * 86400 + 7200)
    assert found.line() == (f"cell(3:1f2e).finetune waited 7d 2h for semaphore {LOCK} while its Workflow held none "
                            "of it, past the queue limit of 7d (chart value queueWatch.queueLimit)")
    assert qw.breaches(wf, NOW, 0, 3600) == []  # 0: no limit
    assert qw.stop_reason(qw.breaches(wf, NOW, 3600, 0)).endswith("(and 1 more nodes past a limit)")


def test_a_retried_step_that_holds_its_lock_is_not_waiting_however_long_it_trains():
    """A Retry node stays Pending until it is done (operator.go processNodeRetries); once it holds the lock the
    controller clears synchronizationStatus and the message (markNodeWaitingForLock with lockName "")."""
    training = node("wf", "cell(0:aa).finetune", "Retry", "Pending", ago(days=9))
    pod = node("wf", "cell(0:aa).finetune(0)", "Pod", "Running", ago(days=9))
    other_lock = node("wf", "x", "Retry", "Pending", ago(days=9), "Waiting for studies/ConfigMap/team-b/gpu lock.",
                      "studies/ConfigMap/team-b/gpu")  # not one of bertology's semaphores
    assert qw.breaches(workflow("wf", training, pod, other_lock), NOW, 3600, 3600) == []


# --- a study's wait behind its own steps is not a wait for the GPU --------------------------------------------

STEPS = yaml.safe_load((Path(__file__).resolve().parent.parent / "workflows" / "templates" / "steps.yaml").read_text())
# status.storedTemplates as the controller stores them (workflow_types.go SetStoredTemplate,
# resolveTemplateReference: `namespaced/<WorkflowTemplate>/<template>`), the real library's GPU steps
STORED = {f"namespaced/bertology-steps/{t['name']}": t for t in STEPS["spec"]["templates"]
          if t["name"] in ("finetune", "evaluate", "cell")}


def holding(wf: str, *nodes: dict, key=lambda wf, node: f"studies/{wf}/{node['id']}") -> dict:
    """status.synchronization as sync_manager.go TryAcquire leaves it: each holder of the `gpu` lock under
    its key (getHolderKey: NAMESPACE/WORKFLOW/NODE_ID, v3.6.19 to v4.1.2); no holders once all released
    (workflow_types.go SemaphoreStatus.LockReleased keeps the entry, emptied)."""
    return {"semaphore": {"holding": [{"semaphore": LOCK, "holders": [key(wf, n) for n in nodes]}]}}


def big_study(released: dict | None = None, holder: bool = False, key=None) -> dict:
    """A study of 40 cells on one GPU: every finetune made at the fan-out nine days ago and waiting for the
    lock; cell 0 trained and finished (its evaluate, a GPU step never seen waiting, too) `released` ago, or
    cell 1's finetune holds the lock now (`holder`)."""
    wf = "big"
    nodes = [waiting_for_gpu(wf, f"cell({i}:c{i}).finetune", days=9) for i in range(2, 40)]
    if released is not None:
        nodes += [node(wf, "cell(0:c0).finetune", "Retry", "Succeeded", ago(days=9), finished=ago(days=9, hours=-3)),
                  node(wf, "cell(0:c0).finetune(0)", "Pod", "Succeeded", ago(days=9), finished=ago(days=9, hours=-3)),
                  node(wf, "cell(0:c0).evaluate", "Retry", "Succeeded", ago(days=9), finished=ago(**released))]
    held = []
    if holder:
        training = node(wf, "cell(1:c1).finetune", "Retry", "Pending", ago(days=9))  # waiting cleared: holds
        held = [training]
        nodes += [training, node(wf, "cell(1:c1).finetune(0)", "Pod", "Running", ago(hours=5))]
    doc = workflow(wf, *nodes)
    doc["status"]["storedTemplates"] = STORED
    doc["status"]["synchronization"] = holding(wf, *held, **({"key": key} if key else {}))
    return doc


def test_a_study_waiting_behind_its_own_training_step_is_not_waiting_for_the_gpu():
    """38 finetune nodes have waited nine days, each `synchronizationStatus.waiting` the gpu lock, while a
    sibling holds it: the study makes progress, nothing is past the limit."""
    assert qw.breaches(big_study(holder=True), NOW, 7 * 86400, 3600) == []
    # a holder key as written before v3.5 (a bare node id: HoldingNameV1), which v3.6+ still reads
    assert qw.breaches(big_study(holder=True, key=lambda wf, n: n["id"]), NOW, 7 * 86400, 3600) == []
    assert qw.holder_node("studies/big/big-1") == "big-1" and qw.holder_node("big-1") == "big-1"
    assert qw.holder_node("studies/big") == ""  # a Workflow-level lock (getHolderKey with no node)


def test_a_wait_counts_from_the_last_time_the_study_held_the_gpu():
    """No holder now (LockReleased emptied the entry): the wait counts from the later of the node's own
    startedAt and when the Workflow last let go, the finishedAt of its latest node of a template that takes
    the lock (here evaluate's, found through status.storedTemplates, never seen waiting)."""
    assert qw.breaches(big_study(released={"days": 2}), NOW, 7 * 86400, 3600) == []
    found = qw.breaches(big_study(released={"days": 8}), NOW, 7 * 86400, 3600)
    assert len(found) == 38 and {b.waited_s for b in found} == {8 * 86400}
    assert qw.last_held(big_study(released={"days": 8}), qw.workflow_nodes(big_study(released={"days": 8})),
                        LOCK).isoformat() == "2026-11-19T12:00:00+00:00"
    # a node that failed still waiting (its lock never taken) is not a release
    study = big_study()
    study["status"]["nodes"]["gave-up"] = {**waiting_for_gpu("big", "cell(1:c1).finetune", days=9),
                                           "id": "gave-up", "phase": "Failed", "finishedAt": ago(hours=1)}
    assert len(qw.breaches(study, NOW, 7 * 86400, 3600)) == 38


# --- node statuses as the controller stores them -------------------------------------------------------------

def compressed(doc: dict) -> dict:
    """The Workflow as the controller writes one over MAX_WORKFLOW_SIZE (workflow/packer/packer.go
    compressWorkflow): `status.compressedNodes` = base64 (StdEncoding) of the gzip of json.Marshal(nodes)
    (util/file CompressEncodeString), `status.nodes` gone."""
    status = dict(doc["status"])
    nodes = status.pop("nodes")
    status["compressedNodes"] = base64.b64encode(gzip.compress(json.dumps(nodes, separators=(",", ":")).encode())).decode()
    return {**doc, "status": status}


def offloaded(doc: dict) -> dict:
    """The Workflow with its nodes offloaded to Argo's database (workflow/hydrator hydrator.go Dehydrate:
    Nodes nil, CompressedNodes "", OffloadNodeStatusVersion the repository's `fnv:<hash>`)."""
    status = {k: v for k, v in doc["status"].items() if k != "nodes"}
    return {**doc, "status": {**status, "offloadNodeStatusVersion": "fnv:784548133"}}


def test_compressed_node_statuses_are_read_as_argo_reads_them():
    plain = workflow("huge", waiting_for_gpu("huge", "cell(3:1f2e).finetune", days=8))
    packed = compressed(plain)
    assert "nodes" not in packed["status"]
    assert qw.workflow_nodes(packed) == plain["status"]["nodes"]
    assert qw.breaches(packed, NOW, 7 * 86400, 3600) == qw.breaches(plain, NOW, 7 * 86400, 3600) != []
    broken = {**packed, "status": {**packed["status"], "compressedNodes": "not base64!"}}
    with pytest.raises(qw.NodesUnreadable, match="its status.compressedNodes could not be decoded"):
        qw.workflow_nodes(broken)


def test_offloaded_node_statuses_are_named_never_taken_for_nothing_waiting():
    gone = offloaded(workflow("archived", waiting_for_gpu("archived", "cell(3:1f2e).finetune", days=8)))
    with pytest.raises(qw.NodesUnreadable) as unreadable:
        qw.breaches(gone, NOW, 7 * 86400, 3600)
    assert str(unreadable.value) == (
        "its node statuses are offloaded to the Argo controller's database (status.offloadNodeStatusVersion "
        "fnv:784548133; persistence.nodeStatusOffLoad), which the queue watch cannot read: check it with "
        "`argo get`, or turn node status offloading off")
    assert qw.workflow_nodes(workflow("new", phase="")) == {}  # not yet reconciled: nothing, and readable


def test_a_pod_no_node_takes_is_found_with_the_scheduler_s_reason_and_others_are_not():
    # operator.go getPendingReason: "Unschedulable: <the PodScheduled condition's message>", or the bare reason
    stuck = node("wf", "cell(0:aa).finetune(0)", "Pod", "Pending", ago(hours=2), f"Unschedulable: {SCHEDULER}")
    bare = node("wf", "cell(1:bb).finetune(0)", "Pod", "Pending", ago(hours=3), "Unschedulable")
    pulling = node("wf", "cell(2:cc).finetune(0)", "Pod", "Pending", ago(hours=5), "ContainerCreating")
    recent = node("wf", "cell(3:dd).finetune(0)", "Pod", "Pending", ago(minutes=20), f"Unschedulable: {SCHEDULER}")
    found = qw.breaches(workflow("wf", stuck, bare, pulling, recent), NOW, 7 * 86400, 3600)
    assert [(b.node, b.reason) for b in found] == [("cell(1:bb).finetune(0)", "Unschedulable"),
                                                   ("cell(0:aa).finetune(0)", f"Unschedulable: {SCHEDULER}")]
    assert found[1].line() == ("cell(0:aa).finetune(0)'s pod found no node for 2h, past the scheduling limit of 1h "
                               f"(chart value queueWatch.schedulingLimit): Unschedulable: {SCHEDULER}")


def test_only_running_bertology_workflows_nobody_stopped_are_watched():
    assert qw.watched(workflow("a")) and qw.watched(workflow("b", template="bertology-nightly-regression"))
    assert qw.watched(workflow("c", phase=""))  # not yet reconciled
    assert not qw.watched(workflow("d", template="team-b-training"))
    assert not qw.watched(workflow("e", shutdown="Stop"))
    assert not qw.watched(workflow("f", phase="Failed"))


def test_the_reason_reaches_the_verdict_through_the_annotations_json():
    reason = qw.stop_reason([qw.Breach("n", 10, 5, lock=LOCK)])
    patch = qw.stop_patch(reason)
    assert patch == {"metadata": {"annotations": {qw.ANNOTATION: reason}}, "spec": {"shutdown": "Stop"}}
    assert qw.reason_from_annotations(json.dumps(patch["metadata"]["annotations"])) == reason
    assert qw.reason_from_annotations("null") == qw.reason_from_annotations("") == ""


@pytest.fixture
def api_server(tmp_path, monkeypatch):
    """Starts the server with the Workflows given; the client finds it through a kubeconfig (the path the
    step takes outside a pod: config.load_kube_config)."""
    servers = []

    def start(workflows: list[dict]) -> FakeApiServer:
        server = FakeApiServer(workflows)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server)
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        return server

    yield start
    for server in servers:
        server.shutdown()


def stuck_namespace() -> list[dict]:
    now_minus = {"days": 8}
    return [
        workflow("queued-study", waiting_for_gpu("queued-study", "cell(0:aa).finetune", **now_minus)),
        workflow("healthy-study", waiting_for_gpu("healthy-study", "cell(0:bb).finetune", hours=1)),
        workflow("other-team", waiting_for_gpu("other-team", "train", **now_minus), template="team-b-training"),
        workflow("bad-selector", node("bad-selector", "cell(0:cc).finetune(0)", "Pod", "Pending",
                                      ago(hours=2), f"Unschedulable: {SCHEDULER}")),
        workflow("already-stopped", waiting_for_gpu("already-stopped", "cell(0:dd).finetune", **now_minus),
                 shutdown="Stop"),
    ]


def test_one_pass_stops_exactly_the_stuck_bertology_workflows_and_says_why(api_server, tmp_path, monkeypatch, capsys):
    server = api_server(stuck_namespace())
    log = tmp_path / "termination-log"
    monkeypatch.setenv("BERTOLOGY_TERMINATION_LOG", str(log))
    monkeypatch.setattr(qw, "now_utc", lambda: NOW)
    code = step.main(["--namespace", "studies", "--queue-limit", "7d", "--scheduling-limit", "1h"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert [line.split(":")[0] for line in out] == ["stopped bad-selector", "stopped queued-study"]
    patches = [(path.rsplit("/", 1)[1], kind) for method, path, kind in server.requests if method == "PATCH"]
    assert patches == [("bad-selector", "application/merge-patch+json"), ("queued-study", "application/merge-patch+json")]
    for name in ("bad-selector", "queued-study"):
        wf = server.workflows[name]
        assert wf["spec"]["shutdown"] == "Stop"  # what `argo stop` patches (util.go patchShutdownStrategy)
        assert wf["metadata"]["annotations"]["a"] == "b"  # a merge patch: the Workflow's own annotations stay
        assert wf["metadata"]["annotations"][qw.ANNOTATION].startswith("stopped by the queue watch: ")
    assert "waited 8d for semaphore studies/ConfigMap/bertology-semaphores/gpu while its Workflow held none" in \
        server.workflows["queued-study"]["metadata"]["annotations"][qw.ANNOTATION]
    assert SCHEDULER in server.workflows["bad-selector"]["metadata"]["annotations"][qw.ANNOTATION]
    for untouched in ("healthy-study", "other-team", "already-stopped"):
        assert server.workflows[untouched] == {w["metadata"]["name"]: w for w in stuck_namespace()}[untouched]
    assert log.read_text().startswith("stopped bad-selector: stopped by the queue watch: ") and \
        log.read_text().endswith("(and 1 more Workflows)")


def test_one_pass_reads_compressed_nodes_names_offloaded_ones_and_spares_a_study_making_progress(
        api_server, tmp_path, monkeypatch, capsys):
    """A whole pass through the real client: the Workflow whose nodes are compressed is stopped as any other,
    the one whose nodes are offloaded is named and the pass fails for it (the others still done), and the
    big study whose cells wait behind their own sibling is left alone."""
    waiting = workflow("compressed-study", waiting_for_gpu("compressed-study", "cell(0:aa).finetune", days=8))
    namespace = [compressed(waiting), offloaded(workflow("offloaded-study")), big_study(holder=True),
                 workflow("healthy-study", waiting_for_gpu("healthy-study", "cell(0:bb).finetune", hours=1))]
    server = api_server(namespace)
    log = tmp_path / "termination-log"
    monkeypatch.setenv("BERTOLOGY_TERMINATION_LOG", str(log))
    monkeypatch.setattr(qw, "now_utc", lambda: NOW)
    assert step.main(["--namespace", "studies", "--queue-limit", "7d", "--scheduling-limit", "1h"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["stopped compressed-study", "could not read offloaded-study"]
    assert out[1] == ("could not read offloaded-study: its node statuses are offloaded to the Argo controller's "
                      "database (status.offloadNodeStatusVersion fnv:784548133; persistence.nodeStatusOffLoad), which "
                      "the queue watch cannot read: check it with `argo get`, or turn node status offloading off")
    patched = [path.rsplit("/", 1)[1] for method, path, _ in server.requests if method == "PATCH"]
    assert patched == ["compressed-study"]
    assert server.workflows["compressed-study"]["spec"]["shutdown"] == "Stop"
    assert "compressedNodes" in server.workflows["compressed-study"]["status"]  # a merge patch: status kept
    assert log.read_text() == f"{out[0]} (and 1 more Workflows)"
    # a dry run still fails for the Workflow it cannot read, and stops nothing
    server.requests.clear()
    assert step.main(["--namespace", "studies", "--queue-limit", "7d", "--scheduling-limit", "1h",
                      "--dry-run", "true"]) == 1
    assert not [m for m, _, _ in server.requests if m == "PATCH"]
    assert log.read_text().startswith("could not read offloaded-study: ")


def test_the_list_is_read_page_by_page(api_server):
    many = [workflow(f"study-{i:03d}") for i in range(230)]
    server = api_server(many)
    assert len(step.workflows(step._api(), "studies")) == 230
    pages = [parse_qs(urlparse(p).query) for m, p, _ in server.requests if m == "GET"]
    assert [(q["limit"], q.get("continue")) for q in pages] == [(["100"], None), (["100"], ["100"]), (["100"], ["200"])]


def test_a_dry_run_stops_nothing_and_bad_limits_stop_before_any_request(api_server, capsys, monkeypatch):
    server = api_server(stuck_namespace())
    monkeypatch.setattr(qw, "now_utc", lambda: NOW)
    before = json.dumps(server.workflows, sort_keys=True)
    assert step.main(["--namespace", "studies", "--queue-limit", "7d", "--scheduling-limit", "1h",
                      "--dry-run", "true"]) == 0
    out = capsys.readouterr().out
    assert "would stop queued-study: " in out and "2 of the Workflows in studies past a limit (dry run" in out
    assert json.dumps(server.workflows, sort_keys=True) == before
    server.requests.clear()
    assert step.main(["--namespace", "studies", "--queue-limit", "a week", "--scheduling-limit", "1h"]) == 2
    assert "error: queue limit 'a week' is not a duration" in capsys.readouterr().err
    assert server.requests == []


def test_nothing_to_watch_without_an_api_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert step.main(["--namespace", "studies", "--queue-limit", "7d", "--scheduling-limit", "1h"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no Kubernetes API to watch: not in a pod and no usable kubeconfig")
