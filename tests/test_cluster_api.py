"""bertology.cluster and `bertology submit / watch / results` without a cluster: the real `kubernetes` and
`argo-workflows` clients against loopback servers that speak the parts of the Kubernetes API (custom objects,
their watch) and of Argo Server's REST API (/api/v1/workflows, /api/v1/workflow-templates) the clients call.

What is sent: the Workflow `argo submit -p` would create (generateName, labels, the arguments as the YAML
with the given values first); what is refused, in one line and before any request; the phases a watch
reads; and the results, found from the plan node's outputs as Argo writes them in status.nodes, read from
a real store that a tiny study run in this process wrote, exactly that plan's runs."""

from __future__ import annotations

import json
import random
import ssl
import string
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

import polars as pl
import pyarrow as pa
import pytest
import yaml
from kube_api import JsonHandler, write_kubeconfig

from bertology import cluster
from bertology.cli import main
from bertology.cluster import argo_server
from bertology.errors import BadInput, Transient
from bertology.results import scan
from bertology.results.study_results import study_ids
from bertology.results.tables import publish
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, RunSpec
from bertology.store import open_store

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "workflows" / "reversed-layers.yaml"
NAMESPACE = "studies"
ARGO_ENV = ("ARGO_SERVER", "ARGO_TOKEN", "ARGO_SECURE", "ARGO_INSECURE_SKIP_VERIFY", "ARGO_NAMESPACE",
            "ARGO_BASE_HREF", "ARGO_INSTANCEID", "KUBECONFIG")


# -- a cluster on loopback: its state, and the two APIs over it ------------------------------------------------

class Cluster:
    """What the fakes serve: namespaces, WorkflowTemplates, Workflows, and per Workflow the status updates a
    controller would make next (each a status patch; {"expire": True}: the watch's resourceVersion is too old;
    {"cut": True}: the watch's connection drops; {"delete": True}: the Workflow is deleted)."""

    def __init__(self, namespaces=("default", NAMESPACE), templates=((NAMESPACE, "bertology-study"),),
                 list_namespaces=True):
        self.namespaces, self.templates, self.list_namespaces = list(namespaces), set(templates), list_namespaces
        self.workflows: dict[tuple[str, str], dict] = {}
        self.updates: dict[str, list[dict]] = {}
        self.on_create: list[dict] = []  # the updates every created Workflow gets
        self.requests: list[tuple[str, str]] = []  # method, path
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.version = 0
        self.lock = threading.Lock()

    def create(self, namespace: str, workflow: dict) -> dict:
        with self.lock:
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            name = workflow["metadata"].get("name") or workflow["metadata"]["generateName"] + suffix
            self.version += 1
            created = {**workflow, "metadata": {**workflow["metadata"], "name": name, "namespace": namespace,
                                                "resourceVersion": str(self.version)}}
            self.workflows[(namespace, name)] = created
            self.updates[name] = [dict(u) for u in self.on_create]
            return created

    def add(self, namespace: str, workflow: dict, updates=()) -> str:
        name = self.create(namespace, workflow)["metadata"]["name"]
        self.updates[name] = list(updates)
        return name

    def advance(self, namespace: str, name: str) -> tuple[str, dict] | None:
        """The next update of a Workflow applied: ("MODIFIED" | "DELETED" | "EXPIRED", the Workflow)."""
        with self.lock:
            queue = self.updates.get(name) or []
            if not queue:
                return None
            update = queue.pop(0)
            workflow = self.workflows[(namespace, name)]
            if update.get("expire") or update.get("cut"):
                return ("EXPIRED" if update.get("expire") else "CUT"), workflow
            if update.get("delete"):
                return "DELETED", self.workflows.pop((namespace, name))
            self.version += 1
            workflow["status"] = {**(workflow.get("status") or {}), **update}
            workflow["metadata"]["resourceVersion"] = str(self.version)
            return "MODIFIED", workflow


