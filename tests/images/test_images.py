"""The images, built here (`make test-images` builds them first with BASE=local), and pods run in them with
podman exactly as their templates say: a whole tiny study against S3 on loopback, equal to the in-process
runner's; the pod's security settings, checked from inside; an OOM kill, exit 137, retried as the template's
retryStrategy says; an emptyDir over its sizeLimit evicted; and the bad input refused before anything runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import polars as pl
import pytest
import yaml

from bertology import images, tiny_pretrain
from bertology.argo.engines import for_workflow
from bertology.argo.runner import run_workflow
from bertology.results import scan
from bertology.store import open_store

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "workflows" / "templates"
STEPS = {t["name"]: t for t in yaml.safe_load((TEMPLATES / "steps.yaml").read_text())["spec"]["templates"]}
TIMING = ["train_seconds", "throughput"]  # measured wall-clock figures, different in every run


@pytest.fixture(scope="module")
def built():
    """The images of this tree (make test-images built them): image -> NAME:TAG."""
    found = {key: images.find_image("podman", name, images.tree_hash(REPO, key)) for key, name in images.IMAGES.items()}
    assert all(found.values()), f"no image for this tree: run `make images BASE=local` first ({found})"
    return found


@pytest.fixture
def bucket(s3_server, monkeypatch):
    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    name = f"b-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return name


def bertology(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "bertology.cli", *args], check=False, cwd=REPO,
                          env=env or dict(os.environ), capture_output=True, text=True, timeout=timeout)


def test_podman_honours_the_per_dockerfile_ignore_file(built, tmp_path):
    """BuildKit reads images/<x>/Dockerfile.dockerignore instead of the root .dockerignore; podman 4.3's
    buildah does too. A probe Dockerfile beside a copy of the CPU image's ignore file lists the context it got:
    exactly what bertology.images hashes for the tag (no __pycache__, no tests, no .venv)."""
    (tmp_path / "Dockerfile").write_text(f"FROM {built['cpu']}\nUSER 0\nCOPY . /ctx\n"
                                         "RUN cd /ctx && find . -type f | sort > /files.txt\n")
    shutil.copy(REPO / "images/cpu/Dockerfile.dockerignore", tmp_path / "Dockerfile.dockerignore")
    tag = f"localhost/bertology-ignore-probe:{uuid.uuid4().hex[:8]}"
    subprocess.run([*images.engine_command("podman"), "build", "-q", *images.ulimits(), "-f",
                    str(tmp_path / "Dockerfile"), "-t", tag, "."], cwd=REPO, check=True, capture_output=True)
    try:
        listed = subprocess.run([*images.engine_command("podman"), "run", "--rm", *images.ulimits(), "--entrypoint",
                                 "cat", tag, "/files.txt"], check=True, capture_output=True, text=True).stdout
    finally:
        subprocess.run([*images.engine_command("podman"), "rmi", "-f", tag], check=False, capture_output=True)
    seen = sorted(line.removeprefix("./") for line in listed.split())
    assert seen == images.context_files(REPO, "cpu")
    assert "jobs/plan.py" in seen and not [f for f in seen if f.startswith(("tests/", ".venv/")) or "__pycache__" in f]


def test_an_unchanged_tree_rebuilds_nothing(built):
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "bertology.images", "build", "--base", "local", "--engine", "podman"],
                          cwd=REPO, check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    refs = dict(line.split(": ") for line in lines[-2:])
    assert [images.image_id("podman", refs[f"bertology-{key}"]) for key in ("cpu", "train")] == \
        [images.image_id("podman", built[key]) for key in ("cpu", "train")]
    assert [line.split(": ", 1)[1].split(" (")[0] for line in lines[:-2]] == ["up to date", "up to date"]
    assert time.monotonic() - started < 60


def test_the_tiny_study_in_podman_equals_the_in_process_run(built, s3_server, monkeypatch):
    """reversed-layers, preset tiny, seeds as the preset sets them: every pod in its image (plan, prepare-data,
    build-checkpoint, finetune, evaluate, analyze, aggregate) against S3 on loopback, then the same study in
    process. Both stores start with the same pre-trained tiny BERT (as every test's store does: conftest.py),
    and the in-process steps use torch's default threads, as the containers do (no OMP_NUM_THREADS in a pod):
    same wheels, same CPU, same thread count, so the runs table is equal bit for bit, timings aside.
    The README's two commands: the images as `make images BASE=local` builds them (the `built` fixture), and
    `bertology run workflows/reversed-layers.yaml -p preset=tiny --engine podman --store s3://BUCKET/PREFIX`
    with a fresh bucket on moto for s3://BUCKET/PREFIX."""
    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("OMP_NUM_THREADS", None)
    s3 = boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"])
    stores = {}
    for engine in ("podman", "local"):
        name = f"b-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=name)
        stores[engine] = f"s3://{name}/store"
        tiny_pretrain.ensure(open_store(stores[engine]))
    runs = {}
    for engine, store in stores.items():
        started = time.monotonic()
        done = bertology("run", "workflows/reversed-layers.yaml", "-p", "preset=tiny", "--store", store,
                         "--engine", engine, env=env, timeout=3600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        print(f"{engine}: {time.monotonic() - started:.1f} s")
        runs[engine] = (scan(store, "runs", study="reversed-layers").collect()
                        .drop(TIMING).sort("variant", "task", "seed", "metric"))
    assert runs["podman"].height == runs["local"].height > 0
    assert set(runs["podman"]["variant"]) == {"pre-trained", "reversed", "clean"}
    assert runs["podman"]["device"].unique().to_list() == ["cpu"]
    assert runs["podman"].equals(runs["local"]), pl.concat(
        [runs["podman"].with_columns(pl.lit("podman").alias("engine")),
         runs["local"].with_columns(pl.lit("local").alias("engine"))]).sort("run_id", "metric")


def _workflow(tmp_path: Path, templates: list[dict], tasks: list[dict]) -> Path:
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "pod-checks"},
           "spec": {"entrypoint": "main", "templates": [{"name": "main", "dag": {"failFast": False, "tasks": tasks}},
                                                        *templates]}}
    path = tmp_path / "pod-checks.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _like(step: str, name: str, script: str, **changes) -> dict:
    """The step library's `step` template (image, securityContext, volumes, resources, retryStrategy, env),
    running `python -c script` instead."""
    template = json.loads(json.dumps(STEPS[step]))
    template.pop("inputs", None)
    template.pop("outputs", None)
    # the step's deadline is its `deadline` input (set by plan); these pods have no inputs, so a fixed one
    template["activeDeadlineSeconds"] = 600
    template["name"] = name
    template["container"].update(command=["python", "-c", script], args=[])
    for key, value in changes.items():
        if value is None:
            template.pop(key, None)
        else:
            template[key] = value
    return template


