"""The container images: what goes into each, the tag that names it, and how `make images` builds them.

An image is tagged by a hash of everything that goes into it: its Dockerfile, the build context as the
engine sees it, and its build arguments (the base image, the torch source). The context is the Dockerfile's
own `Dockerfile.dockerignore` allowlist, which BuildKit and podman 4.3's buildah both honour (checked in
tests/test_images.py); it is listed here with the docker SDK's implementation of the same rules. So an
unchanged tree rebuilds nothing, and a changed one never runs stale code. Each image also carries the hash
of its Dockerfile and context alone (label `io.bertology.tree`), and the image `make images` built or
confirmed last for a tree is also tagged NAME:tree-HASH, by which `bertology run --engine podman` finds the
image built from the tree it runs, whatever base and torch it was built with (bertology.argo.engines).

`BASE=local` builds on a Debian base made here with mmdebstrap (no registry but Debian's) and takes torch
and every package from this machine's own pip settings, mounted into the build (podman only: docker's build
has no volumes).

`make push REGISTRY=HOST[:PORT][/PATH]` builds as `make images` does, tags each image REGISTRY/NAME:VERSION
(the chart's appVersion, which an empty images.NAME.tag stands for), pushes it, and prints the digest the
registry stores it under with the chart values that pull it by that digest (images.train, images.cpu).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bertology.errors import EXIT_BAD_INPUT, BadInput

IMAGES = {"cpu": "bertology-cpu", "train": "bertology-train"}  # images/<key>/Dockerfile -> image name
PREFIX = "localhost/"  # local images only: nothing is pulled or pushed under this name
TREE_LABEL = "io.bertology.tree"
IMAGE_LABEL = "io.bertology.image"
ENGINES = ("podman", "docker")
PUBLIC_BASE = "python:3.12.8-slim-bookworm"
# The local base: Debian's minimal system with Python 3.11 and the CA bundle, as one layer.
LOCAL_BASE_RECIPE = ("mmdebstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
                     "bookworm", "-")
# The chart's default repositories (values.yaml): a placeholder where nothing is published, which the chart
# refuses to render unless images.allowPlaceholder=true
PLACEHOLDER = "ghcr.io/bertology"
CHART = Path("charts/bertology/Chart.yaml")
# A registry and repository path as image references spell them (the distribution/reference grammar): a host
# (a dot, a port or localhost, so that it cannot be read as a Docker Hub path), then lowercase path components.
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REGISTRY_RE = re.compile(rf"(?P<host>{_HOST})(?P<port>:[0-9]{{1,5}})?(?:/{_PATH})*")
TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
REGISTRY_ALLOWED = ("HOST[:PORT][/PATH], the registry your cluster pulls from, without a scheme: a host with a dot "
                    "or a port, or localhost, then lowercase letters, digits and . _ - between slashes, e.g. "
                    "registry.example.com/ml")
INSTALL_HINT = "install one: apt-get install -y podman runc (Debian/Ubuntu), or Docker with its daemon running"
TORCH = "torch==2.13.0"
TORCH_SOURCES = {
    # (base, torch build) -> (TORCH, TORCH_PIP_OPTIONS), the Dockerfiles' build arguments
    ("public", "cpu"): (TORCH, "--index-url https://download.pytorch.org/whl/cpu"),
    ("public", "cuda"): (TORCH, ""),  # PyPI's Linux wheel is the CUDA build
    ("local", "cpu"): (TORCH, ""),  # this machine's pip settings (mounted): its torch CPU wheel
    # PyPI's CUDA wheel: `===` matches the version string exactly, 2.13.0 and not this machine's 2.13.0+cpu,
    # which its pip settings (/etc/pip.conf: --isolated leaves it in force) would otherwise prefer
    ("local", "cuda"): ("torch===2.13.0",
                        "--isolated --cert /etc/ssl/certs/ca-certificates.crt --index-url https://pypi.org/simple"),
}


def _sha(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()


def dockerfile(image: str) -> str:
    return f"images/{image}/Dockerfile"


def context_files(root: Path, image: str) -> list[str]:
    """The regular files of the build context the engine sees for `image`, relative to `root`."""
    from docker.utils.build import exclude_paths

    ignore = root / f"{dockerfile(image)}.dockerignore"
    patterns = [s for s in (line.strip() for line in ignore.read_text().splitlines()) if s and not s.startswith("#")]
    # docker's client sends the Dockerfile and .dockerignore whatever the patterns say: not COPYable here
    kept = set(exclude_paths(str(root), patterns, dockerfile=dockerfile(image))) - {dockerfile(image), ".dockerignore"}
    return sorted(p for p in kept if (root / p).is_file() and not (root / p).is_symlink())


def tree_hash(root: Path, image: str) -> str:
    """The hash of the Dockerfile, its ignore file and every file of its context (path, exec bit, bytes)."""
    parts: list[bytes | str] = []
    for rel in sorted({*context_files(root, image), dockerfile(image), f"{dockerfile(image)}.dockerignore"}):
        path = root / rel
        parts += [rel, str(os.access(path, os.X_OK)), path.read_bytes()]
    return _sha(*parts)[:16]


# --- engines ---------------------------------------------------------------------------------------------


def find_engine(name: str | None = None) -> str:
    """`name`, or podman or docker, whichever runs here (docker only when its daemon answers).
    BadInput when none does."""
    names = [name] if name else list(ENGINES)
    for candidate in names:
        if candidate not in ENGINES:
            raise BadInput(f"container engine '{candidate}' is not supported (allowed: {', '.join(ENGINES)})")
        if shutil.which(candidate) is None:
            continue
        if candidate == "docker":
            probe = subprocess.run(["docker", "info"], check=False, capture_output=True, text=True)
            if probe.returncode != 0:
                if name:
                    raise BadInput("container engine 'docker' does not answer (docker info failed: is its "
                                   "daemon running?); or use --engine podman")
                continue
        return candidate
    which = f"'{name}' is" if name else "no container engine (podman or docker) is"
    raise BadInput(f"{which} not installed: {INSTALL_HINT}")


def engine_command(engine: str) -> list[str]:
    """The engine with its global options: podman with runc, where installed (crun, podman's other runtime,
    fails on cgroup-v1 hosts such as the development machines)."""
    if engine == "podman" and shutil.which("runc"):
        return ["podman", "--runtime", "runc"]
    return [engine]


def ulimits() -> list[str]:
    """Limits for `run` and `build` that runc can set here: podman's default of 1048576 open files exceeds
    what an unprivileged host allows (this process's hard limit is taken instead), and on the development
    machines any process limit above 2048 is refused (1024, the usual per-user default, is taken)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = min(x for x in (soft, hard, 1 << 20) if x != resource.RLIM_INFINITY)
    return ["--ulimit", f"nofile={files}:{files}", "--ulimit", "nproc=1024:1024"]


def image_id(engine: str, ref: str) -> str | None:
    probe = subprocess.run([*engine_command(engine), "image", "inspect", "--format", "{{.Id}}", ref],
                           check=False, capture_output=True, text=True)
    return probe.stdout.strip() or None if probe.returncode == 0 else None


def current_tag(image: str, tree: str) -> str:
    """The name `make images` gives the image it last built or confirmed for a tree: a tree can have several
    (a CPU and a CUDA training image, a local and a public base), and the runner takes the one made last."""
    return f"{PREFIX}{image}:tree-{tree}"


def find_image(engine: str, image: str, tree: str) -> str | None:
    """The image `make images` last built or confirmed for `image` from a tree with hash `tree`, as NAME:TAG."""
    return current_tag(image, tree) if image_id(engine, current_tag(image, tree)) else None


# --- building --------------------------------------------------------------------------------------------


def local_base(engine: str, log=print) -> str:
    """The Debian base made with mmdebstrap and imported, once: its reference (tagged by its recipe)."""
    ref = f"{PREFIX}bertology-base:bookworm-{_sha(*LOCAL_BASE_RECIPE)[:12]}"
    if image_id(engine, ref):
        return ref
    if shutil.which("mmdebstrap") is None:
        raise BadInput("BASE=local needs mmdebstrap: apt-get install -y mmdebstrap")
    log(f"making the local base {ref}: {' '.join(LOCAL_BASE_RECIPE)} | {engine} import - {ref}")
    with subprocess.Popen(LOCAL_BASE_RECIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as debootstrap:
        imported = subprocess.run([*engine_command(engine), "import", "-", ref], stdin=debootstrap.stdout,
                                  check=False, capture_output=True, text=True)
    if debootstrap.returncode != 0 or imported.returncode != 0:
        raise RuntimeError(f"making the local base failed (mmdebstrap exit {debootstrap.returncode}, "
                           f"import exit {imported.returncode}: {imported.stderr.strip()[-300:]})")
    return ref


def pull_base(engine: str, ref: str, log=print) -> None:
    """The public base `ref`, pulled unless the engine has it already, before any image is built on it: where
    no registry can be reached (offline, a proxy, a blocked registry), one line naming the base and BASE=local,
    rather than the build's own failure after its long command line."""
    if image_id(engine, ref):
        return
    log(f"pulling the base {ref}")
    pulled = subprocess.run([*engine_command(engine), "pull", "--quiet", ref] if engine == "podman"
                            else [engine, "pull", "--quiet", ref], check=False, capture_output=True, text=True)
    if pulled.returncode != 0:
        lines = (pulled.stderr.strip() or pulled.stdout.strip()).splitlines()
        reason = lines[-1].removeprefix("Error: ").removeprefix("Error response from daemon: ") if lines else ""
        raise RuntimeError(f"the base image {ref} cannot be pulled ({engine} pull exit {pulled.returncode}"
                           f"{': ' + reason if reason else ''}); use BASE=local, a Debian base made here with "
                           "mmdebstrap (podman; no registry but Debian's)")


def host_pip(workdir: Path) -> tuple[list[str], str]:
    """This machine's pip settings for a build: `-v` options mounting one pip.conf merged from them at
    /etc/pip.conf, and every local path they name (find-links, file:// indexes, constraints, the CA bundle)
    at the same path, read-only; and the merged text."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=True)
    settings: dict[str, str] = {}
    for line in sorted(listed.stdout.splitlines(), key=lambda s: s.startswith(":env:")):  # env wins
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] in ("disable-pip-version-check", "no-cache-dir"):
            continue
        settings[key.rsplit(".", 1)[-1]] = value.strip().strip("'\"")
    text = "[global]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(settings.items()))
    conf = workdir / "pip.conf"
    conf.write_text(text)
    paths = {Path("/etc/ssl/certs")} if Path("/etc/ssl/certs").is_dir() else set()
    for value in settings.values():
        for token in value.split():
            path = Path(token.removeprefix("file://"))
            if token.startswith("file://") and path.name == "simple":
                path = path.parent  # a file:// index's pages link to files beside it (../files/…)
            if path.is_absolute() and path.exists():
                paths.add(path)
    kept = [p for p in sorted(paths) if not any(q != p and q in p.parents for q in paths)]
    mounts = ["-v", f"{conf}:/etc/pip.conf:ro"]
    for path in kept:
        mounts += ["-v", f"{path}:{path}:ro"]
    return mounts, text


def build(root: Path, *, engine: str, base: str = "public", train_torch: str | None = None,
          registry: str = "", version: str = "", log=print) -> dict[str, str]:
    """Build both images unless an image with the same inputs exists: image -> NAME:TAG."""
    if base not in ("public", "local"):
        raise BadInput(f"BASE={base!r} is not allowed (allowed: public, local)")
    train_torch = train_torch or ("cpu" if base == "local" else "cuda")
    if train_torch not in ("cpu", "cuda"):
        raise BadInput(f"TRAIN_TORCH={train_torch!r} is not allowed (allowed: cpu, cuda)")
    if base == "local" and engine != "podman":
        raise BadInput("BASE=local mounts this machine's pip settings into the build, which only podman can "
                       "do (docker build has no volumes); use podman, or BASE=public")
    base_ref = local_base(engine, log) if base == "local" else PUBLIC_BASE
    base_id = image_id(engine, base_ref) if base == "local" else base_ref
    built, pulled = {}, False
    with tempfile.TemporaryDirectory(prefix="bertology-images-") as tmp:
        mounts, pip_conf = host_pip(Path(tmp)) if base == "local" else ([], "")
        for image, name in IMAGES.items():
            torch = "cpu" if image == "cpu" else train_torch
            requirement, options = TORCH_SOURCES[(base, torch)]
            args = {"BASE_IMAGE": base_ref, "TORCH": requirement, "TORCH_PIP_OPTIONS": options}
            tree = tree_hash(root, image)
            ref = f"{PREFIX}{name}:{_sha(tree, json.dumps(args, sort_keys=True), str(base_id), pip_conf)[:16]}"
            if image_id(engine, ref):
                log(f"{ref}: up to date (tree {tree}, torch {torch})")
            else:
                if base == "public" and not pulled:  # once, before the first build: its FROM
                    pull_base(engine, base_ref, log)
                    pulled = True
                log(f"{ref}: building (tree {tree}, base {base_ref}, torch {torch})")
                command = [*engine_command(engine), "build", "--network", "host", *ulimits(), *mounts,
                           "-f", dockerfile(image), "-t", ref, "--label", f"{TREE_LABEL}={tree}",
                           "--label", f"{IMAGE_LABEL}={name}", "--label", f"io.bertology.torch={torch}",
                           *[x for k, v in args.items() for x in ("--build-arg", f"{k}={v}")], "."]
                started = time.monotonic()
                env = {**os.environ, "DOCKER_BUILDKIT": "1"}  # docker: the Dockerfile.dockerignore allowlists
                if subprocess.run(command, check=False, cwd=root, env=env).returncode != 0:
                    raise RuntimeError(f"building {ref} failed: {' '.join(command)}")
                log(f"{ref}: built in {time.monotonic() - started:.0f} s")
            subprocess.run([*engine_command(engine), "tag", ref, current_tag(name, tree)], check=True)
            if registry and version:  # the name the chart pulls (values images.*), for a push
                subprocess.run([*engine_command(engine), "tag", ref, f"{registry}/{name}:{version}"], check=True)
            built[image] = ref
    return built


# --- pushing ---------------------------------------------------------------------------------------------


def check_registry(registry: str) -> str:
    """`registry` as `make push` takes it; BadInput (one line: the value and what is allowed) otherwise."""
    if not registry:
        raise BadInput(f"REGISTRY is missing: make push REGISTRY=... (allowed: {REGISTRY_ALLOWED})")
    match = REGISTRY_RE.fullmatch(registry)
    if match is None or not ("." in match["host"] or match["port"] or match["host"] == "localhost"):
        raise BadInput(f"REGISTRY={registry!r} is not allowed (allowed: {REGISTRY_ALLOWED})")
    if registry == PLACEHOLDER or registry.startswith(PLACEHOLDER + "/"):
        raise BadInput(f"REGISTRY={registry!r} is the chart's placeholder, where no bertology image is published "
                       f"(allowed: another registry, {REGISTRY_ALLOWED})")
    return registry


def chart_version(root: Path) -> str:
    """The chart's appVersion: the tag the chart pulls when images.NAME.tag is empty."""
    for line in (root / CHART).read_text().splitlines():
        if line.startswith("appVersion:"):
            return line.split(":", 1)[1].strip().strip("'\"")
    raise RuntimeError(f"{CHART} has no appVersion")


def push_one(engine: str, ref: str, *, tls_verify: bool) -> str:
    """Push `ref` (REGISTRY/NAME:TAG, tagged locally) to its registry: the manifest digest the registry stores
    it under (sha256:...), which the chart's images.NAME.digest pins."""
    with tempfile.TemporaryDirectory(prefix="bertology-push-") as tmp:
        digest_file = Path(tmp) / "digest"
        if engine == "podman":
            command = [*engine_command(engine), "push", "--quiet", f"--tls-verify={str(tls_verify).lower()}",
                       "--digestfile", str(digest_file), ref]
        else:  # docker: TLS is the daemon's setting (insecure-registries; loopback is insecure by default)
            command = [engine, "push", ref]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            said = " ".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-1:])
            raise RuntimeError(f"pushing {ref} failed ({engine} push exit {done.returncode}): {said}")
        if engine == "podman":
            digest = digest_file.read_text().strip()
        else:  # its last line: "TAG: digest: sha256:... size: N"
            found = re.findall(r"digest: (sha256:[a-f0-9]{64})", done.stdout)
            digest = found[-1] if found else ""
    if not re.fullmatch(r"sha256:[a-f0-9]{64}", digest):
        raise RuntimeError(f"pushing {ref}: {engine} reported no digest ({digest!r})")
    return digest


