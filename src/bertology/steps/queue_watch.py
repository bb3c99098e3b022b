"""queue-watch: one pass over a namespace's running bertology Workflows, stopping each one with a node past a
limit (bertology.argo.queue_watch says which, and why a Workflow is stopped rather than a node failed).

The chart's CronWorkflow runs it every few minutes as ServiceAccount `bertology-queue-watch`, the one
identity of the chart that may list and patch Workflows (`list` and `patch`: the only calls made here; an
admission policy holds its patches to spec.shutdown and the watch's annotation). It prints a line per
Workflow it stopped, and one per Workflow whose node statuses it could not read (offloaded to Argo's
database: bertology.argo.queue_watch.workflow_nodes), going on with the others; it exits 1 when it stopped
any or could not read one, so the watch's own run shows red in `argo cron list` / `argo list` with the
reason as its message; 0 when nothing was past a limit; 2 on bad arguments. `--dry-run true` stops nothing
(and still fails on a Workflow it could not read).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field

from bertology.argo import queue_watch
from bertology.errors import EXIT_BAD_INPUT, BadInput
from bertology.steps.harness import leave_cause

GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "workflows"


def _api():
    """The Kubernetes API as the pod's ServiceAccount (in a pod), else as the local kubeconfig."""
    from kubernetes import client, config

    # a configuration of its own, not the client's process-wide default
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        try:
            # $KUBECONFIG as it is now (the client reads it once, at import)
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None,
                                    client_configuration=configuration)
        except (config.ConfigException, OSError) as e:
            raise BadInput(f"no Kubernetes API to watch: not in a pod and no usable kubeconfig ({e})") from None
    return client.CustomObjectsApi(client.ApiClient(configuration))


def workflows(api, namespace: str) -> list[dict]:
    """Every Workflow of the namespace, page by page."""
    items, token = [], None
    while True:
        page = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, limit=100,
                                                 **({"_continue": token} if token else {}))
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


@dataclass
class Pass:
    """What one pass did: a line per Workflow it stopped (or would stop), and per Workflow it could not read."""

    stopped: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def watch(api, namespace: str, queue_limit_s: float, scheduling_limit_s: float, dry_run: bool = False) -> Pass:
    """One pass over the namespace's running bertology Workflows."""
    from kubernetes.client.exceptions import ApiException

    now = queue_watch.now_utc()
    done = Pass()
    for wf in workflows(api, namespace):
        if not queue_watch.watched(wf):
            continue
        name = wf["metadata"]["name"]
        try:
            found = queue_watch.breaches(wf, now, queue_limit_s, scheduling_limit_s)
        except queue_watch.NodesUnreadable as e:
            done.unreadable.append(f"could not read {name}: {e}")
            continue
        if not found:
            continue
        reason = queue_watch.stop_reason(found)
        if not dry_run:
            try:
                api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                   queue_watch.stop_patch(reason))
            except ApiException as e:
                if e.status == 404:  # deleted since the list: nothing left to stop
                    continue
                raise
        done.stopped.append(f"{'would stop' if dry_run else 'stopped'} {name}: {reason}")
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.queue_watch",
                                description="bertology queue watch: stop Workflows stuck in the GPU queue or unschedulable")
    p.add_argument("--namespace", required=True, help="{{workflow.namespace}}: the namespace to watch")
    p.add_argument("--queue-limit", required=True, help="longest wait for a bertology semaphore (7d, 6h, 0 = none)")
    p.add_argument("--scheduling-limit", required=True, help="longest time a pod may find no node (1h, 30m, 0 = none)")
    p.add_argument("--dry-run", choices=["true", "false"], default="false",
                   help="true: say what it would stop, stop nothing")
    args = p.parse_args(argv)
    try:
        queue_s = queue_watch.parse_duration(args.queue_limit, "queue limit")
        scheduling_s = queue_watch.parse_duration(args.scheduling_limit, "scheduling limit")
        dry_run = args.dry_run == "true"
        done = watch(_api(), args.namespace, queue_s, scheduling_s, dry_run)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        leave_cause(str(e))
        return EXIT_BAD_INPUT
    for line in done.stopped + done.unreadable:
        print(line, flush=True)
    failures = (done.stopped if not dry_run else []) + done.unreadable
    if failures:
        leave_cause(f"{failures[0]}" + (f" (and {len(failures) - 1} more Workflows)" if len(failures) > 1 else ""))
        return 1
    print(f"queue watch: {len(done.stopped)} of the Workflows in {args.namespace} past a limit"
          + (" (dry run: nothing stopped)" if dry_run else ""), flush=True)
    return 0
