"""The container engine's translation of a pod template into `podman run`, the image tags, and the bad input
refused before anything runs. No engine is needed here: tests/images/ runs the containers (make test-images)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bertology import images
from bertology.argo.engines import ContainerEngine, image_key, quantity
from bertology.errors import BadInput

REPO = Path(__file__).resolve().parent.parent
STEPS = {t["name"]: t for t in yaml.safe_load((REPO / "workflows/templates/steps.yaml").read_text())["spec"]["templates"]}


# Kubernetes' resource units (kubernetes.io/docs/concepts/configuration/manage-resources-containers, "Memory
# resource units": 128974848, 129e6, 129M, 128974848000m and 123Mi are roughly the same value), parsed as
# apimachinery's resource.Quantity parses them.
@pytest.mark.parametrize(("text", "value"), [("128974848", 128974848), ("129e6", 129e6), ("129M", 129e6),
                                             ("128974848000m", 128974848), ("123Mi", 123 * 2**20),
                                             ("8Gi", 8 * 2**30), ("500m", 0.5), ("1.5", 1.5)])
def test_resource_quantities_parse_as_kubernetes_parses_them(text, value):
    assert quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["8 GB", "8gi", "-1", "", "Gi"])
def test_a_bad_quantity_is_bad_input(text):
    with pytest.raises(BadInput, match="is not a Kubernetes quantity"):
        quantity(text)


def test_image_references_map_by_name_as_the_chart_maps_them():
    """charts/bertology/templates/_helpers.tpl: trimPrefix "bertology-" (regexReplaceAll "[:@].*$" (base .image) "")."""
    assert image_key("ghcr.io/bertology/bertology-cpu:0.1.0") == "cpu"
    assert image_key("registry.example/team/bertology-train@sha256:" + "0" * 64) == "train"
    assert image_key("bertology-train") == "train"
    assert image_key("python:3.12") == "python"


def test_the_finetune_pod_becomes_exactly_this_podman_run(tmp_path, monkeypatch):
    """Every setting of workflows/templates/steps.yaml's finetune template, as the flags that carry it."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    engine = ContainerEngine("podman", REPO, "reversed-layers")
    engine.images["train"] = "localhost/bertology-train:abc"
    template = STEPS["finetune"]
    container = {**template["container"], "args": ["--store", "s3://b/p", "--plan", "P:1", "--ids", "a,b"]}
    command = engine.run_command(template, container, "pod-1", {"/tmp": tmp_path})
    start = command.index("run")
    assert command[start:] == [
        "run", "--name", "pod-1", "--label", "io.bertology.workflow=reversed-layers",
        "--label", f"io.bertology.run={engine.run_id}", "--network", "host",
        "--shm-size", "64m", *images.ulimits(), "--user", "10001:10001", "--group-add", "10001",
        "--read-only", "--read-only-tmpfs=false", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--memory", str(32 * 2**30), "--memory-swap", str(32 * 2**30), "-v", f"{tmp_path}:/tmp",
        "-e", "AWS_ACCESS_KEY_ID",  # from this environment, by name: the key never enters the command line
        "-e", "BERTOLOGY_TERMINATION_LOG=/dev/termination-log",  # a plain value, as the template sets it
        "--entrypoint", "python", "localhost/bertology-train:abc",
        "-m", "jobs.finetune", "--store", "s3://b/p", "--plan", "P:1", "--ids", "a,b"]
    assert "key" not in command


