"""Every pod the step library can create passes the Kubernetes "restricted" Pod Security Standard, rule by
rule, and each rule is shown to refuse a pod that breaks it; the chart's NetworkPolicy selects exactly those
pods.

The rules are the Baseline and Restricted rows of https://kubernetes.io/docs/concepts/security/pod-security-standards/
as the admission controller implements them (k8s.io/pod-security-admission policy/check_<id>.go; the check
ids below are that package's). The pods are built as Argo's controller builds them (bertology.argo.pods,
workflow/controller/workflowpod.go): from the chart's rendered WorkflowTemplates and CronWorkflow, from the
library as `kubectl apply` installs it, and from every workflows/*.yaml, under Argo's default controller
settings (no executor securityContext): our templates give Argo's init and wait containers what the standard
asks of each container through their own podSpecPatch (docs/kubernetes.md, "Pod Security and the network").
Nothing of ours is controller-wide, so another team's Workflow (Argo's own hello-world, a resource template)
is built exactly as Argo builds it by default, its resource pods keeping Argo's lockdown (MinimalCtrSC).
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_chart import HELM, LIBRARY, REPO, _chart_with_library, by_kind, helm_template, render

from bertology.argo import pod_spec_patch, pods
from bertology.argo.documents import Source, load_library
from bertology.errors import BadInput
from bertology.pod_security import DOCS, kubelet_refusals, violations

pytestmark = pytest.mark.skipif(HELM is None, reason="helm is not installed (`make lint` puts it in .venv/bin)")

# Argo's examples/hello-world.yaml at v3.6.19 (the same file at v3.7.18 and v4.1.2): another team's plain
# Workflow, on the default argoexec image.
HELLO_WORLD = Path(__file__).parent / "fixtures" / "argo-examples" / "hello-world.yaml"
# Argo's examples/k8s-owner-reference.yaml at v3.6.19 (the same at v3.7.18; v4.1.2 adds a test label): another
# team's resource template, whose pod is argoexec alone
RESOURCE = Path(__file__).parent / "fixtures" / "argo-examples" / "k8s-owner-reference.yaml"
# What every pod template of ours patches into Argo's init and wait (workflows/templates/steps.yaml)
LOCKDOWN = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
STUDY_STEPS = {"plan", "prepare-data", "build-checkpoint", "finetune", "evaluate", "analyze", "aggregate"}
# The kinds of built-in objects that hold a pod template (none in the chart today: if one is added, it is
# checked like the step pods).
WORKLOADS = ("Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob")


def workload_pod(doc: dict) -> dict:
    """The pod of a built-in workload object (spec.template, or a CronJob's spec.jobTemplate.spec.template)."""
    if doc["kind"] == "Pod":
        return doc
    spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    return {"kind": "Pod", "metadata": spec["template"].get("metadata", {}), "spec": spec["template"]["spec"]}


@pytest.fixture(scope="module")
def executor() -> dict:
    """Argo's default controller: no `executor` setting (bertology needs none)."""
    return pods.controller_executor(None)


@pytest.fixture(scope="module")
def chart_dir(tmp_path_factory) -> Path:
    """The default render of the chart, as files: templates/ (its WorkflowTemplates), nightly.yaml,
    kubernetes.yaml (the rest)."""
    docs = render()
    out = tmp_path_factory.mktemp("chart")
    (out / "templates").mkdir()
    (out / "templates" / "chart.yaml").write_text(yaml.safe_dump_all(list(by_kind(docs, "WorkflowTemplate").values())))
    (out / "nightly.yaml").write_text(yaml.safe_dump_all(list(by_kind(docs, "CronWorkflow").values())))
    (out / "kubernetes.yaml").write_text(yaml.safe_dump_all([d for d in docs if "argoproj.io" not in d["apiVersion"]]))
    return out


def every_pod(chart_dir: Path, executor: dict) -> dict[str, list[dict]]:
    """Every pod spec there is, by where it comes from."""
    found: dict[str, list[dict]] = {}
    rendered, plain = load_library(chart_dir / "templates"), load_library(LIBRARY)
    for install, library, files in (
            ("chart", rendered, [chart_dir / "templates" / "chart.yaml", chart_dir / "nightly.yaml"]),
            ("kubectl apply", plain, sorted(LIBRARY.glob("*.yaml")))):
        for path in [*files, *sorted((REPO / "workflows").glob("*.yaml"))]:
            for key, made in pods.file_pods(path, library, executor).items():
                found[f"{install}: {key}"] = made
    workloads = [d for d in yaml.safe_load_all((chart_dir / "kubernetes.yaml").read_text()) if d["kind"] in WORKLOADS]
    found["chart: built-in workloads"] = [workload_pod(d) for d in workloads]
    return found


def template_name(pod: dict) -> str:
    return pod["metadata"]["annotations"]["workflows.argoproj.io/node-name"].split(".", 1)[1]


def test_every_pod_of_the_chart_and_every_workflow_passes_the_restricted_standard(chart_dir, executor):
    found = every_pod(chart_dir, executor)
    library = load_library(LIBRARY)
    pod_templates = {t["name"] for s in library.values() for t in s.spec["templates"] if "container" in t}
    # the nightly's exit handler too, and the queue watch's pass
    assert len(pod_templates) == 12 and {"verdict", "watch"} <= pod_templates
    for install in ("chart", "kubectl apply"):
        # every pod template of the library is reached, as a WorkflowTemplate's and through some workflow (the
        # queue watch's through the chart's CronWorkflow; without the chart it is submitted from its template)
        assert {template_name(p) for k, v in found.items() if k.startswith(f"{install}: WorkflowTemplate")
                for p in v} == pod_templates
        workflows = (f"{install}: Workflow-", f"{install}: CronWorkflow")
        reached = pod_templates if install == "chart" else pod_templates - {"watch"}
        assert {template_name(p) for k, v in found.items() if k.startswith(workflows) for p in v} == reached
        study = found[f"{install}: Workflow-reversed-layers"]
        assert STUDY_STEPS <= {template_name(p) for p in study}
        assert {template_name(p) for p in found[f"{install}: CronWorkflow-bertology-nightly-regression"]} >= \
            STUDY_STEPS | {"regress", "verdict"}
    assert {template_name(p) for p in found["chart: CronWorkflow-bertology-queue-watch"]} == {"watch"}
    checked = [(k, p) for k, v in found.items() for p in v]
    assert len(checked) > 200
    for where, pod in checked:
        assert violations(pod) == {}, (where, pod["metadata"]["name"])
        # the pods Argo makes: init, then wait and main (workflowpod_build_test.go assertLegacyPodShape)
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["init"], where
        assert [c["name"] for c in pod["spec"]["containers"]] == ["wait", "main"], where
        # /tmp, the only volume of ours, has a sizeLimit; Argo's own two emptyDirs cannot have one
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert set(volumes) == {"var-run-argo", "tmp-dir-argo", "tmp"}
        assert volumes["tmp"]["emptyDir"]["sizeLimit"] == "20Gi"
        # the step's own container: CPU and memory requests, a memory limit, a read-only root filesystem
        # (checkov's CKV_K8S_10, 12, 13 and 22, which .checkov.yaml skips for Argo's init and wait)
        # Argo's own two: exactly what the template's podSpecPatch gives them, merged in by name
        assert container(pod, "init")["securityContext"] == container(pod, "wait")["securityContext"] == LOCKDOWN
        main = container(pod, "main")
        assert {"cpu", "memory"} <= set(main["resources"]["requests"]), where
        assert "memory" in main["resources"]["limits"], where
        assert main["securityContext"]["readOnlyRootFilesystem"] is True, where
        # and the kubelet starts every container, whatever user the images name (all taken as root here)
        assert kubelet_refusals(pod, lambda image: None) == {}, where


def _without_pod_spec_patch(library: dict) -> dict:
    """The library with every podSpecPatch removed."""
    out = {}
    for name, source in library.items():
        doc = copy.deepcopy(source.doc)
        for template in doc["spec"].get("templates") or []:
            template.pop("podSpecPatch", None)
        out[name] = Source(source.path, doc)
    return out


def test_without_the_pod_spec_patch_argo_s_defaults_fail_exactly_the_per_container_rules(chart_dir, executor):
    """With no executor.securityContext, newExecContainer gives `init` and `wait` none: the pod-level
    runAsNonRoot and seccomp reach them, but allowPrivilegeEscalation and capabilities exist only per container
    (check_allowPrivilegeEscalation.go, check_capabilities_restricted.go), which is what the patch is for."""
    library = _without_pod_spec_patch(load_library(chart_dir / "templates"))
    found = pods.file_pods(REPO / "workflows" / "reversed-layers.yaml", library, executor)
    (made,) = found.values()
    assert made
    for pod in made:
        assert violations(pod) == {
            "allowPrivilegeEscalation": ["containers ['init', 'wait'] must set securityContext.allowPrivilegeEscalation=false"],
            "capabilities_restricted": [f"container '{c}' must set securityContext.capabilities.drop=[\"ALL\"]"
                                        for c in ("init", "wait")],
        }


def test_the_pod_spec_patch_holds_only_what_the_pod_level_cannot_give(chart_dir, executor):
    """Every pod template of ours carries the same patch; each of its two settings is one our pods fail the
    restricted standard without, and exists only per container (Kubernetes PodSecurityContext has no
    allowPrivilegeEscalation and no capabilities); it names only Argo's init and wait, and sets nothing else
    (no image, resources, user or read-only root filesystem: init writes a resource template's manifest to
    /tmp/manifest.yaml on its root filesystem, executor.go StageFiles)."""
    library = load_library(LIBRARY)
    patches = {t.get("podSpecPatch") for s in library.values() for t in s.spec["templates"] if "container" in t}
    assert len(patches) == 1 and None not in patches
    (text,) = patches
    assert yaml.safe_load(text) == {"initContainers": [{"name": "init", "securityContext": LOCKDOWN}],
                                    "containers": [{"name": "wait", "securityContext": LOCKDOWN}]}
    pod_level = {"seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup", "runAsNonRoot", "supplementalGroups",
                 "supplementalGroupsPolicy", "fsGroup", "fsGroupChangePolicy", "sysctls", "seccompProfile",
                 "appArmorProfile", "seLinuxChangePolicy"}  # core/v1 types.go PodSecurityContext
    assert not set(LOCKDOWN) & pod_level
    rendered = load_library(chart_dir / "templates")
    for key in LOCKDOWN:
        weaker = {k: v for k, v in LOCKDOWN.items() if k != key}
        patched = {}
        for name, source in rendered.items():
            doc = copy.deepcopy(source.doc)
            for template in doc["spec"]["templates"]:
                if template.get("podSpecPatch"):
                    template["podSpecPatch"] = yaml.safe_dump({
                        "initContainers": [{"name": "init", "securityContext": weaker}],
                        "containers": [{"name": "wait", "securityContext": weaker}]})
            patched[name] = Source(source.path, doc)
        (made,) = pods.file_pods(REPO / "workflows" / "reversed-layers.yaml", patched, executor).values()
        assert made and all(violations(pod) for pod in made), key
    init = container(pods.file_pods(REPO / "workflows" / "reversed-layers.yaml", rendered, executor)
                     ["Workflow-reversed-layers"][0], "init")
    assert "/tmp" not in {m["mountPath"] for m in init["volumeMounts"]}
    assert init["securityContext"].get("readOnlyRootFilesystem") is not True


# --- another team's Workflow under the same controller ---------------------------------------------------

def root_images(image: str) -> None:
    """The user the images of Argo's hello-world pod name: none, so the kubelet takes root (getImageUser).
    argoexec is the `argoexec` stage of Argo's Dockerfile (v3.6.19: `FROM gcr.io/distroless/static as
    argoexec-base` ... `FROM argoexec-base as argoexec`, no USER; only argoexec-nonroot has `USER 8737`);
    busybox's image names none either."""
    assert image.startswith((pods.DEFAULT_EXECUTOR_IMAGE.split(":")[0] + ":", "busybox")), image


def hello_world(executor: dict) -> dict:
    (made,) = pods.file_pods(HELLO_WORLD, {}, executor).values()
    (pod,) = made
    return pod


def test_another_teams_plain_workflow_gets_argo_s_defaults_because_nothing_of_ours_is_controller_wide(executor):
    """Argo's hello-world (no securityContext anywhere, the default root argoexec image): with no executor
    setting its init and wait have no securityContext at all (workflowpod.go newExecContainer:
    `SecurityContext: woc.controller.Config.GetExecutor().SecurityContext`, nil), and the kubelet starts all
    three containers. Our podSpecPatch is in our templates only."""
    assert executor == {}
    pod = hello_world(executor)
    assert "securityContext" not in pod["spec"]
    assert [c["image"] for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]] == \
        [pods.DEFAULT_EXECUTOR_IMAGE, pods.DEFAULT_EXECUTOR_IMAGE, "busybox"]
    for name in ("init", "wait", "main"):
        assert "securityContext" not in container(pod, name)
    assert kubelet_refusals(pod, root_images) == {}


