"""A submitted study's results, found from its Workflow: its plan step fixes the store and writes the plan,
and hands both on as output parameters (workflows/templates/steps.yaml: `store`, the store's URI, and
`study`, the plan reference NAME:STUDY_ID), which Argo keeps in the Workflow's status.nodes. The store
then gives exactly that plan's runs (bertology.results.study_results): a study name holds a plan per set
of parameters, and its results partition holds the runs of all of them.

The store is read from this machine, as bertology.store reads any (AWS_ENDPOINT_URL and the credentials
from the environment), so the store's URI must mean the same here as in the pods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertology.cluster.state import Status
from bertology.errors import BadInput, BertologyError, Transient, unknown

if TYPE_CHECKING:
    import polars as pl

    from bertology.results.study_results import StudyResults

PLAN_TASK = "plan"  # the DAG task of every study's plan (study.yaml, vocab-overlap.yaml)
VOCABULARY = "vocab_overlap"


def plan_outputs(workflow: dict) -> tuple[str, str, str]:
    """(store URI, study name, study id) from the plan node's outputs: the task node (a Retry node, which Argo
    gives its successful attempt's outputs) or, without retries, its pod."""
    from bertology.argo.queue_watch import NodesUnreadable, workflow_nodes

    status, state = workflow.get("status") or {}, Status.of(workflow)
    if not status.get("nodes") and status.get("offloadNodeStatusVersion"):
        raise BertologyError(f"Workflow '{state.name}': its node statuses are offloaded to the Argo controller's "
                             f"database, which the Kubernetes API does not serve: read it through Argo Server "
                             f"(set ARGO_SERVER, as for the argo CLI)")
    try:
        nodes = workflow_nodes(workflow)
    except NodesUnreadable as e:
        raise BertologyError(f"Workflow '{state.name}': {e}") from None
    for node in nodes.values():
        if node.get("displayName") != PLAN_TASK:
            continue
        outputs = {p.get("name"): p.get("value") for p in (node.get("outputs") or {}).get("parameters") or []}
        store, ref = (outputs.get("store") or "").strip(), (outputs.get("study") or "").strip()
        name, sep, study_id = ref.partition(":")
        if store and sep and name and study_id:
            return store, name, study_id
    if not state.finished:
        raise Transient(f"Workflow '{state.name}' is {state} and its plan step has not finished: no results "
                        f"to read yet (wait for it: bertology watch {state.name})")
    raise BertologyError(f"Workflow '{state.name}' ended {state.phase} without its plan step's outputs (store, "
                         f"study), so it has no results" + (f": {state.message}" if state.message else ""))


def study_results(workflow: dict) -> StudyResults:
    """The plan's runs in the store the plan fixed, those published so far."""
    from bertology.results.study_results import load_study_results
    from bertology.store import open_store

    store, name, study_id = plan_outputs(workflow)
    return load_study_results(open_store(store), name, study_id)


def tables(results: StudyResults) -> list[str]:
    """The tables this study has results in."""
    return [*results.tables, *([VOCABULARY] if results.vocabulary is not None else [])]


def table(results: StudyResults, name: str = "runs") -> pl.DataFrame:
    """One table of the plan's runs (every run's rows, in the plan's order), or the vocabulary rows of its
    models (`vocab_overlap`); BadInput naming the tables it has otherwise."""
    from bertology.results.study_results import OPTIONAL_TABLES

    allowed = ("runs", *OPTIONAL_TABLES, VOCABULARY)
    if name not in allowed:
        raise unknown("results table", name, allowed)
    if name == VOCABULARY and results.vocabulary is not None:
        return results.vocabulary
    if name in results.tables:
        return results.tables[name].collect()
    raise BadInput(f"study '{results.name}' ({results.study_id}) has no '{name}' results "
                   f"(it has: {', '.join(tables(results)) or 'none'})")
