"""Argo Workflows on the local cluster, installed as upstream's manifests install it.

Its CRDs come from the module's manifests/base/crds/full (server-side applied: the Workflow CRD's schema is
larger than client-side apply's annotation allows); the rest is `kubectl kustomize
manifests/cluster-install-no-crds` of the same module: the controller and Argo Server as Deployments in the
`argo` namespace, their ServiceAccounts, ClusterRoles and bindings, and the controller's ConfigMap, empty as
upstream ships it (bertology needs no controller-wide setting). Only the images differ: the ones built here
(FROM scratch, as build.py makes them), and the controller is told its executor image with
`--executor-image`, as upstream's docs say for a private registry.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from bertology.localcluster import build
from bertology.localcluster import layout as lay
from bertology.localcluster.kubectl import binary as kubectl_binary
from bertology.localcluster.kubectl import kubectl

NAMESPACE = "argo"


def source() -> Path:
    return build._module_dir(build.go_binary(), build.MODULES["argo"])


def version() -> str:
    return build.MODULES["argo"].version()


def _image(name: str) -> str:
    return f"{build.IMAGE_PREFIX}/{name}:{version()}"


def images(engine: list[str], binaries: dict[str, Path], *, log=print) -> list[str]:
    """argoexec, workflow-controller and argocli (Argo Server), each FROM scratch as upstream's Dockerfile
    lays them out (/bin/NAME, the entrypoint; the controller and server as user 8737)."""
    made = [build.build_scratch_image(engine, build.argoexec_image(binaries), log=log)]
    for name, binary, argv in (("workflow-controller", "workflow-controller", "workflow-controller"),
                               ("argocli", "argo", "argo")):
        image = build.ScratchImage(
            _image(name), binaries[binary], f"/bin/{binary}",
            f"FROM scratch\nENV PATH=/bin\nCOPY {binary} /bin/{binary}\nADD tmp.tar /\nUSER 8737\n"
            f'ENTRYPOINT ["{argv}"]\n')
        made.append(build.build_scratch_image(engine, image, log=log))
    return made


def manifests(kubectl: str) -> list[dict]:
    """Upstream's cluster install (no CRDs), with the images built here."""
    rendered = subprocess.run([kubectl, "kustomize", str(source() / "manifests" / "cluster-install-no-crds")],
                              check=True, capture_output=True, text=True).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    for document in documents:
        if document["kind"] != "Deployment":
            continue
        container = document["spec"]["template"]["spec"]["containers"][0]
        container["imagePullPolicy"] = "IfNotPresent"
        if document["metadata"]["name"] == "workflow-controller":
            container["image"] = _image("workflow-controller")
            container["args"] = [*container.get("args", []), "--executor-image", _image("argoexec"),
                                 "--executor-image-pull-policy", "IfNotPresent"]
        elif document["metadata"]["name"] == "argo-server":
            container["image"] = _image("argocli")
    return documents


def install(layout: lay.Layout, binaries: dict[str, Path], *, log=print) -> None:
    crds = sorted((source() / "manifests" / "base" / "crds" / "full").glob("argoproj.io_*.yaml"))
    kubectl(layout, "apply", "--server-side", "--force-conflicts", *(f"-f={p}" for p in crds))
    kubectl(layout, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    kubectl(layout, "create", "namespace", NAMESPACE, check=False)
    kubectl(layout, "apply", "--server-side", "--force-conflicts", "-f", "-",
            input=yaml.safe_dump_all(manifests(kubectl_binary())))
    for deployment in ("workflow-controller", "argo-server"):
        kubectl(layout, "-n", NAMESPACE, "rollout", "status", f"deployment/{deployment}", "--timeout=180s",
                timeout=200)
    log(f"  argo {version()}: workflow-controller and argo-server running in namespace {NAMESPACE}")
    link_cli(binaries)


def link_cli(binaries: dict[str, Path]) -> None:
    """`argo` beside the project's kubectl and helm (.venv/bin), so that users type it as they would."""
    target = Path(sys.executable).with_name("argo")
    if target.is_symlink() or target.exists():
        target.unlink()
    target.symlink_to(binaries["argo"])
