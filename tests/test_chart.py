"""The Helm chart, rendered by the real helm binary: it installs workflows/templates and the nightly
CronWorkflow unchanged except for the values it documents, refuses bad values and unsafe steps, and grants
the executor nothing more.

The expectation is built from the library files and the values by the chart's documented rules
(templates/workflow-templates.yaml), so a change on either side is caught.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "bertology"
LIBRARY = REPO / "workflows" / "templates"
NIGHTLY = REPO / "workflows" / "nightly-regression.yaml"
HELM = shutil.which("helm", path=str(Path(sys.executable).parent)) or shutil.which("helm")

pytestmark = pytest.mark.skipif(HELM is None, reason="helm is not installed (`make lint` puts it in .venv/bin)")

CUSTOM = {
    "images": {
        "train": {"repository": "registry.example/ml/train", "tag": "2.0.1", "digest": "", "pullPolicy": "Always"},
        "cpu": {"repository": "registry.example/ml/cpu", "tag": "2.0.1-cpu", "digest": "", "pullPolicy": "Never"},
    },
    "tmp": {"sizeLimit": "50Gi"},
    "gpu": {
        "count": 2,
        "resourceName": "amd.com/gpu",
        "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "concurrency": 7,
    },
    "store": {"uri": "s3://studies/store", "endpointUrl": "http://minio.storage:9000"},
    "s3": {"secretName": "studies-s3"},
    "serviceAccount": {"name": "studies-runner"},
    "nightly": {"enabled": True, "schedule": "30 3 * * 1-5", "suspend": True, "priority": 7},
    "queueWatch": {"enabled": True, "schedule": "*/5 * * * *", "queueLimit": "2d12h", "schedulingLimit": "30m",
                   "dryRun": True},
    "networkPolicy": {
        "enabled": True,
        "dns": {"cidrs": ["10.96.0.10/32", "169.254.20.10/32"], "selectors": [], "ports": [53]},
        # the MinIO of store.endpointUrl, by its pods
        "store": {"cidrs": [], "selectors": [{"namespace": "storage", "podLabels": {"app": "minio"}}], "ports": [9000]},
        "hub": {"cidrs": [], "selectors": [], "ports": [443]},  # offline: no hub rule
        "apiServer": {"cidrs": ["172.20.0.1/32", "fd00::1/128"], "selectors": [], "ports": [6443],
                      "ciliumPolicy": False},
        "artifactRepository": {"cidrs": [], "selectors": [{"namespace": "argo-artifacts"}], "ports": [9000]},
        "extraEgress": [{"to": [{"ipBlock": {"cidr": "10.30.0.5/32"}}], "ports": [{"protocol": "TCP", "port": 5000}]}],
    },
}


def helm_template(*args: str, chart: Path = CHART, placeholder_ok: bool = True) -> subprocess.CompletedProcess:
    """`helm template` of release `bertology` from a chart directory or package; with values.yaml's placeholder
    images allowed (images.allowPlaceholder=true, as `make lint` renders) unless `placeholder_ok` is False."""
    allow = ["--set", "images.allowPlaceholder=true"] if placeholder_ok else []
    return subprocess.run([HELM, "template", "bertology", str(chart), *allow, *args], check=False,
                          capture_output=True, text=True, timeout=60)


def helm_said(result: subprocess.CompletedProcess) -> list[str]:
    """What a failed `helm template` said: its stderr, less helm's notes on the symlinked library and its
    --debug hint."""
    return [line for line in result.stderr.splitlines()
            if line.strip() and not line.startswith("level=INFO") and not line.startswith("Use --debug flag")]


def render(*args: str, chart: Path = CHART) -> list[dict]:
    result = helm_template("--namespace", "studies", *args, chart=chart)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def unshared(doc: dict) -> dict:
    """The document with every YAML alias a separate copy (safe_load shares them), as Argo reads it."""
    return json.loads(json.dumps(doc))


def library() -> dict[str, dict]:
    docs = [unshared(d) for p in sorted(LIBRARY.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    return by_kind(docs, "WorkflowTemplate")


def chart_values(overrides: dict | None = None) -> dict:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key, section in (overrides or {}).items():
        values[key] = {**values[key], **section}
    return values


def expected(doc: dict, values: dict, labels: dict) -> dict:
    """A library document as the chart must install it under `values` (the documented rules)."""
    doc = unshared(doc)
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    doc["metadata"]["labels"] = {**labels, **doc["metadata"].get("labels", {})}
    # the queue watch runs as an account of its own, every other template as the steps'
    account = values["serviceAccount"]["name"] + (
        "-queue-watch" if doc["spec"].get("serviceAccountName") == "bertology-queue-watch" else "")
    if "serviceAccountName" in doc["spec"]:
        doc["spec"]["serviceAccountName"] = account
    for template in doc["spec"]["templates"]:
        container = template.get("container")
        if container is None:
            continue
        name = container["image"].rsplit("/", 1)[1].split(":")[0].removeprefix("bertology-")
        image = values["images"][name]
        container["image"] = f"{image['repository']}@{image['digest']}" if image["digest"] else \
            f"{image['repository']}:{image['tag'] or app_version}"
        container["imagePullPolicy"] = image["pullPolicy"]
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref["name"] == "bertology-s3":
                ref["name"] = values["s3"]["secretName"]
        amounts = container.get("resources", {})
        if any("nvidia.com/gpu" in amounts.get(k, {}) for k in ("requests", "limits")):
            for k in ("requests", "limits"):
                del amounts[k]["nvidia.com/gpu"]
                amounts[k][values["gpu"]["resourceName"]] = str(values["gpu"]["count"])
            if values["gpu"]["nodeSelector"]:
                template["nodeSelector"] = {**template.get("nodeSelector", {}), **values["gpu"]["nodeSelector"]}
            template["tolerations"] = template.get("tolerations", []) + values["gpu"]["tolerations"]
        template["serviceAccountName"] = account
        tmp = {m["name"] for m in container.get("volumeMounts", []) if m["mountPath"] == "/tmp"}
        for volume in template.get("volumes", []):
            if volume["name"] in tmp and "emptyDir" in volume:
                volume["emptyDir"]["sizeLimit"] = values["tmp"]["sizeLimit"]
    return doc


def expected_nightly(values: dict, labels: dict) -> dict:
    """workflows/nightly-regression.yaml as the chart must install it under `values`."""
    doc = unshared(yaml.safe_load(NIGHTLY.read_text()))
    doc["metadata"]["labels"] = {**labels, **doc["metadata"].get("labels", {})}
    doc["spec"]["schedules"] = [values["nightly"]["schedule"]]
    doc["spec"]["suspend"] = values["nightly"]["suspend"]
    if values["nightly"]["priority"]:  # 0: left unset, as both of Argo's queues read it
        doc["spec"]["workflowSpec"]["priority"] = values["nightly"]["priority"]
    return doc


def gpu_templates(doc: dict) -> set[str]:
    return {t["name"] for t in doc["spec"]["templates"]
            if "nvidia.com/gpu" in t.get("container", {}).get("resources", {}).get("limits", {})}


@pytest.fixture(scope="module")
def default_docs() -> list[dict]:
    return render()


@pytest.fixture(scope="module")
def custom_docs(tmp_path_factory) -> list[dict]:
    path = tmp_path_factory.mktemp("values") / "custom.yaml"
    path.write_text(yaml.safe_dump(CUSTOM))
    return render("-f", str(path))


def test_default_render_is_the_library_plus_labels_pull_policy_and_service_account(default_docs):
    installed = by_kind(default_docs, "WorkflowTemplate")
    labels = by_kind(default_docs, "ServiceAccount")["bertology"]["metadata"]["labels"]
    assert installed.keys() == library().keys() and installed
    for name, doc in library().items():
        assert installed[name] == expected(doc, chart_values(), labels)
        # the defaults change nothing the library says: the same images and GPU requests
        for ours, theirs in zip(installed[name]["spec"]["templates"], doc["spec"]["templates"]):
            assert ours.get("container", {}).get("image") == theirs.get("container", {}).get("image")
            assert ours.get("container", {}).get("resources") == theirs.get("container", {}).get("resources")


def test_argo_expressions_come_out_verbatim(default_docs, custom_docs):
    def expressions(docs):
        text = yaml.safe_dump(list(docs), sort_keys=True)
        return sorted(re.findall(r"\{\{.*?\}\}", text))

    source = expressions(library().values())
    assert source
    assert expressions(by_kind(default_docs, "WorkflowTemplate").values()) == source
    assert expressions(by_kind(custom_docs, "WorkflowTemplate").values()) == source
    nightly = expressions([yaml.safe_load(NIGHTLY.read_text())])  # none: the DAG is a WorkflowTemplate's
    assert expressions(by_kind(default_docs, "CronWorkflow").values()) == nightly
    assert expressions(by_kind(custom_docs, "CronWorkflow").values()) == nightly


def test_custom_values_reach_every_place_they_must(custom_docs):
    installed = by_kind(custom_docs, "WorkflowTemplate")
    labels = by_kind(custom_docs, "ServiceAccount")["studies-runner"]["metadata"]["labels"]
    assert any(gpu_templates(doc) for doc in library().values()), "the library has GPU steps"
    for name, doc in library().items():
        assert installed[name] == expected(doc, chart_values(CUSTOM), labels)
        if not any("container" in t for t in doc["spec"]["templates"]):
            continue  # bertology-study: a DAG of templateRefs only
        gpu = gpu_templates(doc)
        pulls = {t["container"]["image"]: t["container"]["imagePullPolicy"]
                 for t in installed[name]["spec"]["templates"] if "container" in t}
        everything = {"registry.example/ml/train:2.0.1": "Always", "registry.example/ml/cpu:2.0.1-cpu": "Never"}
        # the step library has both images; the nightly's exit handler (verdict) the CPU one only
        assert pulls == everything if name == "bertology-steps" else pulls.items() <= everything.items()
        for template in installed[name]["spec"]["templates"]:
            container = template.get("container")
            if container is None:
                continue
            watch = name == "bertology-queue-watch"
            assert template["serviceAccountName"] == "studies-runner" + ("-queue-watch" if watch else "")
            secrets = {e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]
                       if "secretKeyRef" in e.get("valueFrom", {})}
            # verdict and the queue watch read no store
            assert secrets == (set() if template["name"] in ("verdict", "watch") else {"studies-s3"})
            if template["name"] in gpu:
                assert container["image"] == "registry.example/ml/train:2.0.1"
                for amounts in (container["resources"]["requests"], container["resources"]["limits"]):
                    assert amounts["amd.com/gpu"] == "2" and "nvidia.com/gpu" not in amounts
                assert template["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
                assert template["tolerations"][-1] == CUSTOM["gpu"]["tolerations"][0]
            else:
                assert "amd.com/gpu" not in str(container.get("resources"))
                assert "nodeSelector" not in template and "dedicated" not in str(template.get("tolerations"))


def test_rendered_library_under_custom_values_is_strictly_valid_argo_for_every_study(custom_docs, tmp_path):
    from bertology.argo.validate import validate_file

    rendered = tmp_path / "templates" / "chart.yaml"
    rendered.parent.mkdir()
    rendered.write_text(yaml.safe_dump_all(list(by_kind(custom_docs, "WorkflowTemplate").values())))
    cron = tmp_path / "nightly.yaml"
    cron.write_text(yaml.safe_dump_all(list(by_kind(custom_docs, "CronWorkflow").values())))
    studies = sorted((REPO / "workflows").glob("*.yaml"))
    assert studies
    for path in [rendered, cron, *studies]:
        assert validate_file(path, rendered.parent) == [], path


def test_nightly_cron_workflow_is_the_file_with_schedule_suspend_and_the_store_from_the_config_map(
        default_docs, custom_docs):
    for docs, values, account in ((default_docs, chart_values(), "bertology"),
                                  (custom_docs, chart_values(CUSTOM), "studies-runner")):
        labels = by_kind(docs, "ServiceAccount")[account]["metadata"]["labels"]
        assert by_kind(docs, "CronWorkflow")["bertology-nightly-regression"] == expected_nightly(values, labels)
    custom = by_kind(custom_docs, "CronWorkflow")["bertology-nightly-regression"]["spec"]
    assert custom["schedules"] == ["30 3 * * 1-5"] and custom["suspend"] is True
    assert custom["timezone"] == "UTC" and custom["concurrencyPolicy"] == "Forbid"
    # each night's own spec.priority, which Argo's semaphore queue and the controller's Workflow queue read
    # (tests/test_gpu_queue.py); by default none, as in the file: a night queues by age like any study
    assert custom["workflowSpec"]["priority"] == 7
    assert chart_values()["nightly"]["priority"] == 0
    assert "priority" not in by_kind(default_docs, "CronWorkflow")["bertology-nightly-regression"]["spec"][
        "workflowSpec"]
    assert "priority" not in yaml.safe_load(NIGHTLY.read_text())["spec"]["workflowSpec"]
    assert by_kind(render("--set", "nightly.priority=100"), "CronWorkflow")["bertology-nightly-regression"][
        "spec"]["workflowSpec"]["priority"] == 100
    # Argo reads a parameter's configMapKeyRef only from a ConfigMap with this label
    assert by_kind(custom_docs, "ConfigMap")["bertology-config"]["metadata"]["labels"][
        "workflows.argoproj.io/configmap-type"] == "Parameter"


def test_image_digests_pin_the_step_images_by_content():
    train, cpu = "sha256:" + "0123456789abcdef" * 4, "sha256:" + "f" * 64
    docs = render("--set", f"images.train.digest={train}", "--set", f"images.cpu.digest={cpu}",
                  "--set", "images.cpu.tag=9.9.9")
    labels = by_kind(docs, "ServiceAccount")["bertology"]["metadata"]["labels"]
    values = chart_values({"images": {name: {**chart_values()["images"][name], "digest": digest}
                                      for name, digest in (("train", train), ("cpu", cpu))}})
    installed = by_kind(docs, "WorkflowTemplate")
    for name, doc in library().items():
        assert installed[name] == expected(doc, values, labels)
    images = {t["container"]["image"] for d in installed.values() for t in d["spec"]["templates"] if "container" in t}
    assert images == {f"ghcr.io/bertology/bertology-train@{train}", f"ghcr.io/bertology/bertology-cpu@{cpu}"}


PLACEHOLDER_REFUSED = ("images.{key}.repository ghcr.io/bertology/bertology-{key} is the chart's placeholder, where no "
                       "image is published: push the images (make push REGISTRY=HOST[:PORT][/PATH]) and set "
                       "images.train.repository, images.cpu.repository (and .digest) as it prints, or "
                       "images.allowPlaceholder=true for a render that is never installed")
OURS = {"train": "registry.example/ml/bertology-train", "cpu": "registry.example/ml/bertology-cpu"}


@pytest.mark.parametrize("args, refused", [
    ([], {"train", "cpu"}),  # values.yaml as it stands: the library's first container names either
    (["--set", f"images.train.repository={OURS['train']}"], {"cpu"}),
    (["--set", f"images.cpu.repository={OURS['cpu']}"], {"train"}),
    # pinned by digest, still where nothing is published
    (["--set", f"images.cpu.repository={OURS['cpu']}", "--set", "images.train.digest=sha256:" + "a" * 64], {"train"}),
    (["--set", "images.allowPlaceholder=false"], {"train", "cpu"}),
])
def test_the_placeholder_images_are_refused_in_one_line(args, refused):
    result = helm_template("--namespace", "studies", *args, placeholder_ok=False)
    assert result.returncode == 1 and result.stdout == ""
    [line] = helm_said(result)
    assert line.startswith("Error: execution error at (bertology/templates/workflow-templates.yaml:"), line
    assert any(line.endswith(f"): {PLACEHOLDER_REFUSED.format(key=key)}") for key in refused), line


def test_the_placeholder_renders_when_allowed_and_pushed_images_render_without_it():
    allowed = helm_template("--namespace", "studies", "--set", "images.allowPlaceholder=true", placeholder_ok=False)
    assert allowed.returncode == 0, allowed.stderr
    pulled = {t["container"]["image"] for d in yaml.safe_load_all(allowed.stdout) if d and d["kind"] == "WorkflowTemplate"
              for t in d["spec"]["templates"] if "container" in t}
    assert pulled == {"ghcr.io/bertology/bertology-train:0.1.0", "ghcr.io/bertology/bertology-cpu:0.1.0"}

    digest = {"train": "sha256:" + "1" * 64, "cpu": "sha256:" + "2" * 64}
    ours = helm_template("--namespace", "studies", *[a for key in OURS for a in (
        "--set", f"images.{key}.repository={OURS[key]}", "--set", f"images.{key}.digest={digest[key]}")],
        placeholder_ok=False)
    assert ours.returncode == 0, ours.stderr
    installed = by_kind([d for d in yaml.safe_load_all(ours.stdout) if d], "WorkflowTemplate")
    pulled = {t["container"]["image"] for d in installed.values() for t in d["spec"]["templates"] if "container" in t}
    assert pulled == {f"{OURS[key]}@{digest[key]}" for key in OURS}


def test_nightly_can_be_left_out():
    assert by_kind(render("--set", "nightly.enabled=false"), "CronWorkflow").keys() == {"bertology-queue-watch"}


def test_config_maps_carry_the_store_endpoint_and_gpu_semaphore(default_docs, custom_docs):
    default, custom = by_kind(default_docs, "ConfigMap"), by_kind(custom_docs, "ConfigMap")
    assert default["bertology-config"]["data"] == {"store": chart_values()["store"]["uri"]}
    assert custom["bertology-config"]["data"] == {"store": "s3://studies/store",
                                                  "AWS_ENDPOINT_URL": "http://minio.storage:9000"}
    assert default["bertology-semaphores"]["data"] == {"gpu": str(chart_values()["gpu"]["concurrency"])}
    assert custom["bertology-semaphores"]["data"] == {"gpu": "7"}


def test_rbac_grants_the_executor_exactly_its_task_results(custom_docs):
    kinds = sorted(d["kind"] for d in custom_docs)
    assert kinds == sorted([*["ServiceAccount", "Role", "RoleBinding"] * 2, "ConfigMap", "ConfigMap",
                            "CronWorkflow", "CronWorkflow", "NetworkPolicy", *["WorkflowTemplate"] * len(library()),
                            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"])
    task_results = {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]}
    roles, bindings = by_kind(custom_docs, "Role"), by_kind(custom_docs, "RoleBinding")
    # the steps' account: only the executor's task results, never the Workflows themselves
    assert roles["studies-runner-executor"]["rules"] == [task_results]
    # the queue watch's: read and stop Workflows (a merge patch), and its own task results
    assert roles["studies-runner-queue-watch"]["rules"] == [
        {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["list", "patch"]}, task_results]
    for account, role in (("studies-runner", "studies-runner-executor"),
                          ("studies-runner-queue-watch", "studies-runner-queue-watch")):
        (binding,) = [b for b in bindings.values() if b["roleRef"]["name"] == role]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "studies"}]
    assert set(by_kind(custom_docs, "ServiceAccount")) == {"studies-runner", "studies-runner-queue-watch"}
    # only the queue watch's WorkflowTemplate runs as the account that may stop Workflows
    watchers = {name for name, d in by_kind(custom_docs, "WorkflowTemplate").items()
                if "studies-runner-queue-watch" in {d["spec"].get("serviceAccountName"),
                                                    *(t.get("serviceAccountName") for t in d["spec"]["templates"])}}
    assert watchers == {"bertology-queue-watch"}


def test_queue_watch_runs_its_template_with_the_limits_of_the_values(default_docs, custom_docs):
    for docs, values in ((default_docs, chart_values()), (custom_docs, chart_values(CUSTOM))):
        watch = values["queueWatch"]
        cron = by_kind(docs, "CronWorkflow")["bertology-queue-watch"]["spec"]
        assert cron["schedules"] == [watch["schedule"]] and cron["concurrencyPolicy"] == "Forbid"
        assert cron["workflowSpec"]["workflowTemplateRef"] == {"name": "bertology-queue-watch"}
        assert cron["workflowSpec"]["arguments"]["parameters"] == [
            {"name": "queue_limit", "value": watch["queueLimit"]},
            {"name": "scheduling_limit", "value": watch["schedulingLimit"]},
            {"name": "dry_run", "value": str(watch["dryRun"]).lower()}]
    # the template's own defaults are the chart's
    defaults = {p["name"]: p["value"] for p in library()["bertology-queue-watch"]["spec"]["arguments"]["parameters"]}
    assert defaults == {"queue_limit": chart_values()["queueWatch"]["queueLimit"],
                        "scheduling_limit": chart_values()["queueWatch"]["schedulingLimit"], "dry_run": "false"}


def test_queue_watch_can_be_left_out_with_its_account():
    docs = render("--set", "queueWatch.enabled=false")
    names = {d["metadata"]["name"] for d in docs}
    assert not {n for n in names if "queue-watch" in n}
    assert "bertology-study" in by_kind(docs, "WorkflowTemplate")


# --- what the queue watch's account may change: its ValidatingAdmissionPolicy -------------------------------

def _policy(docs: list[dict]) -> tuple[dict, dict]:
    (policy,) = by_kind(docs, "ValidatingAdmissionPolicy").values()
    (binding,) = by_kind(docs, "ValidatingAdmissionPolicyBinding").values()
    return policy, binding


def test_the_queue_watch_s_account_is_held_to_what_the_watch_changes(default_docs, custom_docs):
    """RBAC lets the account patch every Workflow of the namespace and anyone who may submit a Workflow there
    may run a pod as it; the policy admits its updates only of bertology's own Workflows, and only of
    spec.shutdown and the watch's annotation (the CEL is evaluated by the API server only: what each
    expression allows is in templates/queue-watch-policy.yaml)."""
    from bertology.argo import queue_watch

    for docs, account in ((default_docs, "bertology-queue-watch"), (custom_docs, "studies-runner-queue-watch")):
        policy, binding = _policy(docs)
        assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
        # cluster-scoped objects: named after the account and the release's namespace, so two releases differ
        assert policy["metadata"]["name"] == binding["metadata"]["name"] == f"{account}.studies"
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        assert spec["matchConstraints"]["resourceRules"] == [
            {"apiGroups": ["argoproj.io"], "apiVersions": ["*"], "resources": ["workflows"], "operations": ["UPDATE"]}]
        # only requests made as the watch's own ServiceAccount (the pods of its CronWorkflow run as it)
        assert spec["matchConditions"] == [{"name": "queue-watch-account", "expression":
                                            f"request.userInfo.username == 'system:serviceaccount:studies:{account}'"}]
        assert {t["spec"]["serviceAccountName"] for t in by_kind(docs, "WorkflowTemplate").values()
                if t["metadata"]["name"] == "bertology-queue-watch"} == {account}
        # the binding: deny, in the release's namespace only
        assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"],
                                   "matchResources": {"namespaceSelector": {"matchLabels": {
                                       "kubernetes.io/metadata.name": "studies"}}}}
        rules = [v["expression"] for v in spec["validations"]]
        names = ", ".join(f"'{n}'" for n in queue_watch.WATCHED)
        assert f"variables.oldSpec.workflowTemplateRef.name in [{names}]" in rules[0]
        assert set(queue_watch.WATCHED) <= set(by_kind(docs, "WorkflowTemplate"))  # the chart's real names
        assert "variables.spec.shutdown == 'Stop'" in rules[1]
        assert rules[2].count(f"k == '{queue_watch.ANNOTATION}'") == 2
        assert queue_watch.stop_patch("why") == {"metadata": {"annotations": {queue_watch.ANNOTATION: "why"}},
                                                 "spec": {"shutdown": "Stop"}}  # exactly what the rules allow
        assert all(v["reason"] == "Forbidden" and v["message"].startswith("the queue watch's account may")
                   for v in spec["validations"])
    # another namespace, another release: its own policy and binding
    policy, binding = _policy(render("--namespace", "team-b"))
    assert policy["metadata"]["name"] == "bertology-queue-watch.team-b"
    assert "system:serviceaccount:team-b:bertology-queue-watch" in policy["spec"]["matchConditions"][0]["expression"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "team-b"}


def test_the_policy_without_the_chart_holds_the_same_rules_for_the_account_of_that_name():
    """workflows/templates/platform.yaml (kubectl apply, no chart): the same variables and validations; the
    namespace is not known there, so it matches the account's name in any namespace, on every namespace."""
    docs = [d for d in yaml.safe_load_all((LIBRARY / "platform.yaml").read_text()) if d]
    (plain,) = by_kind(docs, "ValidatingAdmissionPolicy").values()
    (binding,) = by_kind(docs, "ValidatingAdmissionPolicyBinding").values()
    chart, _ = _policy(render())
    for key in ("variables", "validations", "failurePolicy", "matchConstraints"):
        assert plain["spec"][key] == chart["spec"][key], key
    assert plain["spec"]["matchConditions"][0]["expression"] == (
        "request.userInfo.username.startsWith('system:serviceaccount:') && "
        "request.userInfo.username.endsWith(':bertology-queue-watch')")
    assert binding["spec"] == {"policyName": plain["metadata"]["name"], "validationActions": ["Deny"]}


