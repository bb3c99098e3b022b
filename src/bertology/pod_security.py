"""The Kubernetes "restricted" Pod Security Standard, checked on a Pod manifest (a dict), offline.

A namespace labelled `pod-security.kubernetes.io/enforce: restricted` refuses a pod that fails any of
these checks; the step library must pass them before it reaches one (README, "Pod Security"). The rules
are the Baseline and Restricted rows of https://kubernetes.io/docs/concepts/security/pod-security-standards/
as the admission controller implements them: k8s.io/pod-security-admission, policy/check_<id>.go, at
the Kubernetes version `make lint` validates against (KUBE_VERSION, 1.35). Each check below names its
file; the check ids are that package's. No library implements these in Python; the rules are short.

`kubelet_refusals` is the kubelet's own runAsNonRoot check on an admitted pod, which decides whether its
containers start at all (the controller's executor settings reach other teams' pods too: see
docs/kubernetes.md, "What the chart changes for other tenants").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

DOCS = "https://kubernetes.io/docs/concepts/security/pod-security-standards/"
KUBE_VERSION = "1.35"

# check_seLinuxOptions.go selinuxAllowedTypes1_31
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}  # 1.31+
# check_sysctls.go sysctlsAllowedV1Dot32 (1.32 to 1.36)
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
}
# check_restrictedVolumes.go restrictedVolumes_1_0: the only inline volume sources Restricted allows.
ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                   "persistentVolumeClaim", "projected", "secret"}
_SECCOMP_OK = ("RuntimeDefault", "Localhost")
_APPARMOR_OK = ("RuntimeDefault", "Localhost")


def containers(spec: dict) -> Iterator[dict]:
    """Every container of a pod spec, as policy/visitor.go visitContainers walks them."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(holder: dict) -> dict:
    return holder.get("securityContext") or {}


def _bad_containers(spec: dict, bad: Callable[[dict], bool]) -> list[str]:
    return [c.get("name", "?") for c in containers(spec) if bad(_sc(c))]


def _user_namespace(spec: dict) -> bool:
    """helpers.go relaxPolicyForUserNamespacePod: hostUsers false relaxes the run-as checks (1.35+)."""
    return spec.get("hostUsers") is False


def host_process(meta: dict, spec: dict) -> list[str]:
    """Baseline "HostProcess" (check_windowsHostProcess.go): windowsOptions.hostProcess not true."""
    bad = ["pod"] if (_sc(spec).get("windowsOptions") or {}).get("hostProcess") is True else []
    bad += _bad_containers(spec, lambda sc: (sc.get("windowsOptions") or {}).get("hostProcess") is True)
    return [f"{', '.join(bad)}: securityContext.windowsOptions.hostProcess=true"] if bad else []


def host_namespaces(meta: dict, spec: dict) -> list[str]:
    """Baseline "Host Namespaces" (check_hostNamespaces.go): hostNetwork, hostPID, hostIPC not true."""
    return [f"spec.{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k) is True]


def privileged(meta: dict, spec: dict) -> list[str]:
    """Baseline "Privileged Containers" (check_privileged.go): securityContext.privileged not true."""
    bad = _bad_containers(spec, lambda sc: sc.get("privileged") is True)
    return [f"containers {bad} must not set securityContext.privileged=true"] if bad else []


def capabilities(meta: dict, spec: dict) -> list[str]:
    """Restricted "Capabilities" (check_capabilities_restricted.go, which overrides Baseline's): every
    container drops ALL and adds nothing but NET_BIND_SERVICE."""
    problems = []
    for c in containers(spec):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"container '{c.get('name')}' must set securityContext.capabilities.drop=[\"ALL\"]")
        added = [a for a in caps.get("add") or [] if a != "NET_BIND_SERVICE"]
        if added:
            problems.append(f"container '{c.get('name')}' must not add capabilities {added}")
    return problems


def host_ports(meta: dict, spec: dict) -> list[str]:
    """Baseline "Host Ports" (check_hostPorts.go): every containerPort's hostPort unset or 0."""
    bad = [f"{c.get('name')}:{p['hostPort']}" for c in containers(spec)
           for p in c.get("ports") or [] if p.get("hostPort")]
    return [f"hostPorts {bad}"] if bad else []


def host_probes(meta: dict, spec: dict) -> list[str]:
    """Baseline "Host Probes / Lifecycle Hooks" (check_hostProbesAndhostLifecycle.go, 1.34+): no
    httpGet/tcpSocket `host` in a probe or lifecycle handler."""
    bad = []
    for c in containers(spec):
        handlers = [c.get(k) for k in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(k) for k in ("postStart", "preStop")]
        for handler in filter(None, handlers):
            bad += [f"{c.get('name')}: {kind}.host={handler[kind]['host']}" for kind in ("httpGet", "tcpSocket")
                    if (handler.get(kind) or {}).get("host")]
    return [f"probe or lifecycle hosts {bad}"] if bad else []


