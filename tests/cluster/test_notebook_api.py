"""bertology.cluster on a real Argo controller, as a notebook uses it: submit a tiny study into the namespace
the chart is installed in, wait for its verdict, and read its runs, equal row for row to what
`bertology.results.scan` reads for that study from the store; through the Kubernetes API with the user's
kubeconfig, and through Argo Server (HTTPS with its own self-signed certificate, auth mode "client": a
ServiceAccount's bearer token), as the argo CLI is configured for either."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import polars as pl
import pytest
from on_cluster import NAMESPACE, REPO, S3_ENV, TIMING, VENV_BIN, run

from bertology import cluster
from bertology.errors import BadInput
from bertology.results import scan

WORKFLOW = REPO / "workflows" / "reversed-layers.yaml"
ARGO_ENV = ("ARGO_SERVER", "ARGO_TOKEN", "ARGO_SECURE", "ARGO_INSECURE_SKIP_VERIFY", "ARGO_NAMESPACE",
            "ARGO_BASE_HREF", "ARGO_INSTANCEID")
# What a notebook user needs of the namespace: submit and follow Workflows, read the study's WorkflowTemplate.
NOTEBOOK_ROLE = f"""
apiVersion: v1
kind: ServiceAccount
metadata: {{name: notebook, namespace: {NAMESPACE}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: notebook, namespace: {NAMESPACE}}}
rules:
  - apiGroups: [argoproj.io]
    resources: [workflows]
    verbs: [create, get, list, watch]
  - apiGroups: [argoproj.io]
    resources: [workflowtemplates]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: notebook, namespace: {NAMESPACE}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: notebook}}
subjects: [{{kind: ServiceAccount, name: notebook, namespace: {NAMESPACE}}}]
"""


@pytest.fixture(scope="module")
def study_name() -> str:
    """A study name of this session's own, so that the store's partition holds this study's runs only."""
    return f"notebook-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def user(studies, monkeypatch):
    """This process as the user: the kubeconfig whose context is the chart's namespace, the store's S3
    endpoint and credentials, no argo setting."""
    for name in ARGO_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBECONFIG", studies["env"]["KUBECONFIG"])
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    return studies


def _rows(frame: pl.DataFrame) -> pl.DataFrame:
    frame = frame.drop([c for c in frame.columns if c in TIMING])
    return frame.select(sorted(frame.columns)).sort(sorted(frame.columns))


def _submit_wait_and_compare(study_name: str, store: str) -> cluster.Study:
    study = cluster.submit(WORKFLOW, {"study": study_name, "preset": "tiny", "tasks": ["sst2"], "seeds": [1]})
    assert study.namespace == NAMESPACE and study.name.startswith("reversed-layers-")
    final = study.wait(timeout=3000)
    assert final.succeeded, final
    runs = study.results()
    stored = scan(store, "runs", study=study_name).collect()
    assert runs.height == stored.height == 3  # sst2 x pre-trained, reversed, clean x one seed
    assert _rows(runs).equals(_rows(stored.select(runs.columns)))
    assert set(runs["variant"]) == {"pre-trained", "reversed", "clean"}
    return study


def test_a_notebook_submits_waits_and_reads_the_runs_through_the_kubernetes_api(user, study_name):
    study = _submit_wait_and_compare(study_name, user["store"])
    # a typo is refused before the cluster hears of it
    with pytest.raises(BadInput, match="unknown parameter 'sead' .*did you mean 'seeds'"):
        cluster.submit(WORKFLOW, {"sead": "[1]"})
    # the command line reads the same runs
    done = subprocess.run([sys.executable, "-m", "bertology.cli", "results", study.name, "-o", "csv"], cwd=REPO,
                          env=dict(os.environ), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert pl.read_csv(done.stdout.encode()).height == 3


def test_a_notebook_submits_and_waits_through_argo_server(user, study_name, monkeypatch):
    env = user["env"]
    run([str(VENV_BIN / "kubectl"), "apply", "-f", "-"], env, input=NOTEBOOK_ROLE)
    token = run([str(VENV_BIN / "kubectl"), "-n", NAMESPACE, "create", "token", "notebook"], env).stdout.strip()
    address = run([str(VENV_BIN / "kubectl"), "-n", "argo", "get", "service", "argo-server", "-o",
                   "jsonpath={.spec.clusterIP}"], env).stdout.strip()
    monkeypatch.setenv("ARGO_SERVER", f"{address}:2746")  # HTTPS: ARGO_SECURE unset means true
    monkeypatch.setenv("ARGO_INSECURE_SKIP_VERIFY", "true")  # Argo Server's own self-signed certificate
    monkeypatch.setenv("ARGO_TOKEN", f"Bearer {token}")
    monkeypatch.setenv("ARGO_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("KUBECONFIG", os.devnull)  # nothing goes through the Kubernetes API
    study = _submit_wait_and_compare(study_name, user["store"])  # the same study: its runs reused, the same rows
    assert cluster.status(study.name).succeeded