class Handler(JsonHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and a watch's chunked stream

    @property
    def cluster(self) -> Cluster:
        return self.server.cluster

    def _record(self, method: str) -> dict | None:
        self.cluster.requests.append((method, self.path))
        self.cluster.auth.append(self.headers.get("Authorization"))
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        if body is not None:
            self.cluster.bodies.append(body)
        return body


class KubeHandler(Handler):
    """/apis/argoproj.io/v1alpha1/namespaces/NS/{workflows,workflowtemplates}[/NAME], the Workflows' watch,
    and /api/v1/namespaces."""

    def _not_found(self, kind: str, name: str) -> None:
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                         "message": f'{kind} "{name}" not found', "details": {"name": name, "kind": kind}})

    def do_GET(self):
        self._record("GET")
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        if url.path == "/api/v1/namespaces":
            if not self.cluster.list_namespaces:
                return self._send(403, {"kind": "Status", "code": 403, "reason": "Forbidden",
                                        "message": 'namespaces is forbidden: User "u" cannot list resource "namespaces"'})
            return self._send(200, {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {},
                                    "items": [{"metadata": {"name": n}} for n in self.cluster.namespaces]})
        if parts[:3] != ["apis", "argoproj.io", "v1alpha1"] or parts[3] != "namespaces":
            return self._not_found("path", url.path)
        namespace, plural, name = parts[4], parts[5], (parts[6] if len(parts) > 6 else None)
        if plural == "workflowtemplates":
            if (namespace, name) in self.cluster.templates:
                return self._send(200, {"kind": "WorkflowTemplate", "metadata": {"name": name}})
            return self._not_found("workflowtemplates.argoproj.io", name)
        if name is not None:
            found = self.cluster.workflows.get((namespace, name))
            return self._send(200, found) if found else self._not_found("workflows.argoproj.io", name)
        if query.get("watch", "").lower() == "true":
            return self._watch(namespace, query)
        items = [w for (ns, _), w in self.cluster.workflows.items() if ns == namespace]
        self._send(200, {"kind": "WorkflowList", "metadata": {"resourceVersion": str(self.cluster.version)},
                         "items": items})

    def _watch(self, namespace: str, query: dict) -> None:
        """The Workflow's next updates as watch events, a chunk each, then the end of the stream (after a short
        wait when there are none: a watch that saw nothing returns at its timeoutSeconds)."""
        name = query["fieldSelector"].removeprefix("metadata.name=")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        while (step := self.cluster.advance(namespace, name)) is not None:
            kind, workflow = step
            if kind == "CUT":  # the connection drops mid-stream, as behind a proxy's idle timeout
                self.close_connection = True
                return
            if kind == "EXPIRED":
                event = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                     "message": "too old resource version"}}
            else:
                event = {"type": kind, "object": workflow}
            self._chunk(json.dumps(event).encode() + b"\n")
            sent += 1
            time.sleep(0.01)
            if kind != "MODIFIED":
                break
        if not sent:
            time.sleep(min(float(query.get("timeoutSeconds", 1)), 0.2))
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self):
        body = self._record("POST")
        parts = urlparse(self.path).path.strip("/").split("/")
        namespace = parts[4]
        if namespace not in self.cluster.namespaces:
            return self._not_found("namespaces", namespace)
        self._send(201, self.cluster.create(namespace, body))


class ArgoHandler(Handler):
    """Argo Server's /api/v1/workflows/NS[/NAME] and /api/v1/workflow-templates/NS/NAME; each read of a
    Workflow finds the controller's next update made."""

    def _not_found(self, what: str) -> None:
        self._send(404, {"code": 5, "message": f"{what} not found"})

    def do_GET(self):
        self._record("GET")
        parts = urlparse(self.path).path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "workflow-templates"]:
            namespace, name = parts[3], parts[4]
            if (namespace, name) in self.cluster.templates:
                return self._send(200, {"metadata": {"name": name, "namespace": namespace}})
            return self._not_found(f'workflowtemplates.argoproj.io "{name}"')
        if parts[:3] != ["api", "v1", "workflows"]:
            return self._not_found(self.path)
        namespace = parts[3]
        if len(parts) == 4:
            return self._send(200, {"items": [w for (ns, _), w in self.cluster.workflows.items() if ns == namespace]})
        self.cluster.advance(namespace, parts[4])
        found = self.cluster.workflows.get((namespace, parts[4]))
        return self._send(200, found) if found else self._not_found(f'workflows.argoproj.io "{parts[4]}"')

    def do_POST(self):
        body = self._record("POST")
        namespace = urlparse(self.path).path.strip("/").split("/")[3]
        self._send(200, self.cluster.create(namespace, body["workflow"]))


def _serve(handler, cluster: Cluster, tls: ssl.SSLContext | None = None):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.cluster = cluster
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No argo or kubectl setting of this machine reaches a test; HOME without a ~/.kube/config."""
    for name in ARGO_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture
def kube(clean_env, tmp_path):
    """A Kubernetes API on loopback and a kubeconfig whose context's namespace is `studies`."""
    state = Cluster()
    server = _serve(KubeHandler, state)
    config = yaml.safe_load(write_kubeconfig(tmp_path / "kubeconfig", server).read_text())
    config["contexts"][0]["context"]["namespace"] = NAMESPACE
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    yield state, str(tmp_path / "kubeconfig")
    server.shutdown()
    server.server_close()


