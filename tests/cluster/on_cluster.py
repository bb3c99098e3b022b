"""What the cluster tests share: commands run as a user runs them, the chart's values for this cluster, and a
Workflow's status read back."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import boto3

from bertology.localcluster import layout as lay
from bertology.localcluster.images import recorded_bertology_images

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
NAMESPACE = "studies"
S3_PORT = 19000
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
          "AWS_ENDPOINT_URL": f"http://{lay.NODE_IP}:{S3_PORT}"}
# The step library's requests are sized for GPU nodes (finetune: 4 CPUs, 16Gi); the local node has 2 CPUs.
SMALL_NODE = ("plan", "prepare-data", "build-checkpoint", "finetune", "evaluate", "analyze", "aggregate",
              "vocab-plan", "vocab-overlap", "regress")
# wall-clock figures, different in every run: runs, curves, model_profile (the measured costs)
TIMING = ("train_seconds", "throughput", "seconds", "intervention_cpu_seconds", "inference_seconds",
          "examples_per_second")


def run(argv: list[str], env: dict, *, check: bool = True, timeout: float = 600, input: str | None = None):
    """A command as the user types it, in the checkout; its output kept for the assertion message."""
    done = subprocess.run(argv, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
                          input=input)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-4000:]}\n"
                             f"{done.stderr[-4000:]}")
    return done


def in_process_env() -> dict:
    """The environment of a `bertology run` whose steps compute what the pods compute: the S3 server, offline,
    and torch's threads as a pod has them by default (one per CPU the pod may use: every CPU of the node), also
    in steps forked from the test session's fork server, which imported torch with one thread (a forked step
    takes OMP_NUM_THREADS from its own environment: bertology.argo.zygote)."""
    return {**os.environ, **S3_ENV, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(len(os.sched_getaffinity(0)))}


def new_bucket(s3_env: dict) -> str:
    name = f"b-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return name


def chart_values(layout: lay.Layout, bucket: str, *, gpu_concurrency: int = 1) -> list[str]:
    """The values a platform team gives `helm install`: the images the node's containerd holds (`make cluster`
    imported those `make images BASE=local` built from this tree), the store and its endpoint (and its port,
    for the NetworkPolicy), one GPU step at a time, and requests that fit a 2-CPU node."""
    values = []
    for key, ref in recorded_bertology_images(layout).items():
        repository, tag = ref.rsplit(":", 1)
        values += ["--set", f"images.{key}.repository={repository}", "--set", f"images.{key}.tag={tag}"]
    return [*values, "--set", f"store.uri=s3://{bucket}/store",
            "--set", f"store.endpointUrl={S3_ENV['AWS_ENDPOINT_URL']}",
            "--set", f"networkPolicy.store.ports={{{S3_PORT}}}", "--set", f"gpu.concurrency={gpu_concurrency}",
            *(x for t in SMALL_NODE for x in ("--set", f"resources.{t}.requests.cpu=250m",
                                                "--set", f"resources.{t}.requests.memory=1Gi"))]


def workflow(env: dict, name: str) -> dict:
    out = run([str(VENV_BIN / "kubectl"), "get", "workflow", name, "-o", "json"], env)
    return json.loads(out.stdout)


def submitted_name(output: str) -> str:
    """The Workflow's name from `argo submit`'s output (its `Name:` line)."""
    for line in output.splitlines():
        if line.startswith("Name:"):
            return line.split()[1]
    raise AssertionError(f"no Name: line in argo submit's output:\n{output}")


def wait_phase(env: dict, name: str, *, timeout: float = 1800) -> dict:
    """The Workflow once it has finished (Succeeded, Failed or Error)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        document = workflow(env, name)
        if document.get("status", {}).get("phase") in ("Succeeded", "Failed", "Error"):
            return document
        time.sleep(3)
    raise AssertionError(f"workflow {name} did not finish in {timeout:.0f} s")
