"""A template's (or a Workflow's) `podSpecPatch`, applied to a pod spec as Argo applies it.

Follows workflow/util/util.go `ApplyPodSpecPatch` (the same in v3.6.19, v3.7.18 and v4.1.2): the patch is
YAML converted to JSON (`ConvertYAMLToJSON`), checked to unmarshal as a PodSpec, and applied to the built
pod's spec with `strategicpatch.StrategicMergePatch(podSpecJSON, patchJSON, apiv1.PodSpec{})`. workflowpod.go
`createWorkflowPod` (v4.1.2: `podBuilder.build`) applies the Workflow's patch, then the template's, after
the pod is complete (init, wait and main containers, volumes, scheduling, security contexts), and
`processPodSpecPatch` substitutes `{{…}}` in it first.

The strategic merge of a PodSpec, as k8s.io/apimachinery/pkg/util/strategicpatch does it for the fields
this module knows (their `patchStrategy:"merge"` and `patchMergeKey` tags in k8s.io/api/core/v1/types.go):
- a map is merged key by key, and `null` deletes a key;
- a list with a merge key (`containers`, `initContainers`, `ephemeralContainers`, `volumes`,
  `imagePullSecrets`, `schedulingGates`, `resourceClaims` by `name`; `hostAliases` by `ip`;
  `topologySpreadConstraints` by `topologyKey`; in a container `env` by `name`, `volumeMounts` by
  `mountPath`, `volumeDevices` by `devicePath`, `ports` by `containerPort`) is merged element by element:
  a patch element whose key matches an element of the spec is merged into it, in place; any other is
  appended (a container the pod does not have is added as the patch gives it, without an image);
- every other list (`tolerations`, `command`, `args`, `capabilities.drop`, …) is replaced whole.
What it cannot apply faithfully is refused in one line: a patch directive (`$patch`, `$retainKeys`,
`$setElementOrder/…`, `$deleteFromPrimitiveList/…`), a merge-list element without its merge key, a key that
is not a PodSpec field (Go's json.Unmarshal would drop it silently), the `command` or `volumeMounts` of a
container in `containers` (createWorkflowPod wraps their commands in the emissary and mounts Argo's volumes
after the patch), `{{…}}` (substituted per pod), and a patch that is not a YAML mapping.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from bertology.errors import BadInput

# k8s.io/api/core/v1 types.go PodSpec (Kubernetes 1.36): the JSON names of its fields
POD_SPEC_FIELDS = frozenset((
    "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
    "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector", "serviceAccountName",
    "serviceAccount", "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID", "hostIPC",
    "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname", "subdomain", "affinity",
    "schedulerName", "tolerations", "hostAliases", "priorityClassName", "priority", "dnsConfig", "readinessGates",
    "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead", "topologySpreadConstraints",
    "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates", "resourceClaims", "resources", "hostnameOverride",
    "workloadRef", "schedulingGroup",
))
# `patchStrategy:"merge"` lists and their `patchMergeKey`, by where they are
POD_MERGE_KEYS = {"volumes": "name", "initContainers": "name", "containers": "name", "ephemeralContainers": "name",
                  "imagePullSecrets": "name", "hostAliases": "ip", "topologySpreadConstraints": "topologyKey",
                  "schedulingGates": "name", "resourceClaims": "name"}
CONTAINER_MERGE_KEYS = {"env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
                        "ports": "containerPort"}
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
# Fields of `containers` (not init containers) that createWorkflowPod changes after the patch: the
# emissary's wrapper around `command`, and the var-run-argo and tmp-dir-argo mounts
AFTER_PATCH = ("command", "volumeMounts")
# Argo's own containers in the default pod layout (workflow/common/common.go InitContainerName,
# WaitContainerName): newExecContainer builds them from the controller's executor settings
ARGO_CONTAINERS = {"initContainers": "init", "containers": "wait"}


def parse(text: Any, where: str) -> dict:
    """The patch as a mapping (ConvertYAMLToJSON), refusing in one line what `apply` cannot apply faithfully."""
    if "{{" in str(text):
        raise BadInput(f"{where}: podSpecPatch with {{{{…}}}} is substituted per pod; it is not modelled")
    try:
        patch = yaml.safe_load(str(text))
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else "invalid YAML"
        raise BadInput(f"{where}: podSpecPatch is not YAML ({first})") from None
    if patch is None:
        return {}
    if not isinstance(patch, dict):
        raise BadInput(f"{where}: podSpecPatch must be a YAML mapping of PodSpec fields, got {type(patch).__name__}")
    unknown = sorted(set(patch) - POD_SPEC_FIELDS)
    if unknown:
        raise BadInput(f"{where}: podSpecPatch key {unknown[0]!r} is not a PodSpec field (Argo's json.Unmarshal "
                       f"would drop it silently)")
    _check(patch, where, "podSpecPatch")
    for i, container in enumerate(patch.get("containers") or []):
        for key in AFTER_PATCH:
            if isinstance(container, dict) and key in container:
                raise BadInput(f"{where}: podSpecPatch.containers[{i}].{key}: Argo changes a container's {key} "
                               f"after applying the patch (workflowpod.go createWorkflowPod); not modelled")
    return json.loads(json.dumps(patch))  # JSON's types, as ConvertYAMLToJSON gives them


def _check(value: Any, where: str, path: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if str(key).startswith("$"):
                raise BadInput(f"{where}: {path}.{key}: strategic merge directives are not modelled")
            _check(item, where, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check(item, where, f"{path}[{i}]")


def apply(spec: dict, patch: dict, where: str = "podSpecPatch") -> dict:
    """`spec` with `patch` (from `parse`) applied as StrategicMergePatch applies it to a PodSpec."""
    return _merge(copy.deepcopy(spec), patch, POD_MERGE_KEYS, where, "podSpecPatch")


def _merge(base: Any, patch: Any, merge_keys: dict[str, str], where: str, path: str) -> Any:
    if not isinstance(patch, dict) or not isinstance(base, dict):
        return copy.deepcopy(patch)
    out = dict(base)
    for key, value in patch.items():
        at = f"{path}.{key}"
        if value is None:
            out.pop(key, None)
        elif key in merge_keys and isinstance(value, list):
            inner = CONTAINER_MERGE_KEYS if key in CONTAINER_LISTS else {}
            out[key] = _merge_list(out.get(key) or [], value, merge_keys[key], inner, where, at)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, {}, where, at)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(base: list, patch: list, key: str, inner: dict[str, str], where: str, path: str) -> list:
    out = [copy.deepcopy(item) for item in base]
    for element in patch:
        if not isinstance(element, dict) or key not in element:
            raise BadInput(f"{where}: {path}: an element without its merge key '{key}' cannot be merged")
        found = next((i for i, item in enumerate(out) if isinstance(item, dict) and item.get(key) == element[key]),
                     None)
        if found is None:
            out.append(_merge({}, element, inner, where, f"{path}[{key}={element[key]}]"))
        else:
            out[found] = _merge(out[found], element, inner, where, f"{path}[{key}={element[key]}]")
    return out


def argo_containers_only(patch: dict) -> bool:
    """Whether the patch changes nothing but Argo's own `init` and `wait` containers (what the local runner,
    which runs neither, may accept and ignore)."""
    for field, value in patch.items():
        if field not in ARGO_CONTAINERS or not isinstance(value, list):
            return False
        if any(not isinstance(c, dict) or c.get("name") != ARGO_CONTAINERS[field] for c in value):
            return False
    return True
