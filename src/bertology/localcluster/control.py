"""Bringing the local cluster up and down, in the order each part needs the one before it.

up:   preflight -> build (cached) -> host -> certificates and kubeconfigs -> etcd -> kube-apiserver ->
      controller manager, scheduler -> containerd -> images imported -> kubelet (node Ready) -> kube-proxy
      (the `kubernetes` Service reachable from a pod) -> Argo (CRDs, RBAC, controller and server as pods).
down: kubelet stopped (so that it starts no pod again) -> Argo's and every pod's containers removed
      through the CRI -> kube-proxy, control plane, etcd, containerd stopped -> the shims that outlive
      containerd killed, and any pod process that outlived its shim -> the host put back (host.py) -> the
      state removed but for containerd's image store -> anything left is listed, and fails it.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

from bertology.localcluster import argo, build, components, host, images, pki, processes
from bertology.localcluster import layout as lay
from bertology.localcluster.kubectl import kubectl

# started in this order, stopped in the reverse
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "registry", "containerd",
         "kubelet", "kube-proxy")


def _https_ok(url: str, layout: lay.Layout | None = None) -> bool:
    """Whether `url` answers 200: with the admin's certificate against the cluster's CA, or unverified for
    a component's own self-signed health endpoint."""
    if layout is not None:
        context = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
        context.load_cert_chain(layout.pki / "admin.crt", layout.pki / "admin.key")
    else:
        context = ssl._create_unverified_context()  # a component's own self-signed cert, on loopback
    try:
        with urllib.request.urlopen(url, context=context, timeout=3) as response:
            return response.status == 200
    except (OSError, ssl.SSLError):
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status == 200
    except OSError:
        return False


def _configure(path: Path, text: str) -> bool:
    """Writes a component's configuration file unless it holds `text` already: whether it changed (a running
    kube-proxy exits when its file is written, whatever it holds)."""
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def _start(layout: lay.Layout, name: str, argv: list[str], what: str, ready: Callable[[], bool], *,
           timeout: float = 90, env: dict | None = None, reconfigured: bool = False, log=print) -> None:
    """Starts the component unless it runs already (restarted when its configuration changed), and waits
    until `ready`."""
    if reconfigured:
        processes.stop(layout, name)
    if processes.pid_of(layout, name) is None:
        processes.start(layout, name, argv, env=env)
    processes.wait_for(layout, name, what, ready, timeout=timeout)
    log(f"  {name}: {what}")


def up(*, layout: lay.Layout | None = None, gpus: int = 2, bertology_images: bool = True, log=print) -> Path:
    """The cluster, running: the admin kubeconfig's path. Already running parts are kept."""
    layout = layout or lay.Layout.default()
    host.check_tools()
    started = time.monotonic()
    binaries = build.build_all(log=log)
    log(f"binaries ready ({time.monotonic() - started:.0f} s)")
    for directory in (layout.state, layout.run, layout.logs, layout.config):
        directory.mkdir(parents=True, exist_ok=True)
    host.prepare(layout)
    if not (layout.pki / "ca.crt").exists():
        pki.create_all(layout.pki, components.IDENTITIES)
    components.write_kubeconfigs(layout)
    env_path = f"{binaries['containerd'].parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = {"PATH": env_path, "HOME": str(layout.state)}

    _start(layout, "etcd", components.etcd(layout, binaries["etcd"]), "healthy",
           lambda: _http_ok(f"http://127.0.0.1:{lay.ETCD_CLIENT_PORT}/health"), env=env, log=log)
    _start(layout, "kube-apiserver", components.api_server(layout, binaries["kube-apiserver"]), "ready",
           lambda: _https_ok(f"{components.API_URL}/readyz", layout), timeout=120, env=env, log=log)
    _start(layout, "kube-controller-manager", components.controller_manager(layout, binaries["kube-controller-manager"]),
           "healthy", lambda: _https_ok(f"https://127.0.0.1:{lay.CONTROLLER_MANAGER_PORT}/healthz"), env=env, log=log)
    _start(layout, "kube-scheduler", components.scheduler(layout, binaries["kube-scheduler"]), "healthy",
           lambda: _https_ok(f"https://127.0.0.1:{lay.SCHEDULER_PORT}/healthz"), env=env, log=log)

    registry_config = layout.config / "registry.yaml"
    changed = _configure(registry_config, yaml.safe_dump(components.registry_config(layout)))
    _start(layout, "registry", [str(components.REGISTRY_BINARY), "serve", str(registry_config)], "serving",
           lambda: _http_ok(f"http://{components.REGISTRY}/v2/"), env=env, reconfigured=changed, log=log)
    components.registry_hosts(layout)
    engine = images.engine()
    pause = build.build_scratch_image(engine, build.pause_image(log=log), log=log)
    config = layout.config / "containerd.toml"
    changed = _configure(config, components.containerd_config(layout, pause))
    _start(layout, "containerd", [str(binaries["containerd"]), "--config", str(config)], "serving",
           lambda: images.containerd_answers(layout, binaries), env=env, reconfigured=changed, log=log)
    cluster_images = [pause, *argo.images(engine, binaries, log=log)]
    ours = images.bertology_images(engine) if bertology_images else {}
    images.import_images(layout, binaries, engine, [*cluster_images, *ours.values()], log=log)
    if ours:
        images.record_bertology_images(layout, ours)

    kubelet_config = layout.config / "kubelet.yaml"
    changed = _configure(kubelet_config, yaml.safe_dump(components.kubelet_config(layout, cgroup_v1=host.cgroup_v1())))
    _start(layout, "kubelet", components.kubelet(layout, binaries["kubelet"], kubelet_config), "healthy",
           lambda: _http_ok(f"http://127.0.0.1:{lay.KUBELET_HEALTHZ_PORT}/healthz"), env=env, reconfigured=changed,
           log=log)
    wait_node_ready(layout, log=log)
    advertise_gpus(layout, gpus)
    proxy_config = layout.config / "kube-proxy.yaml"
    changed = _configure(proxy_config, yaml.safe_dump(components.kube_proxy_config(layout)))
    _start(layout, "kube-proxy", components.kube_proxy(binaries["kube-proxy"], proxy_config), "healthy",
           lambda: _http_ok(f"http://127.0.0.1:{lay.PROXY_HEALTHZ_PORT}/healthz"), env=env, reconfigured=changed,
           log=log)
    argo.install(layout, binaries, log=log)
    (layout.state / "up.json").write_text(json.dumps({"seconds": round(time.monotonic() - started, 1)}))
    log(f"cluster up in {time.monotonic() - started:.0f} s")
    return layout.admin_kubeconfig


