"""Each component's configuration and command line, with the flags of Kubernetes' own
hack/local-up-cluster.sh (start_etcd, start_apiserver, start_controller_manager, start_scheduler,
start_kubelet, start_kubeproxy) as the reference, narrowed to one node on a host-only bridge."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from bertology.localcluster import layout as lay
from bertology.localcluster.host import CGROUP_ROOT, cni_bin_dir
from bertology.localcluster.pki import Identity

ADMIN = Identity("admin", "bertology-admin", groups=("system:masters",))
API_SERVER = Identity("kube-apiserver", "kube-apiserver", client=False, server=True, hosts=(
    lay.API_SERVICE_IP, lay.NODE_IP, "127.0.0.1", "localhost", lay.NODE_NAME, "kubernetes", "kubernetes.default",
    "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"))
API_SERVER_KUBELET_CLIENT = Identity("kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                                     groups=("system:masters",))
CONTROLLER_MANAGER = Identity("kube-controller-manager", "system:kube-controller-manager")
SCHEDULER = Identity("kube-scheduler", "system:kube-scheduler")
KUBELET = Identity("kubelet", f"system:node:{lay.NODE_NAME}", groups=("system:nodes",))
KUBELET_SERVING = Identity("kubelet-serving", f"system:node:{lay.NODE_NAME}", client=False, server=True,
                           hosts=(lay.NODE_IP, lay.NODE_NAME, "127.0.0.1", "localhost"))
KUBE_PROXY = Identity("kube-proxy", "system:kube-proxy")
IDENTITIES = [ADMIN, API_SERVER, API_SERVER_KUBELET_CLIENT, CONTROLLER_MANAGER, SCHEDULER, KUBELET, KUBELET_SERVING,
              KUBE_PROXY]
# which identity each kubeconfig holds
KUBECONFIGS = {"admin": ADMIN, "kube-controller-manager": CONTROLLER_MANAGER, "kube-scheduler": SCHEDULER,
               "kubelet": KUBELET, "kube-proxy": KUBE_PROXY}
API_URL = f"https://{lay.NODE_IP}:{lay.API_PORT}"


def kubeconfig(layout: lay.Layout, identity: Identity, namespace: str = "default") -> dict:
    """A kubeconfig with the CA and the identity's key pair inline (it can be copied anywhere)."""
    import base64

    def inline(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    pki = layout.pki
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "bertology-local", "preferences": {},
        "clusters": [{"name": "bertology-local", "cluster": {
            "server": API_URL, "certificate-authority-data": inline(pki / "ca.crt")}}],
        "users": [{"name": identity.common_name, "user": {
            "client-certificate-data": inline(pki / f"{identity.name}.crt"),
            "client-key-data": inline(pki / f"{identity.name}.key")}}],
        "contexts": [{"name": "bertology-local", "context": {
            "cluster": "bertology-local", "user": identity.common_name, "namespace": namespace}}],
    }


def write_kubeconfigs(layout: lay.Layout) -> None:
    layout.config.mkdir(parents=True, exist_ok=True)
    for component, identity in KUBECONFIGS.items():
        path = layout.admin_kubeconfig if component == "admin" else layout.kubeconfig(component)
        text = yaml.safe_dump(kubeconfig(layout, identity))
        if not path.exists() or path.read_text() != text:  # a running component may watch its file
            path.write_text(text)
            path.chmod(0o600)


def etcd(layout: lay.Layout, binary: Path) -> list[str]:
    client = f"http://127.0.0.1:{lay.ETCD_CLIENT_PORT}"
    peer = f"http://127.0.0.1:{lay.ETCD_PEER_PORT}"
    return [str(binary), "--name", "bertology", "--data-dir", str(layout.etcd_data),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"bertology={peer}", "--listen-metrics-urls", "",
            "--log-level", "warn"]


REGISTRY_BINARY = Path("/usr/bin/docker-registry")  # Debian's docker-registry (distribution 2.8)
REGISTRY = f"{lay.NODE_IP}:{lay.REGISTRY_PORT}"


def registry_config(layout: lay.Layout) -> dict:
    return {"version": 0.1, "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(layout.registry_data)}, "delete": {"enabled": True}},
            "http": {"addr": REGISTRY}}


def registry_hosts(layout: lay.Layout) -> None:
    """containerd's hosts.toml files: the registry over plain HTTP, and as docker.io's only mirror (docker.io
    itself stays the server, which the node never reaches: a pull of an image not pushed here fails)."""
    for host, server in (("docker.io", "https://registry-1.docker.io"), (REGISTRY, f"http://{REGISTRY}")):
        directory = layout.registry_hosts / host
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts.toml").write_text(
            f'server = "{server}"\n\n[host."http://{REGISTRY}"]\n  capabilities = ["pull", "resolve"]\n'
            f"  skip_verify = true\n")


def api_server(layout: lay.Layout, binary: Path) -> list[str]:
    pki = layout.pki
    # PodSecurity is one of the default admission plugins: a namespace's
    # pod-security.kubernetes.io/enforce label is enforced as on any cluster.
    return [str(binary),
            f"--etcd-servers=http://127.0.0.1:{lay.ETCD_CLIENT_PORT}",
            f"--bind-address={lay.NODE_IP}", f"--advertise-address={lay.NODE_IP}", f"--secure-port={lay.API_PORT}",
            f"--tls-cert-file={pki / 'kube-apiserver.crt'}", f"--tls-private-key-file={pki / 'kube-apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--kubelet-client-certificate={pki / 'kube-apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kube-apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-key-file={pki / 'service-account.pub'}",
            f"--service-account-signing-key-file={pki / 'service-account.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={lay.SERVICE_SUBNET}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--profiling=false", "--v=1"]