def _run(path: Path, store: str, tmp_path: Path):
    engine = for_workflow("podman", path, {}, TEMPLATES, REPO, store)
    lines: list[str] = []
    result = run_workflow(path, params={}, templates_dir=TEMPLATES, workdir=tmp_path / "work", project_root=REPO,
                          parallelism=2, log=lines.append, max_backoff_s=0.1, engine=engine)
    return result, lines


INSIDE = r"""
import errno, json, os
writes = {}
for path in ["/app/x", "/opt/venv/x", "/etc/x", "/var/tmp/x", "/run/x", "/x", "/tmp/x", "/dev/shm/x"]:
    try:
        open(path, "w").write("x")
        writes[path] = "ok"
    except OSError as e:
        writes[path] = errno.errorcode[e.errno]
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
shm = os.statvfs("/dev/shm")
limit = next(open(p).read().strip() for p in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
             if os.path.exists(p))
print("INSIDE " + json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
      "writes": writes, "cap_eff": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
      "shm": shm.f_blocks * shm.f_frsize, "memory_limit": int(limit), "home": os.environ["HOME"],
      "tmp_mode": oct(os.stat("/tmp").st_mode & 0o7777), "aws_key": os.environ.get("AWS_ACCESS_KEY_ID")}))
"""


def test_a_pod_runs_as_its_template_says(built, bucket, tmp_path):
    """aggregate's settings, seen from inside: uid/gid 10001, fsGroup 10001 as a group, nothing writable but
    /tmp (the emptyDir, mode 0777 with the fsGroup's setgid bit) and /dev/shm (64 MiB), no capabilities, no new
    privileges, the 8Gi memory limit, and the S3 secret from this environment."""
    path = _workflow(tmp_path, [_like("aggregate", "inside", INSIDE, retryStrategy=None)],
                     [{"name": "inside", "template": "inside"}])
    result, lines = _run(path, f"s3://{bucket}/store", tmp_path)
    assert result.succeeded, lines
    seen = json.loads(next(line for line in lines if "INSIDE " in line).split("INSIDE ", 1)[1])
    assert seen["writes"] == {"/app/x": "EROFS", "/opt/venv/x": "EROFS", "/etc/x": "EROFS", "/var/tmp/x": "EROFS",
                              "/run/x": "EROFS", "/x": "EROFS", "/tmp/x": "ok", "/dev/shm/x": "ok"}
    assert (seen["uid"], seen["gid"], seen["groups"]) == (10001, 10001, [10001])
    assert (seen["cap_eff"], seen["no_new_privs"]) == ("0000000000000000", "1")
    assert seen["shm"] == 64 * 2**20
    assert seen["memory_limit"] == 8 * 2**30  # aggregate's limits.memory: 8Gi
    assert (seen["home"], seen["tmp_mode"], seen["aws_key"]) == ("/tmp", "0o2777", "testing")


OOM = "bytearray(512 * 2**20)"
OOM_ONCE = "import os\nif os.environ['ATTEMPT'] == '0': bytearray(512 * 2**20)\nprint('attempt', os.environ['ATTEMPT'], 'done')"


