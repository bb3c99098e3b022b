"""Our Argo YAML, checked strictly and run locally: the same files run on a cluster and on one machine.

documents: the YAML as documents (loading, the WorkflowTemplate library), shared by both.
validate: strict schema (hera's models, unknown keys forbidden), Argo's own rules, reference checks.
runner:   executes a Workflow / CronWorkflow on this machine with Argo's semantics (docs/runner.md).
"""

from bertology.argo.documents import load_documents
from bertology.argo.runner import NodeResult, RunResult, check_supported, run_workflow
from bertology.argo.validate import ValidationFailed, validate_file, validate_or_raise

__all__ = [
    "NodeResult",
    "RunResult",
    "ValidationFailed",
    "check_supported",
    "load_documents",
    "run_workflow",
    "validate_file",
    "validate_or_raise",
]