@pytest.fixture
def argo(clean_env, monkeypatch):
    """Argo Server on loopback (plain HTTP), set up as the argo CLI reads it; reads of a watch 10 ms apart."""
    state = Cluster()
    server = _serve(ArgoHandler, state)
    monkeypatch.setenv("ARGO_SERVER", f"127.0.0.1:{server.server_port}")
    monkeypatch.setenv("ARGO_SECURE", "false")
    monkeypatch.setenv("ARGO_TOKEN", "Bearer argo-token")
    monkeypatch.setenv("ARGO_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("KUBECONFIG", "/dev/null")
    monkeypatch.setattr(argo_server, "POLL_S", 0.01)
    yield state
    server.shutdown()
    server.server_close()


def _yaml_parameters() -> list[dict]:
    return yaml.safe_load(WORKFLOW.read_text())["spec"]["arguments"]["parameters"]


# -- submit ---------------------------------------------------------------------------------------------------

def test_submit_creates_the_workflow_argo_submit_would(kube, monkeypatch):
    state, kubeconfig = kube
    monkeypatch.setenv("ARGO_INSTANCEID", "team-a")
    study = cluster.submit(WORKFLOW, {"preset": "tiny", "tasks": ["sst2"], "seeds": "[1]"}, kubeconfig=kubeconfig,
                           priority=7)
    assert study.namespace == NAMESPACE and study.name.startswith("reversed-layers-") and len(study.name) == 21
    prefix = f"/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}"
    assert state.requests == [("GET", f"{prefix}/workflowtemplates/bertology-study"), ("POST", f"{prefix}/workflows")]
    assert state.auth == ["Bearer t", "Bearer t"]  # the kubeconfig user's token
    [body] = state.bodies
    source = yaml.safe_load(WORKFLOW.read_text())
    assert (body["apiVersion"], body["kind"]) == ("argoproj.io/v1alpha1", "Workflow")
    assert body["metadata"] == {"generateName": "reversed-layers-",
                                "labels": {**source["metadata"]["labels"],
                                           "workflows.argoproj.io/controller-instanceid": "team-a"}}
    assert body["spec"]["workflowTemplateRef"] == {"name": "bertology-study"} and body["spec"]["priority"] == 7
    given = [{"name": "preset", "value": "tiny"}, {"name": "tasks", "value": '["sst2"]'},
             {"name": "seeds", "value": "[1]"}]
    assert body["spec"]["arguments"]["parameters"] == [
        *given, *(p for p in _yaml_parameters() if p["name"] not in ("preset", "tasks", "seeds"))]
    # without parameters: the YAML's arguments exactly, no priority
    cluster.submit(WORKFLOW, kubeconfig=kubeconfig)
    assert state.bodies[-1]["spec"] == source["spec"]


@pytest.mark.parametrize("args, kwargs, message", [
    ([REPO / "workflows" / "nightly-regression.yaml"], {},
     ("nightly-regression.yaml is not a bertology study Workflow: it holds CronWorkflow (expected one Workflow "
      "with workflowTemplateRef bertology-study or bertology-vocab-overlap")),
    ([REPO / "workflows" / "templates" / "study.yaml"], {}, "is not a bertology study Workflow: it holds WorkflowTemplate"),
    (["{tmp}/missing.yaml"], {}, "workflow file '{tmp}/missing.yaml' not found"),
    ([WORKFLOW, {"sead": "[1]"}], {}, (f"unknown parameter 'sead' for {WORKFLOW} (did you mean "
                                       "'seeds'?; declared: study, store, platform_store, preset")),
    ([WORKFLOW, {"seeds": "one"}], {}, "parameter 'seeds' must be a JSON list such as"),
    ([WORKFLOW, {"preset": "tinny"}], {}, "unknown preset 'tinny' (did you mean 'tiny'?; known: paper, demo, tiny)"),
    ([WORKFLOW, {"lr": "fast"}], {}, "parameter 'lr' must be a number, got 'fast'"),
    ([WORKFLOW, {"study": "my/study"}], {}, "study name 'my/study' must be letters, digits and '-'"),
    ([WORKFLOW, {"tasks": {1, 2}}], {}, "parameter 'tasks': a set is not a parameter value"),
    ([WORKFLOW], {"priority": "high"}, "priority 'high' is not an integer (allowed: -2147483648 to 2147483647"),
    ([WORKFLOW], {"namespace": "Studies"}, "namespace 'Studies' is not a namespace name (allowed: lower-case letters"),
    ([WORKFLOW], {"kubeconfig": "{tmp}/nowhere"}, "kubeconfig '{tmp}/nowhere' not found"),
    ([WORKFLOW], {"templates": "{tmp}"}, "WorkflowTemplate 'bertology-study' not found in {tmp}, so "),
])
def test_bad_input_is_refused_in_one_line_before_any_request(kube, tmp_path, args, kwargs, message):
    state, kubeconfig = kube
    args = [a.format(tmp=tmp_path) if isinstance(a, str) else a for a in args]
    kwargs = {"kubeconfig": kubeconfig, **{k: v.format(tmp=tmp_path) for k, v in kwargs.items()}}
    with pytest.raises(BadInput) as refused:
        cluster.submit(*args, **kwargs)
    assert message.format(tmp=tmp_path) in str(refused.value) and "\n" not in str(refused.value)
    assert state.requests == []


def test_the_vocab_overlap_study_is_a_study_and_its_own_parameters_are_checked(kube):
    state, kubeconfig = kube
    state.templates.add((NAMESPACE, "bertology-vocab-overlap"))
    with pytest.raises(BadInput, match=r"unknown parameter 'seeds' for \S+/workflows/vocab-overlap.yaml \(declared: study"):
        cluster.submit(REPO / "workflows" / "vocab-overlap.yaml", {"seeds": "[1]"}, kubeconfig=kubeconfig)
    assert state.requests == []
    study = cluster.submit(REPO / "workflows" / "vocab-overlap.yaml", {"case": "fold"}, kubeconfig=kubeconfig)
    assert study.name.startswith("vocab-overlap-")
    assert state.bodies[-1]["spec"]["arguments"]["parameters"][0] == {"name": "case", "value": "fold"}


def test_a_namespace_without_the_study_template_is_refused_before_the_workflow_is_created(kube):
    state, kubeconfig = kube
    with pytest.raises(BadInput) as refused:
        cluster.submit(WORKFLOW, namespace="studis", kubeconfig=kubeconfig)
    assert str(refused.value).startswith("namespace 'studis' not found on the Kubernetes API at http://127.0.0.1:")
    assert str(refused.value).endswith("(did you mean 'studies'?; namespaces: default, studies)")
    with pytest.raises(BadInput, match=r"namespace 'default' on the Kubernetes API at .* has no WorkflowTemplate "
                                       r"'bertology-study' \(install the chart there: helm install bertology "
                                       r"charts/bertology -n default; or give the namespace it is installed in\)"):
        cluster.submit(WORKFLOW, namespace="default", kubeconfig=kubeconfig)
    state.list_namespaces = False  # a user who may not list namespaces: the second line
    with pytest.raises(BadInput, match="namespace 'studis' on the Kubernetes API at .* has no WorkflowTemplate"):
        cluster.submit(WORKFLOW, namespace="studis", kubeconfig=kubeconfig)
    assert not [r for r in state.requests if r[0] == "POST"]


def test_the_cli_submits_and_refuses_like_the_api(kube, tmp_path, capsys):
    state, kubeconfig = kube
    (tmp_path / "params.yaml").write_text("preset: tiny\ntasks: [sst2]\nseeds: [1, 2]\n")
    assert main(["submit", str(WORKFLOW), "-f", str(tmp_path / "params.yaml"), "-p", "seeds=[3]",
                 "--kubeconfig", kubeconfig]) == 0
    name = capsys.readouterr().out.strip()
    assert name.startswith("reversed-layers-") and (NAMESPACE, name) in state.workflows
    assert state.bodies[-1]["spec"]["arguments"]["parameters"][:3] == [
        {"name": "preset", "value": "tiny"}, {"name": "tasks", "value": '["sst2"]'}, {"name": "seeds", "value": "[3]"}]
    requests = len(state.requests)
    assert main(["submit", str(WORKFLOW), "-p", "sead=[1]", "--kubeconfig", kubeconfig]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "unknown parameter 'sead'" in err and "did you mean 'seeds'?" in err
    assert main(["submit", str(WORKFLOW), "--kubeconfig", kubeconfig, "-n", "Bad_NS"]) == 2
    assert "namespace 'Bad_NS' is not a namespace name" in capsys.readouterr().err
    assert len(state.requests) == requests


def test_submit_watch_prints_the_name_each_change_and_the_verdict(kube, capsys):
    state, kubeconfig = kube
    state.on_create = [{"phase": "Running", "progress": "0/2"}, {"phase": "Running", "progress": "1/2"},
                       {"phase": "Failed", "progress": "2/2", "message": "main: Error (exit code 1): finetune failed: "
                                                                         "boom"}]
    assert main(["submit", str(WORKFLOW), "-p", "preset=tiny", "--watch", "--kubeconfig", kubeconfig]) == 1
    lines = capsys.readouterr().out.splitlines()
    name = lines[0]
    assert lines[1:] == ["Pending", "Running 0/2", "Running 1/2",
                         "Failed 2/2: main: Error (exit code 1): finetune failed: boom",
                         f"workflow {name}: Failed: main: Error (exit code 1): finetune failed: boom"]


# -- watch and wait -------------------------------------------------------------------------------------------

def _study_document(status: dict | None = None) -> dict:
    document = yaml.safe_load(WORKFLOW.read_text())
    return {**document, **({"status": status} if status else {})}


def test_watch_yields_each_change_and_wait_the_final_status(kube):
    state, kubeconfig = kube
    name = state.add(NAMESPACE, _study_document(), [
        {"phase": "Pending"},  # only the resourceVersion changes: nothing new to say
        {"phase": "Running", "progress": "0/3", "message": "Waiting for bertology-semaphores/gpu lock"},
        {"expire": True},  # the watch's version is too old: read again, watch on
        {"phase": "Running", "progress": "2/3", "message": ""},
        {"cut": True},  # the stream breaks off: read again, watch on
        {"phase": "Succeeded", "progress": "3/3"}])
    seen = [str(s) for s in cluster.watch(name, kubeconfig=kubeconfig)]
    assert seen == ["Pending", "Running 0/3: Waiting for bertology-semaphores/gpu lock", "Running 2/3",
                    "Succeeded 3/3"]
    final = cluster.Study(name, NAMESPACE, kubeconfig).wait(timeout=30)  # finished: answered at once
    assert final.succeeded and final.finished and (final.phase, final.progress, final.message) == ("Succeeded", "3/3", "")
    watches = [p for m, p in state.requests if "watch=true" in p]
    assert watches and all(f"fieldSelector=metadata.name%3D{name}" in p for p in watches)
    reads = [p for m, p in state.requests if p.endswith(f"/workflows/{name}")]
    assert len(reads) == 1 + 2 + 1  # watch's first read, after the expired and the cut watch; wait's


def test_wait_returns_a_failed_studys_verdict_and_the_cli_exits_1(kube, capsys):
    state, kubeconfig = kube
    verdict = "main: Error (exit code 1): analyze failed: killed; aggregate failed: study reversed-layers is incomplete"
    name = state.add(NAMESPACE, _study_document({"phase": "Running", "progress": "1/4"}),
                     [{"phase": "Failed", "progress": "4/4", "message": verdict}])
    final = cluster.wait(name, kubeconfig=kubeconfig)
    assert (final.phase, final.message) == ("Failed", verdict) and not final.succeeded
    assert main(["watch", name, "--kubeconfig", kubeconfig]) == 1
    assert capsys.readouterr().out.splitlines() == [f"Failed 4/4: {verdict}", f"workflow {name}: Failed: {verdict}"]
    done = state.add(NAMESPACE, _study_document({"phase": "Succeeded", "progress": "4/4"}))
    assert main(["watch", done, "-n", NAMESPACE, "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"workflow {done}: Succeeded"


def test_wait_times_out_and_watch_ends_on_a_deleted_workflow(kube):
    state, kubeconfig = kube
    name = state.add(NAMESPACE, _study_document({"phase": "Running", "progress": "0/1"}))
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"Workflow '{name}' is still Running 0/1 after 1 s"):
        cluster.wait(name, kubeconfig=kubeconfig, timeout=1)
    assert time.monotonic() - started < 10
    state.updates[name] = [{"delete": True}]
    with pytest.raises(Exception, match=f"Workflow '{name}' in namespace 'studies' was deleted while watched"):
        list(cluster.watch(name, kubeconfig=kubeconfig))


def test_an_unknown_workflow_is_named_with_the_closest_one(kube):
    state, kubeconfig = kube
    name = state.add(NAMESPACE, _study_document())
    with pytest.raises(BadInput) as refused:
        cluster.status(name[:-1], kubeconfig=kubeconfig)
    assert str(refused.value) == (f"no Workflow '{name[:-1]}' in namespace 'studies' on the Kubernetes API at "
                                  f"{_host(state, kubeconfig)} (did you mean '{name}'?; Workflows there: {name})")


def _host(state, kubeconfig) -> str:
    return yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]


def test_an_unreachable_api_is_transient_in_one_line(clean_env, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), KubeHandler)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server)
    server.server_close()  # nothing listens there any more
    with pytest.raises(Transient, match=r"cannot reach the Kubernetes API at http://127\.0\.0\.1:\d+: "):
        cluster.status("x", kubeconfig=kubeconfig)