def test_an_oom_kill_exits_137_and_is_retried_as_the_template_says(built, bucket, tmp_path):
    """The step library's retryStrategy (limit 3; exit 75, 137 or status Error): a step over its memory limit
    is killed by the kernel, exits 137, fails with Argo's message for it (operator.go inferFailedReason:
    "main: OOMKilled (exit code 137)") and is retried; one that fits on its second attempt succeeds then;
    exit 2 (bad input) is not retried. The limit is the template's resources.limits.memory (64Mi here)."""
    small = {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}

    def limited(name, script, env=None):
        template = _like("aggregate", name, script)
        template["container"]["resources"] = small
        template["container"]["env"] = [*template["container"]["env"], *(env or [])]
        return template

    path = _workflow(tmp_path, [limited("always-oom", OOM),
                                limited("oom-once", OOM_ONCE, [{"name": "ATTEMPT", "value": "{{retries}}"}]),
                                limited("bad-input", "raise SystemExit(2)")],
                     [{"name": n, "template": n} for n in ("always-oom", "oom-once", "bad-input")])
    result, lines = _run(path, f"s3://{bucket}/store", tmp_path)
    always, once, bad = (result.nodes[n] for n in ("always-oom", "oom-once", "bad-input"))
    assert (always.phase, always.exit_code, always.attempts) == ("Failed", 137, 4), lines
    # the Retry node says why it stopped (operator.go processNodeRetries); each attempt, why it failed
    assert always.message == "No more retries left"
    assert all(t.message.startswith("main: OOMKilled (exit code 137)") for t in always.tries), always.tries
    assert (once.phase, once.exit_code, once.attempts) == ("Succeeded", 0, 2), lines
    assert any("attempt 1 done" in line for line in lines)
    assert (bad.phase, bad.exit_code, bad.attempts) == ("Failed", 2, 1)


def test_an_empty_dir_over_its_size_limit_is_evicted(built, bucket, tmp_path):
    """pkg/kubelet/eviction: an emptyDir past its sizeLimit evicts the pod ("Usage of EmptyDir volume ...");
    the killed container's exit code is 137, which the template's retryStrategy retries."""
    fill = "import time\nopen('/tmp/big', 'wb').write(b'x' * 32 * 2**20)\ntime.sleep(30)"
    template = _like("aggregate", "fill-tmp", fill, volumes=[{"name": "tmp", "emptyDir": {"sizeLimit": "8Mi"}}],
                     retryStrategy={"limit": "1", "retryPolicy": "Always",
                                    "expression": "asInt(lastRetry.exitCode) == 137"})
    path = _workflow(tmp_path, [template], [{"name": "fill-tmp", "template": "fill-tmp"}])
    started = time.monotonic()
    result, lines = _run(path, f"s3://{bucket}/store", tmp_path)
    node = result.nodes["fill-tmp"]
    assert (node.phase, node.exit_code, node.attempts) == ("Failed", 137, 2), lines
    assert node.message == "No more retries left"  # the Retry node's (operator.go processNodeRetries)
    assert all(t.message.startswith('Usage of EmptyDir volume "tmp" exceeds the limit "8Mi". ') for t in node.tries)
    assert time.monotonic() - started < 40  # evicted, not left to sleep out its 30 s twice


def test_bad_input_is_one_line_before_anything_runs(built, bucket, tmp_path, s3_server):
    """A file:// store; a tree whose images were never built; S3 credentials the containers cannot see."""
    env = {**os.environ, **s3_server, "HF_HUB_OFFLINE": "1"}
    study = ("run", "workflows/reversed-layers.yaml", "-p", "preset=tiny", "--engine", "podman")
    local = bertology(*study, "--store", str(tmp_path / "store"), env=env)
    assert local.returncode == 2
    assert local.stderr.strip().splitlines() == [
        (f"error: store 'file://{tmp_path / 'store'}' cannot be reached from the containers: a pod on a cluster "
        "cannot see this machine's files; use an S3 store (--store s3://BUCKET/PREFIX, e.g. MinIO or moto on "
        "loopback with AWS_ENDPOINT_URL), or --engine local")]

    # S3 credentials in a credentials file: this machine reaches the store, a pod (env only) does not
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    hidden = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    unseen = bertology(*study, "--store", f"s3://{bucket}/store", env={**hidden, "AWS_SHARED_CREDENTIALS_FILE": str(creds)})
    assert unseen.returncode == 2, unseen.stderr
    [line] = unseen.stderr.strip().splitlines()
    assert line.startswith(f"error: store s3://{bucket}/store cannot be reached from a container ({built['cpu']}, "
                           f"host network, variables AWS_ENDPOINT_URL passed on): ")

    # a copy of the tree with one change: its images were never built
    for part in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / part, tmp_path / part)
    for part in ("src", "jobs", "images", "workflows"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (tmp_path / "jobs/plan.py").write_text((tmp_path / "jobs/plan.py").read_text() + "# changed\n")
    stale = bertology("run", str(tmp_path / "workflows/reversed-layers.yaml"), "-p", "preset=tiny", "--engine",
                      "podman", "--store", f"s3://{bucket}/store", env=env)
    assert stale.returncode == 2
    assert stale.stderr.strip().splitlines() == [
        (f"error: no bertology-cpu image for this tree (hash {images.tree_hash(tmp_path, 'cpu')}) in podman: run "
        "`make images` (or `make images BASE=local`) first")]
    assert not open_store(f"s3://{bucket}/store").list("studies")
