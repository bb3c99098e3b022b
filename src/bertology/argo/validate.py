"""Strict validation of our Argo YAML, before it reaches a cluster or the local runner.

Three layers, all reported as "file: location: message" lines:

1. Schema (bertology.argo.schema): every document against hera's pydantic models of Argo's CRDs with
   unknown keys forbidden, so a misspelled key (which Argo itself silently drops) or a wrong type fails.
2. Argo's own rules (bertology.argo.rules): what workflow/validate/validate.go rejects beyond the schema.
3. References (bertology.argo.references, bertology.argo.variables): entrypoint, template / templateRef
   targets, `depends`, cycles, task arguments against the target's inputs, and every `{{...}}` variable.

This module is the entry point: `validate_file` for all problems of a file, `validate_or_raise` for the
first as bad input. The documents themselves (loading, the library) are bertology.argo.documents.
"""

from __future__ import annotations

from pathlib import Path

from bertology.argo.documents import Source, load_documents, load_library
from bertology.argo.references import Checker
from bertology.errors import BadInput

__all__ = ["PLATFORM_KINDS", "ValidationFailed", "validate_file", "validate_or_raise"]

# Kubernetes kinds the step library's directory may hold beside the WorkflowTemplates (the queue watch's
# admission policy among them: templates/platform.yaml).
PLATFORM_KINDS = ("ConfigMap", "ServiceAccount", "Role", "RoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding")


class ValidationFailed(BadInput):
    """All problems found in a workflow file; the message is the first one (one line)."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(errors[0] + more)


def validate_file(path: str | Path, templates_dir: str | Path | None) -> list[str]:
    """All problems of a workflow file and of the WorkflowTemplates it references ([] when valid)."""
    path = Path(path)
    try:
        library = load_library(templates_dir)
        docs = load_documents(path)
    except BadInput as e:
        return [str(e)]
    if not docs:
        return [f"{path}: no YAML documents"]
    checker = Checker(library)
    for doc in docs:
        if doc.get("kind") in PLATFORM_KINDS and not str(doc.get("apiVersion", "")).startswith("argoproj.io/"):
            continue  # Kubernetes' own kinds (templates/platform.yaml): make lint runs kubernetes-validate on them
        name = (doc.get("metadata") or {}).get("name")
        known = library.get(name) if doc.get("kind") == "WorkflowTemplate" else None
        # Validating a library file itself: check the library's copy so it is not checked twice.
        checker.document(
            known if known is not None and known.path.resolve() == path.resolve() else Source(path, doc)
        )
    return checker.errors


def validate_or_raise(path: str | Path, templates_dir: str | Path | None) -> None:
    errors = validate_file(path, templates_dir)
    if errors:
        raise ValidationFailed(errors)