# -- results --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stored_study(tmp_path_factory):
    """A store holding two plans of reversed-layers: a tiny study run here (the sst2 task, one seed: three
    runs, about 15 s), and one more plan with one run written by hand."""
    root = tmp_path_factory.mktemp("store")
    code = main(["run", "-q", str(WORKFLOW), "-p", "preset=tiny", "-p", 'tasks=["sst2"]', "-p", "seeds=[1]",
                 "--store", str(root)])
    assert code == 0
    store = open_store(str(root))
    [ran] = study_ids(store, "reversed-layers")
    other = "00000000000000aa"
    cell = Cell("reversed-layers", "pre-trained", "m", RunSpec(CheckpointSpec("m"), DatasetSpec("rte", "synthetic", "m")))
    spec = {"preset": "tiny", "models": ["m"], "seeds": [1], "source": "synthetic", "max_length": 32,
            "regime": {"name": "full", "lr": 1e-3, "batch_size": 8, "epochs": 1}, "variants": [{"name": "pre-trained"}]}
    store.write_json(f"studies/reversed-layers/{other}/plan.json",
                     {"study": "reversed-layers", "study_id": other, "spec": spec, "cells": [cell.to_dict()]})
    publish(store, "runs", cell, pa.Table.from_pylist([
        {"split": "validation", "metric": "accuracy", "value": 0.5, "primary": True, "best_epoch": 1, "epochs": 1,
         "num_train": 10, "train_seconds": 1.0, "throughput": 10.0, "device": "cpu", "code_version": "t"}]))
    return store, ran, other


