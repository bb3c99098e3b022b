"""What the host needs before a kubelet can run pods on it, and undoing all of it.

Preparing (as hack/local-up-cluster.sh and kubeadm's preflight expect a node to be):
- `/` shared (`mount --make-rshared /`): the kubelet's volume mounts must propagate into containers;
- IPv4 forwarding and bridge netfilter on, so that pods reach Services through kube-proxy's rules;
- the host-only bridge `bertology0` with the node's address (layout.py), and the bridge CNI network on it;
- the cgroup `bertology-cluster` in every cgroup v1 hierarchy: the kubelet's cgroupRoot, so that every pod's
  cgroup lies under it.

Undoing: the previous sysctl values and mount propagation of `/` are written down when first changed and
put back; every mount under the state and run directories is unmounted, deepest first; the cgroups under
`bertology-cluster` are removed, deepest first, after any process left in them (a pod's that outlived its
shim) is killed; every iptables chain the cluster made (kube-proxy's KUBE-*, and the bridge plugin's CNI-*
chains of the `bertology` network) is flushed and deleted; the bridge is deleted. `leftovers()` lists
anything still there, for `make cluster-down` to fail on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from bertology.errors import BadInput
from bertology.localcluster import layout as lay

CGROUP_ROOT = "bertology-cluster"
CGROUPS = Path("/sys/fs/cgroup")
SYSCTLS = {"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"}
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")  # Debian's containernetworking-plugins, upstream's
# containerd's compiled-in state directory: its shims' sockets (/run/containerd/s) and ctr's FIFOs go there
# whatever its configuration says; removed on the way down when the cluster created it
CONTAINERD_DEFAULT_STATE = Path("/run/containerd")
APT_PACKAGES = ("runc", "iptables", "conntrack", "containernetworking-plugins", "podman", "docker-registry", "gcc",
                "libc6-dev")


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def cni_bin_dir() -> str:
    for directory in CNI_BIN_DIRS:
        if Path(directory, "bridge").is_file():
            return directory
    raise BadInput("no CNI plugins (bridge, host-local, loopback) in /usr/lib/cni or /opt/cni/bin: "
                   "apt-get install containernetworking-plugins")


def check_tools() -> None:
    """Everything the node needs from the host, named in one line when missing (before anything starts)."""
    if os.geteuid() != 0:
        raise BadInput("the local cluster needs root (mounts, cgroups, iptables, a bridge): run it as root or "
                       "with sudo")
    missing = [tool for tool in ("runc", "iptables", "ip", "mount", "podman", "docker-registry")
               if shutil.which(tool) is None]
    if missing:
        raise BadInput(f"missing on this machine: {', '.join(missing)}: apt-get install "
                       f"{' '.join(APT_PACKAGES)}")
    cni_bin_dir()
    if not (CGROUPS / "memory").is_dir() and not (CGROUPS / "cgroup.controllers").is_file():
        raise BadInput(f"no cgroup hierarchy at {CGROUPS}: the kubelet needs cgroups")


# --- cgroups ---------------------------------------------------------------------------------------------


def cgroup_v1() -> bool:
    return not (CGROUPS / "cgroup.controllers").is_file()


def cgroup_hierarchies() -> list[Path]:
    """Each mounted hierarchy's root: on cgroup v1 every /sys/fs/cgroup/<controller> (and name=systemd,
    unified); on v2 the one root."""
    if not cgroup_v1():
        return [CGROUPS]
    return sorted(p for p in CGROUPS.iterdir() if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists())


def make_cgroup(name: str = CGROUP_ROOT) -> None:
    """The cgroup `name` (a path under each hierarchy's root), and each one above it, in every hierarchy."""
    for hierarchy in cgroup_hierarchies():
        parent = hierarchy
        for part in Path(name).parts:
            cgroup = parent / part
            cgroup.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":  # a v1 cpuset child starts with no cpus and no mems
                for key in ("cpuset.cpus", "cpuset.mems"):
                    (cgroup / key).write_text((parent / key).read_text())
            parent = cgroup


def describe(processes: dict[int, str]) -> str:
    """`pid command, ...` of cgroup_processes()' answer, in pid order."""
    return ", ".join(f"{pid} {comm}" for pid, comm in sorted(processes.items()))


def cgroup_processes(name: str = CGROUP_ROOT) -> dict[int, str]:
    """pid -> command of every process in a cgroup under `name`, in any hierarchy."""
    found = {}
    for hierarchy in cgroup_hierarchies():
        for procs in (hierarchy / name).rglob("cgroup.procs"):
            try:
                pids = [int(pid) for pid in procs.read_text().split()]
            except OSError:  # the cgroup went while it was read
                continue
            for pid in pids:
                try:
                    found[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    found[pid] = "?"
    return found


def _remove_cgroup_trees(name: str) -> list[str]:
    failed = []
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / name
        if not root.is_dir():
            continue
        for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [root]:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as error:
                failed.append(f"{directory}: {error.strerror}")
    return failed


def remove_cgroups(name: str = CGROUP_ROOT, *, timeout: float = 30.0) -> list[str]:
    """Removes every cgroup under the cluster's root, deepest first; returns those it could not.

    A cgroup that still holds a process cannot be removed. Every process under the root is a pod's (the
    kubelet's cgroupRoot holds nothing else), and one can outlive its pod: killing the shims orphans their
    containers' processes rather than killing them, so a container the CRI did not remove (its `rmp` timed
    out, or a kubelet started it again) is left running. So each is thawed (a paused pod's tasks take no
    signal while frozen) and killed, and the removal retried while the kernel still counts an exiting
    process in its cgroup."""
    deadline = time.monotonic() + timeout
    while True:
        for hierarchy in cgroup_hierarchies():
            for state in (hierarchy / name).rglob("freezer.state"):
                with contextlib.suppress(OSError):
                    state.write_text("THAWED")
        for pid in cgroup_processes(name):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        failed = _remove_cgroup_trees(name)
        if not failed or time.monotonic() > deadline:
            return failed
        time.sleep(0.2)


# --- mounts, sysctls -------------------------------------------------------------------------------------


def _mountinfo() -> list[tuple[str, str]]:
    """(mount point, optional fields) of every mount, in /proc/self/mountinfo's order."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        optional = fields[6:fields.index("-")]
        mounts.append((fields[4].encode().decode("unicode_escape"), " ".join(optional)))
    return mounts


def mounts_under(*roots: Path) -> list[str]:
    prefixes = [str(r).rstrip("/") + "/" for r in roots]
    return [point for point, _ in _mountinfo() if any(point.startswith(p) or point == p[:-1] for p in prefixes)]


def unmount_under(*roots: Path) -> None:
    for point in sorted(set(mounts_under(*roots)), key=lambda p: -p.count("/")):
        _run("umount", "-l", point, check=False)


def root_shared() -> bool:
    return any(point == "/" and "shared:" in optional for point, optional in _mountinfo())


def prepare(layout: lay.Layout) -> None:
    """Mount propagation, sysctls, the bridge, the CNI network and the cgroup root (see the module's doc);
    what it changes of the host's own settings is written to STATE/host.json first."""
    record = layout.state / "host.json"
    previous = json.loads(record.read_text()) if record.exists() else {
        "root_shared": root_shared(),
        "sysctls": {key: _sysctl_read(key) for key in SYSCTLS},
        "run_containerd": CONTAINERD_DEFAULT_STATE.exists(),
    }
    record.write_text(json.dumps(previous))
    if not root_shared():
        _run("mount", "--make-rshared", "/")
    for key, value in SYSCTLS.items():
        _sysctl_write(key, value)
    if not Path(f"/sys/class/net/{lay.BRIDGE}").exists():
        _run("ip", "link", "add", lay.BRIDGE, "type", "bridge")
    if lay.NODE_IP not in _run("ip", "-4", "-o", "addr", "show", "dev", lay.BRIDGE).stdout:
        _run("ip", "addr", "add", f"{lay.NODE_IP}/24", "dev", lay.BRIDGE)
    _run("ip", "link", "set", lay.BRIDGE, "up")
    layout.cni_conf.mkdir(parents=True, exist_ok=True)
    (layout.cni_conf / "10-bertology.conflist").write_text(json.dumps(cni_config(layout), indent=2))
    make_cgroup()


def cni_config(layout: lay.Layout) -> dict:
    """The pods' network: the bridge plugin on `bertology0` with host-local addresses, masquerading what
    leaves the pod subnet, hairpin on (a pod reaching itself through a Service), and the portmap plugin."""
    return {
        "cniVersion": "1.0.0",
        "name": lay.CNI_NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": lay.BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(layout.cni_data),
                      "ranges": [[{"subnet": lay.POD_SUBNET, "gateway": lay.NODE_IP}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def _sysctl_read(key: str) -> str | None:
    path = _sysctl_path(key)
    return path.read_text().strip() if path.exists() else None


def _sysctl_write(key: str, value: str) -> None:
    path = _sysctl_path(key)
    if path.exists():
        path.write_text(value)


# --- iptables --------------------------------------------------------------------------------------------

_KUBE_CHAIN = re.compile(r"^:(KUBE-[A-Z0-9-]+)")
_CNI_RULE = re.compile(r'-A (\S+) .*--comment "name: \\?"?' + re.escape(lay.CNI_NETWORK) + r'\b')


def cluster_rules() -> list[str]:
    """Every iptables rule and chain of the cluster still present: kube-proxy's KUBE-* chains and the
    rules that jump to them, and the bridge plugin's rules for the `bertology` network."""
    found = []
    for table in ("filter", "nat", "mangle"):
        dump = _run("iptables-save", "-t", table, check=False).stdout
        for line in dump.splitlines():
            if _KUBE_CHAIN.match(line) or (line.startswith("-A") and ("KUBE-" in line or _CNI_RULE.match(line))):
                found.append(f"{table}: {line}")
    return found


def remove_rules() -> None:
    """Deletes what cluster_rules() finds: the rules first (so no chain is still referenced), then the chains
    (kube-proxy's, and the CNI-* chains that only the `bertology` network's rules jumped to)."""
    for table in ("filter", "nat", "mangle"):
        dump = _run("iptables-save", "-t", table, check=False).stdout
        chains = set()
        for line in dump.splitlines():
            if line.startswith("-A") and ("KUBE-" in line or _CNI_RULE.match(line)):
                jump = re.search(r"-j (CNI-[0-9a-f]+)", line)
                if jump:
                    chains.add(jump.group(1))
                rule = shlex.split(line)
                _run("iptables", "-t", table, "-D", *rule[1:], check=False)
        dump = _run("iptables-save", "-t", table, check=False).stdout
        chains |= {m.group(1) for m in map(_KUBE_CHAIN.match, dump.splitlines()) if m}
        for chain in sorted(chains):
            _run("iptables", "-t", table, "-F", chain, check=False)
        for chain in sorted(chains):
            _run("iptables", "-t", table, "-X", chain, check=False)


# --- undoing ---------------------------------------------------------------------------------------------


def restore(layout: lay.Layout) -> None:
    """Everything prepare() and the cluster changed, put back (see the module's doc)."""
    unmount_under(layout.state, layout.run)
    remove_cgroups()
    remove_rules()
    if Path(f"/sys/class/net/{lay.BRIDGE}").exists():
        _run("ip", "link", "delete", lay.BRIDGE, check=False)
    record = layout.state / "host.json"
    if record.exists():
        previous = json.loads(record.read_text())
        for key, value in previous["sysctls"].items():
            if value is not None:
                _sysctl_write(key, value)
        if not previous["root_shared"]:
            _run("mount", "--make-rprivate", "/", check=False)
        if not previous.get("run_containerd", True):
            shutil.rmtree(CONTAINERD_DEFAULT_STATE, ignore_errors=True)
        record.unlink()


def leftovers(layout: lay.Layout) -> list[str]:
    """What of the cluster is still on the host: mounts, cgroups, iptables rules, the bridge."""
    found = [f"mount {m}" for m in mounts_under(layout.state, layout.run)]
    held = cgroup_processes()
    holding = f" (still holding {describe(held)})" if held else ""
    for hierarchy in cgroup_hierarchies():
        if (hierarchy / CGROUP_ROOT).exists():
            found.append(f"cgroup {hierarchy / CGROUP_ROOT}{holding}")
    found += [f"iptables {rule}" for rule in cluster_rules()]
    if Path(f"/sys/class/net/{lay.BRIDGE}").exists():
        found.append(f"network interface {lay.BRIDGE}")
    return found
