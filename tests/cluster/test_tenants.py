"""bertology as a tenant of a shared Argo: other teams' Workflows run under the controller exactly as
upstream installs it (bertology asks for no controller-wide setting), and the queue watch's account can
stop nothing but bertology's own studies, whoever borrows it."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from on_cluster import NAMESPACE, REPO, VENV_BIN, run, submitted_name, workflow

from bertology.localcluster import argo, components

REGISTRY = components.REGISTRY
WATCH_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:bertology-queue-watch"


def _kubectl(env: dict, *args: str, check: bool = True, input: str | None = None):
    return run([str(VENV_BIN / "kubectl"), *args], env, check=check, input=input)


def _tenant(admin_env: dict, name: str, *, restricted: bool, rules: list[dict]) -> None:
    """A team's namespace, as Argo's quick start sets one up: its default ServiceAccount may report outputs
    (manifests/quick-start/base/executor/emissary/executor-role.yaml) and do what `rules` add."""
    _kubectl(admin_env, "delete", "namespace", name, "--ignore-not-found", "--wait=true")
    _kubectl(admin_env, "create", "namespace", name)
    if restricted:
        _kubectl(admin_env, "label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "executor", "namespace": name},
            "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]},
                      *rules]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "executor-default", "namespace": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "executor"},
               "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": name}]}
    _kubectl(admin_env, "apply", "-f", "-", input=yaml.safe_dump_all([role, binding]))


@pytest.fixture(scope="module")
def busybox_mirrored(admin_env):
    """busybox (Debian's static build, FROM scratch) pushed to the node's registry, which the node's
    containerd takes as docker.io's mirror: Argo's own hello-world pulls `busybox` unchanged."""
    with tempfile.TemporaryDirectory() as context:
        Path(context, "busybox").write_bytes(Path("/bin/busybox").read_bytes())
        Path(context, "busybox").chmod(0o755)
        Path(context, "Containerfile").write_text(
            'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nENV PATH=/bin\n')
        podman = ["podman", "--runtime", "runc"]
        subprocess.run([*podman, "build", "-q", "-t", f"{REGISTRY}/library/busybox:latest", "."], cwd=context,
                       check=True, capture_output=True)
        subprocess.run([*podman, "push", "--tls-verify=false", f"{REGISTRY}/library/busybox:latest"], check=True,
                       capture_output=True)


def _run_example(env: dict, namespace: str, example: str) -> tuple[str, dict]:
    """One of Argo's examples (the module's examples/ directory), submitted unchanged to `namespace` and
    watched to its end: its name and its one pod, once it Succeeded."""
    done = run(["argo", "submit", "-n", namespace, str(argo.source() / "examples" / example), "--watch"], env,
               timeout=600)
    name = submitted_name(done.stdout)
    status = json.loads(_kubectl(env, "-n", namespace, "get", "workflow", name, "-o", "json").stdout)["status"]
    assert status["phase"] == "Succeeded", status.get("message")
    pods = json.loads(_kubectl(env, "-n", namespace, "get", "pods", "-l", f"workflows.argoproj.io/workflow={name}",
                               "-o", "json").stdout)["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return name, pods[0]


def test_argos_hello_world_runs_unchanged_in_another_teams_namespace(studies, admin_env, busybox_mirrored):
    """examples/hello-world.yaml from the Argo module, as its users submit it: `image: busybox`, pulled
    (`latest` is always pulled), its init and wait containers with no securityContext at all, since the
    controller has no executor setting (workflowpod.go newExecContainer)."""
    _tenant(admin_env, "team-a", restricted=False, rules=[])
    _, pod = _run_example(admin_env, "team-a", "hello-world.yaml")
    executor = {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}
    assert set(executor) == {"init", "wait", "main"}
    assert "securityContext" not in executor["init"] and "securityContext" not in executor["wait"]
    logs = _kubectl(admin_env, "-n", "team-a", "logs", pod["metadata"]["name"], "-c", "main").stdout
    assert "hello world" in logs


def test_another_teams_resource_template_keeps_argos_lockdown_and_runs_in_a_restricted_namespace(studies, admin_env):
    """examples/k8s-set-owner-reference.yaml (a resource template: argoexec itself creates a ConfigMap) in a
    namespace that enforces "restricted". Argo gives its init and main containers MinimalCtrSC (runAsNonRoot,
    user 8737, RuntimeDefault seccomp, read-only root) only when the controller has no executor
    securityContext: with bertology installed, it still has none, so the pod is admitted and runs."""
    _tenant(admin_env, "team-b", restricted=True,
            rules=[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]}])
    name, pod = _run_example(admin_env, "team-b", "k8s-set-owner-reference.yaml")
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] == 8737, container["name"]
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    owned = json.loads(_kubectl(admin_env, "-n", "team-b", "get", "configmaps", "-o", "json").stdout)["items"]
    assert any(cm["metadata"]["name"].startswith("owned-eg-") and cm["metadata"]["ownerReferences"][0]["name"] == name
               for cm in owned)


def _as_watch(layout):
    """The Kubernetes client (the queue watch's own) as the watch's ServiceAccount, impersonated: the API
    server authorizes and admits each request exactly as it would the watch's own, or those of a Workflow's
    pod that borrowed the account."""
    from kubernetes import client, config

    api = config.new_client_from_config(str(layout.admin_kubeconfig))
    api.set_default_header("Impersonate-User", WATCH_ACCOUNT)
    return client.CustomObjectsApi(api)


def _patch(api, name: str, body: dict):
    """A merge patch of a Workflow, as the watch sends it (bertology.argo.queue_watch): None when admitted,
    else the API server's refusal."""
    from kubernetes.client.exceptions import ApiException

    try:
        api.patch_namespaced_custom_object("argoproj.io", "v1alpha1", NAMESPACE, "workflows", name, body,
                                           _content_type="application/merge-patch+json")
    except ApiException as refused:
        return refused
    return None


def test_the_queue_watch_account_stops_only_bertology_studies(studies, admin_env, layout):
    """The account may list and patch Workflows (RBAC cannot narrow `patch` to some of them); the chart's
    ValidatingAdmissionPolicy lets it change only spec.shutdown to Stop and its own annotation, and only on a
    Workflow of bertology's templates. Another team's Workflow in the same namespace cannot be stopped with
    it, and a study cannot be changed in any other way; `get` is not granted at all."""
    from kubernetes.client.exceptions import ApiException

    other = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
             "metadata": {"generateName": "another-team-", "namespace": NAMESPACE},
             "spec": {"entrypoint": "wait", "templates": [{"name": "wait", "suspend": {}}]}}
    other_name = json.loads(_kubectl(admin_env, "create", "-o", "json", "-f", "-", input=json.dumps(other)).stdout)[
        "metadata"]["name"]
    study = submitted_name(run(["argo", "submit", "workflows/reversed-layers.yaml", "-p", "preset=tiny"],
                               studies["env"]).stdout)
    api = _as_watch(layout)
    try:
        denied = _patch(api, other_name, {"spec": {"shutdown": "Stop"}})
        assert denied is not None and denied.status == 403 and "ValidatingAdmissionPolicy" in denied.body, denied
        assert workflow(studies["env"], other_name)["spec"].get("shutdown") is None
        longer = _patch(api, study, {"spec": {"activeDeadlineSeconds": 99999999}})
        assert longer is not None and longer.status == 403 and "ValidatingAdmissionPolicy" in longer.body, longer
        relabelled = _patch(api, study, {"metadata": {"labels": {"bertology/study": "another"}},
                                         "spec": {"shutdown": "Stop"}})
        assert relabelled is not None and relabelled.status == 403, relabelled
        with pytest.raises(ApiException) as read:
            api.get_namespaced_custom_object("argoproj.io", "v1alpha1", NAMESPACE, "workflows", study)
        assert read.value.status == 403 and "cannot get resource" in read.value.body
        listed = api.list_namespaced_custom_object("argoproj.io", "v1alpha1", NAMESPACE, "workflows")
        assert {other_name, study} <= {w["metadata"]["name"] for w in listed["items"]}
        stopped = _patch(api, study, {"metadata": {"annotations": {"bertology.io/stopped-by-queue-watch": "a test"}},
                                      "spec": {"shutdown": "Stop"}})
        assert stopped is None, stopped
        assert workflow(studies["env"], study)["spec"]["shutdown"] == "Stop"
    finally:
        _kubectl(admin_env, "-n", NAMESPACE, "delete", "workflow", other_name, study, "--wait=false", check=False)