def _finished(store_uri: str, ref: str, phase: str = "Succeeded") -> dict:
    """A study Workflow as Argo leaves it: the plan task's Retry node and its pod, each with the plan's output
    parameters as Argo writes them (`valueFrom` kept), among the other nodes."""
    outputs = {"parameters": [
        {"name": "checkpoints", "value": '["a"]', "valueFrom": {"path": "/tmp/outputs/checkpoints.json"}},
        {"name": "study", "value": ref, "valueFrom": {"path": "/tmp/outputs/study.json"}},
        {"name": "store", "value": store_uri, "valueFrom": {"path": "/tmp/outputs/store.json"}},
        {"name": "baseline_store", "value": "", "valueFrom": {"path": "/tmp/outputs/baseline_store.json"}}],
        "exitCode": "0"}
    nodes = {
        "rl-x": {"id": "rl-x", "name": "rl-x", "displayName": "rl-x", "type": "DAG", "phase": phase},
        "rl-x-1": {"id": "rl-x-1", "name": "rl-x.plan", "displayName": "plan", "type": "Retry", "phase": "Succeeded",
                   "templateRef": {"name": "bertology-steps", "template": "plan"}, "outputs": outputs,
                   "children": ["rl-x-2"]},
        "rl-x-2": {"id": "rl-x-2", "name": "rl-x.plan(0)", "displayName": "plan(0)", "type": "Pod",
                   "phase": "Succeeded", "outputs": outputs},
        "rl-x-3": {"id": "rl-x-3", "name": "rl-x.aggregate", "displayName": "aggregate", "type": "Retry",
                   "phase": "Succeeded", "outputs": {"exitCode": "0"}},
    }
    return _study_document({"phase": phase, "progress": "9/9", "nodes": nodes})


