"""The real workflow YAML in workflows/ is strictly valid, and the validator catches damage to it.

These are the files `argo submit` gets on the cluster and `bertology run` executes here.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from bertology.argo.documents import Source, effective_spec, load_documents, load_library
from bertology.argo.runner import check_supported
from bertology.argo.validate import validate_file

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / "workflows"
TEMPLATES = WORKFLOWS / "templates"
FILES = sorted([*WORKFLOWS.glob("*.yaml"), *TEMPLATES.glob("*.yaml")])


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_workflow_file_is_strictly_valid(path):
    assert validate_file(path, TEMPLATES) == []


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_study_uses_only_what_the_local_runner_supports(path):
    source = Source(path, load_documents(path)[0])
    library = load_library(TEMPLATES)
    spec, templates = effective_spec(source, library)
    check_supported(source, spec, templates, library)  # raises BadInput naming an unsupported feature


def test_gpu_steps_request_a_gpu_and_retry_only_transient_failures():
    steps = {t["name"]: t for t in load_documents(TEMPLATES / "steps.yaml")[0]["spec"]["templates"]}
    for name in ("finetune", "evaluate"):
        assert steps[name]["container"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    for name, template in steps.items():
        if "container" in template:
            retry = template["retryStrategy"]
            # one policy for every step (what it retries: tests/test_argo_failures.py, over Argo's messages)
            assert retry == steps["plan"]["retryStrategy"], name
            assert retry["limit"] == "3" and retry["retryPolicy"] == "Always"
            assert "affinity" not in retry, name  # a retry may run on the same node (steps.yaml says why)
            assert "backoff" not in retry, name  # waited out before the policy is read; holds the GPU lock
            assert template["activeDeadlineSeconds"], name  # every pod has a deadline
            assert template["container"]["securityContext"]["readOnlyRootFilesystem"] is True


def _damaged(tmp_path: Path, study: str, change) -> list[str]:
    """Validate a copy of the real study (and its real template library) after `change` edits it."""
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates)
    docs = {"study": load_documents(WORKFLOWS / study)[0],
            "dag": load_documents(TEMPLATES / "study.yaml")[0],
            "steps": load_documents(TEMPLATES / "steps.yaml")[0]}
    change(docs)
    (tmp_path / study).write_text(yaml.safe_dump(docs["study"], sort_keys=False))
    (templates / "study.yaml").write_text(yaml.safe_dump(docs["dag"], sort_keys=False))
    (templates / "steps.yaml").write_text(yaml.safe_dump(docs["steps"], sort_keys=False))
    return (validate_file(tmp_path / study, templates) + validate_file(templates / "study.yaml", templates)
            + validate_file(templates / "steps.yaml", templates))


def _task(docs, name):
    """A task of the study DAG every study Workflow runs (templates/study.yaml)."""
    return next(t for t in docs["dag"]["spec"]["templates"][0]["dag"]["tasks"] if t["name"] == name)


def _step(docs, name):
    return next(t for t in docs["steps"]["spec"]["templates"] if t["name"] == name)


DAMAGE = {
    "unknown key": (lambda d: _step(d, "finetune")["container"].__setitem__("imagePullPolicyy", "Always"),
                    "imagePullPolicyy"),
    "wrong type": (lambda d: d["study"]["spec"].__setitem__("parallelism", "many"), "parallelism"),
    "unquoted quantity": (lambda d: _step(d, "finetune")["container"]["resources"]["limits"].__setitem__(
        "nvidia.com/gpu", 1), "nvidia.com/gpu"),
    "dangling templateRef": (lambda d: _task(d, "plan")["templateRef"].__setitem__("template", "plann"), "plann"),
    "dangling depends": (lambda d: _task(d, "cell").__setitem__("depends", "prepare-data && build"), "build"),
    "dangling workflow parameter": (lambda d: _task(d, "plan")["arguments"]["parameters"][2].__setitem__(
        "value", "{{workflow.parameters.presett}}"), "presett"),
    "dangling output parameter": (lambda d: _task(d, "cell").__setitem__(
        "withParam", "{{tasks.plan.outputs.parameters.runz}}"), "runz"),
    "unknown argument": (lambda d: _task(d, "aggregate")["arguments"]["parameters"].append(
        {"name": "colour", "value": "red"}), "colour"),
    "dangling local template": (lambda d: _step(d, "cell")["dag"]["tasks"][0].__setitem__("template", "fine"),
                                "fine"),
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_damage_to_the_real_workflow_is_caught_by_name(kind, tmp_path):
    change, needle = DAMAGE[kind]
    errors = _damaged(tmp_path, "reversed-layers.yaml", lambda d: change(d))
    assert errors, kind
    assert any(needle in e for e in errors), errors


def test_the_undamaged_copy_is_valid(tmp_path):
    assert _damaged(tmp_path, "reversed-layers.yaml", lambda d: copy.deepcopy(d)) == []


# workflow/util/merge.go ValidateUserOverrides (Argo 3.7.14+, 4.0.5+, 4.1.0+): under templateReferencing
# Strict or Secure, a Workflow may set only these spec fields besides workflowTemplateRef (docs/
# workflow-restrictions.md "Allowed Workflow Fields Under templateReferencing"); operator.go setExecWorkflow
# refuses a Workflow without workflowTemplateRef ("workflows must use workflowTemplateRef to be executed
# when the controller is in reference mode").
STRICT_ALLOWED = {"arguments", "entrypoint", "shutdown", "suspend", "activeDeadlineSeconds", "priority",
                  "ttlStrategy", "podGC", "volumeClaimGC", "archiveLogs", "workflowMetadata", "workflowTemplateRef",
                  "metrics", "artifactGC"}


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_workflow_runs_under_template_referencing_strict(path):
    (doc,) = load_documents(path)
    spec = doc["spec"]["workflowSpec"] if doc["kind"] == "CronWorkflow" else doc["spec"]
    assert "workflowTemplateRef" in spec, path
    assert set(spec) <= STRICT_ALLOWED, set(spec) - STRICT_ALLOWED


def test_pods_run_as_the_service_account_the_platform_grants_task_results():
    """docs/workflow-rbac.md: pods run as spec.serviceAccountName, else the namespace's `default`; the
    emissary executor needs create and patch on workflowtaskresults. workflows/templates/ alone (no
    chart) provides both, and the store ConfigMap carries the label Argo requires of a parameter ConfigMap."""
    docs = load_documents(TEMPLATES / "platform.yaml")
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    task_results = {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]}
    rules = {"bertology": [task_results],
             # the queue watch's own account: read and stop Workflows (queue-watch.yaml), besides its task results
             "bertology-queue-watch": [{"apiGroups": ["argoproj.io"], "resources": ["workflows"],
                                        "verbs": ["list", "patch"]}, task_results]}
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert accounts == set(rules)
    for account, expected in rules.items():
        (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and d["subjects"] == [
            {"kind": "ServiceAccount", "name": account}]]
        (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == binding["roleRef"]["name"]]
        assert role["rules"] == expected, account
    account = "bertology"
    library = load_library(TEMPLATES)
    assert library["bertology-queue-watch"].spec["serviceAccountName"] == "bertology-queue-watch"
    runnable = ["bertology-study", "bertology-vocab-overlap", "bertology-nightly-regression"]
    for name in runnable:
        spec = library[name].spec
        assert spec["serviceAccountName"] == account, name
        # `store` a plain value, empty: -p store=… replaces it on every Argo version; the ConfigMap's URI is
        # `platform_store`, which plan reads when `store` is empty
        params = {p["name"]: p for p in spec["arguments"]["parameters"]}
        assert params["store"]["value"] == "" and "valueFrom" not in params["store"], name
        platform = params["platform_store"]
        # default "": a deleted ConfigMap must not error every running study (operator.go setGlobalParameters
        # reads it on every reconcile); plan then refuses to start a study in one line
        assert platform == {**platform, "valueFrom": {"configMapKeyRef": {"name": "bertology-config", "key": "store"},
                                                      "default": ""}}
        assert "value" not in platform, name
    assert maps["bertology-config"]["metadata"]["labels"]["workflows.argoproj.io/configmap-type"] == "Parameter"
    assert set(maps["bertology-semaphores"]["data"]) == {"gpu"}


def test_no_dag_relies_on_fail_fast_timing():
    """Every DAG of ours states failFast: false (dag.go; see bertology.argo.dag)."""
    dags = [t for src in load_library(TEMPLATES).values() for t in src.spec.get("templates") or [] if "dag" in t]
    assert dags
    for template in dags:
        assert template["dag"].get("failFast") is False, template["name"]


def _library_with_platform_store(tmp_path: Path, uri: str) -> Path:
    """The real library, its ConfigMap bertology-config pointing at `uri` (as the chart's store.uri would)."""
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates)
    docs = load_documents(templates / "platform.yaml")
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "bertology-config":
            doc["data"]["store"] = uri
    (templates / "platform.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return templates


@pytest.mark.parametrize("version", ["3.6.19", "3.7.18", "4.1.2"])
def test_the_store_given_with_p_reaches_plan_on_every_supported_argo_version(tmp_path, monkeypatch, version):
    """`argo submit … -p store=URI` (workflow/util/util.go overrideParameters) puts a value in the Workflow;
    before v3.7.0 a WorkflowTemplate's valueFrom for the same parameter won (tests/test_argo_conformance.py).
    The study's `store` has none, so plan writes where -p says on every version; without it, plan takes
    the ConfigMap's (`platform_store`). plan runs for real here (a dry run runs only it)."""
    from bertology.argo.runner import run_workflow

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    platform, mine = tmp_path / "platform", tmp_path / "mine"
    templates = _library_with_platform_store(tmp_path, f"file://{platform}")

    def plan_store(**params) -> str:
        result = run_workflow(WORKFLOWS / "reversed-layers.yaml", params={"preset": "tiny", "tasks": '["rte"]', **params},
                              templates_dir=templates, workdir=tmp_path / f"work-{len(params)}", project_root=REPO,
                              log=lambda _: None, dry_run=True, fork_server=True, argo_version=version)
        assert result.nodes["plan"].phase == "Succeeded", result.nodes["plan"].message
        return result.nodes["plan"].outputs["store"]

    assert plan_store(store=f"file://{mine}") == f"file://{mine}"
    assert list(mine.glob("studies/reversed-layers/*/plan.json")) and not platform.exists()
    if version == "4.1.2":  # the same on every version: the ConfigMap's store when none is given
        assert plan_store() == f"file://{platform}"


def _task_arguments(template: dict) -> list[tuple[str, str]]:
    return [(task["name"], json.dumps(task.get("arguments") or {}))
            for task in (template.get("dag") or {}).get("tasks") or []]


def test_only_plan_reads_platform_store_every_later_step_takes_plan_s_store():
    """Argo reads `platform_store`'s ConfigMap again on every reconcile; a step after plan reading it would
    move a running study, or after `helm uninstall` get "" and fail. Every other task takes
    {{tasks.plan.outputs.parameters.store}}."""
    library = load_library(TEMPLATES)
    for name in ("bertology-study", "bertology-vocab-overlap", "bertology-nightly-regression"):
        spec = library[name].spec
        for template in spec["templates"]:
            for task, arguments in _task_arguments(template):
                reads = "workflow.parameters.platform_store" in arguments
                assert reads == (task == "plan"), (name, task)
                if task != "plan" and '"name": "store"' in arguments:
                    assert "{{tasks.plan.outputs.parameters.store}}" in arguments, (name, task)
            assert "platform_store" not in json.dumps({k: v for k, v in template.items() if k != "dag"}), name
    for template in library["bertology-steps"].spec["templates"]:
        params = {p["name"] for p in (template.get("inputs") or {}).get("parameters") or []}
        assert ("platform_store" in params) == (template["name"] in ("plan", "vocab-plan")), template["name"]


@pytest.mark.parametrize("study", ["reversed-layers.yaml", "vocab-overlap.yaml"])
def test_plan_refuses_a_study_with_no_store_in_one_line_when_the_config_map_is_gone(tmp_path, monkeypatch, study):
    """After `helm uninstall` (or without the chart's ConfigMap) `platform_store` takes its default "", and a
    study submitted without -p store has no store: plan, the first step, refuses it naming both parameters
    and how to set them, before any GPU step (a dry run runs plan only)."""
    from bertology.argo.runner import run_workflow
    from bertology.steps.harness import NO_STORE

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates)
    docs = [d for d in load_documents(templates / "platform.yaml") if d["metadata"]["name"] != "bertology-config"]
    (templates / "platform.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    result = run_workflow(WORKFLOWS / study, params={"preset": "tiny"}, templates_dir=templates,
                          workdir=tmp_path / "work", project_root=REPO, log=lambda _: None, dry_run=True,
                          fork_server=True)
    plan = result.nodes["plan"]
    assert (plan.phase, plan.exit_code, plan.attempts) == ("Failed", 2, 1)  # bad input: not retried
    assert plan.tries[0].message == f"main: Error (exit code 2): error: {NO_STORE}"
    assert "store is empty and so is platform_store" in NO_STORE and "\n" not in NO_STORE
    assert not [n for n, node in result.nodes.items() if node.tries and n != "plan"]  # no other pod ran