def push(root: Path, *, engine: str, registry: str, version: str, tls_verify: bool = True, base: str = "public",
         train_torch: str | None = None, log=print) -> dict[str, tuple[str, str]]:
    """Build both images as `build` does (nothing when up to date), tag each REGISTRY/NAME:VERSION and push it:
    image -> (REGISTRY/NAME, digest)."""
    if not tls_verify and engine != "podman":
        raise BadInput(f"TLS_VERIFY=false is podman's ({engine} reads insecure registries from its daemon's "
                       "settings; loopback is allowed there by default): use ENGINE=podman, or TLS_VERIFY=true")
    build(root, engine=engine, base=base, train_torch=train_torch, registry=registry, version=version, log=log)
    pushed = {}
    for image, name in IMAGES.items():
        ref = f"{registry}/{name}:{version}"
        log(f"{ref}: pushing")
        started = time.monotonic()
        digest = push_one(engine, ref, tls_verify=tls_verify)
        log(f"{ref}: pushed in {time.monotonic() - started:.0f} s, digest {digest}")
        pushed[image] = (f"{registry}/{name}", digest)
    return pushed


def helm_values(pushed: dict[str, tuple[str, str]]) -> list[str]:
    """The `helm install` arguments that make the chart pull each pushed image by its digest."""
    return [f"--set images.{image}.{key}={value}" for image, (repository, digest) in pushed.items()
            for key, value in (("repository", repository), ("digest", digest))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertology.images", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build both images (nothing when they are up to date)")
    b.add_argument("--engine", default=None, help="podman | docker (default: whichever runs here)")
    b.add_argument("--base", default="public", help="public (the Dockerfiles' bases) | local (mmdebstrap)")
    b.add_argument("--train-torch", default=None, help="cuda | cpu (default: cuda; cpu with --base local)")
    b.add_argument("--registry", default="", help="with --version, also tag each image REGISTRY/NAME:VERSION")
    b.add_argument("--version", default="", help="see --registry (the chart's appVersion)")
    p = sub.add_parser("push", help="build both images if needed, push them, print the chart values that pull "
                                    "them by digest")
    p.add_argument("--registry", default="", help="HOST[:PORT][/PATH]: each image goes to REGISTRY/NAME:VERSION")
    p.add_argument("--version", default="", help="the tag (default: the chart's appVersion)")
    p.add_argument("--engine", default=None, help="podman | docker (default: whichever runs here)")
    p.add_argument("--base", default="public", help="public (the Dockerfiles' bases) | local (mmdebstrap)")
    p.add_argument("--train-torch", default=None, help="cuda | cpu (default: cuda; cpu with --base local)")
    p.add_argument("--tls-verify", default="true", help="true | false (false: a registry without TLS; podman)")
    t = sub.add_parser("tree", help="print each image's tree hash (its label io.bertology.tree)")
    t.add_argument("--root", default=".")
    args = parser.parse_args(argv)
    root = Path.cwd()
    try:
        if args.command == "tree":
            for image, name in IMAGES.items():
                print(f"{name} {tree_hash(Path(args.root), image)}")
            return 0
        if args.command == "push":
            registry = check_registry(args.registry)
            version = args.version or chart_version(root)
            if not TAG_RE.fullmatch(version):
                raise BadInput(f"IMAGE_TAG={version!r} is not allowed (allowed: letters, digits, _ . -, at most "
                               "128, not starting with . or -)")
            if args.tls_verify not in ("true", "false"):
                raise BadInput(f"TLS_VERIFY={args.tls_verify!r} is not allowed (allowed: true, false)")
            engine = find_engine(args.engine)
            pushed = push(root, engine=engine, registry=registry, version=version,
                          tls_verify=args.tls_verify == "true", base=args.base, train_torch=args.train_torch)
            print(f"helm values that pull these images by digest (images.{' and images.'.join(IMAGES)}: "
                  "repository and digest); add them to `helm install`:")
            print(" \\\n".join(f"  {line}" for line in helm_values(pushed)))
            return 0
        engine = find_engine(args.engine)
        for image, ref in build(root, engine=engine, base=args.base, train_torch=args.train_torch,
                                registry=args.registry, version=args.version).items():
            print(f"{IMAGES[image]}: {ref}")
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