def test_results_are_exactly_the_plans_runs_from_the_store_the_plan_fixed(kube, stored_study):
    state, kubeconfig = kube
    store, ran, other = stored_study
    name = state.add(NAMESPACE, _finished(store.uri, f"reversed-layers:{ran}"))
    runs = cluster.results(name, kubeconfig=kubeconfig)
    everything = scan(store.uri, "runs", study="reversed-layers").collect()
    mine = everything.filter(pl.col("model") != "m")  # the hand-written plan's run is not this study's
    assert runs.height == mine.height == 3 and everything.height == 4
    assert runs.sort("run_id").equals(mine.select(runs.columns).sort("run_id"))
    assert set(runs["variant"]) == {"pre-trained", "reversed", "clean"} and set(runs["task"]) == {"sst2"}
    curves = cluster.Study(name, NAMESPACE, kubeconfig).results("curves")
    assert set(curves["run_id"]) == set(runs["run_id"])
    # the other plan of the same study name: its one run only
    other_name = state.add(NAMESPACE, _finished(store.uri, f"reversed-layers:{other}"))
    assert cluster.results(other_name, kubeconfig=kubeconfig)["model"].to_list() == ["m"]


def test_results_refuse_in_one_line(kube, stored_study):
    state, kubeconfig = kube
    store, ran, _ = stored_study
    name = state.add(NAMESPACE, _finished(store.uri, f"reversed-layers:{ran}"))
    with pytest.raises(BadInput, match=r"unknown results table 'run' \(did you mean 'runs'\?; known: runs, curves"):
        cluster.results(name, "run", kubeconfig=kubeconfig)
    with pytest.raises(BadInput, match=rf"study 'reversed-layers' \({ran}\) has no 'activation_distance' results "
                                       r"\(it has: runs, curves, weight_distance, model_profile\)"):
        cluster.results(name, "activation_distance", kubeconfig=kubeconfig)
    running = state.add(NAMESPACE, _study_document({"phase": "Running", "progress": "0/1"}))
    with pytest.raises(Transient, match=f"Workflow '{running}' is Running 0/1 and its plan step has not finished"):
        cluster.results(running, kubeconfig=kubeconfig)
    failed = state.add(NAMESPACE, _study_document({"phase": "Failed", "message": "plan: Error (exit code 2)"}))
    with pytest.raises(Exception, match=f"Workflow '{failed}' ended Failed without its plan step's outputs .*: "
                                        r"plan: Error \(exit code 2\)"):
        cluster.results(failed, kubeconfig=kubeconfig)


