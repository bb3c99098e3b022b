"""The local cluster's binaries and images, built here from their sources at pinned versions, once each.

Every Go binary comes from a wrapper module under cluster/ (its go.mod names the upstream module at one
version and lists the commands as `tool` directives; its go.sum pins every dependency): Kubernetes'
control plane, kubelet and kube-proxy; etcd; containerd with its runc shim and ctr; crictl; Argo's
workflow-controller, argoexec and CLI. `go build -o DIR tool` builds a module's commands in one go, sharing
the compiled packages. A build lands in ~/.cache/bertology/cluster/NAME-VERSION-HASH, where HASH covers
the go.mod, the go.sum, the Go version and the flags, so a second `make cluster` builds nothing and a new
pin builds anew. The version each binary reports is the upstream's own (the ldflags of upstream's
Makefiles): Helm's kubeVersion checks read the API server's.

The two images the cluster itself needs are made here too: `pause` (the pod sandbox) compiled from
Kubernetes' C source (build/pause/linux/pause.c, in the module above) with gcc, statically, and argoexec in
an image FROM scratch. Both go into containerd with `ctr images import`, as do bertology's own images.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bertology.errors import BadInput

REPO = Path(__file__).resolve().parents[3]
MODULES_DIR = REPO / "cluster"
CACHE = Path(os.environ.get("BERTOLOGY_CLUSTER_CACHE", Path.home() / ".cache" / "bertology" / "cluster"))
BUILD_DATE = "2026-11-28T00:00:00Z"  # fixed, so that a build is the same whenever it is made
PAUSE_VERSION = "3.10.2"  # build/pause/Makefile's TAG at the pinned Kubernetes
IMAGE_PREFIX = "localhost/bertology-cluster"


@dataclass(frozen=True)
class GoModule:
    """A wrapper module under cluster/: `upstream` is the module it builds from, its version read from
    the wrapper's go.mod; `rename` maps the name `go build` gives a command (its last import path element,
    before a /vN) to the usual one; `added` are files upstream's own build makes before `go build`, and
    `symlinks` those of upstream's git tree that a module zip leaves out."""

    name: str
    upstream: str
    rename: dict[str, str] = field(default_factory=dict)
    added: dict[str, str] = field(default_factory=dict)  # files added to upstream's tree: relative path -> text
    symlinks: dict[str, str] = field(default_factory=dict)  # upstream's symlinks (a module zip drops them): path -> target

    @property
    def directory(self) -> Path:
        return MODULES_DIR / self.name

    def _go_mod(self) -> dict:
        """The wrapper's go.mod as `go mod edit -json` reads it."""
        out = subprocess.run([go_binary(), "mod", "edit", "-json"], cwd=self.directory, check=True,
                             capture_output=True, text=True)
        return json.loads(out.stdout)

    def version(self) -> str:
        found = [r["Version"] for r in self._go_mod().get("Require", []) if r["Path"] == self.upstream]
        if not found:
            raise BadInput(f"{self.directory / 'go.mod'}: it requires no {self.upstream}")
        return found[0]

    def tools(self) -> list[str]:
        return [t["Path"] for t in self._go_mod().get("Tool", [])]

    def binaries(self) -> list[str]:
        names = []
        for tool in self.tools():
            parts = tool.split("/")
            base = parts[-2] if re.fullmatch(r"v[0-9]+", parts[-1]) else parts[-1]
            names.append(self.rename.get(base, base))
        return names


def _kubernetes_ldflags(version: str) -> tuple[str, ...]:
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean",
              "buildDate": BUILD_DATE}
    return tuple(f"-X k8s.io/{pkg}.{key}={value}" for key, value in stamps.items()
                 for pkg in ("component-base/version", "client-go/pkg/version"))


MODULES = {
    "kubernetes": GoModule("kubernetes", "k8s.io/kubernetes"),
    "etcd": GoModule("etcd", "go.etcd.io/etcd/server/v3", rename={"server": "etcd"}),
    "containerd": GoModule("containerd", "github.com/containerd/containerd/v2"),
    "cri-tools": GoModule("cri-tools", "sigs.k8s.io/cri-tools"),
    # The CLI embeds Argo Server's UI (ui/embed.go: //go:embed dist/app), which the module does not ship
    # (upstream builds it with yarn first); upstream's Makefile with STATIC_FILES=false touches an empty
    # ui/dist/app/index.html instead, and so does this build: `argo server` then serves no UI.
    # Its git tree also has workflow/executor/osspecific/signal_linux.go as a symlink to signal_darwin.go,
    # which the module zip leaves out (zips hold no symlinks): argoexec then fails with "undefined: Setpgid".
    "argo": GoModule("argo", "github.com/argoproj/argo-workflows/v3", added={"ui/dist/app/index.html": ""},
                     symlinks={"workflow/executor/osspecific/signal_linux.go": "signal_darwin.go"}),
}