def app_armor(meta: dict, spec: dict) -> list[str]:
    """Baseline "AppArmor" (check_appArmorProfile.go): appArmorProfile.type RuntimeDefault, Localhost or
    unset; the beta annotation runtime/default, localhost/* or empty."""
    bad = ["pod"] if (_sc(spec).get("appArmorProfile") or {}).get("type", "RuntimeDefault") not in _APPARMOR_OK \
        else []
    bad += _bad_containers(spec, lambda sc: (sc.get("appArmorProfile") or {}).get("type", "RuntimeDefault")
                           not in _APPARMOR_OK)
    prefix = "container.apparmor.security.beta.kubernetes.io/"
    bad += [f"{k}={v}" for k, v in (meta.get("annotations") or {}).items()
            if k.startswith(prefix) and v and v != "runtime/default" and not v.startswith("localhost/")]
    return [f"forbidden AppArmor profiles: {bad}"] if bad else []


def se_linux(meta: dict, spec: dict) -> list[str]:
    """Baseline "SELinux" (check_seLinuxOptions.go, 1.31+): seLinuxOptions.type one of the container
    types or unset; user and role unset."""
    def bad_options(sc: dict) -> bool:
        options = sc.get("seLinuxOptions") or {}
        return options.get("type", "") not in _SELINUX_TYPES or bool(options.get("user") or options.get("role"))

    bad = (["pod"] if bad_options(_sc(spec)) else []) + _bad_containers(spec, bad_options)
    return [f"{bad} set forbidden securityContext.seLinuxOptions"] if bad else []


def proc_mount(meta: dict, spec: dict) -> list[str]:
    """Restricted "/proc Mount Type" (check_procMount_restricted.go, 1.35+: no user-namespace exception):
    procMount unset or Default."""
    bad = _bad_containers(spec, lambda sc: sc.get("procMount", "Default") != "Default")
    return [f"containers {bad} must not set securityContext.procMount"] if bad else []


def seccomp(meta: dict, spec: dict) -> list[str]:
    """Restricted "Seccomp" (check_seccompProfile_restricted.go): RuntimeDefault or Localhost at the pod
    level, or on every container; a container may leave it unset only when the pod sets it."""
    pod_type = (_sc(spec).get("seccompProfile") or {}).get("type")
    problems = [f"pod must not set securityContext.seccompProfile.type to {pod_type}"] \
        if pod_type is not None and pod_type not in _SECCOMP_OK else []
    for c in containers(spec):
        kind = (_sc(c).get("seccompProfile") or {}).get("type")
        if kind is not None and kind not in _SECCOMP_OK:
            problems.append(f"container '{c.get('name')}' must not set seccompProfile.type to {kind}")
        elif kind is None and pod_type not in _SECCOMP_OK:
            problems.append(f"pod or container '{c.get('name')}' must set securityContext.seccompProfile.type "
                            "to RuntimeDefault or Localhost")
    return problems


