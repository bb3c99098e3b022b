"""Which API a study goes to, chosen as the argo CLI chooses: Argo Server when $ARGO_SERVER names one
(bertology.cluster.argo_server), else the Kubernetes API (bertology.cluster.kube), in the same namespace
either way (bertology.cluster.namespace). Both speak in plain Workflow documents (dicts, as `kubectl get
-o json` shows them) and refuse in one line (bertology.cluster.answers)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from bertology.cluster.argo_server import ARGO_SERVER_ENV, ArgoServer
from bertology.cluster.kube import KubernetesApi
from bertology.cluster.namespace import check_namespace


class Transport(Protocol):
    """Workflows of one namespace, through one API."""

    namespace: str
    where: str  # the API, in words: "the Kubernetes API at https://…", "Argo Server at https://host:port"

    def create(self, workflow: dict) -> dict: ...
    def get(self, name: str) -> dict: ...
    def has_template(self, name: str) -> bool | None: ...  # None: not allowed to look
    def namespaces(self) -> list[str] | None: ...  # None: not allowed to list them
    def changes(self, name: str, deadline: float | None) -> Iterator[dict]: ...


def connect(namespace: str | None = None, kubeconfig: str | Path | None = None) -> Transport:
    """The API to use and the namespace, from the arguments and the environment; nothing is requested yet."""
    if namespace is not None:
        check_namespace(namespace, "namespace")
    if os.environ.get(ARGO_SERVER_ENV, "").strip():
        return ArgoServer.from_environment(namespace, kubeconfig)
    return KubernetesApi.from_kubeconfig(namespace, kubeconfig)
