"""Workflows through the Kubernetes API, with the `kubernetes` package: as `argo submit` does without an Argo
Server, a Workflow is created as a custom object (argoproj.io/v1alpha1 `workflows`) in the namespace, and
followed with a watch on its name.

The credentials are kubectl's: the kubeconfig given, else $KUBECONFIG (a list, merged), else
~/.kube/config, else, in a pod, its ServiceAccount; the namespace defaults to the kubeconfig context's
(bertology.cluster.namespace).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import urllib3

from bertology.cluster.answers import not_found, refused, unreachable
from bertology.cluster.namespace import default_namespace
from bertology.errors import BadInput, BertologyError

GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "workflows"
INSTANCE_ID_ENV, INSTANCE_ID_LABEL = "ARGO_INSTANCEID", "workflows.argoproj.io/controller-instanceid"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
INSTALL = "pip install 'bertology[cluster]'"
WATCH_S = 300  # one watch request at most this long; the next resumes from the last version seen
NO_KUBECONFIG = ("give kubeconfig=PATH (--kubeconfig PATH), set $KUBECONFIG, or write ~/.kube/config, as kubectl "
                 "and argo read it")


def kube_settings(kubeconfig: str | Path | None, required: bool = True):
    """(the client's Configuration, the context's namespace or None), as kubectl finds them; (None, None)
    when there are none and none are required (an Argo Server with $ARGO_TOKEN needs no kubeconfig)."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise BertologyError(f"a cluster needs the `kubernetes` package ({INSTALL})") from None

    configuration = client.Configuration()  # its own, not the client's process-wide default
    if kubeconfig is not None:
        if not Path(kubeconfig).is_file():
            raise BadInput(f"kubeconfig '{kubeconfig}' not found (a file, as kubectl's --kubeconfig)")
        files = str(kubeconfig)
    elif os.environ.get("KUBECONFIG", "").strip():
        value = os.environ["KUBECONFIG"]
        present = [p for p in value.split(os.pathsep) if p and Path(p).is_file()]
        if not present and not required:  # KUBECONFIG=/dev/null, as Argo's docs suggest beside ARGO_TOKEN
            return None, None
        if not present:
            raise BadInput(f"$KUBECONFIG '{value}' names no file that exists ({NO_KUBECONFIG})")
        files = os.pathsep.join(present)
    elif Path("~/.kube/config").expanduser().is_file():
        files = str(Path("~/.kube/config").expanduser())
    elif os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT / "token").is_file():
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as e:
            raise BadInput(f"in a pod, its ServiceAccount cannot be used: {e}") from None
        namespace = (SERVICE_ACCOUNT / "namespace").read_text().strip() or None
        return configuration, namespace
    elif required:
        raise BadInput(f"no kubeconfig found ({NO_KUBECONFIG})")
    else:
        return None, None
    try:
        config.load_kube_config(config_file=files, client_configuration=configuration)
        _, current = config.list_kube_config_contexts(config_file=files)
    except (config.ConfigException, OSError, ValueError, KeyError, TypeError) as e:
        raise BadInput(f"kubeconfig '{files}' cannot be used: {' '.join(str(e).split()) or type(e).__name__}") from None
    return configuration, ((current or {}).get("context") or {}).get("namespace")


class KubernetesApi:
    """The Workflows of one namespace as custom objects."""

    def __init__(self, configuration, namespace: str):
        from kubernetes import client

        self.api_client = client.ApiClient(configuration)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.namespace = namespace
        self.where = f"the Kubernetes API at {configuration.host}"

    @classmethod
    def from_kubeconfig(cls, namespace: str | None, kubeconfig: str | Path | None) -> KubernetesApi:
        configuration, context_namespace = kube_settings(kubeconfig)
        return cls(configuration, namespace or default_namespace(context_namespace))

    def create(self, workflow: dict) -> dict:
        """The Workflow created (its name given by the API server from `generateName`), labelled with
        $ARGO_INSTANCEID as the argo CLI labels one for a controller with an instance id."""
        if os.environ.get(INSTANCE_ID_ENV, "").strip():
            workflow["metadata"].setdefault("labels", {})[INSTANCE_ID_LABEL] = os.environ[INSTANCE_ID_ENV].strip()
        return self._call("create a Workflow", self.custom.create_namespaced_custom_object, GROUP, VERSION,
                          self.namespace, PLURAL, workflow)

    def get(self, name: str) -> dict:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except ApiException as e:
            if e.status == 404:
                raise not_found(name, self.namespace, self._names(), self.where) from None
            raise refused(e.status, e.body, e.reason, f"read Workflow '{name}'", self.where) from None
        except urllib3.exceptions.HTTPError as e:  # no answer: refused, reset, a certificate
            raise unreachable(e, self.where) from None

    def has_template(self, name: str) -> bool | None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "workflowtemplates", name)
        except ApiException as e:
            if e.status == 404:
                return False
            if e.status in (401, 403):
                return None  # not allowed to look: creating the Workflow will say what is wrong
            raise refused(e.status, e.body, e.reason, f"read WorkflowTemplate '{name}'", self.where) from None
        except urllib3.exceptions.HTTPError as e:
            raise unreachable(e, self.where) from None
        return True

    def namespaces(self) -> list[str] | None:
        """Every namespace's name, or None where this identity may not list them."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            return [n.metadata.name for n in client.CoreV1Api(self.api_client).list_namespace().items]
        except (ApiException, urllib3.exceptions.HTTPError):
            return None

    def changes(self, name: str, deadline: float | None) -> Iterator[dict]:
        """The Workflow now, then each time the API server reports it changed, until `deadline` (time.monotonic;
        None: for as long as the caller iterates). An expired watch (410 Gone) or one cut off is resumed from a
        fresh read."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        workflow = self.get(name)
        yield workflow
        version = workflow["metadata"].get("resourceVersion")
        while deadline is None or time.monotonic() < deadline:
            left = WATCH_S if deadline is None else max(1, min(WATCH_S, int(deadline - time.monotonic() + 0.999)))
            try:
                for event in watch.Watch().stream(
                        self.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
                        field_selector=f"metadata.name={name}", resource_version=version, timeout_seconds=left):
                    found = event.get("raw_object") or {}
                    if event.get("type") == "DELETED":
                        raise BertologyError(f"Workflow '{name}' in namespace '{self.namespace}' was deleted while "
                                             f"watched (phase {(found.get('status') or {}).get('phase') or 'unknown'})")
                    version = (found.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        yield found
            except ApiException as e:
                if e.status != 410:
                    raise refused(e.status, e.body, e.reason, f"watch Workflow '{name}'", self.where) from None
            except urllib3.exceptions.HTTPError:
                pass  # the stream broke off (a proxy's idle timeout, an API server restarting): read it again
            else:
                continue
            workflow = self.get(name)  # too old to resume from, or cut: read it again (unreachable: one line)
            version = workflow["metadata"].get("resourceVersion")
            yield workflow

    def _names(self) -> list[str]:
        from kubernetes.client.exceptions import ApiException

        try:
            listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)
        except (ApiException, urllib3.exceptions.HTTPError):  # a courtesy for the "not found" line
            return []
        return [w["metadata"]["name"] for w in listed.get("items") or []]

    def _call(self, doing: str, method, *args):
        from kubernetes.client.exceptions import ApiException

        try:
            return method(*args)
        except ApiException as e:
            raise refused(e.status, e.body, e.reason, doing, self.where) from None
        except urllib3.exceptions.HTTPError as e:
            raise unreachable(e, self.where) from None
