"""`make push` against a real registry on loopback: Debian's `docker-registry` (the distribution server most
registries run), plain HTTP on 127.0.0.1, a fresh store per test. What the registry then serves is checked
through its own API (the catalog, each repository's tags, the manifest digest of a HEAD), the printed helm
values are rendered by the real helm binary, and each image is pulled back by the digest printed for it. Bad
input is refused in one line before anything is built, and so is a public base no registry serves here.
The images are the ones `make test-images` built (BASE=local ENGINE=podman), as in test_images.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from bertology import images

REPO = Path(__file__).resolve().parents[2]
HELM = shutil.which("helm", path=str(Path(sys.executable).parent)) or shutil.which("helm")
APP_VERSION = yaml.safe_load((REPO / "charts/bertology/Chart.yaml").read_text())["appVersion"]
# Every manifest type a pull accepts: the registry answers a HEAD with the digest of the manifest it stores
# only when its media type is accepted (podman pushes OCI manifests, docker Docker v2 ones).
ACCEPT = ("application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, "
          "application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json")
# what the build variables of `make test-images` give; the push must find those images up to date
BUILT_AS = ("BASE=local", "ENGINE=podman")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(url: str, method: str = "GET", accept: str | None = None):
    request = urllib.request.Request(url, method=method, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers, response.read()


@pytest.fixture
def registry(tmp_path):
    """docker-registry serving plain HTTP on a free loopback port, its store under tmp_path: HOST:PORT."""
    assert shutil.which("docker-registry"), "docker-registry is not installed (make test-images installs it)"
    port = _free_port()
    config = tmp_path / "registry.yml"
    config.write_text(yaml.safe_dump({"version": 0.1, "log": {"level": "warn"},
                                      "storage": {"filesystem": {"rootdirectory": str(tmp_path / "blobs")}},
                                      "http": {"addr": f"127.0.0.1:{port}"}}))
    log = (tmp_path / "registry.log").open("w")
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()
        while True:
            try:
                _http(f"http://127.0.0.1:{port}/v2/")
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "registry.log").read_text()
                assert time.monotonic() - started < 30, "the registry did not answer within 30 s"
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def make(*args: str, timeout: int = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    kept = {k: v for k, v in os.environ.items() if k not in ("REGISTRY", "IMAGE_TAG", "TLS_VERIFY", "MAKEFLAGS")}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=REPO, env={**kept, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)


def said(stderr: str) -> list[str]:
    """stderr less make's own line about the failed recipe."""
    return [line for line in stderr.splitlines() if line.strip() and not re.match(r"make(\[\d+\])?: \*\*\* ", line)]


ALLOWED = ("HOST[:PORT][/PATH], the registry your cluster pulls from, without a scheme: a host with a dot or a port, "
           "or localhost, then lowercase letters, digits and . _ - between slashes, e.g. registry.example.com/ml")


