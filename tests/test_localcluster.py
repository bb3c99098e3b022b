"""The local cluster's parts that need neither root nor a running cluster (`make test-cluster` runs the rest):
the pinned modules and their build cache, the certificates, each component's configuration, the host's
iptables bookkeeping and the process supervision."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bertology.errors import BadInput
from bertology.localcluster import build, components, host, pki, processes
from bertology.localcluster import layout as lay

REPO = Path(__file__).resolve().parents[1]
needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="the modules are read with `go mod edit`")


@needs_go
def test_each_module_pins_one_upstream_version_and_lists_its_commands():
    """cluster/NAME/go.mod: the upstream module at one version (the one the docs' table gives), its commands
    as tool directives, each binary named as upstream names it."""
    pinned = {name: module.version() for name, module in build.MODULES.items()}
    assert pinned == {"kubernetes": "v1.36.3", "etcd": "v3.6.16", "containerd": "v2.2.9", "cri-tools": "v1.37.0",
                      "argo": "v3.7.18"}
    binaries = {name: module.binaries() for name, module in build.MODULES.items()}
    assert binaries["kubernetes"] == ["kube-apiserver", "kube-controller-manager", "kube-proxy", "kube-scheduler",
                                      "kubelet"]
    assert binaries["etcd"] == ["etcd"]  # go.etcd.io/etcd/server/v3 builds as "server"
    assert binaries["containerd"] == ["containerd", "containerd-shim-runc-v2", "ctr"]
    assert binaries["argo"] == ["argo", "argoexec", "workflow-controller"]
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    for version in pinned.values():
        assert f"| {version.lstrip('v')} |" in docs


@needs_go
def test_the_staging_modules_are_pinned_to_the_release_of_the_same_tree():
    """k8s.io/kubernetes requires its staging modules at v0.0.0: each is replaced by its v0.36.x release."""
    edit = json.loads(subprocess.run(["go", "mod", "edit", "-json"], cwd=REPO / "cluster" / "kubernetes",
                                     check=True, capture_output=True, text=True).stdout)
    replaced = {r["Old"]["Path"]: r["New"] for r in edit["Replace"]}
    assert len(replaced) >= 30 and all(new == {"Path": old, "Version": "v0.36.3"} for old, new in replaced.items())
    flags = build.ldflags(build.MODULES["kubernetes"], "v1.36.3")
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMinor=36" in flags


@needs_go
def test_a_build_is_cached_by_what_goes_into_it(tmp_path, monkeypatch):
    """The cache key covers go.mod, go.sum, the Go version and the flags: the same inputs, the same key; a
    changed go.sum, a new one (a second build costs nothing; a new pin builds anew)."""
    module = build.MODULES["etcd"]
    go = build.go_binary()
    key = build.cache_key(go, module)
    assert key.startswith("etcd-v3.6.16-") and key == build.cache_key(go, module)
    copy = tmp_path / "etcd"
    shutil.copytree(module.directory, copy)
    monkeypatch.setattr(build, "MODULES_DIR", tmp_path)
    (copy / "go.sum").write_text((copy / "go.sum").read_text() + "\n")
    assert build.cache_key(go, module) != key


def test_a_missing_go_is_named_in_one_line(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(BadInput, match=r"^go is not installed: .*Go >= 1.26"):
        build.go_binary()


def test_certificates_name_the_identities_kubernetes_authenticates(tmp_path):
    """One CA; a client certificate's CN is the user and its O the groups (the kubelet as
    system:node:bertology-node in system:nodes, for the Node authorizer); the API server's names every
    address it is reached at, the `kubernetes` Service's VIP and the bridge included."""
    pki.create_all(tmp_path, components.IDENTITIES)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())

    def load(name: str) -> x509.Certificate:
        cert = x509.load_pem_x509_certificate((tmp_path / f"{name}.crt").read_bytes())
        cert.verify_directly_issued_by(ca)
        return cert

    kubelet = load("kubelet")
    assert kubelet.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:bertology-node"
    assert [a.value for a in kubelet.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    usages = kubelet.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    server = load("kube-apiserver")
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {"10.96.0.1", "10.244.0.1", "127.0.0.1"}
    assert "kubernetes.default.svc.cluster.local" in names.get_values_for_type(x509.DNSName)
    assert server.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc) > datetime.timedelta(days=300)
    assert (tmp_path / "kubelet.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "service-account.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")


def test_each_components_configuration(tmp_path, monkeypatch):
    """What this machine needs is set only where it needs it: the kubelet takes cgroup v1 only when told so,
    and a process that cannot lower an OOM score gets no lowered score asked of it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    layout = lay.Layout(state=tmp_path / "state", run=tmp_path / "run")
    monkeypatch.setattr(components, "cni_bin_dir", lambda: "/usr/lib/cni")
    for restricted in (True, False):
        monkeypatch.setattr(components, "restricted_oom_score_adj", lambda r=restricted: r)
        config = tomllib.loads(components.containerd_config(layout, "localhost/pause:1"))
        runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
        assert runtime["restrict_oom_score_adj"] is restricted
        assert runtime["cni"]["conf_dir"] == str(layout.cni_conf)
        assert runtime["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
        assert config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "localhost/pause:1"
        assert config["grpc"]["address"] == str(layout.containerd_socket)
        kubelet = components.kubelet_config(layout, cgroup_v1=restricted)
        assert ("failCgroupV1" in kubelet) is restricted and ("oomScoreAdj" in kubelet) is restricted
        assert kubelet["cgroupDriver"] == "cgroupfs" and kubelet["cgroupRoot"] == f"/{host.CGROUP_ROOT}"
        assert kubelet["imageGCHighThresholdPercent"] == 100  # nothing could pull an image back
        assert ("oomScoreAdj" in components.kube_proxy_config(layout)) is restricted
    args = components.api_server(layout, Path("/bin/kube-apiserver"))
    assert "--authorization-mode=Node,RBAC" in args and f"--bind-address={lay.NODE_IP}" in args
    assert not [a for a in args if "admission" in a and "PodSecurity" in a]  # a default plugin: left on
    network = host.cni_config(layout)
    assert network["plugins"][0]["bridge"] == lay.BRIDGE and network["plugins"][0]["ipam"]["dataDir"] == str(
        layout.cni_data)


def test_a_kubeconfig_carries_its_identity_inline(tmp_path):
    layout = lay.Layout(state=tmp_path, run=tmp_path / "run")
    pki.create_all(layout.pki, components.IDENTITIES)
    components.write_kubeconfigs(layout)
    admin = yaml.safe_load(layout.admin_kubeconfig.read_text())
    assert admin["clusters"][0]["cluster"]["server"] == "https://10.244.0.1:6443"
    assert admin["users"][0]["name"] == "bertology-admin" and "client-key-data" in admin["users"][0]["user"]
    before = layout.kubeconfig("kubelet").stat().st_mtime_ns
    components.write_kubeconfigs(layout)  # unchanged: not written again (a running component may watch it)
    assert layout.kubeconfig("kubelet").stat().st_mtime_ns == before


IPTABLES_SAVE = """# Generated by iptables-save
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-1a2b3c4d5e6f7a8b9c0d1e2f - [0:0]
:CNI-ffffffffffffffffffffffff - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -s 10.244.0.5/32 -m comment --comment "name: \\"bertology\\" id: \\"0123\\"" -j CNI-1a2b3c4d5e6f7a8b9c0d1e2f
-A POSTROUTING -s 10.88.0.3/32 -m comment --comment "name: \\"podman\\" id: \\"4567\\"" -j CNI-ffffffffffffffffffffffff
-A KUBE-POSTROUTING -j MASQUERADE
COMMIT
"""


def test_only_the_clusters_own_iptables_rules_are_its_leftovers(monkeypatch):
    """kube-proxy's KUBE-* chains and the bridge plugin's rules for the `bertology` network are the cluster's;
    another network's (podman's) are not."""
    monkeypatch.setattr(host, "_run", lambda *argv, check=True: subprocess.CompletedProcess(
        argv, 0, IPTABLES_SAVE if argv[-1] == "nat" and argv[0] == "iptables-save" else "", ""))
    found = host.cluster_rules()
    assert any("KUBE-SERVICES" in r for r in found) and any('bertology' in r for r in found)
    assert not any("podman" in r for r in found)


def test_a_component_is_started_detached_and_stopped_by_its_pid_file(tmp_path):
    layout = lay.Layout(state=tmp_path / "state", run=tmp_path / "run")
    layout.state.mkdir()
    sleep = shutil.which("sleep")
    pid = processes.start(layout, "sleeper", [sleep, "300"])
    assert processes.pid_of(layout, "sleeper") == pid
    assert Path(f"/proc/{pid}/stat").read_text().split()[5] == str(pid)  # its own session
    processes.stop(layout, "sleeper", grace=5)
    assert processes.pid_of(layout, "sleeper") is None and not layout.pidfile("sleeper").exists()
    # a pid file whose pid is now another program's is not that component
    layout.pidfile("other").write_text(f"{pid} /nonexistent/binary\n")
    assert processes.pid_of(layout, "other") is None


def test_a_component_that_exits_says_so_with_its_log(tmp_path):
    layout = lay.Layout(state=tmp_path / "state", run=tmp_path / "run")
    layout.state.mkdir()
    processes.start(layout, "fails", [sys.executable, "-c", "print('cannot bind 10.244.0.1:6443'); raise SystemExit(1)"])
    with pytest.raises(processes.StartFailed, match=r"fails exited before ready:\n(.|\n)*cannot bind"):
        processes.wait_for(layout, "fails", "ready", lambda: False, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0 or not host.cgroup_hierarchies(), reason="cgroups are written as root")
def test_cluster_down_kills_what_outlived_its_pod_and_removes_every_cgroup():
    """A pod's process whose shim was killed before its pod was removed still sits in a cgroup under the
    kubelet's root; such a cgroup cannot be removed while it holds a process, so going down kills it."""
    name = f"bertology-test-{os.getpid()}"
    host.make_cgroup(f"{name}/kubepods/pod1")
    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        for hierarchy in host.cgroup_hierarchies():
            (hierarchy / name / "kubepods" / "pod1" / "cgroup.procs").write_text(str(orphan.pid))
        assert host.cgroup_processes(name) == {orphan.pid: "sleep"}
        assert host.remove_cgroups(name, timeout=30) == []
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert not any((hierarchy / name).exists() for hierarchy in host.cgroup_hierarchies())
    finally:
        orphan.kill()
        host.remove_cgroups(name, timeout=5)