def ldflags(module: GoModule, version: str) -> list[str]:
    """Upstream's version stamps for the module at `version` (each upstream Makefile's LDFLAGS)."""
    if module.name == "kubernetes":
        return list(_kubernetes_ldflags(version))
    if module.name == "etcd":
        return []  # etcd's version is a constant of go.etcd.io/etcd/api/v3/version
    if module.name == "containerd":
        return [f"-X github.com/containerd/containerd/v2/version.Version={version}",
                "-X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"]
    if module.name == "cri-tools":
        return [f"-X sigs.k8s.io/cri-tools/pkg/version.Version={version}"]
    if module.name == "argo":
        return [f"-X github.com/argoproj/argo-workflows/v3.version={version}",
                f"-X github.com/argoproj/argo-workflows/v3.buildDate={BUILD_DATE}",
                "-X github.com/argoproj/argo-workflows/v3.gitTreeState=clean"]
    return []


def go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        raise BadInput("go is not installed: the local cluster is built from Go modules (Go >= 1.26; "
                       "apt-get install golang-1.26, or https://go.dev/dl)")
    return go


def _go_env() -> dict[str, str]:
    # static binaries (the images are FROM scratch) and no toolchain download: the machine's own Go
    return {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false -mod=readonly"}


def _module_dir(go: str, module: GoModule) -> Path:
    """The upstream module's source in the module cache (downloaded first if missing)."""
    out = subprocess.run([go, "mod", "download", "-json", f"{module.upstream}@{module.version()}"],
                         cwd=module.directory, env=_go_env(), check=True, capture_output=True, text=True)
    return Path(json.loads(out.stdout)["Dir"])


def _workspace(go: str, module: GoModule, work: Path) -> dict[str, str]:
    """For a module with `added` files or `symlinks`: a copy of upstream's verified tree (the module cache's, which
    `go mod download` checked against go.sum) with those files, replacing the module through a go.work of
    its own (the module cache itself is read-only, and -overlay refuses files beneath it). No env otherwise."""
    if not module.added and not module.symlinks:
        return {}
    source = work / "src"
    shutil.copytree(_module_dir(go, module), source)
    for path in source.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    for relative, text in module.added.items():
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_text(text)
    for relative, target in module.symlinks.items():
        (source / relative).symlink_to(target)
    go_work = work / "go.work"
    go_version = re.search(r"^go (\S+)", (module.directory / "go.mod").read_text(), re.MULTILINE).group(1)
    go_work.write_text(f"go {go_version}\n\nuse {module.directory}\n\n"
                       f"replace {module.upstream} {module.version()} => {source}\n")
    return {"GOWORK": str(go_work)}


def cache_key(go: str, module: GoModule) -> str:
    version = subprocess.run([go, "version"], check=True, capture_output=True, text=True).stdout.strip()
    digest = hashlib.sha256()
    for part in (version, *ldflags(module, module.version()), repr(sorted(module.added.items())),
                 repr(sorted(module.symlinks.items()))):
        digest.update(part.encode())
    for name in ("go.mod", "go.sum"):
        digest.update((module.directory / name).read_bytes())
    return f"{module.name}-{module.version()}-{digest.hexdigest()[:12]}"


def build_module(module: GoModule, *, log=print) -> Path:
    """The module's binaries, built once per version: the directory holding them."""
    go = go_binary()
    target = CACHE / cache_key(go, module)
    if (target / ".complete").exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log(f"building {module.name} {module.version()} ({', '.join(module.binaries())}) from Go modules ...")
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=f".{module.name}-") as work:
        out = Path(work) / "bin"
        out.mkdir()
        flags = ["-trimpath", "-ldflags", " ".join(["-s", "-w", *ldflags(module, module.version())])]
        env = {**_go_env(), **_workspace(go, module, Path(work))}
        subprocess.run([go, "build", *flags, "-o", f"{out}/", "tool"], cwd=module.directory, env=env, check=True)
        for built, wanted in module.rename.items():
            (out / built).rename(out / wanted)
        missing = [b for b in module.binaries() if not (out / b).is_file()]
        if missing:
            raise RuntimeError(f"go build of {module.name} made no {', '.join(missing)}")
        (out / ".complete").write_text(f"{time.monotonic() - started:.0f} s\n")
        shutil.rmtree(target, ignore_errors=True)
        out.rename(target)
    log(f"built {module.name} in {time.monotonic() - started:.0f} s: {target}")
    return target