@pytest.mark.parametrize("settings", [["queueWatch.admissionPolicy=false"], ["queueWatch.enabled=false"]])
def test_the_policy_can_be_left_out(settings):
    docs = render(*[arg for s in settings for arg in ("--set", s)])
    assert not by_kind(docs, "ValidatingAdmissionPolicy") and not by_kind(docs, "ValidatingAdmissionPolicyBinding")
    watch = "queueWatch.enabled=false" not in settings
    assert ("bertology-queue-watch" in by_kind(docs, "ServiceAccount")) == watch


def test_every_step_pod_is_non_root_with_a_read_only_root_filesystem(default_docs):
    pods = [t for d in by_kind(default_docs, "WorkflowTemplate").values()
            for t in d["spec"]["templates"] if "container" in t]
    assert pods
    for template in pods:
        assert template["securityContext"]["runAsNonRoot"] is True, template["name"]
        assert template["container"]["securityContext"]["readOnlyRootFilesystem"] is True, template["name"]


@pytest.mark.parametrize("setting, message", [
    ("gpu.count=abc", "at '/gpu/count': got string, want integer"),
    ("gpu.count=0", "at '/gpu/count': minimum: got 0, want 1"),
    ("colour=blue", "additional properties 'colour' not allowed"),
    ("images.cpu.pullPolicy=Sometimes", "at '/images/cpu/pullPolicy': value must be one of"),
    ("store.uri=file:///data", "at '/store/uri': 'file:///data' does not match pattern"),
    ("nightly.schedule=tonight", "at '/nightly/schedule': 'tonight' does not match pattern"),
    ("nightly.suspend=maybe", "at '/nightly/suspend': got string, want boolean"),
    ("nightly.priority=high", "at '/nightly/priority': got string, want integer"),
    ("nightly.priority=3000000000", "at '/nightly/priority': maximum:"),
    ("nightly.timezone=CET", "additional properties 'timezone' not allowed"),
    ("images.allowPlaceholder=maybe", "at '/images/allowPlaceholder': got string, want boolean"),
    ("queueWatch.queueLimit=3 days", "at '/queueWatch/queueLimit': '3 days' does not match pattern"),
    ("queueWatch.schedulingLimit=-1h", "at '/queueWatch/schedulingLimit': '-1h' does not match pattern"),
    ("queueWatch.dryRun=perhaps", "at '/queueWatch/dryRun': got string, want boolean"),
    ("queueWatch.admissionPolicy=perhaps", "at '/queueWatch/admissionPolicy': got string, want boolean"),
])
def test_schema_rejects_bad_values_by_name(setting, message):
    result = helm_template("--set", setting)
    assert result.returncode != 0
    assert message in result.stderr


