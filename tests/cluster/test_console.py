"""What `make cluster` tells its user, used as the user would: the commands it prints, and the docs'."""

from __future__ import annotations

import os
import subprocess
import sys

from on_cluster import REPO

DOCS_COMMANDS = """export KUBECONFIG=/var/lib/bertology-cluster/admin.kubeconfig PATH=$PWD/.venv/bin:$PATH
kubectl get nodes
argo list -A
"""


def test_what_make_cluster_prints_works_as_printed(layout):
    """`make cluster` on a running cluster starts nothing again and prints how to use it; the commands it
    prints (and docs/kubernetes.md shows) reach the cluster: the node Ready, Argo answering."""
    up = subprocess.run([sys.executable, "-m", "bertology.localcluster", "up"], cwd=REPO, capture_output=True,
                        text=True, check=False, timeout=900)
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"export KUBECONFIG={layout.admin_kubeconfig} PATH=$PWD/.venv/bin:$PATH" in up.stdout
    assert "kubectl get nodes; argo list -A" in up.stdout and "make cluster-down" in up.stdout
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
    done = subprocess.run(["bash", "-e", "-c", DOCS_COMMANDS], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    node = next(line for line in done.stdout.splitlines() if line.startswith("bertology-node"))
    assert node.split()[1] == "Ready" and node.split()[-1] == "v1.36.3", node
    listed = done.stdout.splitlines()[2]  # argo list's first line, after the node's two
    assert listed.split()[:2] == ["NAMESPACE", "NAME"] or listed == "No workflows found", done.stdout