def wait_node_ready(layout: lay.Layout, *, timeout: float = 120, log=print) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = kubectl(layout, "get", "node", lay.NODE_NAME, "-o",
                        "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
        if probe.stdout.strip() == "True":
            log(f"  node {lay.NODE_NAME}: Ready")
            return
        if processes.pid_of(layout, "kubelet") is None:
            break
        time.sleep(1)
    raise processes.StartFailed(f"node {lay.NODE_NAME} not Ready after {timeout:.0f} s:\n"
                                f"{processes.tail(layout.log('kubelet'))}")


def advertise_gpus(layout: lay.Layout, count: int) -> None:
    """The node advertises `count` of the extended resource the GPU steps request (Kubernetes' documented way
    to advertise an extended resource: a patch of the node's status capacity), so that they schedule here;
    they then train on the CPU. The kubelet keeps a capacity it does not manage itself."""
    key = lay.GPU_RESOURCE.replace("/", "~1")
    patch = json.dumps([{"op": "add", "path": f"/status/capacity/{key}", "value": str(count)}])
    kubectl(layout, "patch", "node", lay.NODE_NAME, "--subresource=status", "--type=json", "-p", patch)


def status(layout: lay.Layout | None = None) -> dict[str, int | None]:
    layout = layout or lay.Layout.default()
    return {name: processes.pid_of(layout, name) for name in ORDER}


def down(*, layout: lay.Layout | None = None, keep_images: bool = True, log=print) -> list[str]:
    """Everything stopped and put back; what could not be (an empty list when the host is clean)."""
    layout = layout or lay.Layout.default()
    binaries = build.cached_binaries() or {}
    processes.stop(layout, "kubelet")  # first: a running kubelet starts again each pod removed under it
    if processes.pid_of(layout, "containerd") is not None and binaries:
        images.remove_all_pods(layout, binaries, log=log)
    processes.stop(layout, "kube-proxy")
    if "kube-proxy" in binaries:
        subprocess.run([str(binaries["kube-proxy"]), "--cleanup"], check=False, capture_output=True)
    for name in reversed(ORDER):
        processes.stop(layout, name)
    shims = [binaries[b] for b in ("containerd-shim-runc-v2",) if b in binaries]
    for pid, _ in processes.processes_from(shims):
        processes._signal_group(pid, 9)
    time.sleep(0.5)
    orphans = host.cgroup_processes()
    if orphans:
        log(f"  killing {len(orphans)} {'process' if len(orphans) == 1 else 'processes'} that outlived their pods: "
            f"{host.describe(orphans)}")
    host.restore(layout)
    for path in (layout.etcd_data, layout.kubelet_root, layout.pki, layout.config, layout.cni_conf.parent,
                 layout.run, layout.state / "opt", layout.state / "up.json", layout.admin_kubeconfig):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if not keep_images:
        shutil.rmtree(layout.containerd_root, ignore_errors=True)
    left = host.leftovers(layout)
    left += [f"process {pid} {exe}" for pid, exe in processes.processes_from(list(binaries.values()))]
    for item in left:
        log(f"left behind: {item}")
    return left