def _chart_with_library(tmp_path: Path, change) -> Path:
    """A copy of the chart whose symlinked library is a changed copy of workflows/templates."""
    shutil.copytree(CHART, tmp_path / "charts" / "bertology", symlinks=True)
    shutil.copytree(LIBRARY, tmp_path / "workflows" / "templates")
    shutil.copy(NIGHTLY, tmp_path / "workflows" / NIGHTLY.name)  # the chart's other symlink's target
    steps = tmp_path / "workflows" / "templates" / "steps.yaml"
    doc = unshared(yaml.safe_load(steps.read_text()))
    change({t["name"]: t for t in doc["spec"]["templates"]})
    steps.write_text(yaml.safe_dump(doc))
    return tmp_path / "charts" / "bertology"


@pytest.mark.parametrize("change, message", [
    (lambda t: t["finetune"]["container"]["securityContext"].update(readOnlyRootFilesystem=False),
     "steps.yaml: template finetune: container.securityContext.readOnlyRootFilesystem must be true"),
    (lambda t: t["plan"]["securityContext"].pop("runAsNonRoot"),
     "steps.yaml: template plan: securityContext.runAsNonRoot must be true"),
    (lambda t: t["analyze"]["container"].update(image="ghcr.io/bertology/bertology-tpu:0.1.0"),
     "steps.yaml: template analyze: image ghcr.io/bertology/bertology-tpu:0.1.0 is not"),
])
def test_unsafe_or_unplaceable_library_steps_fail_the_render_by_name(tmp_path, change, message):
    result = helm_template(chart=_chart_with_library(tmp_path, change))
    assert result.returncode != 0
    assert message in result.stderr