def resource_pod(executor: dict) -> dict:
    (made,) = pods.file_pods(RESOURCE, {}, executor).values()
    (pod,) = made
    return pod


def test_another_teams_resource_template_keeps_argo_s_lockdown(executor):
    """A resource template's pod is argoexec alone: init and main (no wait: v3.6, and v3.7+ without archived
    logs), both newExecContainer's. With no executor.securityContext Argo locks them down itself
    (`if tmpl.GetType() == wfv1.TemplateTypeResource && exec.SecurityContext == nil { exec.SecurityContext =
    common.MinimalCtrSC() }`, the root filesystem read-only on main only): user 8737, no capabilities, no
    privilege escalation, RuntimeDefault seccomp, so the pod passes "restricted" with no pod-level setting."""
    pod = resource_pod(executor)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["init"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["main"]
    assert container(pod, "main")["command"][3:] == ["argoexec", "resource", "create"]
    minimal = pods.minimal_container_security()
    assert minimal["runAsUser"] == 8737 and minimal["capabilities"] == {"drop": ["ALL"]}
    assert container(pod, "main")["securityContext"] == minimal
    assert container(pod, "init")["securityContext"] == {k: v for k, v in minimal.items()
                                                         if k != "readOnlyRootFilesystem"}
    assert "securityContext" not in pod["spec"]
    assert violations(pod) == {}
    assert kubelet_refusals(pod, root_images) == {}


def test_any_controller_wide_executor_setting_would_end_that_lockdown_for_every_team():
    """Why bertology sets nothing controller-wide: the two settings our pods need, given as the controller's
    executor.securityContext, replace MinimalCtrSC on every resource template of every team (newExecContainer
    applies it only when there is none): their argoexec then runs as the image's user, root, and in a
    namespace enforcing "restricted" the pod is refused."""
    two = {"securityContext": dict(LOCKDOWN)}
    pod = resource_pod(two)
    for name in ("init", "main"):
        assert container(pod, name)["securityContext"] == LOCKDOWN
    assert set(violations(pod)) == {"runAsNonRoot", "seccompProfile_restricted"}
    # and a container-level runAsNonRoot would keep another team's plain pods Pending: verifyRunAsNonRoot
    # refuses the root argoexec image ("container has runAsNonRoot and image will run as root")
    strict = {"securityContext": {**LOCKDOWN, "runAsNonRoot": True}}
    refused = kubelet_refusals(hello_world(strict), root_images)
    assert set(refused) == {"init", "wait"}
    assert all(m.startswith("container has runAsNonRoot and image will run as root") for m in refused.values())


def test_kubelet_check_follows_verify_run_as_non_root():
    """security_context_others.go verifyRunAsNonRoot over DetermineEffectiveSecurityContext (a container's
    field wins over the pod's), the image's user as getImageUser reports it."""
    def pod(pod_sc: dict | None = None, sc: dict | None = None) -> dict:
        main = {"name": "main", "image": "img", **({"securityContext": sc} if sc is not None else {})}
        return {"metadata": {"name": "p"}, "spec": {"containers": [main], **({"securityContext": pod_sc} if pod_sc else {})}}

    def refused(p: dict, user) -> str | None:
        return kubelet_refusals(p, lambda image: user).get("main")

    assert refused(pod(), None) is None  # runAsNonRoot unset: anything runs
    assert refused(pod({"runAsNonRoot": False}), 0) is None
    assert refused(pod({"runAsNonRoot": True}), None).startswith("container has runAsNonRoot and image will run as root")
    assert refused(pod({"runAsNonRoot": True}), 0).startswith("container has runAsNonRoot and image will run as root")
    assert refused(pod({"runAsNonRoot": True}), "0").startswith("container has runAsNonRoot and image will run as root")
    assert refused(pod({"runAsNonRoot": True}), 8737) is None
    assert refused(pod({"runAsNonRoot": True}), "8737") is None
    assert refused(pod({"runAsNonRoot": True}), "argo").startswith(
        "container has runAsNonRoot and image has non-numeric user (argo), cannot verify user is non-root")
    assert refused(pod({"runAsNonRoot": True, "runAsUser": 10001}), 0) is None  # the pod's user, not the image's
    assert refused(pod({"runAsNonRoot": True, "runAsUser": 10001}, {"runAsUser": 0}), 8737).startswith(
        "container's runAsUser breaks non-root policy")
    assert refused(pod({"runAsNonRoot": True}, {"runAsNonRoot": False}), 0) is None  # the container's wins
    assert refused(pod(None, {"runAsNonRoot": True}), 0) is not None


@pytest.fixture(scope="module")
def finetune(chart_dir, executor) -> dict:
    """A real step pod: finetune of the reversed-layers study, from the rendered chart."""
    made = pods.file_pods(REPO / "workflows" / "reversed-layers.yaml", load_library(chart_dir / "templates"), executor)
    (pod,) = [p for p in made["Workflow-reversed-layers"] if template_name(p) == "finetune"]
    assert violations(pod) == {}
    return pod


def container(pod: dict, name: str) -> dict:
    spec = pod["spec"]
    return next(c for c in spec["initContainers"] + spec["containers"] if c["name"] == name)


def _set(path: str, value):
    """A change to a pod: `path` is dotted, from spec; `c:NAME.` starts at container NAME."""
    def change(pod: dict) -> None:
        keys = path.split(".")
        node = container(pod, keys.pop(0)[2:]) if keys[0].startswith("c:") else pod["spec"]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    return change


def _annotate(key: str, value: str):
    return lambda pod: pod["metadata"]["annotations"].update({key: value})


def _volume(source: dict, name: str = "extra"):
    return lambda pod: pod["spec"]["volumes"].append({"name": name, **source})


def _all(*changes):
    def change(pod: dict) -> None:
        for one in changes:
            one(pod)
    return change


# (row of the docs' Baseline / Restricted tables, the check that must refuse it, the change)
BROKEN = [
    ("HostProcess", "windowsHostProcess", _set("securityContext.windowsOptions", {"hostProcess": True})),
    ("HostProcess", "windowsHostProcess", _set("c:main.securityContext.windowsOptions", {"hostProcess": True})),
    ("Host Namespaces", "hostNamespaces", _set("hostNetwork", True)),
    ("Host Namespaces", "hostNamespaces", _set("hostPID", True)),
    ("Host Namespaces", "hostNamespaces", _set("hostIPC", True)),
    ("Privileged Containers", "privileged", _set("c:main.securityContext.privileged", True)),
    ("Capabilities", "capabilities_restricted", _set("c:main.securityContext.capabilities.add", ["SYS_ADMIN"])),
    ("Capabilities", "capabilities_restricted", _set("c:main.securityContext.capabilities.add", ["NET_RAW"])),
    ("Capabilities", "capabilities_restricted", _set("c:init.securityContext.capabilities.drop", [])),
    ("HostPath Volumes", "restrictedVolumes", _volume({"hostPath": {"path": "/var/run"}})),
    ("Host Ports", "hostPorts", _set("c:main.ports", [{"containerPort": 8080, "hostPort": 8080}])),
    ("Host Probes / Lifecycle Hooks", "hostProbesAndHostLifecycle",
     _set("c:main.livenessProbe", {"httpGet": {"host": "10.0.0.1", "port": 80}})),
    ("Host Probes / Lifecycle Hooks", "hostProbesAndHostLifecycle",
     _set("c:wait.lifecycle", {"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 80}}})),
    ("AppArmor", "appArmorProfile", _set("securityContext.appArmorProfile", {"type": "Unconfined"})),
    ("AppArmor", "appArmorProfile", _set("c:main.securityContext.appArmorProfile", {"type": "Unconfined"})),
    ("AppArmor", "appArmorProfile", _annotate("container.apparmor.security.beta.kubernetes.io/main", "unconfined")),
    ("SELinux", "seLinuxOptions", _set("securityContext.seLinuxOptions", {"type": "spc_t"})),
    ("SELinux", "seLinuxOptions", _set("c:main.securityContext.seLinuxOptions", {"user": "system_u"})),
    ("SELinux", "seLinuxOptions", _set("c:wait.securityContext.seLinuxOptions", {"role": "sysadm_r"})),
    ("/proc Mount Type", "procMount_restricted", _set("c:main.securityContext.procMount", "Unmasked")),
    ("Seccomp", "seccompProfile_restricted", _set("securityContext.seccompProfile", {"type": "Unconfined"})),
    ("Seccomp", "seccompProfile_restricted", _set("securityContext.seccompProfile", None)),
    ("Seccomp", "seccompProfile_restricted", _set("c:main.securityContext.seccompProfile", {"type": "Unconfined"})),
    ("Sysctls", "sysctls", _set("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "65536"}])),
    ("Volume Types", "restrictedVolumes", _volume({"nfs": {"server": "nfs.example", "path": "/"}})),
    ("Volume Types", "restrictedVolumes", _volume({"gitRepo": {"repository": "https://example/x.git"}})),
    ("Privilege Escalation", "allowPrivilegeEscalation", _set("c:main.securityContext.allowPrivilegeEscalation", True)),
    ("Privilege Escalation", "allowPrivilegeEscalation", _set("c:wait.securityContext.allowPrivilegeEscalation", None)),
    ("Running as Non-root", "runAsNonRoot", _set("securityContext.runAsNonRoot", False)),
    ("Running as Non-root", "runAsNonRoot", _set("securityContext.runAsNonRoot", None)),
    ("Running as Non-root", "runAsNonRoot", _set("c:init.securityContext.runAsNonRoot", False)),
    ("Running as Non-root user", "runAsUser", _set("securityContext.runAsUser", 0)),
    ("Running as Non-root user", "runAsUser", _set("c:main.securityContext.runAsUser", 0)),
]


@pytest.mark.parametrize("row, check, change", BROKEN,
                         ids=[f"{row}-{check}-{i}" for i, (row, check, _) in enumerate(BROKEN)])
def test_each_rule_refuses_a_pod_that_breaks_it(finetune, row, check, change):
    pod = copy.deepcopy(finetune)
    change(pod)
    assert set(violations(pod)) == {check}, f"{row} ({DOCS})"


# What the rows allow (the "Allowed Values" of each row and check file): these pods are admitted.
ALLOWED = [
    ("Capabilities: NET_BIND_SERVICE may be added", _set("c:main.securityContext.capabilities.add", ["NET_BIND_SERVICE"])),
    ("Seccomp: Localhost", _set("securityContext.seccompProfile", {"type": "Localhost", "localhostProfile": "p.json"})),
    ("Seccomp: set on every container instead of the pod",
     _all(*[_set(f"c:{c}.securityContext.seccompProfile", {"type": "RuntimeDefault"}) for c in ("init", "wait", "main")],
          _set("securityContext.seccompProfile", None))),
    ("Sysctls: a safe one", _set("securityContext.sysctls", [{"name": "net.ipv4.tcp_syncookies", "value": "1"}])),
    ("AppArmor: RuntimeDefault", _set("securityContext.appArmorProfile", {"type": "RuntimeDefault"})),
    ("AppArmor: localhost/ annotation", _annotate("container.apparmor.security.beta.kubernetes.io/main", "localhost/p")),
    ("SELinux: container_t", _set("securityContext.seLinuxOptions", {"type": "container_t", "level": "s0:c1"})),
    ("Volume Types: image, csi, projected, and a volume with no source (defaulted to emptyDir)",
     _all(_volume({"image": {"reference": "quay.io/x:1"}}, "a"), _volume({"csi": {"driver": "d"}}, "b"),
          _volume({"projected": {"sources": []}}, "c"), _volume({}, "d"))),
    ("Running as Non-root: any value in a user namespace (helpers.go relaxPolicyForUserNamespacePod)",
     _all(_set("hostUsers", False), _set("securityContext.runAsNonRoot", False), _set("securityContext.runAsUser", 0))),
    ("Windows pods: no allowPrivilegeEscalation (check_allowPrivilegeEscalation.go, 1.25+)",
     _all(_set("os", {"name": "windows"}), _set("c:wait.securityContext.allowPrivilegeEscalation", None))),
]


@pytest.mark.parametrize("what, change", ALLOWED, ids=[w.split(":")[0] + f"-{i}" for i, (w, _) in enumerate(ALLOWED)])
def test_what_each_rule_allows_is_admitted(finetune, what, change):
    pod = copy.deepcopy(finetune)
    change(pod)
    assert violations(pod) == {}, what


# --- the pods as Argo builds them (workflow/controller/workflowpod.go and its tests) ---------------------

HELLO = {"name": "whalesay", "container": {"image": "docker/whalesay:latest", "command": ["cowsay"],
                                           "args": ["hello world"]}}


def test_pod_metadata_workflow_level_then_template_level():
    """workflowpod_test.go TestPodMetadata (wfWithPodMetadataAndTemplateMetadata): addMetadata copies the
    Workflow's podMetadata, then the template's metadata over it."""
    template = {**HELLO, "metadata": {"annotations": {"workflow-level-pod-annotation": "fizz",
                                                      "template-level-pod-annotation": "hello"},
                                      "labels": {"workflow-level-pod-label": "buzz",
                                                 "template-level-pod-label": "world"}}}
    wf_spec = {"podMetadata": {"annotations": {"workflow-level-pod-annotation": "foo"},
                               "labels": {"workflow-level-pod-label": "bar"}}}
    meta = pods.pod(template, wf_spec, "hello-world", {})["metadata"]
    assert meta["annotations"]["workflow-level-pod-annotation"] == "fizz"
    assert meta["labels"]["workflow-level-pod-label"] == "buzz"
    assert meta["annotations"]["template-level-pod-annotation"] == "hello"
    assert meta["labels"]["template-level-pod-label"] == "world"
    # common.go LabelKeyWorkflow / LabelKeyCompleted, set by build() on every pod
    assert meta["labels"]["workflows.argoproj.io/workflow"] == "hello-world"
    assert meta["labels"]["workflows.argoproj.io/completed"] == "false"
    assert pods.pod(HELLO, wf_spec, "hello-world", {})["metadata"]["labels"]["workflow-level-pod-label"] == "bar"


def test_security_contexts_come_from_where_argo_takes_them():
    # workflowpod_test.go TestCtrlLevelExecutorSecurityContext: the wait container is containers[0] and
    # has the controller's executor securityContext
    pod = pods.pod(HELLO, {}, "wf", {"securityContext": {"runAsUser": 1000}})
    assert pod["spec"]["containers"][0]["name"] == "wait"
    assert pod["spec"]["containers"][0]["securityContext"] == {"runAsUser": 1000}
    assert pod["spec"]["initContainers"][0]["securityContext"] == {"runAsUser": 1000}
    assert "securityContext" not in pod["spec"]["containers"][1]  # main: only the template's
    # TestWFLevelSecurityContext / TestTmplLevelSecurityContext: runAsUser 1234 reaches the pod from either
    assert pods.pod(HELLO, {"securityContext": {"runAsUser": 1234}}, "wf", {})["spec"]["securityContext"] == \
        {"runAsUser": 1234}
    assert pods.pod({**HELLO, "securityContext": {"runAsUser": 1234}}, {}, "wf", {})["spec"]["securityContext"] \
        == {"runAsUser": 1234}
    # addSchedulingConstraints: the template's pod securityContext replaces the Workflow's, unmerged, so a
    # Workflow-level seccomp does not save a template that sets its own securityContext without one
    restricted = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    pod = pods.pod({**HELLO, "securityContext": {"runAsUser": 1000}}, {"securityContext": restricted}, "wf", {})
    assert pod["spec"]["securityContext"] == {"runAsUser": 1000}
    assert {"runAsNonRoot", "seccompProfile_restricted"} <= set(violations(pod))


def test_workflow_level_settings_reach_every_pod(finetune, chart_dir, executor):
    """build(): spec.hostNetwork of the Workflow; addMetadata: its podMetadata annotations; both can
    break the standard for every step of a study whose own templates are fine."""
    library = load_library(chart_dir / "templates")
    study = yaml.safe_load((REPO / "workflows" / "reversed-layers.yaml").read_text())
    study["spec"]["hostNetwork"] = True
    study["spec"]["podMetadata"] = {"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}}
    made = pods.workflow_pods(Source(Path("study.yaml"), study), library, executor)
    assert {template_name(p) for p in made} >= STUDY_STEPS
    for pod in made:
        assert set(violations(pod)) == {"hostNamespaces", "appArmorProfile"}


def test_pod_spec_patch_is_a_strategic_merge_by_container_name_applied_last():
    """util.ApplyPodSpecPatch: strategicpatch.StrategicMergePatch(podSpec, patch, apiv1.PodSpec{}) after the
    pod is built (createWorkflowPod; v4.1.2 podBuilder.build), the Workflow's patch first, then the
    template's (processPodSpecPatch). `containers` and `initContainers` merge by name (patchMergeKey "name"),
    in place; a map merges key by key and null deletes; a list without a merge key (args, tolerations,
    capabilities.drop) is replaced."""
    template = {**HELLO, "securityContext": {"runAsUser": 1000},
                "container": {**HELLO["container"], "securityContext": {"readOnlyRootFilesystem": True,
                                                                        "capabilities": {"drop": ["NET_RAW"]}}},
                "podSpecPatch": yaml.safe_dump({
                    "containers": [{"name": "main", "args": ["bye"], "securityContext": {"capabilities": {
                        "drop": ["ALL"]}}}, {"name": "wait", "securityContext": {"runAsUser": 5}}],
                    "securityContext": {"runAsUser": None, "runAsNonRoot": True}})}
    wf_spec = {"tolerations": [{"key": "a", "operator": "Exists"}],
               "podSpecPatch": '{"containers": [{"name": "wait", "securityContext": {"runAsUser": 4, "runAsGroup": 4}}],'
                               ' "tolerations": [{"key": "b", "operator": "Exists"}]}'}
    pod = pods.pod(template, wf_spec, "wf", {})
    assert [c["name"] for c in pod["spec"]["containers"]] == ["wait", "main"]  # merged in place, in order
    assert container(pod, "main")["args"] == ["bye"]
    assert container(pod, "main")["image"] == "docker/whalesay:latest"  # untouched fields stay
    assert container(pod, "main")["securityContext"] == {"readOnlyRootFilesystem": True,
                                                         "capabilities": {"drop": ["ALL"]}}
    assert container(pod, "wait")["securityContext"] == {"runAsUser": 5, "runAsGroup": 4}  # template's last
    assert pod["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]  # replaced, not appended
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True}  # null deleted runAsUser
    # a container the pod lacks is added as the patch gives it, without an image (the pod would be invalid:
    # what our patch would do under v4.1's init-less layout, which has no init or wait)
    added = pods.pod({**HELLO, "podSpecPatch": '{"containers": [{"name": "sidecar", "securityContext": {}}]}'},
                     {}, "wf", {})
    assert pod_spec_patch.apply({"containers": [{"name": "a"}]}, {"containers": [{"name": "b"}]}) == \
        {"containers": [{"name": "a"}, {"name": "b"}]}
    assert [c["name"] for c in added["spec"]["containers"]] == ["wait", "main", "sidecar"]
    assert "image" not in container(added, "sidecar")
    # in a container, env merges by name and volumeMounts by mountPath
    merged = pod_spec_patch.apply(
        {"containers": [{"name": "m", "env": [{"name": "A", "value": "1"}], "volumeMounts": [
            {"name": "x", "mountPath": "/x"}]}]},
        {"containers": [{"name": "m", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "3"}],
                         "volumeMounts": [{"name": "y", "mountPath": "/x", "readOnly": True}]}]})
    assert merged["containers"][0]["env"] == [{"name": "A", "value": "3"}, {"name": "B", "value": "2"}]
    assert merged["containers"][0]["volumeMounts"] == [{"name": "y", "mountPath": "/x", "readOnly": True}]


@pytest.mark.parametrize("patch, message", [
    ('{"containers": [{"name": "wait", "$patch": "delete"}]}',
     "podSpecPatch.containers[0].$patch: strategic merge directives are not modelled"),
    ('{"$setElementOrder/containers": [{"name": "main"}]}', "not a PodSpec field"),
    ('{"containers": [{"securityContext": {}}]}', "an element without its merge key 'name' cannot be merged"),
    ('{"hostnetwork": true}', "podSpecPatch key 'hostnetwork' is not a PodSpec field"),
    ('{"containers": [{"name": "main", "command": ["sh"]}]}',
     "podSpecPatch.containers[0].command: Argo changes a container's command after applying the patch"),
    ('{"containers": [{"name": "wait", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}]}',
     "podSpecPatch.containers[0].volumeMounts: Argo changes a container's volumeMounts after applying"),
    ('{"containers": [{"name": "main", "image": "{{inputs.parameters.image}}"}]}', "substituted per pod"),
    ("[1, 2]", "must be a YAML mapping of PodSpec fields, got list"),
    ("containers: [", "podSpecPatch is not YAML"),
])
def test_a_pod_spec_patch_that_cannot_be_applied_faithfully_is_refused_in_one_line(patch, message):
    with pytest.raises(BadInput, match=re.escape(message)) as refused:
        pods.pod({**HELLO, "podSpecPatch": patch}, {}, "wf", {})
    assert "\n" not in str(refused.value)


def test_controller_settings_that_reshape_pods_are_refused(tmp_path):
    for data, message in (({"mainContainer": "securityContext: {}"}, "data.mainContainer reshapes every pod"),
                          ({"initlessPod": "enabled: true"}, "data.initlessPod.enabled")):
        path = tmp_path / "cm.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "data": data}))
        with pytest.raises(BadInput, match=message):
            pods.controller_executor(path)


def test_lint_cli_writes_the_pods_and_fails_on_a_violation(tmp_path):
    argv = [sys.executable, "-m", "bertology.argo.pods", "--templates", str(LIBRARY), "--out", str(tmp_path / "a"),
            str(REPO / "workflows" / "vocab-overlap.yaml")]
    good = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert good.returncode == 0, good.stdout + good.stderr  # Argo's default controller: no --controller
    written = list(yaml.safe_load_all((tmp_path / "a" / "Workflow-vocab-overlap.yaml").read_text()))
    assert [p["kind"] for p in written] == ["Pod"] * 4
    assert [template_name(p) for p in written] == ["vocab-plan", "vocab-overlap", "aggregate", "verdict"]
    assert written[-1]["spec"]["activeDeadlineSeconds"] == 600  # its timeout, 10m (workflowpod.go)
    # the same library without its podSpecPatch: four pods (vocab-plan, vocab-overlap, aggregate and the exit
    # handler verdict), two per-container rules each
    library = tmp_path / "library"
    library.mkdir()
    for path in LIBRARY.glob("*.yaml"):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            for template in (doc.get("spec") or {}).get("templates") or []:
                template.pop("podSpecPatch", None)
        (library / path.name).write_text(yaml.safe_dump_all(docs))
    bad = subprocess.run([*argv[:4], str(library), "--out", str(tmp_path / "b"), argv[-1]],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 1, bad.stderr
    lines = bad.stdout.splitlines()
    assert len([line for line in lines if "restricted allowPrivilegeEscalation" in line]) == 4
    assert lines[-1] == f"4 pods from 1 documents in {tmp_path / 'b'}; 8 restricted Pod Security violations"
    patched = yaml.safe_load((REPO / "workflows" / "vocab-overlap.yaml").read_text())
    patched["spec"]["podSpecPatch"] = '{"containers": [{"name": "main", "$patch": "replace"}]}'
    (tmp_path / "patched.yaml").write_text(yaml.safe_dump(patched))
    refused = subprocess.run([*argv[:-1], str(tmp_path / "patched.yaml")], capture_output=True, text=True,
                             timeout=120, check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("error: the Workflow: podSpecPatch.containers[0].$patch: strategic merge "
                                      "directives are not modelled")


# --- the chart: what only a template can give is enforced at render time ---------------------------------

@pytest.mark.parametrize("change, message", [
    (lambda t: t["finetune"]["securityContext"].pop("seccompProfile"),
     "steps.yaml: template finetune: securityContext.seccompProfile.type must be RuntimeDefault"),
    (lambda t: t["plan"]["container"]["securityContext"].update(allowPrivilegeEscalation=True),
     "steps.yaml: template plan: container.securityContext.allowPrivilegeEscalation must be false"),
    (lambda t: t["analyze"]["container"]["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
     "steps.yaml: template analyze: container.securityContext.capabilities.drop must hold ALL"),
    (lambda t: t["regress"].pop("metadata"),
     ("steps.yaml: template regress: metadata.labels must carry app.kubernetes.io/name: bertology and "
      "app.kubernetes.io/component: step")),
    (lambda t: t["evaluate"].pop("podSpecPatch"),
     ("steps.yaml: template evaluate: podSpecPatch must give Argo's wait container (containers) "
      "securityContext allowPrivilegeEscalation: false and capabilities.drop [ALL]")),
    (lambda t: t["aggregate"].__setitem__("podSpecPatch", yaml.safe_dump({"containers": [
        {"name": "wait", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]})),
     ("steps.yaml: template aggregate: podSpecPatch must give Argo's init container (initContainers) "
      "securityContext allowPrivilegeEscalation: false and capabilities.drop [ALL]")),
])
def test_chart_refuses_a_step_the_namespace_would_refuse(tmp_path, change, message):
    result = helm_template(chart=_chart_with_library(tmp_path, change))
    assert result.returncode != 0
    assert message in result.stderr


# --- the NetworkPolicy -------------------------------------------------------------------------------------

def selects(selector: dict, labels: dict) -> bool:
    """A LabelSelector (matchLabels, matchExpressions with Exists) against a pod's labels."""
    expressions = selector.get("matchExpressions", [])
    assert {e["operator"] for e in expressions} <= {"Exists"}
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()) and \
        all(e["key"] in labels for e in expressions)


def test_network_policy_selects_every_step_pod_and_nothing_else(chart_dir, executor):
    docs = list(yaml.safe_load_all((chart_dir / "kubernetes.yaml").read_text()))
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    selector = policy["spec"]["podSelector"]
    found = every_pod(chart_dir, executor)
    step_pods = [p for k, v in found.items() if k.startswith("chart: ") for p in v]
    assert step_pods and all(selects(selector, p["metadata"]["labels"]) for p in step_pods)
    # another Workflow's pod in the namespace, and a bertology pod that no Workflow made, are not selected
    other = pods.pod(HELLO, {}, "someone-else", executor)
    assert not selects(selector, other["metadata"]["labels"])
    assert not selects(selector, {"app.kubernetes.io/name": "bertology", "app.kubernetes.io/component": "step"})
    # Argo's hello-world, another team's Workflow, neither
    (hello,) = next(iter(pods.file_pods(HELLO_WORLD, {}, executor).values()))
    assert not selects(selector, hello["metadata"]["labels"])
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    # on Cilium, its CiliumNetworkPolicy selects the same pods (what both allow: tests/test_chart.py)
    (cilium,) = by_kind(render("--api-versions", "cilium.io/v2/CiliumNetworkPolicy"), "CiliumNetworkPolicy").values()
    assert cilium["spec"]["endpointSelector"] == selector


@pytest.mark.parametrize("settings, message", [
    (["store.endpointUrl=http://minio.storage:9000"],
     "store.endpointUrl http://minio.storage:9000 uses port 9000, which networkPolicy.store.ports [443] does not allow"),
    (["store.endpointUrl=http://minio.storage"],
     "store.endpointUrl http://minio.storage uses port 80, which networkPolicy.store.ports [443] does not allow"),
    (["networkPolicy.store.cidrs={10.0.0.0/33}"], "at '/networkPolicy/store/cidrs/0': '10.0.0.0/33' does not match"),
    (["networkPolicy.hub.ports={70000}"], "at '/networkPolicy/hub/ports/0': maximum: got 70,000, want 65,535"),
    (["networkPolicy.apiServer.ports=null"], "at '/networkPolicy/apiServer': missing property 'ports'"),
    (["tmp.sizeLimit=lots"], "at '/tmp/sizeLimit': 'lots' does not match pattern"),
    (["images.cpu.digest=sha256:abc"], "at '/images/cpu/digest': 'sha256:abc' does not match pattern"),
    (["images.train.digest=latest"], "at '/images/train/digest': 'latest' does not match pattern"),
])
def test_bad_network_size_and_digest_values_are_refused_by_name(settings, message):
    result = helm_template(*[arg for s in settings for arg in ("--set", s)])
    assert result.returncode != 0
    assert message in result.stderr


def test_endpoint_port_listed_in_the_store_ports_renders():
    docs = render("--set", "store.endpointUrl=https://s3.example:8443", "--set", "networkPolicy.store.ports={443,8443}")
    (policy,) = by_kind(docs, "NetworkPolicy").values()
    assert policy["spec"]["egress"][1]["ports"] == [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 8443}]
