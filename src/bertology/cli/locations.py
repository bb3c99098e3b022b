"""Where a command finds what it works on: the store (--store, $BERTOLOGY_STORE, else ./.bertology), the
WorkflowTemplates a workflow references, and the jobs/ package its steps run from."""

from __future__ import annotations

import os
from pathlib import Path

from bertology.errors import BadInput
from bertology.store import DEFAULT_ROOT

STORE_ENV = "BERTOLOGY_STORE"
TEMPLATES_HINT = "pass --templates DIR (the WorkflowTemplates, e.g. a checkout's workflows/templates)"


def find_project_root(workflow: Path, templates: Path | None = None) -> Path:
    """The directory holding `jobs/` (the containers' working directory in the images): above the
    workflow, else above the templates directory (a study YAML outside the checkout), else the cwd."""
    above = [*([templates.resolve(), *templates.resolve().parents] if templates else [])]
    for parent in [workflow.resolve().parent, *workflow.resolve().parents, *above, Path.cwd()]:
        if (parent / "jobs" / "__init__.py").exists():
            return parent
    raise BadInput(f"cannot find the jobs/ package above '{workflow}' (run from a bertology checkout, "
                   f"or {TEMPLATES_HINT} inside one)")


def store_uri(value: str | None, flag: str = "--store") -> str:
    """An explicit --store, else $BERTOLOGY_STORE, else ./.bertology; an empty value is an error."""
    if value is None:
        value = os.environ.get(STORE_ENV)
        if value is not None and not value.strip():
            raise BadInput(f"{STORE_ENV}='{value}' is empty (unset it, or set a store URI: file://PATH, a "
                           f"local path, s3://BUCKET[/PREFIX])")
        return value or DEFAULT_ROOT
    if not value.strip():
        raise BadInput(f"{flag} '{value}' is empty (expected a store URI: file://PATH, a local path, "
                       f"s3://BUCKET[/PREFIX]; default ${STORE_ENV} or ./{DEFAULT_ROOT})")
    return value


def with_hint(error: BadInput, templates: Path) -> BadInput:
    """A template that cannot be found: say where we looked and how to point elsewhere."""
    text = str(error)
    if "WorkflowTemplate" in text and "not found" in text and "--templates" not in text:
        return BadInput(f"{text}; looked in {templates}: {TEMPLATES_HINT}")
    return error
