"""What a pod costs to start in its image (`--engine podman`) against the in-process runner (`--engine local`).

A workflow of `--pods` container tasks in a chain, each with the step library's `finetune` settings (the
training image, its securityContext, emptyDir and limits) and a step that does what every step that loads a
model does first, import torch and transformers' BERT: `python -m bertology.weight_init` (the step modules
themselves import neither until they use them: docs/development.md). The local runner forks each from a
warm interpreter by default, or starts a fresh one (--no-fork-server); a container adds its own start and
removal to a fresh interpreter. The podman run uses moto's S3 on loopback as its store (the engine checks it).
Prints seconds per pod, end to end (the fork server's own start included), for each engine; needs the images (`make images BASE=local`).

    .venv/bin/python bench/container_startup.py [--pods 6]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from pathlib import Path

import boto3
import yaml
from moto.server import ThreadedMotoServer

from bertology.argo.engines import for_workflow
from bertology.argo.runner import run_workflow

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "workflows" / "templates"


def workflow(directory: Path, pods: int) -> Path:
    step = json.loads(json.dumps(next(t for t in yaml.safe_load((TEMPLATES / "steps.yaml").read_text())["spec"]
                                      ["templates"] if t["name"] == "finetune")))
    for key in ("inputs", "outputs", "retryStrategy", "synchronization", "tolerations"):
        step.pop(key, None)
    step["name"] = "step"
    step["container"].update(command=["python", "-m", "bertology.weight_init"], args=[])
    tasks = [{"name": f"p{i}", "template": "step", **({"depends": f"p{i - 1}"} if i else {})} for i in range(pods)]
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "startup"},
           "spec": {"entrypoint": "main", "templates": [{"name": "main", "dag": {"failFast": False, "tasks": tasks}},
                                                        step]}}
    path = directory / "startup.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=6)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    boto3.client("s3").create_bucket(Bucket="bench")
    store = "s3://bench/store"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = workflow(Path(tmp), args.pods)
            for label, engine, fork in (("local (fork server)", "local", True),
                                        ("local (--no-fork-server)", "local", False), ("podman", "podman", False)):
                runner = None if engine == "local" else for_workflow(engine, path, {}, TEMPLATES, REPO, store)
                started = time.monotonic()
                result = run_workflow(path, params={}, templates_dir=TEMPLATES, workdir=Path(tmp) / label[:6],
                                      project_root=REPO, fork_server=fork, log=lambda _: None, engine=runner)
                seconds = time.monotonic() - started
                assert result.succeeded, result.nodes
                print(f"{label}: {args.pods} pods in {seconds:.1f} s, {seconds / args.pods:.2f} s per pod")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
