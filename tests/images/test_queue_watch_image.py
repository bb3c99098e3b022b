"""The queue watch in the CPU image, run as its template says (its command and arguments, uid 10001, a
read-only root, /tmp writable), against the loopback Kubernetes API of tests/kube_api.py through a
kubeconfig: the image has the Kubernetes client, and the pass stops the stuck study and only it."""

from __future__ import annotations

import subprocess
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from kube_api import FakeApiServer, write_kubeconfig

from bertology import images
from bertology.argo.queue_watch import ANNOTATION

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = yaml.safe_load((REPO / "workflows" / "templates" / "queue-watch.yaml").read_text())
LOCK = "studies/ConfigMap/bertology-semaphores/gpu"


@pytest.fixture(scope="module")
def cpu_image():
    found = images.find_image("podman", images.IMAGES["cpu"], images.tree_hash(REPO, "cpu"))
    assert found, "no CPU image for this tree: run `make images BASE=local` first"
    return found


def study(name: str, waited: timedelta) -> dict:
    started = (datetime.now(timezone.utc) - waited).strftime("%Y-%m-%dT%H:%M:%SZ")
    node = {"id": f"{name}-1", "name": f"{name}.cell(0:aa).finetune", "displayName": "finetune", "type": "Retry",
            "templateName": "finetune", "phase": "Pending", "startedAt": started,
            "message": f"Waiting for {LOCK} lock. Lock status: 0/4", "synchronizationStatus": {"waiting": LOCK}}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": name, "namespace": "studies"},
            "spec": {"workflowTemplateRef": {"name": "bertology-study"}},
            "status": {"phase": "Running", "nodes": {node["id"]: node}}}


def test_the_queue_watch_runs_in_the_cpu_image_and_stops_the_stuck_study(cpu_image, tmp_path):
    server = FakeApiServer([study("stuck", timedelta(days=8)), study("fresh", timedelta(hours=2))])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server)
        kubeconfig.chmod(0o644)
        (watch,) = TEMPLATE["spec"]["templates"]
        container = watch["container"]
        values = {"workflow.namespace": "studies", "workflow.parameters.queue_limit": "7d",
                  "workflow.parameters.scheduling_limit": "1h", "workflow.parameters.dry_run": "false"}
        args = [values.get(a.strip("{}"), a) for a in container["args"]]
        user = watch["securityContext"]["runAsUser"]
        done = subprocess.run(
            [*images.engine_command("podman"), "run", "--rm", "--network", "host", *images.ulimits(), "--read-only",
             "--user", f"{user}:{user}", "--tmpfs", "/tmp", "-v", f"{kubeconfig}:/kube/config:ro",
             "-e", "KUBECONFIG=/kube/config", cpu_image, *container["command"], *args],
            capture_output=True, text=True, timeout=120, check=False)
    finally:
        server.shutdown()
    assert done.returncode == 1, done.stdout + done.stderr  # it stopped one: the pass shows red
    assert done.stdout.startswith("stopped stuck: stopped by the queue watch: cell(0:aa).finetune waited 8d")
    assert server.workflows["stuck"]["spec"]["shutdown"] == "Stop"
    assert LOCK in server.workflows["stuck"]["metadata"]["annotations"][ANNOTATION]
    assert "shutdown" not in server.workflows["fresh"]["spec"]
