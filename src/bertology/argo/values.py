"""A node's values: a YAML scalar as the string Argo holds, a template substituted, and NodeError.

A value that cannot be made (an unresolved `{{…}}`, a bad withParam, an input without a value) makes its
node an Error without starting a pod, as workflow/controller/operator.go `executeTemplate` marks a node
whose template `common.ProcessArgs` cannot substitute (`initializeNodeOrMarkError`). Substitution itself
follows Argo in substitution.py.
"""

from __future__ import annotations

import json
from typing import Any

from bertology.argo.substitution import SubstitutionError, render


class NodeError(Exception):
    """A node that cannot run as written (unresolved variable, bad withParam, missing input): phase Error."""


def substitute(value: Any, scope: dict[str, str]) -> Any:
    """substitution.render, a tag it cannot substitute a NodeError."""
    try:
        return render(value, scope)
    except SubstitutionError as e:
        raise NodeError(str(e)) from None


def any_string(value: Any) -> str:
    """A YAML scalar as Argo's AnyString holds it (pkg/apis/workflow/v1alpha1/anystring.go)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
