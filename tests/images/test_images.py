"""The images, built here (`make test-images` builds them first with BASE=local), and pods run in them with
podman exactly as their templates say: a whole tiny study against S3 on loopback, equal to the in-process
runner's; the pod's security settings, checked from inside; an OOM kill, exit 137, and an emptyDir over its
sizeLimit, evicted, each not retried, as the template's retryStrategy says; the bad input refused before
anything runs; and a SIGKILLed runner's containers removed with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
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
        reports = [key for key in open_store(store).list("studies/reversed-layers/") if key.endswith("/report.md")]
        opening = open_store(store).read_bytes(reports[0]).decode().splitlines()[0]
        assert len(reports) == 1 and "Layer reversal" in opening, opening  # the title, from the workflow's header
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
TRANSIENT_ONCE = "import os, sys\nif os.environ['ATTEMPT'] == '0': sys.exit(75)\nprint('attempt', os.environ['ATTEMPT'], 'done')"


def test_an_oom_kill_exits_137_and_is_not_retried_as_the_template_says(built, bucket, tmp_path):
    """The step library's retryStrategy (limit 3; exit 75, 137 or status Error, but not an OOM kill): a step
    over its memory limit is killed by the kernel, exits 137 and fails with Argo's message for it (operator.go
    inferFailedReason: "main: OOMKilled (exit code 137)"), which the expression does not retry: it would run
    out again; a transient failure (75) is retried and succeeds on its second attempt; exit 2 (bad input) is
    not retried. The limit is the template's resources.limits.memory (64Mi here)."""
    small = {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}

    def limited(name, script, env=None):
        template = _like("aggregate", name, script)
        template["container"]["resources"] = small
        template["container"]["env"] = [*template["container"]["env"], *(env or [])]
        return template

    path = _workflow(tmp_path, [limited("always-oom", OOM),
                                limited("transient-once", TRANSIENT_ONCE, [{"name": "ATTEMPT", "value": "{{retries}}"}]),
                                limited("bad-input", "raise SystemExit(2)")],
                     [{"name": n, "template": n} for n in ("always-oom", "transient-once", "bad-input")])
    checkout = set(REPO.iterdir())
    result, lines = _run(path, f"s3://{bucket}/store", tmp_path)
    # what the engine leaves in its working directory (conmon's `oom` file) stays in the pod's, which goes
    assert set(REPO.iterdir()) == checkout
    always, once, bad = (result.nodes[n] for n in ("always-oom", "transient-once", "bad-input"))
    assert (always.phase, always.exit_code, always.attempts) == ("Failed", 137, 1), lines
    # the Retry node says why it stopped (operator.go processNodeRetries); its attempt, why it failed
    assert always.message == "retryStrategy.expression evaluated to false"
    assert always.tries[0].message.startswith("main: OOMKilled (exit code 137)"), always.tries
    assert (once.phase, once.exit_code, once.attempts) == ("Succeeded", 0, 2), lines
    assert any("attempt 1 done" in line for line in lines)
    assert (bad.phase, bad.exit_code, bad.attempts) == ("Failed", 2, 1)


def test_an_empty_dir_over_its_size_limit_is_evicted(built, bucket, tmp_path):
    """pkg/kubelet/eviction: an emptyDir past its sizeLimit evicts the pod ("Usage of EmptyDir volume ...");
    the killed container's exit code is 137, and the template's retryStrategy does not retry it: it would fill
    /tmp again."""
    fill = "import time\nopen('/tmp/big', 'wb').write(b'x' * 32 * 2**20)\ntime.sleep(30)"
    template = _like("aggregate", "fill-tmp", fill, volumes=[{"name": "tmp", "emptyDir": {"sizeLimit": "8Mi"}}])
    path = _workflow(tmp_path, [template], [{"name": "fill-tmp", "template": "fill-tmp"}])
    started = time.monotonic()
    result, lines = _run(path, f"s3://{bucket}/store", tmp_path)
    node = result.nodes["fill-tmp"]
    assert (node.phase, node.exit_code, node.attempts) == ("Failed", 137, 1), lines
    assert node.message == "retryStrategy.expression evaluated to false"  # the Retry node's (processNodeRetries)
    assert node.tries[0].message.startswith('Usage of EmptyDir volume "tmp" exceeds the limit "8Mi". ')
    assert time.monotonic() - started < 40  # evicted, not left to sleep out its 30 s


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


WORKING = r"""
import sys, time, uuid
from bertology.store import open_store
store, attempt = open_store(sys.argv[1]), uuid.uuid4().hex
if not store.exists("work/started"):  # the first attempt publishes that it started, then works long
    store.write_bytes("work/started", attempt.encode())
    print("working", flush=True)
    time.sleep(600)
store.write_bytes("work/result", b"42")  # a rerun resumes from what was published: done at once
store.write_bytes(f"work/finished/{attempt}", b"")
"""