@pytest.mark.parametrize("variables, line", [
    ([], f"error: REGISTRY is missing: make push REGISTRY=... (allowed: {ALLOWED})"),
    (["REGISTRY="], f"error: REGISTRY is missing: make push REGISTRY=... (allowed: {ALLOWED})"),
    (["REGISTRY=https://registry.example.com/ml"],
     f"error: REGISTRY='https://registry.example.com/ml' is not allowed (allowed: {ALLOWED})"),
    (["REGISTRY=ml/bertology"], f"error: REGISTRY='ml/bertology' is not allowed (allowed: {ALLOWED})"),
    (["REGISTRY=registry.example.com/ML"], f"error: REGISTRY='registry.example.com/ML' is not allowed (allowed: {ALLOWED})"),
    (["REGISTRY=ghcr.io/bertology"], ("error: REGISTRY='ghcr.io/bertology' is the chart's placeholder, where no "
                                      f"bertology image is published (allowed: another registry, {ALLOWED})")),
    (["REGISTRY=127.0.0.1:5000/bertology", "TLS_VERIFY=no"],
     "error: TLS_VERIFY='no' is not allowed (allowed: true, false)"),
    (["REGISTRY=127.0.0.1:5000/bertology", "IMAGE_TAG=-1"],
     "error: IMAGE_TAG='-1' is not allowed (allowed: letters, digits, _ . -, at most 128, not starting with . or -)"),
])
def test_bad_input_is_one_line_before_anything_is_built(variables, line):
    started = time.monotonic()
    done = make("push", *variables, *BUILT_AS, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said(done.stderr) == [line]
    assert "localhost/bertology-" not in done.stdout  # no image looked at: build() names each it checks
    assert time.monotonic() - started < 60


def test_a_public_base_that_cannot_be_pulled_is_one_line_before_anything_is_built(tmp_path):
    """`make push` with the default BASE=public where no registry can be reached (here every HTTP(S) request
    goes to a proxy that refuses it, as offline): one line naming the base and BASE=local, exit 1, before
    any image is built, instead of the build's failure and its long command line."""
    if images.image_id("podman", images.PUBLIC_BASE):
        pytest.skip(f"{images.PUBLIC_BASE} is already here: nothing needs pulling")
    refused = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback there
    offline = {name: refused for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")}
    started = time.monotonic()
    done = make("push", "REGISTRY=127.0.0.1:5000/bertology", "TLS_VERIFY=false", "ENGINE=podman", timeout=300,
                env={**offline, "NO_PROXY": "", "no_proxy": ""})
    assert done.returncode == 2, done.stdout + done.stderr  # make's own status for a failed recipe
    [line] = said(done.stderr)
    assert line.startswith(f"error: the base image {images.PUBLIC_BASE} cannot be pulled (podman pull exit "), line
    assert line.endswith("); use BASE=local, a Debian base made here with mmdebstrap (podman; no registry but "
                         "Debian's)"), line
    assert "connection refused" in line  # podman's own reason, its last line
    assert f"pulling the base {images.PUBLIC_BASE}" in done.stdout
    assert ": building (" not in done.stdout and "STEP 1" not in done.stdout + done.stderr
    assert time.monotonic() - started < 120


def test_make_push_publishes_both_images_and_prints_the_values_that_pull_them(registry):
    """The README's `make push REGISTRY=registry.example.com/ml`, with a registry on loopback in place of
    registry.example.com/ml (TLS_VERIFY=false: it serves plain HTTP) and the build variables the images were
    built with, so nothing is rebuilt. The registry then lists both repositories with the chart's appVersion as
    their tag; the digest printed for each is the one the registry serves for that tag (Docker-Content-Digest
    of a HEAD), names a manifest whose bytes hash to it and whose config is the image built here; and the helm
    values printed, given to `helm template` as they stand, make every step pod pull REGISTRY/NAME@DIGEST. Each
    image then pulls back by that reference, as a node does (`podman pull REGISTRY/NAME@DIGEST`: podman checks the
    manifest it gets against the digest), and is the image built here (its layers are already here: no copy)."""
    assert HELM, "helm is not installed (make test-images puts it in .venv/bin)"
    built = {key: images.find_image("podman", name, images.tree_hash(REPO, key)) for key, name in images.IMAGES.items()}
    assert all(built.values()), f"no image for this tree: run `make images BASE=local` first ({built})"
    target = f"{registry}/bertology"
    printed: dict[str, str] = {}
    started = time.monotonic()
    done = make("push", f"REGISTRY={target}", "TLS_VERIFY=false", *BUILT_AS)
    took = time.monotonic() - started
    try:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        print(f"make push: {took:.1f} s")
        checked = re.findall(r"^localhost/(bertology-\w+):\w+: (up to date|building)", done.stdout, re.MULTILINE)
        assert sorted(checked) == [("bertology-cpu", "up to date"), ("bertology-train", "up to date")], done.stdout
        printed = dict(re.findall(rf"^{re.escape(target)}/(bertology-\w+):{re.escape(APP_VERSION)}: pushed in \d+ s, "
                                  r"digest (sha256:[a-f0-9]{64})$", done.stdout, re.MULTILINE))
        assert printed.keys() == set(images.IMAGES.values()), done.stdout

        base = f"http://{registry}/v2"
        _, catalog = _http(f"{base}/_catalog")
        assert json.loads(catalog) == {"repositories": ["bertology/bertology-cpu", "bertology/bertology-train"]}
        for key, name in images.IMAGES.items():
            _, tags = _http(f"{base}/bertology/{name}/tags/list")
            assert json.loads(tags) == {"name": f"bertology/{name}", "tags": [APP_VERSION]}
            headers, _ = _http(f"{base}/bertology/{name}/manifests/{APP_VERSION}", "HEAD", ACCEPT)
            assert headers["Docker-Content-Digest"] == printed[name]
            headers, body = _http(f"{base}/bertology/{name}/manifests/{printed[name]}", accept=ACCEPT)
            assert "sha256:" + hashlib.sha256(body).hexdigest() == printed[name]
            assert json.loads(body)["config"]["digest"] == "sha256:" + images.image_id("podman", built[key])

        values = [line.strip().removesuffix("\\").split() for line in done.stdout.splitlines()
                  if line.startswith("  --set images.")]
        assert all(len(v) == 2 and v[0] == "--set" for v in values), values
        assert {v[1].split("=", 1)[0] for v in values} == {f"images.{k}.{f}" for k in images.IMAGES
                                                          for f in ("repository", "digest")}
        rendered = subprocess.run([HELM, "template", "bertology", "charts/bertology", *[a for v in values for a in v]],
                                  cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert rendered.returncode == 0, rendered.stderr
        pulled = {t["container"]["image"] for d in yaml.safe_load_all(rendered.stdout)
                  if d and d["kind"] == "WorkflowTemplate" for t in d["spec"]["templates"] if "container" in t}
        assert pulled == {f"{target}/{name}@{printed[name]}" for name in images.IMAGES.values()}

        for key, name in images.IMAGES.items():
            by_digest = f"{target}/{name}@{printed[name]}"
            started = time.monotonic()
            pull = subprocess.run([*images.engine_command("podman"), "pull", "--quiet", "--tls-verify=false",
                                   by_digest], capture_output=True, text=True, timeout=600, check=False)
            assert pull.returncode == 0, pull.stderr
            print(f"podman pull {by_digest}: {time.monotonic() - started:.1f} s")
            assert pull.stdout.strip() == images.image_id("podman", built[key])
            inspected = subprocess.run([*images.engine_command("podman"), "image", "inspect", "--format",
                                        "{{json .RepoDigests}}", by_digest], capture_output=True, text=True,
                                       check=True)
            assert by_digest in json.loads(inspected.stdout)
    finally:  # the local names the push and the pulls gave the images, and only those (untag IMAGE alone drops
        # every name)
        for name in images.IMAGES.values():
            refs = [f"{target}/{name}:{APP_VERSION}", *([f"{target}/{name}@{printed[name]}"] if name in printed else [])]
            for ref in refs:
                subprocess.run([*images.engine_command("podman"), "untag", ref, ref], check=False, capture_output=True)
