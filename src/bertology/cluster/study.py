"""The notebook's handle on a study on a cluster: submit it, follow it, read its results.

`submit` checks everything it can here first (bertology.cluster.workflow_file: the file, the parameters'
names and values; the kubeconfig and the namespace's name), then asks the cluster whether the namespace
has the study's WorkflowTemplate (the chart installs it), and only then creates the Workflow. `watch`,
`wait` and `results` take a Workflow's name, so they also serve a study submitted another way (`argo
submit`, another notebook); a `Study` keeps the name and the namespace for them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertology.cluster.state import Status
from bertology.cluster.transport import Transport, connect
from bertology.errors import BadInput, choices

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class Study:
    """A study's Workflow on the cluster, by name and namespace (the kubeconfig it was reached with, if one
    was given)."""

    name: str
    namespace: str
    kubeconfig: str | None = None

    def status(self) -> Status:
        return status(self.name, namespace=self.namespace, kubeconfig=self.kubeconfig)

    def watch(self, timeout: float | None = None) -> Iterator[Status]:
        return watch(self.name, namespace=self.namespace, kubeconfig=self.kubeconfig, timeout=timeout)

    def wait(self, timeout: float | None = None) -> Status:
        return wait(self.name, namespace=self.namespace, kubeconfig=self.kubeconfig, timeout=timeout)

    def results(self, table: str = "runs") -> pl.DataFrame:
        return results(self.name, table, namespace=self.namespace, kubeconfig=self.kubeconfig)


def submit(workflow: str | Path, parameters: dict[str, Any] | None = None, *, namespace: str | None = None,
           kubeconfig: str | Path | None = None, priority: int | None = None,
           templates: str | Path | None = None) -> Study:
    """Create the study's Workflow, as `argo submit WORKFLOW -p NAME=VALUE … [--priority N]` does; its name is
    the file's generateName and a suffix the API server draws. `templates`: the WorkflowTemplates the
    parameters are checked against (default: `templates/` beside the file)."""
    from bertology.cluster.workflow_file import study_workflow

    document = study_workflow(workflow, parameters, templates=templates, priority=priority)
    api = connect(namespace, kubeconfig)
    template = document["spec"]["workflowTemplateRef"]["name"]
    if api.has_template(template) is False:
        raise _no_template(api, template)
    created = api.create(document)
    return Study(created["metadata"]["name"], api.namespace, None if kubeconfig is None else str(kubeconfig))


def status(name: str, *, namespace: str | None = None, kubeconfig: str | Path | None = None) -> Status:
    """The Workflow's state now."""
    return Status.of(connect(namespace, kubeconfig).get(name))


def watch(name: str, *, namespace: str | None = None, kubeconfig: str | Path | None = None,
          timeout: float | None = None) -> Iterator[Status]:
    """The Workflow's state now and each time it changes (phase, progress or message), until it has finished
    (the last one yielded) or `timeout` seconds have passed (then it just stops)."""
    api = connect(namespace, kubeconfig)
    deadline = None if timeout is None else time.monotonic() + timeout
    last = None
    for document in api.changes(name, deadline):
        state = Status.of(document)
        if state != last:
            yield state
            last = state
        if state.finished:
            return


def wait(name: str, *, namespace: str | None = None, kubeconfig: str | Path | None = None,
         timeout: float | None = None) -> Status:
    """The Workflow's final state: Succeeded, or Failed or Error with the study's verdict as its message.
    TimeoutError when it is still running after `timeout` seconds (it goes on running)."""
    last = None
    for last in watch(name, namespace=namespace, kubeconfig=kubeconfig, timeout=timeout):
        pass
    if last is None or not last.finished:
        raise TimeoutError(f"Workflow '{name}' is still {last or 'not read'} after {timeout or 0:g} s (it goes on "
                           f"running)")
    return last


def results(name: str, table: str = "runs", *, namespace: str | None = None,
            kubeconfig: str | Path | None = None) -> pl.DataFrame:
    """One results table of exactly this study's runs (those published so far, while it runs): the store and
    plan its plan step fixed, read here (bertology.cluster.plan)."""
    from bertology.cluster.plan import study_results
    from bertology.cluster.plan import table as one_table

    return one_table(study_results(connect(namespace, kubeconfig).get(name)), table)


def _no_template(api: Transport, template: str) -> BadInput:
    """A namespace without the study's WorkflowTemplate: a misspelt namespace, when the namespaces can be
    listed, else one the chart is not installed in."""
    known = api.namespaces()
    if known is not None and api.namespace not in known:
        return BadInput(f"namespace '{api.namespace}' not found on {api.where} "
                        f"({choices(api.namespace, sorted(known), 'namespaces')})")
    return BadInput(f"namespace '{api.namespace}' on {api.where} has no WorkflowTemplate '{template}' (install the "
                    f"chart there: helm install bertology charts/bertology -n {api.namespace}; or give the namespace "
                    f"it is installed in)")