def test_argo_lint_passes_every_workflow_we_ship(studies, tmp_path):
    """The real `argo lint` (Argo's own validation, the one `argo submit` runs) over every Workflow,
    WorkflowTemplate and CronWorkflow we ship, and the chart's own as `helm template` renders them, each
    reference resolved among those files (--offline). Against the cluster (no --offline), Argo 3.7.18 lints a
    Workflow with the templates of the Workflow's own metadata.namespace (server/workflow/workflow_server.go
    LintWorkflow: `s.wftmplStore.Getter(ctx, req.Workflow.Namespace)`), which a study file leaves empty, and
    every study fails with "an empty namespace may not be set when a resource name is provided"; `argo submit`
    sets the namespace first and is not affected."""
    rendered = tmp_path / "chart.yaml"
    chart = run([str(VENV_BIN / "helm"), "template", "bertology", "charts/bertology", "--set",
                 "images.allowPlaceholder=true"], studies["env"]).stdout
    # the chart's CronWorkflows (its WorkflowTemplates are the files below, with the values applied)
    crons = [d for d in yaml.safe_load_all(chart) if d and d["kind"] == "CronWorkflow"]
    assert {c["metadata"]["name"] for c in crons} == {"bertology-nightly-regression", "bertology-queue-watch"}
    rendered.write_text(yaml.safe_dump_all(crons))
    shipped = [str(p) for directory in ("workflows", "workflows/templates")
               for p in sorted((REPO / directory).glob("*.yaml"))]
    done = run(["argo", "lint", "--offline", "--output", "simple", *shipped, str(rendered)], studies["env"],
               check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no linting errors found" in (done.stdout + done.stderr).lower()
