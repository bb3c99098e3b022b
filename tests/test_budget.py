"""Every study at its paper defaults stays inside Argo's comfortable size: about 1,000 nodes and well under
the 1 MiB at which the controller starts compressing the workflow's status (workflow/packer/packer.go).
plan picks the bundle (runs per pod) that keeps it there (bertology.steps.budget)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bertology.steps import budget
from bertology.study import StudySpec

REPO = Path(__file__).resolve().parent.parent
STUDIES = sorted(p for p in (REPO / "workflows").glob("*.yaml")
                 if (d := yaml.safe_load(p.read_text()))["kind"] == "Workflow"
                 and d["spec"].get("workflowTemplateRef", {}).get("name") == "bertology-study")


def shape(workflow: Path) -> tuple[str, int, int, int]:
    """(study, runs, datasets, checkpoints) of a fresh study at the workflow's defaults, as plan expands it."""
    params = {p["name"]: str(p["value"]) for p in yaml.safe_load(workflow.read_text())["spec"]["arguments"]["parameters"]}
    name = params.pop("study")
    cells = StudySpec.from_params(name, params)[0].cells()
    return (name, len(cells), len({c.run.dataset.id for c in cells}), len({c.run.checkpoint.id for c in cells}))


@pytest.mark.parametrize("workflow", STUDIES, ids=lambda p: p.stem)
def test_every_study_fits_argo_with_the_automatic_bundle(workflow):
    name, runs, datasets, checkpoints = shape(workflow)
    bundle = budget.auto_bundle(runs, datasets, checkpoints)
    pods = budget.pod_items(runs, bundle)
    nodes = budget.workflow_nodes(datasets, checkpoints, len(pods))
    size = budget.status_bytes(datasets, checkpoints, pods)
    assert nodes <= budget.MAX_NODES and size <= budget.MAX_STATUS_BYTES, (name, bundle, nodes, size)
    if bundle > 1:  # the smallest bundle that fits: one less does not
        assert not budget.fits(runs, bundle - 1, datasets, checkpoints)


def test_the_largest_study_needs_bundling():
    """shuffled-embeddings: 405 runs would be about 2,900 nodes with one run per pod."""
    (workflow,) = [w for w in STUDIES if w.stem == "shuffled-embeddings"]
    _, runs, datasets, checkpoints = shape(workflow)
    assert budget.workflow_nodes(datasets, checkpoints, runs) > 2 * budget.MAX_NODES
    assert budget.auto_bundle(runs, datasets, checkpoints) > 1


def test_the_node_estimate_counts_what_the_controller_creates():
    """A Retry node plus a Pod per step (operator.go executeTemplate), a TaskGroup per fan-out or one Skipped
    node when it is empty (dag.go executeDAGTask), and 1 + 3 × 2 nodes per cell DAG."""
    assert budget.workflow_nodes(0, 0, 0) == 1 + 2 + 1 + 1 + 1 + 2
    assert budget.workflow_nodes(2, 3, 4) == 1 + 2 + (1 + 4) + (1 + 6) + (1 + 28) + 2


def test_the_size_estimate_is_of_real_node_statuses():
    """One pod node as the estimate writes it is in the range measured on upstream fixtures (roughly 0.5 to
    1 KB per pod node without artifacts), and a bundle's ids lengthen every name under it."""
    one = budget.status_bytes(1, 0, [])
    none = budget.status_bytes(0, 0, [])
    assert 900 <= one - none <= 2200  # a Retry and a Pod node
    assert budget.status_bytes(0, 0, budget.pod_items(8, 8)) > budget.status_bytes(0, 0, budget.pod_items(1, 1))
    json.dumps(budget._node("x", "Pod", "t", 0, {}))  # serialisable as the controller stores it