def controller_manager(layout: lay.Layout, binary: Path) -> list[str]:
    pki, config = layout.pki, layout.kubeconfig("kube-controller-manager")
    return [str(binary), f"--kubeconfig={config}", f"--authentication-kubeconfig={config}",
            f"--authorization-kubeconfig={config}",
            "--bind-address=127.0.0.1", f"--secure-port={lay.CONTROLLER_MANAGER_PORT}",
            f"--cert-dir={layout.pki / 'kube-controller-manager-serving'}",
            f"--service-account-private-key-file={pki / 'service-account.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={lay.SERVICE_SUBNET}",
            "--use-service-account-credentials", "--leader-elect=false", "--profiling=false", "--v=1"]


def scheduler(layout: lay.Layout, binary: Path) -> list[str]:
    config = layout.kubeconfig("kube-scheduler")
    return [str(binary), f"--kubeconfig={config}", f"--authentication-kubeconfig={config}",
            f"--authorization-kubeconfig={config}", "--bind-address=127.0.0.1",
            f"--secure-port={lay.SCHEDULER_PORT}", f"--cert-dir={layout.pki / 'kube-scheduler-serving'}",
            "--leader-elect=false", "--profiling=false", "--v=1"]


def containerd_config(layout: lay.Layout, sandbox_image: str) -> str:
    """containerd 2's configuration (version 3): its own root, state and socket, the CRI's CNI on the
    cluster's network, the pause image built here as the sandbox, the registry hosts (registry_hosts), runc
    with cgroupfs (the kubelet's driver)."""
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return "\n".join([
        "version = 3",
        f"root = {json.dumps(str(layout.containerd_root))}",
        f"state = {json.dumps(str(layout.containerd_state))}",
        # snapshotters this machine cannot use, off: no warnings at each start
        ("disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs', "
        "'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.erofs', "
        "'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']"),
        "[grpc]", f"  address = {json.dumps(str(layout.containerd_socket))}",
        "[plugins]",
        "  [plugins.'io.containerd.internal.v1.opt']", f"    path = {json.dumps(str(layout.state / 'opt'))}",
        "  [plugins.'io.containerd.cri.v1.images'.pinned_images]", f"    sandbox = {json.dumps(sandbox_image)}",
        "  [plugins.'io.containerd.cri.v1.images'.registry]",
        f"    config_path = {json.dumps(str(layout.registry_hosts))}",
        # restrict_oom_score_adj: no OOM score below containerd's own. The kubelet asks -998 for a pod's
        # sandbox, which needs CAP_SYS_RESOURCE; a host without it (a VM sandbox, a rootless setup) fails
        # every pod with runc's "failed to update /proc/self/oom_score_adj: Permission denied".
        f"  [{cri_runtime}]", "    enable_cdi = false",
        f"    restrict_oom_score_adj = {'true' if restricted_oom_score_adj() else 'false'}",
        f"  [{cri_runtime}.containerd.runtimes.runc]", "    runtime_type = 'io.containerd.runc.v2'",
        f"  [{cri_runtime}.containerd.runtimes.runc.options]", "    SystemdCgroup = false",
        f"    Root = {json.dumps(str(layout.run / 'runc'))}",
        f"  [{cri_runtime}.cni]", f"    bin_dirs = [{json.dumps(cni_bin_dir())}]",
        f"    conf_dir = {json.dumps(str(layout.cni_conf))}",
        "  [plugins.'io.containerd.grpc.v1.cri']", "    stream_server_address = '127.0.0.1'",
        "",
    ])


def restricted_oom_score_adj() -> bool:
    """Whether this process lacks CAP_SYS_RESOURCE, without which no OOM score can be lowered."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return not int(line.split()[1], 16) & (1 << 24)
    return False


def kubelet_config(layout: lay.Layout, *, cgroup_v1: bool) -> dict:
    pki = layout.pki
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": lay.NODE_IP, "port": lay.KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": lay.KUBELET_HEALTHZ_PORT,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet-serving.crt"), "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{CGROUP_ROOT}",
        "failSwapOn": False,
        "resolvConf": "/etc/resolv.conf",
        # A developer's disk is shared with everything else on it: evict only when it is nearly full, and
        # never garbage-collect the imported images (nothing could pull them back).
        "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2%", "imagefs.available": "2%",
                         "nodefs.inodesFree": "2%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "staticPodPath": "",
    }
    if restricted_oom_score_adj():
        config["oomScoreAdj"] = 0  # its own; -999 by default
    if cgroup_v1:
        # Kubernetes 1.35+ refuses cgroup v1 by default; this machine has nothing else.
        config["failCgroupV1"] = False
    return config


def kubelet(layout: lay.Layout, binary: Path, config: Path) -> list[str]:
    return [str(binary), f"--config={config}", f"--kubeconfig={layout.kubeconfig('kubelet')}",
            f"--hostname-override={lay.NODE_NAME}", f"--node-ip={lay.NODE_IP}",
            f"--root-dir={layout.kubelet_root}", "--v=1"]


def kube_proxy_config(layout: lay.Layout) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig("kube-proxy"))},
        "hostnameOverride": lay.NODE_NAME, "mode": "iptables", "clusterCIDR": lay.POD_SUBNET,
        "bindAddress": lay.NODE_IP,
        "healthzBindAddress": f"127.0.0.1:{lay.PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": f"127.0.0.1:{lay.PROXY_METRICS_PORT}",
        "nodePortAddresses": [f"{lay.NODE_IP}/32"],
        "conntrack": {"maxPerCore": 0},  # leave the host's nf_conntrack_max as it is
        **({"oomScoreAdj": 0} if restricted_oom_score_adj() else {}),  # its own; -999 by default
    }


def kube_proxy(binary: Path, config: Path) -> list[str]:
    return [str(binary), f"--config={config}", "--v=1"]
