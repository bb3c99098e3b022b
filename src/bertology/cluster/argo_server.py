"""Workflows through Argo Server's API, with the `argo-workflows` package, for a cluster whose Kubernetes API
is out of reach (another network, a notebook service): chosen when $ARGO_SERVER is set, and configured by
the environment exactly as the argo CLI reads it (cmd/argo/commands/client/conn.go):

- ARGO_SERVER: `host:port`, without a scheme;
- ARGO_SECURE: HTTPS unless it is `false`; ARGO_INSECURE_SKIP_VERIFY=true: accept a certificate that
  cannot be verified (Argo Server's own, self-signed);
- ARGO_TOKEN: the whole Authorization header (`Bearer …` or `Basic …`), else the kubeconfig user's token;
- ARGO_NAMESPACE, else the kubeconfig context's namespace; ARGO_BASE_HREF: the path it is served under.

A Workflow is created with `create_workflow` and read with `get_workflow`; a watch reads it every POLL_S
seconds (a plain request each, through any proxy or load balancer in between).
"""

from __future__ import annotations

import copy
import json
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import urllib3

from bertology.cluster.answers import not_found, refused, unreachable
from bertology.cluster.kube import INSTALL, kube_settings
from bertology.cluster.namespace import default_namespace
from bertology.errors import BadInput, BertologyError

ARGO_SERVER_ENV = "ARGO_SERVER"
POLL_S = 5.0  # between two reads of a watched Workflow


class ArgoServer:
    """The Workflows of one namespace through Argo Server."""

    def __init__(self, server: str, namespace: str, token: str | None, *, secure: bool = True, verify: bool = True,
                 base_href: str = ""):
        try:
            import argo_workflows
            from argo_workflows.api import workflow_service_api, workflow_template_service_api
        except ImportError:
            raise BertologyError(f"$ARGO_SERVER is set, so the `argo-workflows` package is needed ({INSTALL})") from None

        configuration = argo_workflows.Configuration(host=f"{'https' if secure else 'http'}://{server}"
                                                          f"{base_href.rstrip('/')}")
        configuration.verify_ssl = verify
        if token:
            configuration.api_key["BearerToken"] = token  # sent as it is: ARGO_TOKEN holds its scheme
        client = argo_workflows.ApiClient(configuration)
        self.workflows = workflow_service_api.WorkflowServiceApi(client)
        self.templates = workflow_template_service_api.WorkflowTemplateServiceApi(client)
        self.namespace = namespace
        self.where = f"Argo Server at {configuration.host}"
        self.verify = verify

    @classmethod
    def from_environment(cls, namespace: str | None, kubeconfig: str | Path | None) -> ArgoServer:
        server = os.environ[ARGO_SERVER_ENV].strip()
        if "://" in server or "/" in server:
            raise BadInput(f"${ARGO_SERVER_ENV} '{server}' is not host:port (allowed: e.g. localhost:2746, without "
                           f"http:// or https://: ARGO_SECURE=false says plain HTTP; ARGO_BASE_HREF a path)")
        configuration, context_namespace = kube_settings(kubeconfig, required=kubeconfig is not None)
        token = os.environ.get("ARGO_TOKEN")
        if token is None and configuration is not None:
            token = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")  # the user's
        return cls(server, namespace or default_namespace(context_namespace), token,
                   secure=os.environ.get("ARGO_SECURE") != "false",
                   verify=os.environ.get("ARGO_INSECURE_SKIP_VERIFY") != "true",
                   base_href=os.environ.get("ARGO_BASE_HREF", ""))

    def create(self, workflow: dict) -> dict:
        from argo_workflows.exceptions import ApiTypeError, ApiValueError
        from argo_workflows.model.io_argoproj_workflow_v1alpha1_workflow import (
            IoArgoprojWorkflowV1alpha1Workflow,
        )
        from argo_workflows.model.io_argoproj_workflow_v1alpha1_workflow_create_request import (
            IoArgoprojWorkflowV1alpha1WorkflowCreateRequest,
        )
        from argo_workflows.model_utils import validate_and_convert_types

        # the client's model of the document (converted in place, so a copy), as its own deserializer makes it
        try:
            model = validate_and_convert_types(copy.deepcopy(workflow), (IoArgoprojWorkflowV1alpha1Workflow,),
                                               ["workflow"], True, True, self.workflows.api_client.configuration)
        except (ApiTypeError, ApiValueError) as e:
            raise BadInput(f"the Workflow does not fit Argo Server's API (argo-workflows' model): {e}") from None
        request = IoArgoprojWorkflowV1alpha1WorkflowCreateRequest(namespace=self.namespace, workflow=model)
        return self._call("create a Workflow", None, self.workflows.create_workflow, self.namespace, request)

    def get(self, name: str) -> dict:
        return self._call(f"read Workflow '{name}'", name, self.workflows.get_workflow, self.namespace, name)

    def has_template(self, name: str) -> bool | None:
        from argo_workflows.exceptions import ApiException

        try:
            self._request(self.templates.get_workflow_template, self.namespace, name)
        except ApiException as e:
            if e.status == 404:
                return False
            if e.status in (401, 403):
                return None
            raise refused(e.status, e.body, e.reason, f"read WorkflowTemplate '{name}'", self.where) from None
        return True

    def namespaces(self) -> list[str] | None:
        return None  # Argo Server lists none

    def changes(self, name: str, deadline: float | None) -> Iterator[dict]:
        """The Workflow now, then each time a read finds it changed (its resourceVersion), until `deadline`."""
        version = None
        while True:
            workflow = self.get(name)
            if (workflow.get("metadata") or {}).get("resourceVersion") != version or version is None:
                version = (workflow.get("metadata") or {}).get("resourceVersion")
                yield workflow
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic())))

    def _call(self, doing: str, name: str | None, method, *args) -> dict:
        from argo_workflows.exceptions import ApiException

        try:
            return self._request(method, *args)
        except ApiException as e:
            if e.status == 404 and name is not None:
                raise not_found(name, self.namespace, self._names(), self.where) from None
            raise refused(e.status, e.body, e.reason, doing, self.where) from None

    def _request(self, method, *args) -> dict:
        """The response as a plain document (the client's models are not built: a newer server's fields stay),
        without urllib3's warning on every request where verification is off by choice."""
        with warnings.catch_warnings():
            if not self.verify:
                warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            try:
                response = method(*args, _preload_content=False)
            except urllib3.exceptions.HTTPError as e:
                raise unreachable(e, self.where) from None
        return json.loads(response.data or b"{}")

    def _names(self) -> list[str]:
        from argo_workflows.exceptions import ApiException

        try:
            listed = self._request(self.workflows.list_workflows, self.namespace)
        except (ApiException, BertologyError):  # a courtesy for the "not found" line
            return []
        return [w["metadata"]["name"] for w in listed.get("items") or []]