def test_the_results_command_prints_writes_csv_and_parquet(kube, stored_study, tmp_path, capsys):
    state, kubeconfig = kube
    store, ran, _ = stored_study
    name = state.add(NAMESPACE, _finished(store.uri, f"reversed-layers:{ran}"))
    assert main(["results", name, "--kubeconfig", kubeconfig]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"reversed-layers {ran}: runs, 3 rows"
    assert lines[1].startswith("| schema_version | study | variant |") and len(lines) == 2 + 1 + 3
    assert main(["results", name, "-n", NAMESPACE, "--kubeconfig", kubeconfig, "-o", "csv", "--table", "curves"]) == 0
    curves = pl.read_csv(capsys.readouterr().out.encode())
    assert set(curves["run_id"]) == set(cluster.results(name, kubeconfig=kubeconfig)["run_id"])
    target = tmp_path / "runs.parquet"
    assert main(["results", name, "--kubeconfig", kubeconfig, "-o", f"parquet:{target}"]) == 0
    assert capsys.readouterr().out.strip() == f"reversed-layers {ran}: runs, 3 rows: {target}"
    assert pl.read_parquet(target).equals(cluster.results(name, kubeconfig=kubeconfig))
    assert main(["results", name, "--kubeconfig", kubeconfig, "-o", "xlsx"]) == 2
    assert "-o 'xlsx' is not an output (allowed: table, csv, parquet:PATH)" in capsys.readouterr().err


# -- through Argo Server --------------------------------------------------------------------------------------

def test_argo_server_submit_wait_and_results(argo, stored_study):
    store, ran, _ = stored_study
    argo.on_create = [{"phase": "Running", "progress": "0/1"}, {"phase": "Running", "progress": "1/2"}]
    study = cluster.submit(WORKFLOW, {"preset": "tiny"})
    assert study.namespace == NAMESPACE and study.name.startswith("reversed-layers-")
    assert argo.requests == [("GET", f"/api/v1/workflow-templates/{NAMESPACE}/bertology-study"),
                             ("POST", f"/api/v1/workflows/{NAMESPACE}")]
    assert set(argo.auth) == {"Bearer argo-token"}  # ARGO_TOKEN, as it is
    [body] = argo.bodies
    assert body["namespace"] == NAMESPACE and body["workflow"]["metadata"]["generateName"] == "reversed-layers-"
    assert body["workflow"]["spec"]["arguments"]["parameters"] == [
        {"name": "preset", "value": "tiny"}, *(p for p in _yaml_parameters() if p["name"] != "preset")]
    finished = _finished(store.uri, f"reversed-layers:{ran}")
    argo.updates[study.name].append(finished["status"])
    assert [str(s) for s in study.watch()] == ["Running 0/1", "Running 1/2", "Succeeded 9/9"]  # a read each
    assert study.wait().succeeded
    assert study.results().height == 3
    with pytest.raises(BadInput, match=rf"no Workflow 'nope' in namespace 'studies' on Argo Server at "
                                       rf"http://127\.0\.0\.1:\d+ \(Workflows there: {study.name}\)"):
        cluster.status("nope")


def test_argo_server_settings_as_the_argo_cli_reads_them(argo, monkeypatch, tmp_path):
    # a scheme in ARGO_SERVER: refused before any request
    server = argo_server.os.environ["ARGO_SERVER"]
    monkeypatch.setenv("ARGO_SERVER", f"http://{server}")
    with pytest.raises(BadInput, match="ARGO_SERVER 'http://127.0.0.1:.*' is not host:port"):
        cluster.submit(WORKFLOW)
    assert argo.requests == []
    # without ARGO_TOKEN and ARGO_NAMESPACE: the kubeconfig's token and context namespace, as the argo CLI
    monkeypatch.setenv("ARGO_SERVER", server)
    monkeypatch.delenv("ARGO_TOKEN")
    monkeypatch.delenv("ARGO_NAMESPACE")
    config = yaml.safe_load(write_kubeconfig(tmp_path / "kubeconfig", SimpleNamespace(server_port=1)).read_text())
    config["contexts"][0]["context"]["namespace"] = NAMESPACE
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    assert cluster.submit(WORKFLOW).namespace == NAMESPACE
    assert set(argo.auth) == {"Bearer t"}
    # ARGO_BASE_HREF: the path Argo Server is served under
    monkeypatch.setenv("ARGO_BASE_HREF", "/argo/")
    with pytest.raises(BadInput, match=r"on Argo Server at http://127\.0\.0\.1:\d+/argo has no WorkflowTemplate"):
        cluster.submit(WORKFLOW)  # this one is not served under /argo: nothing found there
    assert argo.requests[-1] == ("GET", f"/argo/api/v1/workflow-templates/{NAMESPACE}/bertology-study")


def test_argo_server_over_https_with_a_self_signed_certificate(clean_env, monkeypatch, tmp_path):
    """ARGO_SECURE unset: HTTPS, as the argo CLI; a certificate no CA here signed is refused in one line
    unless ARGO_INSECURE_SKIP_VERIFY=true."""
    from bertology.localcluster import pki

    pki.create_all(tmp_path / "pki", [pki.Identity("server", "argo-server", client=False, server=True,
                                                   hosts=("127.0.0.1",))])
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "pki" / "server.crt", tmp_path / "pki" / "server.key")
    state = Cluster()
    server = _serve(ArgoHandler, state, tls)
    try:
        monkeypatch.setenv("ARGO_SERVER", f"127.0.0.1:{server.server_port}")
        monkeypatch.setenv("ARGO_TOKEN", "Bearer x")
        monkeypatch.setenv("ARGO_NAMESPACE", NAMESPACE)
        with pytest.raises(BadInput, match=r"cannot verify the TLS certificate of Argo Server at "
                                           r"https://127\.0\.0\.1:\d+ .*ARGO_INSECURE_SKIP_VERIFY=true"):
            cluster.submit(WORKFLOW)
        monkeypatch.setenv("ARGO_INSECURE_SKIP_VERIFY", "true")
        study = cluster.submit(WORKFLOW)
        assert (NAMESPACE, study.name) in state.workflows
    finally:
        server.shutdown()
        server.server_close()