def test_packaged_chart_holds_the_library_contents_and_renders_the_same(tmp_path, default_docs):
    result = subprocess.run([HELM, "package", str(CHART), "--destination", str(tmp_path)], check=False,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    (package,) = tmp_path.glob("bertology-*.tgz")
    with tarfile.open(package) as archive:
        for path in LIBRARY.glob("*.yaml"):
            member = archive.getmember(f"bertology/workflow-templates/{path.name}")
            assert member.isfile() and archive.extractfile(member).read() == path.read_bytes()
        member = archive.getmember("bertology/nightly-regression.yaml")
        assert member.isfile() and archive.extractfile(member).read() == NIGHTLY.read_bytes()
    assert render(chart=package) == default_docs


# --- the NetworkPolicy per CNI ------------------------------------------------------------------------------

KUBE_VERSION = re.search(r"^KUBE_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)[1]
STEPS = {"matchLabels": {"app.kubernetes.io/name": "bertology", "app.kubernetes.io/component": "step"},
         "matchExpressions": [{"key": "workflows.argoproj.io/workflow", "operator": "Exists"}]}
CILIUM_API = "cilium.io/v2/CiliumNetworkPolicy"
# The CiliumNetworkPolicy CRD (cilium pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnetworkpolicies.yaml),
# spec.egress[]: toEntities items `enum: [all, world, cluster, host, init, ingress, unmanaged, remote-node,
# health, none, kube-apiserver]`; toPorts[].ports[]: `port` a string, "an L4 port number, or a name",
# `protocol` `enum: [TCP, UDP, SCTP, VRRP, IGMP, ANY]`; spec needs `endpointSelector` (or nodeSelector) and
# one of ingress, ingressDeny, egress, egressDeny.
CILIUM_ENTITIES = {"all", "world", "cluster", "host", "init", "ingress", "unmanaged", "remote-node", "health", "none",
                   "kube-apiserver"}


def network_policies(*args: str) -> tuple[dict, dict | None]:
    """The rendered NetworkPolicy and CiliumNetworkPolicy (None when there is none), every built-in object of
    the render strictly valid for the Kubernetes version `make lint` validates against."""
    import kubernetes_validate

    docs = render(*args)
    for doc in docs:
        if not doc["apiVersion"].startswith(("argoproj.io/", "cilium.io/")):
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    (policy,) = by_kind(docs, "NetworkPolicy").values()
    cilium = list(by_kind(docs, "CiliumNetworkPolicy").values())
    assert len(cilium) <= 1
    return policy, (cilium[0] if cilium else None)


def peer(namespace: str | None = None, **labels: str) -> dict:
    """A NetworkPolicyPeer selecting pods by namespace name and labels."""
    out = {}
    if namespace:
        out["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    if labels:
        out["podSelector"] = {"matchLabels": labels}
    return out


def tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": p} for p in ports]


EVERYWHERE = [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]
DEFAULT_DNS = {
    "to": [{"ipBlock": {"cidr": "169.254.20.10/32"}},  # NodeLocal DNSCache's link-local address
           peer("kube-system", **{"k8s-app": "kube-dns"}),  # CoreDNS / kube-dns
           peer("kube-system", **{"k8s-app": "node-local-dns"}),  # NodeLocal DNSCache's pods (Cilium)
           peer("openshift-dns", **{"dns.operator.openshift.io/daemonset-dns": "default"})],
    "ports": [{"protocol": p, "port": port} for port in (53, 5353) for p in ("UDP", "TCP")],
}


def test_default_policy_reaches_dns_on_every_cni_and_the_rest_over_tcp():
    policy, cilium = network_policies()
    spec = policy["spec"]
    assert spec["podSelector"] == STEPS
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    assert spec["egress"] == [
        DEFAULT_DNS,
        {"to": EVERYWHERE, "ports": tcp(443)},  # store
        {"to": EVERYWHERE, "ports": tcp(443)},  # hub
        {"to": EVERYWHERE, "ports": tcp(443, 6443)},  # API server
        # no artifact repository: none is selected by default
    ]
    assert cilium is None  # `helm template` sees no cilium.io API: auto adds nothing


@pytest.mark.parametrize("args, rule, expected", [
    # an in-cluster artifact repository (MinIO for archiveLogs), by namespace and pod labels
    (["--set-json", 'networkPolicy.artifactRepository.selectors=[{"namespace": "minio", "podLabels": {"app": "minio"}}]'],
     -1, {"to": [peer("minio", app="minio")], "ports": tcp(9000)}),
    # ... by namespace only, on another port
    (["--set-json", 'networkPolicy.artifactRepository.selectors=[{"namespace": "argo-artifacts"}]',
      "--set", "networkPolicy.artifactRepository.ports={9000,9443}"],
     -1, {"to": [peer("argo-artifacts")], "ports": tcp(9000, 9443)}),
    # ... or pods of the release's own namespace, by labels only
    (["--set-json", 'networkPolicy.artifactRepository.selectors=[{"podLabels": {"app": "minio"}}]'],
     -1, {"to": [peer(app="minio")], "ports": tcp(9000)}),
    # the API server narrowed to the `kubernetes` Service's endpoints (Calico, OpenShift)
    (["--set", "networkPolicy.apiServer.cidrs={10.0.0.5/32,10.0.0.6/32}", "--set", "networkPolicy.apiServer.ports={6443}"],
     3, {"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}, {"ipBlock": {"cidr": "10.0.0.6/32"}}], "ports": tcp(6443)}),
    # NodeLocal DNSCache answering on the kube-dns Service IP: one more CIDR, the selectors kept
    (["--set", "networkPolicy.dns.cidrs={169.254.20.10/32,10.96.0.10/32}"],
     0, {**DEFAULT_DNS, "to": [{"ipBlock": {"cidr": "169.254.20.10/32"}}, {"ipBlock": {"cidr": "10.96.0.10/32"}},
                               *DEFAULT_DNS["to"][1:]]}),
    # OpenShift's DNS only
    (["--set-json", "networkPolicy.dns.cidrs=[]", "--set-json",
      'networkPolicy.dns.selectors=[{"namespace": "openshift-dns", "podLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}}]',
      "--set", "networkPolicy.dns.ports={5353}"],
     0, {"to": [peer("openshift-dns", **{"dns.operator.openshift.io/daemonset-dns": "default"})],
         "ports": [{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}]}),
    # a store inside the cluster, by its pods (an ipBlock never matches a pod on Cilium)
    (["--set", "store.endpointUrl=http://minio.storage:9000", "--set-json", "networkPolicy.store.cidrs=[]",
      "--set-json", 'networkPolicy.store.selectors=[{"namespace": "storage", "podLabels": {"app": "minio"}}]',
      "--set", "networkPolicy.store.ports={9000}"],
     1, {"to": [peer("storage", app="minio")], "ports": tcp(9000)}),
])
def test_each_setting_reaches_its_rule(args, rule, expected):
    policy, _ = network_policies(*args)
    assert policy["spec"]["egress"][rule] == expected


def test_a_destination_without_peers_has_no_rule():
    policy, _ = network_policies("--set-json", "networkPolicy.hub.cidrs=[]", "--set-json", "networkPolicy.store.cidrs=[]")
    assert policy["spec"]["egress"] == [DEFAULT_DNS, {"to": EVERYWHERE, "ports": tcp(443, 6443)}]


def test_custom_values_give_the_policy_they_describe(custom_docs):
    """CUSTOM: DNS by CIDRs only, the store and artifact repository by pods, no hub, two API server CIDRs,
    one extra rule."""
    (policy,) = by_kind(custom_docs, "NetworkPolicy").values()
    assert policy["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.96.0.10/32"}}, {"ipBlock": {"cidr": "169.254.20.10/32"}}],
         "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"to": [peer("storage", app="minio")], "ports": tcp(9000)},
        {"to": [{"ipBlock": {"cidr": "172.20.0.1/32"}}, {"ipBlock": {"cidr": "fd00::1/128"}}], "ports": tcp(6443)},
        {"to": [peer("argo-artifacts")], "ports": tcp(9000)},
        *CUSTOM["networkPolicy"]["extraEgress"],
    ]
    assert by_kind(custom_docs, "CiliumNetworkPolicy") == {}  # ciliumPolicy false


@pytest.mark.parametrize("setting, cluster_has_cilium, rendered", [
    ("auto", False, False), ("auto", True, True), ("true", False, True), ("true", True, True),
    ("false", True, False), ("false", False, False),
])
def test_cilium_policy_allows_the_api_server_entity(setting, cluster_has_cilium, rendered):
    """Cilium gives the API server the reserved kube-apiserver identity, which no ipBlock matches: the
    CiliumNetworkPolicy allows it by entity, for the same pods and the apiServer ports."""
    args = ["--set", f"networkPolicy.apiServer.ciliumPolicy={setting}", "--set", "networkPolicy.apiServer.ports={443,6443}"]
    policy, cilium = network_policies(*args, *(["--api-versions", CILIUM_API] if cluster_has_cilium else []))
    assert (cilium is not None) == rendered
    if cilium is None:
        return
    assert cilium["apiVersion"] == "cilium.io/v2"
    spec = cilium["spec"]
    assert spec["endpointSelector"] == policy["spec"]["podSelector"] == STEPS
    assert set(spec) <= {"description", "endpointSelector", "egress"}
    assert spec["egress"] == [{"toEntities": ["kube-apiserver"],
                               "toPorts": [{"ports": [{"port": "443", "protocol": "TCP"},
                                                      {"port": "6443", "protocol": "TCP"}]}]}]
    for rule in spec["egress"]:
        assert set(rule["toEntities"]) <= CILIUM_ENTITIES
        for port in (p for to in rule["toPorts"] for p in to["ports"]):
            assert isinstance(port["port"], str) and port["port"].isdigit() and port["protocol"] == "TCP"


def test_no_policy_at_all_when_disabled():
    docs = render("--set", "networkPolicy.enabled=false", "--api-versions", CILIUM_API)
    assert by_kind(docs, "NetworkPolicy") == {} and by_kind(docs, "CiliumNetworkPolicy") == {}


@pytest.mark.parametrize("args, message", [
    (["--set", "networkPolicy.apiServer.ciliumPolicy=maybe"],
     "at '/networkPolicy/apiServer/ciliumPolicy': value must be one of 'auto', true, false"),
    (["--set-json", 'networkPolicy.dns.selectors=[{"namespace": "Kube_System"}]'],
     "at '/networkPolicy/dns/selectors/0/namespace': 'Kube_System' does not match pattern"),
    (["--set-json", 'networkPolicy.artifactRepository.selectors=[{"namespace": "minio", "labels": {"app": "minio"}}]'],
     "at '/networkPolicy/artifactRepository/selectors/0': additional properties 'labels' not allowed"),
    (["--set-json", 'networkPolicy.artifactRepository.selectors=[{}]'],
     "at '/networkPolicy/artifactRepository/selectors/0': minProperties: got 0, want 1"),
    (["--set-json", 'networkPolicy.artifactRepository.selectors=[{"podLabels": {"app name": "minio"}}]'],
     "at '/networkPolicy/artifactRepository/selectors/0/podLabels': additional properties 'app name' not allowed"),
    (["--set-json", 'networkPolicy.artifactRepository.selectors=[{"podLabels": {"app": "mini o"}}]'],
     "at '/networkPolicy/artifactRepository/selectors/0/podLabels/app': 'mini o' does not match pattern"),
    (["--set", "networkPolicy.artifactRepository.ports={0}"],
     "at '/networkPolicy/artifactRepository/ports/0': minimum: got 0, want 1"),
    (["--set", "networkPolicy.dns.ports=null"], "at '/networkPolicy/dns': missing property 'ports'"),
    (["--set-json", 'networkPolicy.extraEgress=[{"too": []}]'],
     "at '/networkPolicy/extraEgress/0': additional properties 'too' not allowed"),
])
def test_bad_network_values_are_refused_naming_the_value(args, message):
    result = helm_template(*args)
    assert result.returncode != 0
    assert message in result.stderr