def test_every_step_template_is_runnable_by_the_engine():
    """The step library passes the engine's checks (images aside): emptyDir volumes, limits, security."""
    engine = ContainerEngine("podman", REPO, "x")
    engine.images = {"cpu": "c", "train": "t"}
    engine.check(list(STEPS.values()))


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t["volumes"].__setitem__(0, {"name": "tmp", "hostPath": {"path": "/data"}}),
     "volume 'tmp' is hostPath; --engine local aside, only emptyDir volumes are emulated"),
    (lambda t: t["volumes"].__setitem__(0, {"name": "tmp", "emptyDir": {"medium": "Memory"}}),
     "emptyDir medium 'Memory' of volume 'tmp' is not emulated"),
    (lambda t: t["container"].__setitem__("image", "python:3.12"),
     "image 'python:3.12' is not one this repository builds (allowed names: bertology-cpu, bertology-train)"),
    (lambda t: t["container"]["resources"]["limits"].__setitem__("memory", "lots"),
     "resource quantity 'lots' is not a Kubernetes quantity"),
    (lambda t: t["securityContext"].__setitem__("runAsUser", 0),
     "runAsNonRoot with runAsUser 0 (the kubelet refuses to start it)"),
])
def test_what_the_engine_cannot_run_is_refused_by_name(change, message):
    template = yaml.safe_load(yaml.safe_dump(STEPS["aggregate"]))
    change(template)
    engine = ContainerEngine("podman", REPO, "x")
    engine.images = {"cpu": "c", "train": "t"}
    with pytest.raises(BadInput, match=message.replace("(", r"\(").replace(")", r"\)")):
        engine.check([template])


def test_a_file_store_is_refused_in_one_line():
    engine = ContainerEngine("podman", REPO, "x")
    with pytest.raises(BadInput) as caught:
        engine.probe_store("file:///home/me/.bertology", {})
    assert str(caught.value) == (
        "store 'file:///home/me/.bertology' cannot be reached from the containers: a pod on a cluster cannot see "
        "this machine's files; use an S3 store (--store s3://BUCKET/PREFIX, e.g. MinIO or moto on loopback with "
        "AWS_ENDPOINT_URL), or --engine local")


def test_no_engine_installed_is_one_line_with_how_to_install(tmp_path):
    """`bertology run --engine podman` where neither is on PATH: exit 2, one line, before anything runs."""
    done = subprocess.run([sys.executable, "-m", "bertology.cli", "run", "workflows/reversed-layers.yaml",
                           "-p", "preset=tiny", "--store", str(tmp_path / "store"), "--engine", "podman"],
                          check=False, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PATH": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        ("error: 'podman' is not installed: install one: apt-get install -y podman runc (Debian/Ubuntu), or "
        "Docker with its daemon running")]
    assert not (tmp_path / "store" / "studies").exists()


def test_an_unknown_engine_is_refused_by_the_flag():
    done = subprocess.run([sys.executable, "-m", "bertology.cli", "run", "workflows/reversed-layers.yaml",
                           "--engine", "kubernetes"], check=False, cwd=REPO, capture_output=True,
                          text=True)
    assert done.returncode == 2
    assert "invalid choice: 'kubernetes' (choose from 'local', 'podman', 'docker')" in done.stderr


def _copy_tree(dest: Path) -> Path:
    for part in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / part, dest / part)
    for part in ("src", "jobs", "images", "workflows"):
        shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest


def test_the_tag_follows_what_goes_into_the_image_and_nothing_else(tmp_path):
    tree = _copy_tree(tmp_path)
    first = {image: images.tree_hash(tree, image) for image in images.IMAGES}
    assert first == {image: images.tree_hash(REPO, image) for image in images.IMAGES}  # no caches counted
    (tree / "src/bertology/__pycache__").mkdir(exist_ok=True)
    (tree / "src/bertology/__pycache__/x.pyc").write_bytes(b"cache")  # excluded by the ignore file
    (tree / "docs").mkdir()
    (tree / "docs/notes.md").write_text("not in the context")
    assert {image: images.tree_hash(tree, image) for image in images.IMAGES} == first
    (tree / "jobs/plan.py").write_text((tree / "jobs/plan.py").read_text() + "\n")
    changed = {image: images.tree_hash(tree, image) for image in images.IMAGES}
    assert all(changed[image] != first[image] for image in images.IMAGES)
    assert "jobs/plan.py" in images.context_files(tree, "cpu")
    assert not [f for f in images.context_files(tree, "cpu") if "__pycache__" in f or f.startswith("docs/")]