def test_the_api_is_documented_where_the_docs_say():
    """The names the docs' notebook section uses exist, with those keywords."""
    import inspect

    assert {"namespace", "kubeconfig", "priority", "templates"} <= set(inspect.signature(cluster.submit).parameters)
    assert {"timeout"} <= set(inspect.signature(cluster.Study.wait).parameters)
    assert "table" in inspect.signature(cluster.Study.results).parameters
    text = (REPO / "docs" / "reports.md").read_text()
    assert "## From a notebook: studies on a cluster" in text and "bertology submit" in text


def test_a_yaml_number_is_sent_as_the_string_argo_keeps(argo, tmp_path):
    """`value: 64` in a study's YAML is Argo's AnyString "64": so both APIs get it (argo-workflows' model
    takes strings only)."""
    document = yaml.safe_load(WORKFLOW.read_text())
    for param in document["spec"]["arguments"]["parameters"]:
        if param["name"] == "max_length":
            param["value"] = 64
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(document))
    cluster.submit(tmp_path / "mine.yaml", templates=REPO / "workflows" / "templates")
    sent = {p["name"]: p["value"] for p in argo.bodies[-1]["workflow"]["spec"]["arguments"]["parameters"]}
    assert sent["max_length"] == "64" and sent["lr"] == "default:2e-5"
