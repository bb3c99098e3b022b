"""Where the local cluster keeps its things, and the addresses its parts agree on.

Everything the cluster writes lives under one state directory (`BERTOLOGY_CLUSTER_DIR`, default
/var/lib/bertology-cluster): etcd's data, the certificates, the kubelet's and containerd's roots, the logs,
the pid files and the kubeconfigs. Sockets live under /run/bertology-cluster. The binaries are built once
per version into ~/.cache/bertology/cluster (build.py), outside both, so `make cluster-down` never costs a
rebuild.

The node's only network is a host-only bridge, `bertology0` (10.244.0.1/24): the pods' addresses come from
it, the API server and the kubelet listen on its address (pods reach them there, and through the
`kubernetes` Service's VIP 10.96.0.1 that kube-proxy maps to it), and an S3 server on the host listening
on it is reachable from every pod. Nothing listens on the machine's own interfaces; etcd, the controller
manager and the scheduler listen on loopback only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

NODE_NAME = "bertology-node"
BRIDGE = "bertology0"
CNI_NETWORK = "bertology"  # the CNI network's name: its iptables chains carry it in their comments
NODE_IP = "10.244.0.1"  # the bridge's address: the node's InternalIP and the API server's
POD_SUBNET = "10.244.0.0/24"
SERVICE_SUBNET = "10.96.0.0/24"
API_SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service, first address of the service range
API_PORT = 6443
ETCD_CLIENT_PORT = 12379
ETCD_PEER_PORT = 12380
CONTROLLER_MANAGER_PORT = 10257
SCHEDULER_PORT = 10259
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
PROXY_HEALTHZ_PORT = 10256
PROXY_METRICS_PORT = 10249
REGISTRY_PORT = 5000  # a registry on the node's address: a push target, and docker.io's mirror for the node
CONTAINERD_NAMESPACE = "k8s.io"  # the namespace CRI images live in (ctr -n k8s.io)
# The extended resource the node advertises so that GPU steps schedule on a machine without a GPU: the
# pods then train on the CPU, as any step does without CUDA (bertology.train.device).
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Layout:
    """The local cluster's directories. `state` holds what the cluster writes; `run` its sockets."""

    state: Path
    run: Path

    @classmethod
    def default(cls) -> Layout:
        state = Path(os.environ.get("BERTOLOGY_CLUSTER_DIR", "/var/lib/bertology-cluster"))
        return cls(state=state, run=Path(os.environ.get("BERTOLOGY_CLUSTER_RUN", "/run/bertology-cluster")))

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pids(self) -> Path:
        return self.run / "pids"

    @property
    def etcd_data(self) -> Path:
        return self.state / "etcd"

    @property
    def kubelet_root(self) -> Path:
        return self.state / "kubelet"

    @property
    def containerd_root(self) -> Path:
        return self.state / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.run / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd" / "containerd.sock"

    @property
    def registry_data(self) -> Path:
        return self.state / "registry"

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry host configuration (its config_path): the mirror and the plain-HTTP registry."""
        return self.config / "certs.d"

    @property
    def cni_conf(self) -> Path:
        return self.state / "cni" / "net.d"

    @property
    def cni_data(self) -> Path:
        return self.state / "cni" / "networks"

    @property
    def config(self) -> Path:
        return self.state / "config"

    @property
    def admin_kubeconfig(self) -> Path:
        """The cluster-admin's kubeconfig: what `make cluster` prints for users."""
        return self.state / "admin.kubeconfig"

    def kubeconfig(self, component: str) -> Path:
        return self.config / f"{component}.kubeconfig"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def pidfile(self, component: str) -> Path:
        return self.pids / f"{component}.pid"
