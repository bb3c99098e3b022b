"""The Pods Argo's controller makes of our templates, as manifests: what a Pod Security admission check and
checkov see (`make lint`, tests/test_pod_security.py), checked before any cluster does.

Follows workflow/controller/workflowpod.go, createWorkflowPod (v3.6.19, v3.7.18; podBuilder.build in v4.1.2),
in the default layout:
- metadata: labels `workflows.argoproj.io/workflow` and `.../completed`, then addMetadata copies the
  Workflow's spec.podMetadata and then the template's metadata (labels and annotations);
- spec: restartPolicy Never; createVolumes: `var-run-argo` and `tmp-dir-argo` (emptyDirs) before the
  template's volumes; setupServiceAccount (template, else Workflow); spec.hostNetwork, dnsPolicy,
  dnsConfig and imagePullSecrets from the Workflow;
- a container or script template: containers `wait` then `main`, init container `init`. newExecContainer
  gives `init` and `wait` the controller's executor image, resources and securityContext
  (workflow-controller-configmap key `executor`: `--controller`; nil by default, so they get only what the
  pod-level securityContext and a podSpecPatch give them); the main container runs under
  `/var/run/argo/argoexec emissary --` with `var-run-argo` mounted;
- a resource template: no `wait` (v3.6; from v3.7 only with archived logs, which is refused here), and its
  `main` is argoexec too (operator.go executeResource: `newExecContainer(common.MainContainerName, tmpl)`,
  `argoexec resource ACTION`). With no executor securityContext, newExecContainer locks its containers down
  with `common.MinimalCtrSC()` (non-root user 8737, no capabilities, no privilege escalation, RuntimeDefault
  seccomp), the root filesystem read-only on `main` only ("TODO: always set RO FS once #10787 is fixed");
  any controller executor securityContext replaces that whole;
- addSchedulingConstraints: nodeSelector, affinity, tolerations (template, else the enclosing DAG's, else
  the Workflow's), schedulerName, priorityClassName, hostAliases, and the pod securityContext: the
  template's replaces the Workflow's spec.securityContext whole, it is not merged;
- a script template's main container gets the `argo-staging` emptyDir (addScriptStagingVolume);
- last, the Workflow's podSpecPatch and then the template's, each a strategic merge patch of the pod spec
  (util.ApplyPodSpecPatch: pod_spec_patch.py); containers are merged by name, so a patch naming `init` and
  `wait` sets fields of Argo's own containers, which nothing else in a template can reach.

A Workflow's spec is joined onto its workflowTemplateRef's (workflow/util/merge.go JoinWorkflowSpec, a
strategic merge: maps merged, lists replaced here). What this cannot know is refused by name: template types
other than container, script and resource, a podSpecPatch it cannot apply faithfully (pod_spec_patch.py),
and controller settings that reshape pods (mainContainer, workflowDefaults, initlessPod, kubeConfig). Pod
names are `<workflow>-<template>`, not Argo's hashed ones.

    python -m bertology.argo.pods --templates DIR [--controller CONFIGMAP] --out DIR FILE...
writes each document's pods to OUT/<kind>-<name>.yaml and exits 1 if any fails the restricted standard.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import yaml

from bertology import pod_security
from bertology.argo import deadlines, pod_spec_patch
from bertology.argo.documents import (
    Source,
    effective_spec,
    load_documents,
    load_library,
    resolve_task_template,
)
from bertology.argo.schema import ARGO_NEWEST
from bertology.errors import EXIT_BAD_INPUT, BadInput

WORKFLOW_LABEL = "workflows.argoproj.io/workflow"  # workflow/common/common.go LabelKeyWorkflow
COMPLETED_LABEL = "workflows.argoproj.io/completed"  # LabelKeyCompleted
# The controller's default executor image is argoexec at its own version (controller.executorImage).
DEFAULT_EXECUTOR_IMAGE = f"quay.io/argoproj/argoexec:{ARGO_NEWEST}"
VAR_RUN_ARGO = {"name": "var-run-argo", "emptyDir": {}}  # workflowpod.go volumeVarArgo
TMP_DIR_ARGO = {"name": "tmp-dir-argo", "emptyDir": {}}  # volumeTmpDir
# Controller ConfigMap keys that change pods in ways this module does not model.
UNMODELLED_CONFIG = ("mainContainer", "workflowDefaults", "kubeConfig")


def controller_executor(path: str | Path | None) -> dict:
    """The `executor` setting of a workflow-controller-configmap (a ConfigMap, or a patch of one, whose
    data values are YAML strings, as config/config.go reads them); {} when there is none."""
    if path is None:
        return {}
    (doc,) = load_documents(path) or [{}]
    data = doc.get("data") or {}
    for key in UNMODELLED_CONFIG:
        if key in data:
            raise BadInput(f"{path}: data.{key} reshapes every pod; bertology.argo.pods does not model it")
    if (yaml.safe_load(data.get("initlessPod") or "{}") or {}).get("enabled"):
        raise BadInput(f"{path}: data.initlessPod.enabled (Argo 4.1's init-less layout) is not modelled")
    return yaml.safe_load(data.get("executor") or "{}") or {}


def _join(base: dict, over: dict) -> dict:
    """`over` merged onto `base`: maps recursively, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _join(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def minimal_container_security() -> dict:
    """workflow/common/security_context.go `MinimalCtrSC` (v3.6.19, v3.7.18, v4.1.2)."""
    return {"capabilities": {"drop": ["ALL"]}, "privileged": False, "runAsNonRoot": True, "runAsUser": 8737,
            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _exec_container(name: str, command: list[str], executor: dict, kind: str = "container") -> dict:
    """workflowpod.go newExecContainer: the controller's executor settings, nothing from the template; for a
    resource template with no executor securityContext, Argo's own lockdown ("lock down resource pods by
    default": MinimalCtrSC, its read-only root filesystem left unset on `init` and `wait`)."""
    container = {"name": name, "image": executor.get("image", DEFAULT_EXECUTOR_IMAGE), "command": command}
    for key in ("imagePullPolicy", "resources", "securityContext", "args"):
        if key in executor:
            container[key] = copy.deepcopy(executor[key])
    if kind == "resource" and executor.get("securityContext") is None:
        container["securityContext"] = minimal_container_security()
        if name in ("init", "wait"):
            del container["securityContext"]["readOnlyRootFilesystem"]
    return container


def pod(template: dict, wf_spec: dict, wf_name: str, executor: dict, boundary: dict | None = None,
        where: str = "") -> dict:
    """The Pod the controller creates for a container, script or resource template (podBuilder.build)."""
    where = where or f"template {template.get('name')}"
    patches = [pod_spec_patch.parse(holder["podSpecPatch"], label)
               for holder, label in ((wf_spec, "the Workflow"), (template, where)) if holder.get("podSpecPatch")]
    kind = next((k for k in ("container", "script", "resource") if k in template), None)
    if kind is None:
        raise BadInput(f"{where}: only container, script and resource templates are modelled as pods")
    tmpl = copy.deepcopy(template)
    if kind == "resource":
        if (tmpl.get("archiveLocation") or {}).get("archiveLogs"):
            raise BadInput(f"{where}: a resource template that archives its logs has a wait container from "
                           "v3.7 on; not modelled")
        main = _exec_container("main", ["argoexec", "resource", str(tmpl["resource"].get("action", ""))],
                               executor, kind)
        main["volumeMounts"] = [{"name": "tmp-dir-argo", "mountPath": "/tmp", "subPath": "0"}]
        containers = [main]
    else:
        main = {**{k: v for k, v in tmpl[kind].items() if k != "source"}, "name": "main"}
        main["volumeMounts"] = list(main.get("volumeMounts", []))
        wait = _exec_container("wait", ["argoexec", "wait"], executor, kind)
        wait["volumeMounts"] = [{"name": "tmp-dir-argo", "mountPath": "/tmp", "subPath": "0"},
                                {"name": "var-run-argo", "mountPath": "/var/run/argo"}]
        containers = [wait, main]
    main["command"] = ["/var/run/argo/argoexec", "emissary", "--", *main.get("command", [])]
    main["volumeMounts"].append({"name": "var-run-argo", "mountPath": "/var/run/argo"})
    init = _exec_container("init", ["argoexec", "init"], executor, kind)
    init["volumeMounts"] = [{"name": "var-run-argo", "mountPath": "/var/run/argo"}]
    spec: dict = {"restartPolicy": "Never", "volumes": [VAR_RUN_ARGO, TMP_DIR_ARGO, *tmpl.get("volumes", [])]}
    if "activeDeadlineSeconds" in tmpl:
        spec["activeDeadlineSeconds"] = tmpl["activeDeadlineSeconds"]
    if tmpl.get("timeout"):  # createWorkflowPod: the time left to the template's timeout replaces it (at most all)
        spec["activeDeadlineSeconds"] = int(deadlines.timeout_seconds(tmpl["timeout"]) or 0)
    for key in ("imagePullSecrets", "hostNetwork", "dnsPolicy", "dnsConfig"):
        if key in wf_spec:
            spec[key] = copy.deepcopy(wf_spec[key])
    account = tmpl.get("serviceAccountName") or wf_spec.get("serviceAccountName")
    if account:
        spec["serviceAccountName"] = account
    if tmpl.get("automountServiceAccountToken", wf_spec.get("automountServiceAccountToken")) is False:
        spec["automountServiceAccountToken"] = False
    spec["containers"], spec["initContainers"] = containers, [init]
    if kind == "script":
        spec["volumes"].append({"name": "argo-staging", "emptyDir": {}})
        main["volumeMounts"].append({"name": "argo-staging", "mountPath": "/argo/staging"})
    # addSchedulingConstraints
    for key in ("nodeSelector", "affinity", "tolerations"):
        value = tmpl.get(key) or (boundary or {}).get(key) or wf_spec.get(key)
        if value:
            spec[key] = copy.deepcopy(value)
    for key, wf_key in (("schedulerName", "schedulerName"), ("priorityClassName", "podPriorityClassName")):
        if tmpl.get(key) or wf_spec.get(wf_key):
            spec[key] = tmpl.get(key) or wf_spec.get(wf_key)
    if wf_spec.get("hostAliases") or tmpl.get("hostAliases"):
        spec["hostAliases"] = [*wf_spec.get("hostAliases", []), *tmpl.get("hostAliases", [])]
    security = tmpl.get("securityContext") or wf_spec.get("securityContext")
    if security:
        spec["securityContext"] = copy.deepcopy(security)
    # addMetadata
    labels = {WORKFLOW_LABEL: wf_name, COMPLETED_LABEL: "false"}
    annotations = {"workflows.argoproj.io/node-name": f"{wf_name}.{tmpl.get('name')}"}
    for meta in (wf_spec.get("podMetadata") or {}, tmpl.get("metadata") or {}):
        labels.update(meta.get("labels") or {})
        annotations.update(meta.get("annotations") or {})
    # util.ApplyPodSpecPatch, last: the Workflow's patch, then the template's (processPodSpecPatch)
    for patch in patches:
        spec = pod_spec_patch.apply(spec, patch, where)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{wf_name}-{tmpl.get('name')}", "labels": labels, "annotations": annotations},
            "spec": spec}


def _workflow_name(source: Source) -> str:
    meta = source.doc.get("metadata") or {}
    return str(meta.get("name") or str(meta.get("generateName") or "workflow").rstrip("-"))


def workflow_pods(source: Source, library: dict[str, Source], executor: dict) -> list[dict]:
    """Every pod a Workflow or CronWorkflow can create: its DAG walked from the entrypoint (and onExit),
    through template and templateRef, one pod per pod template reached."""
    spec, scope = effective_spec(source, library)
    ref = (source.spec.get("workflowTemplateRef") or {}).get("name")
    wf_spec = _join(library[ref].spec, source.spec) if ref in library else source.spec
    name, pods, seen = _workflow_name(source), [], set()

    def walk(template: dict, where: Source, boundary: dict | None) -> None:
        key = (str(where.path), where.name, template.get("name"), (boundary or {}).get("name"))
        if key in seen:
            return
        seen.add(key)
        if "dag" in template or "steps" in template:
            tasks = template["dag"].get("tasks") or [] if "dag" in template else \
                [step for group in template["steps"] or [] for step in group]
            for task in tasks:
                found = resolve_task_template(task, where, library)
                if isinstance(found, str):
                    raise BadInput(f"{source.path}: {found}")
                walk(*found, template)
        else:
            pods.append(pod(template, wf_spec, name, executor, boundary,
                            f"{where.path}: {where.label}: template {template.get('name')}"))

    for entry in (spec.get("entrypoint"), spec.get("onExit")):
        template = scope.template(entry) if entry else None
        if entry and template is None:
            raise BadInput(f"{source.path}: template '{entry}' not found in {scope.label}")
        if template is not None:
            walk(template, scope, None)
    return pods


def template_pods(source: Source, executor: dict) -> list[dict]:
    """Each pod template of a WorkflowTemplate, as a Workflow submitted from it runs it."""
    return [pod(t, source.spec, source.name, executor, None, f"{source.path}: {source.label}: template {t['name']}")
            for t in source.spec.get("templates") or [] if "dag" not in t and "steps" not in t]


def file_pods(path: str | Path, library: dict[str, Source], executor: dict) -> dict[str, list[dict]]:
    """The pods of every Argo document of a file, by `<kind>-<name>`; other kinds have none."""
    out = {}
    for doc in load_documents(path):
        source = Source(Path(path), doc)
        if source.kind in ("Workflow", "CronWorkflow"):
            out[f"{source.kind}-{_workflow_name(source)}"] = workflow_pods(source, library, executor)
        elif source.kind == "WorkflowTemplate":
            out[f"{source.kind}-{source.name}"] = template_pods(source, executor)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertology.argo.pods", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="Workflow, CronWorkflow or WorkflowTemplate YAML files")
    parser.add_argument("--templates", help="directory of the WorkflowTemplates that templateRefs name")
    parser.add_argument("--controller", help="a workflow-controller-configmap whose `executor` setting to model "
                                             "(default: none, Argo's defaults)")
    parser.add_argument("--out", required=True, help="directory for the Pod manifests")
    args = parser.parse_args(argv)
    try:
        library, executor = load_library(args.templates), controller_executor(args.controller)
        found = {k: v for f in args.files for k, v in file_pods(f, library, executor).items()}
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out, failed = Path(args.out), 0
    out.mkdir(parents=True, exist_ok=True)
    for key, pods in found.items():
        if pods:
            (out / f"{key}.yaml").write_text(yaml.safe_dump_all(pods, sort_keys=False))
        for manifest in pods:
            for check, problems in pod_security.violations(manifest).items():
                failed += 1
                print(f"{key}: pod {manifest['metadata']['name']}: restricted {check}: {'; '.join(problems)} "
                      f"({pod_security.DOCS})")
    print(f"{sum(map(len, found.values()))} pods from {len(found)} documents in {out}; "
          f"{failed} restricted Pod Security violations")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
