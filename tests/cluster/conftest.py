"""The local cluster as a platform team's would be, for tests that run bertology on it as its users would.

`make test-cluster` brings the cluster up first (`make cluster`: a real Kubernetes and Argo Workflows,
bertology's images in its containerd). Here, once per session:
- an S3 server (moto) on the node's address, which every pod reaches;
- the namespace `studies`, labelled to enforce the "restricted" Pod Security Standard, with the S3 Secret,
  and the chart installed in it by `helm install`, with the images, the store and a GPU queue of one;
- a kubeconfig whose context is that namespace: what a user of the cluster has, so that each command is
  exactly what the user would type (`argo submit workflows/foreign-bert.yaml -p preset=tiny`).
"""

from __future__ import annotations

import os
import socket

import pytest
import yaml
from on_cluster import NAMESPACE, S3_ENV, S3_PORT, VENV_BIN, chart_values, new_bucket, run

from bertology.localcluster import control
from bertology.localcluster import layout as lay


@pytest.fixture(scope="session")
def layout() -> lay.Layout:
    layout = lay.Layout.default()
    stopped = [name for name, pid in control.status(layout).items() if pid is None]
    assert not stopped, f"the local cluster is not running ({', '.join(stopped)}): run `make cluster` first"
    return layout


@pytest.fixture(scope="session")
def s3_server(layout):
    """moto's S3 on the node's address: the host's and every pod's store; this process's S3 clients (the
    results read back) are pointed at it."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:  # ThreadedMotoServer.start waits for ever on a port in use
        if probe.connect_ex((lay.NODE_IP, S3_PORT)) == 0:
            pytest.fail(f"{lay.NODE_IP}:{S3_PORT} is in use (another test session's S3 server?)")
    server = ThreadedMotoServer(ip_address=lay.NODE_IP, port=S3_PORT)
    server.start()
    saved = {key: os.environ.get(key) for key in S3_ENV}
    os.environ.update(S3_ENV)
    yield dict(S3_ENV)
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def admin_env(layout) -> dict:
    return {**os.environ, "KUBECONFIG": str(layout.admin_kubeconfig), "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}


@pytest.fixture(scope="session")
def studies(layout, admin_env, s3_server, tmp_path_factory) -> dict:
    """The `studies` namespace with the chart installed: {env: the user's environment (KUBECONFIG with the
    namespace as its context's), bucket: the store's bucket, store: its URI}."""
    kubectl = [str(VENV_BIN / "kubectl")]
    run([*kubectl, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true"], admin_env, timeout=300)
    run([*kubectl, "create", "namespace", NAMESPACE], admin_env)
    run([*kubectl, "label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted",
         "pod-security.kubernetes.io/enforce-version=latest"], admin_env)
    run([*kubectl, "-n", NAMESPACE, "create", "secret", "generic", "bertology-s3",
         f"--from-literal=AWS_ACCESS_KEY_ID={S3_ENV['AWS_ACCESS_KEY_ID']}",
         f"--from-literal=AWS_SECRET_ACCESS_KEY={S3_ENV['AWS_SECRET_ACCESS_KEY']}"], admin_env)
    bucket = new_bucket(s3_server)
    run([str(VENV_BIN / "helm"), "install", "bertology", "charts/bertology", "-n", NAMESPACE, "--wait",
         *chart_values(layout, bucket)], admin_env, timeout=300)
    config = yaml.safe_load(layout.admin_kubeconfig.read_text())
    config["contexts"][0]["context"]["namespace"] = NAMESPACE
    user_config = tmp_path_factory.mktemp("user") / "kubeconfig"
    user_config.write_text(yaml.safe_dump(config))
    return {"env": {**admin_env, "KUBECONFIG": str(user_config)}, "bucket": bucket, "store": f"s3://{bucket}/store",
            "port": S3_PORT}
