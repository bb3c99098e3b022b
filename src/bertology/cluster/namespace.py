"""The namespace a study goes to, as the argo CLI finds it (cmd/argo/commands/client/conn.go `Namespace`):
the one given, else $ARGO_NAMESPACE, else the kubeconfig context's, else `default`."""

from __future__ import annotations

import os
import re

from bertology.errors import BadInput

ARGO_NAMESPACE_ENV = "ARGO_NAMESPACE"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # a DNS-1123 label


def default_namespace(context_namespace: str | None) -> str:
    """$ARGO_NAMESPACE, else the kubeconfig context's namespace, else `default`."""
    if os.environ.get(ARGO_NAMESPACE_ENV, "").strip():
        return check_namespace(os.environ[ARGO_NAMESPACE_ENV].strip(), f"${ARGO_NAMESPACE_ENV}")
    return context_namespace or "default"


def check_namespace(namespace: str, where: str) -> str:
    if not isinstance(namespace, str) or len(namespace) > 63 or not _NAME.fullmatch(namespace):
        raise BadInput(f"{where} {namespace!r} is not a namespace name (allowed: lower-case letters, digits and "
                       f"'-', at most 63, starting and ending with a letter or digit)")
    return namespace
