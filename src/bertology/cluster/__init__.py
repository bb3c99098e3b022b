"""Studies on a cluster from Python: submit a study's Workflow to Argo Workflows, follow it, read its results.

    from bertology.cluster import submit
    study = submit("workflows/reversed-layers.yaml", {"preset": "tiny", "tasks": ["sst2"]})
    study.wait()                  # Status: Succeeded, or Failed / Error with the study's verdict
    runs = study.results()        # a Polars frame of exactly this study's runs, from its store

workflow_file: the study's file checked and its parameters bound, before anything reaches the cluster.
transport:     which API (Argo Server when $ARGO_SERVER is set, else the Kubernetes API), as the argo CLI;
namespace:     in which namespace, as the argo CLI; answers: a server's refusals, one line each.
kube, argo_server: the two, with the `kubernetes` and `argo-workflows` packages (`pip install 'bertology[cluster]'`).
state:         a Workflow's phase, progress and message.
plan:          a study's store and plan from its Workflow, and its results tables from them.
study:         submit, status, watch, wait, results, and Study, which keeps a Workflow's name and namespace.
"""

from bertology.cluster.state import Status
from bertology.cluster.study import Study, results, status, submit, wait, watch

__all__ = ["Status", "Study", "results", "status", "submit", "wait", "watch"]
