"""Images into the node's containerd, and the node's containers out of it.

The node pulls nothing: every image a pod names is imported first, from the container engine that built it
(`podman save` | `ctr -n k8s.io images import`), and the pods take it as present (imagePullPolicy
IfNotPresent). An image whose digest containerd already holds is not imported again.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from bertology import images as bertology_image_builds
from bertology.errors import BadInput
from bertology.localcluster import layout as lay

REPO = Path(__file__).resolve().parents[3]


def engine() -> list[str]:
    """podman, with runc (the engine `make images BASE=local` builds with)."""
    return bertology_image_builds.engine_command(bertology_image_builds.find_engine("podman"))


def ctr(layout: lay.Layout, binaries: dict[str, Path], *args: str, check: bool = True,
        timeout: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(binaries["ctr"]), "--address", str(layout.containerd_socket), "-n",
                           lay.CONTAINERD_NAMESPACE, *args], check=check, capture_output=True, text=True,
                          timeout=timeout)


def containerd_answers(layout: lay.Layout, binaries: dict[str, Path]) -> bool:
    if not layout.containerd_socket.exists():
        return False
    return ctr(layout, binaries, "version", check=False, timeout=10).returncode == 0


def bertology_images(engine_argv: list[str]) -> dict[str, str]:
    """The images `make images BASE=local` built last from this tree, by the names the runner finds them:
    {"cpu": ref, "train": ref}."""
    found = {}
    for key, name in bertology_image_builds.IMAGES.items():
        ref = bertology_image_builds.current_tag(name, bertology_image_builds.tree_hash(REPO, key))
        probe = subprocess.run([*engine_argv, "image", "exists", ref], check=False)
        if probe.returncode != 0:
            raise BadInput(f"no image {ref} for this tree: run `make images BASE=local` first")
        found[key] = ref
    return found


def record_bertology_images(layout: lay.Layout, refs: dict[str, str]) -> None:
    """STATE/bertology-images.json: which of bertology's images the node holds ({"cpu": ref, "train": ref}),
    the chart's images.*.repository and tag on this cluster (recorded_bertology_images)."""
    (layout.state / "bertology-images.json").write_text(json.dumps(refs, indent=1))


def recorded_bertology_images(layout: lay.Layout) -> dict[str, str]:
    path = layout.state / "bertology-images.json"
    if not path.exists():
        raise BadInput(f"the local cluster holds no bertology image ({path} is missing): run `make cluster`")
    return json.loads(path.read_text())


def _engine_id(engine_argv: list[str], ref: str) -> str:
    out = subprocess.run([*engine_argv, "image", "inspect", "--format", "{{.Id}}", ref], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def import_images(layout: lay.Layout, binaries: dict[str, Path], engine_argv: list[str], refs: list[str],
                  *, log=print) -> None:
    """Each image into containerd, unless the one there came from the same engine image (by its id, which
    the record beside containerd's root keeps)."""
    record_path = layout.containerd_root / "bertology-imported.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    present = set(ctr(layout, binaries, "images", "list", "-q").stdout.split())
    for ref in refs:
        engine_id = _engine_id(engine_argv, ref)
        if ref in present and record.get(ref) == engine_id:
            continue
        log(f"  importing {ref} into containerd")
        with tempfile.TemporaryDirectory(dir=layout.state) as work:
            archive = Path(work) / "image.tar"
            subprocess.run([*engine_argv, "save", "--format", "docker-archive", "-o", str(archive), ref], check=True,
                           capture_output=True)
            ctr(layout, binaries, "images", "import", "--snapshotter", "overlayfs", str(archive))
        record[ref] = engine_id
        record_path.write_text(json.dumps(record, indent=1))


def remove_all_pods(layout: lay.Layout, binaries: dict[str, Path], *, log=print) -> None:
    """Every pod sandbox stopped and removed through the CRI, as the kubelet would (so the CNI releases each
    pod's address and its iptables rules), then any container left in containerd's namespace."""
    crictl = [str(binaries["crictl"]), "--runtime-endpoint", f"unix://{layout.containerd_socket}",
              "--image-endpoint", f"unix://{layout.containerd_socket}", "--timeout", "60s"]
    pods = subprocess.run([*crictl, "pods", "-q"], check=False, capture_output=True, text=True).stdout.split()
    if pods:
        log(f"  removing {len(pods)} pod sandboxes")
        subprocess.run([*crictl, "rmp", "-f", *pods], check=False, capture_output=True, text=True)
    for container in ctr(layout, binaries, "containers", "list", "-q", check=False).stdout.split():
        ctr(layout, binaries, "tasks", "kill", "-s", "SIGKILL", container, check=False)
        ctr(layout, binaries, "containers", "delete", container, check=False)