def _containers(label: str) -> list[dict]:
    listed = subprocess.run([*images.engine_command("podman"), "ps", "--all", "--format", "json", "--filter",
                             f"label={label}"], check=True, capture_output=True, text=True).stdout
    return json.loads(listed or "[]")


def test_a_killed_runner_takes_its_containers_along(built, bucket, tmp_path):
    """`bertology run --engine podman` SIGKILLed while its pod works (one process killed, as an OOM killer
    picks one): the engine's client dies with the runner, but the container would live on without it; the
    reaper removes every container with the run's label within seconds. A concurrent run of the same
    workflow (another run label) keeps working, and then stops on SIGINT with its container removed before
    it exits (130). The killed run's rerun resumes from what its step published and succeeds; afterwards no
    container of the workflow is left, and the store holds one finished attempt: the rerun's."""
    began = time.monotonic()
    workflow = f"working-{uuid.uuid4().hex[:8]}"  # the file's name is the containers' workflow label
    template = _like("aggregate", "work", WORKING, retryStrategy=None)
    template["container"]["args"] = ["{{workflow.parameters.store}}"]
    path = tmp_path / f"{workflow}.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": workflow},
        "spec": {"entrypoint": "main", "arguments": {"parameters": [{"name": "store"}]},
                 "templates": [{"name": "main", "dag": {"failFast": False,
                                                        "tasks": [{"name": "work", "template": "work"}]}},
                               template]}}, sort_keys=False))
    stores = {run: f"s3://{bucket}/{run}" for run in ("killed", "other")}

    def start(run: str, log: str) -> subprocess.Popen:
        with (tmp_path / log).open("w") as out:
            return subprocess.Popen([sys.executable, "-m", "bertology.cli", "run", str(path), "--templates",
                                     str(TEMPLATES), "--engine", "podman", "--store", stores[run]],
                                    cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True)

    def output(log: str) -> str:
        return (tmp_path / log).read_text()[-3000:]

    runners = {run: start(run, f"{run}.log") for run in stores}
    try:
        while not all(open_store(uri).exists("work/started") for uri in stores.values()):
            for run, runner in runners.items():
                assert runner.poll() is None, output(f"{run}.log")
            assert time.monotonic() - began < 180, {run: output(f"{run}.log") for run in stores}
            time.sleep(0.2)
        pods = {run: next(c for c in _containers(f"io.bertology.workflow={workflow}") if uri in c["Command"])
                for run, uri in stores.items()}
        labels = {run: f"io.bertology.run={pod['Labels']['io.bertology.run']}" for run, pod in pods.items()}
        assert labels["killed"] != labels["other"] and {p["State"] for p in pods.values()} == {"running"}

        os.kill(runners["killed"].pid, signal.SIGKILL)
        killed_at = time.monotonic()
        assert runners["killed"].wait(timeout=10) == -signal.SIGKILL
        while _containers(labels["killed"]):
            assert time.monotonic() - killed_at < 10, _containers(labels["killed"])
            time.sleep(0.1)
        print(f"the killed run's container removed {time.monotonic() - killed_at:.1f} s after the kill")
        [other] = _containers(labels["other"])
        assert other["State"] == "running"  # another run's container: untouched

        runners["rerun"] = start("killed", "rerun.log")  # while the other run stops
        os.kill(runners["other"].pid, signal.SIGINT)
        assert runners["other"].wait(timeout=60) == 130, output("other.log")
        assert "stopped by SIGINT; every step stopped" in output("other.log")
        assert _containers(labels["other"]) == []

        assert runners["rerun"].wait(timeout=300) == 0, output("rerun.log")
        assert "workflow " + path.name + ": Succeeded" in output("rerun.log")
    finally:
        for runner in runners.values():
            if runner.poll() is None:
                runner.kill()
        leftover = _containers(f"io.bertology.workflow={workflow}")
        if leftover:
            subprocess.run([*images.engine_command("podman"), "rm", "--force", "--time", "0",
                            *[c["Id"] for c in leftover]], check=False, capture_output=True)
    assert leftover == []  # the normal run removed its container too
    store = open_store(stores["killed"])
    first = store.read_bytes("work/started").decode()
    finished = [key.removeprefix("work/finished/") for key in store.list("work/finished")]
    assert store.read_bytes("work/result") == b"42"
    assert len(finished) == 1 and finished != [first]  # the rerun's attempt; the killed one never finished
    assert not open_store(stores["other"]).exists("work/result")
    print(f"{time.monotonic() - began:.1f} s in all")