def sysctls(meta: dict, spec: dict) -> list[str]:
    """Baseline "Sysctls" (check_sysctls.go): only the safe, namespaced set."""
    bad = [s.get("name") for s in _sc(spec).get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    return [f"forbidden sysctls {bad}"] if bad else []


def volume_types(meta: dict, spec: dict) -> list[str]:
    """Restricted "Volume Types" (check_restrictedVolumes.go, which overrides Baseline's "HostPath
    Volumes", check_hostPathVolumes.go): configMap, csi, downwardAPI, emptyDir, ephemeral, image,
    persistentVolumeClaim, projected, secret only (a volume with no source is defaulted to emptyDir)."""
    bad = [f"{v.get('name')} ({', '.join(sorted(set(v) - {'name'}))})" for v in spec.get("volumes") or []
           if not set(v) - {"name"} <= ALLOWED_VOLUMES]
    return [f"restricted volume types: {bad}"] if bad else []


def privilege_escalation(meta: dict, spec: dict) -> list[str]:
    """Restricted "Privilege Escalation" (check_allowPrivilegeEscalation.go): every container sets
    allowPrivilegeEscalation=false (unset is refused: there is no pod-level field)."""
    if (spec.get("os") or {}).get("name") == "windows":
        return []
    bad = _bad_containers(spec, lambda sc: sc.get("allowPrivilegeEscalation") is not False)
    return [f"containers {bad} must set securityContext.allowPrivilegeEscalation=false"] if bad else []


def run_as_non_root(meta: dict, spec: dict) -> list[str]:
    """Restricted "Running as Non-root" (check_runAsNonRoot.go): runAsNonRoot true on the pod, with no
    container setting false, or true on every container."""
    if _user_namespace(spec):
        return []
    pod = _sc(spec).get("runAsNonRoot")
    problems = ["pod must not set securityContext.runAsNonRoot=false"] if pod is False else []
    for c in containers(spec):
        own = _sc(c).get("runAsNonRoot")
        if own is False:
            problems.append(f"container '{c.get('name')}' must not set securityContext.runAsNonRoot=false")
        elif own is None and pod is not True:
            problems.append(f"pod or container '{c.get('name')}' must set securityContext.runAsNonRoot=true")
    return problems


def run_as_user(meta: dict, spec: dict) -> list[str]:
    """Restricted "Running as Non-root user" (check_runAsUser.go, 1.23+): runAsUser never 0."""
    if _user_namespace(spec):
        return []
    bad = (["pod"] if _sc(spec).get("runAsUser") == 0 else []) + \
        _bad_containers(spec, lambda sc: sc.get("runAsUser") == 0)
    return [f"{bad} must not set runAsUser=0"] if bad else []


# Check id (pod-security-admission's) -> check: the Restricted level, in the order of the docs' Baseline then
# Restricted rows; where a Restricted check overrides a Baseline one (OverrideCheckIDs), only it runs.
CHECKS: dict[str, Callable[[dict, dict], list[str]]] = {
    "windowsHostProcess": host_process,
    "hostNamespaces": host_namespaces,
    "privileged": privileged,
    "hostPorts": host_ports,
    "hostProbesAndHostLifecycle": host_probes,
    "appArmorProfile": app_armor,
    "seLinuxOptions": se_linux,
    "procMount_restricted": proc_mount,
    "sysctls": sysctls,
    "restrictedVolumes": volume_types,
    "allowPrivilegeEscalation": privilege_escalation,
    "runAsNonRoot": run_as_non_root,
    "runAsUser": run_as_user,
    "seccompProfile_restricted": seccomp,
    "capabilities_restricted": capabilities,
}


def violations(pod: dict) -> dict[str, list[str]]:
    """The restricted checks a Pod manifest fails, by check id (empty: admitted)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    found = {check: check_pod(meta, spec) for check, check_pod in CHECKS.items()}
    return {check: problems for check, problems in found.items() if problems}


# --- the kubelet's own check, after admission ---------------------------------------------------------------
# An admitted pod can still fail to start: the kubelet refuses a container whose effective runAsNonRoot is
# true when it cannot see that the container runs as someone other than root, and the pod stays Pending
# (CreateContainerConfigError). Kubernetes pkg/kubelet/kuberuntime/security_context_others.go
# verifyRunAsNonRoot, with the image's user from kuberuntime_container.go getImageUser ("If non of them is
# set, treat it as root.": no uid and no user name count as uid 0) and the effective context from
# pkg/securitycontext/util.go DetermineEffectiveSecurityContext (a container's own field wins over the pod's).

ImageUser = int | str | None  # the image's user: a uid, a user name, or unset (root)


def kubelet_refusals(pod: dict, image_user: Callable[[str], ImageUser]) -> dict[str, str]:
    """The containers of a Pod manifest the kubelet would refuse to start, by name, with its message.

    `image_user(image)` is the user the image's config names (Dockerfile USER), as getImageUser reads it.
    verifyRunAsNonRoot:
        if effectiveSc == nil || effectiveSc.RunAsNonRoot == nil || !*effectiveSc.RunAsNonRoot { return nil }
        if effectiveSc.RunAsUser != nil { if *effectiveSc.RunAsUser == 0 { "container's runAsUser breaks
            non-root policy" } return nil }
        case uid == nil && len(username) > 0: "container has runAsNonRoot and image has non-numeric user"
        case uid != nil: if *uid == 0 { "container has runAsNonRoot and image will run as root" }
    """
    spec, name = pod.get("spec") or {}, (pod.get("metadata") or {}).get("name")
    refused = {}
    for container in containers(spec):
        effective = {k: v for k, v in _sc(spec).items() if k in ("runAsNonRoot", "runAsUser")}
        effective.update({k: v for k, v in _sc(container).items() if k in ("runAsNonRoot", "runAsUser")})
        if effective.get("runAsNonRoot") is not True:
            continue
        where = f"(pod: {name}, container: {container.get('name')})"
        if effective.get("runAsUser") is not None:
            if effective["runAsUser"] == 0:
                refused[container.get("name")] = f"container's runAsUser breaks non-root policy {where}"
            continue
        user = image_user(container.get("image", ""))
        user = int(user) if isinstance(user, str) and user.isdigit() else user
        if isinstance(user, str) and user:
            refused[container.get("name")] = (f"container has runAsNonRoot and image has non-numeric user ({user}), "
                                              f"cannot verify user is non-root {where}")
        elif not user:  # 0, or unset: treated as root
            refused[container.get("name")] = f"container has runAsNonRoot and image will run as root {where}"
    return refused