def build_all(*, log=print) -> dict[str, Path]:
    """Every binary of the cluster by name -> its path (each module built once per version)."""
    binaries: dict[str, Path] = {}
    for module in MODULES.values():
        directory = build_module(module, log=log)
        binaries.update({name: directory / name for name in module.binaries()})
    return binaries


def cached_binaries() -> dict[str, Path] | None:
    """The binaries of the pinned versions if all are built already, else None (nothing is built)."""
    go = go_binary()
    binaries: dict[str, Path] = {}
    for module in MODULES.values():
        directory = CACHE / cache_key(go, module)
        if not (directory / ".complete").exists():
            return None
        binaries.update({name: directory / name for name in module.binaries()})
    return binaries


# --- the cluster's own images ----------------------------------------------------------------------------


def pause_binary(*, log=print) -> Path:
    """Kubernetes' pause, compiled from its C source with upstream's flags (build/pause/Makefile)."""
    go = go_binary()
    source = _module_dir(go, MODULES["kubernetes"]) / "build" / "pause" / "linux" / "pause.c"
    target = CACHE / f"pause-{PAUSE_VERSION}-{hashlib.sha256(source.read_bytes()).hexdigest()[:12]}" / "pause"
    if target.is_file():
        return target
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BadInput("gcc is not installed: the pod sandbox (pause) is compiled from Kubernetes' C source "
                       "(apt-get install gcc libc6-dev)")
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"compiling pause {PAUSE_VERSION} from {source}")
    subprocess.run([gcc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{PAUSE_VERSION}-bertology",
                    "-o", str(target.with_suffix(".tmp")), str(source)], check=True)
    target.with_suffix(".tmp").rename(target)
    return target


@dataclass(frozen=True)
class ScratchImage:
    """An image FROM scratch holding one static binary."""

    ref: str
    binary: Path
    path_in_image: str
    containerfile: str


def pause_image(*, log=print) -> ScratchImage:
    binary = pause_binary(log=log)
    return ScratchImage(f"{IMAGE_PREFIX}/pause:{PAUSE_VERSION}", binary, "/pause",
                        'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n')


def argoexec_image(binaries: dict[str, Path]) -> ScratchImage:
    """argoexec as Argo's default executor image has it (/bin/argoexec, the entrypoint, root: upstream's
    `argoexec` target), FROM scratch: its init container copies the binary into the pod's /var/run/argo and
    its wait container talks to the API server, for which the service account's CA bundle is mounted."""
    version = MODULES["argo"].version()
    return ScratchImage(f"{IMAGE_PREFIX}/argoexec:{version}", binaries["argoexec"], "/bin/argoexec",
                        'FROM scratch\nENV PATH=/bin\nCOPY argoexec /bin/argoexec\nADD tmp.tar /\n'
                        'ENTRYPOINT ["argoexec"]\n')


def build_scratch_image(engine: list[str], image: ScratchImage, *, log=print) -> str:
    """The image built with the engine (podman), unless one with this binary exists: its reference."""
    digest = hashlib.sha256(image.binary.read_bytes() + image.containerfile.encode()).hexdigest()[:16]
    probe = subprocess.run([*engine, "image", "inspect", "--format", "{{index .Labels \"io.bertology.binary\"}}",
                            image.ref], check=False, capture_output=True, text=True)
    if probe.returncode == 0 and probe.stdout.strip() == digest:
        return image.ref
    log(f"building image {image.ref}")
    with tempfile.TemporaryDirectory() as context:
        shutil.copy2(image.binary, Path(context) / Path(image.path_in_image).name)
        # /tmp as distroless has it, writable by any user (1777): Argo's init writes a resource template's
        # manifest there as user 8737 (MinimalCtrSC). COPY of a directory keeps its contents' modes, not its
        # own; ADD of a tar keeps the directory entry's.
        with tarfile.open(Path(context) / "tmp.tar", "w") as tar:
            entry = tarfile.TarInfo("tmp")
            entry.type, entry.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(entry)
        (Path(context) / "Containerfile").write_text(image.containerfile + f"LABEL io.bertology.binary={digest}\n")
        subprocess.run([*engine, "build", "-q", "-f", "Containerfile", "-t", image.ref, "."], cwd=context,
                       check=True, capture_output=True, text=True)
    return image.ref
