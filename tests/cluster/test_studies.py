"""Studies on the real controller as they go wrong on a real cluster: a step's pod deleted mid-step, the
platform's ConfigMap deleted under a running study, the nightly regression from its CronWorkflow, and a step
that fails for good, which the study's verdict must name."""

from __future__ import annotations

import json
import sys
import time

import polars as pl
import yaml
from on_cluster import (
    NAMESPACE,
    S3_ENV,
    TIMING,
    VENV_BIN,
    chart_values,
    in_process_env,
    new_bucket,
    run,
    submitted_name,
    wait_phase,
    workflow,
)

from bertology.cluster.plan import plan_outputs, table
from bertology.localcluster import layout as lay
from bertology.results.study_results import latest_study_id, load_study_results
from bertology.store import open_store


def _kubectl(env: dict, *args: str, check: bool = True, input: str | None = None):
    return run([str(VENV_BIN / "kubectl"), *args], env, check=check, input=input)


def _running_pod(env: dict, name: str, template: str, *, timeout: float = 900) -> str:
    """A pod of the Workflow running `template` whose main container has started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = json.loads(_kubectl(env, "get", "pods", "-l", f"workflows.argoproj.io/workflow={name}", "-o",
                                   "json").stdout)["items"]
        for pod in pods:
            if pod["metadata"]["name"].startswith(f"{name}-{template}-"):  # Argo's pod names (v2)
                main = [c for c in pod["status"].get("containerStatuses", []) if c["name"] == "main"]
                if main and "running" in main[0]["state"]:
                    return pod["metadata"]["name"]
        time.sleep(1)
    raise AssertionError(f"no running {template} pod of {name} in {timeout:.0f} s")


def _plan_runs(store: str, name: str, study_id: str | None = None) -> pl.DataFrame:
    """The runs of one plan (the cluster's store is shared with the other tests, which run the same study
    with other parameters; a fresh store holds one plan), wall-clock columns left out, in a fixed order."""
    opened = open_store(store)
    found = load_study_results(opened, name, study_id or latest_study_id(opened, name))
    runs = table(found).drop(list(TIMING), strict=False)
    return runs.sort(runs.columns)


def test_a_deleted_pod_is_retried_and_a_deleted_configmap_stops_nothing(studies, s3_server):
    """reversed-layers, tiny, as the user submits it. Mid-study a finetune pod is deleted (a node drained, a
    preemption): Argo retries the step (its retryStrategy) on the same node, and the study still Succeeds
    with the runs of an undisturbed in-process run. Then the chart's ConfigMap bertology-config is deleted (a `helm uninstall`
    under running studies): Argo reads `platform_store` from it again on every reconcile (operator.go
    setGlobalParameters), and with the parameter's default the study goes on instead of failing at once with
    "failed to set global parameters". A pod started meanwhile lacks the store's endpoint (the ConfigMap's
    AWS_ENDPOINT_URL) and fails; its retry, once the ConfigMap is back, succeeds."""
    env = studies["env"]
    # 3 runs, of a seed no other test trains: the cluster's store is shared, and a run another test finished
    # is only published, by a pod that may end before it can be deleted
    small = ["-p", "preset=tiny", "-p", "seeds=[5]", "-p", 'tasks=["sst2"]']
    name = submitted_name(run(["argo", "submit", "workflows/reversed-layers.yaml", *small], env).stdout)
    pod = _running_pod(env, name, "finetune")
    _kubectl(env, "delete", "pod", pod, "--wait=false")

    saved = yaml.safe_load(_kubectl(env, "get", "configmap", "bertology-config", "-o", "yaml").stdout)
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        saved["metadata"].pop(key, None)
    _kubectl(env, "delete", "configmap", "bertology-config")
    try:
        _kubectl(env, "annotate", "workflow", name, "test.bertology.io/reconcile=now")  # an event: a reconcile
        time.sleep(10)
        during = workflow(env, name)["status"]
        assert during["phase"] == "Running", during.get("message")
        assert "global parameters" not in (during.get("message") or "")
    finally:
        _kubectl(env, "apply", "-f", "-", input=yaml.safe_dump(saved))

    done = wait_phase(env, name)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    nodes = done["status"]["nodes"]
    deleted = [n for n in nodes.values() if n["displayName"] == "finetune(0)" and "deleted" in n.get("message", "")]
    assert len(deleted) == 1, [n.get("message") for n in nodes.values() if n["displayName"].startswith("finetune(")]
    (step,) = [n for n in nodes.values() if n["type"] == "Retry" and deleted[0]["id"] in n.get("children", [])]
    assert step["phase"] == "Succeeded" and len(step["children"]) >= 2, step  # a later attempt did it
    # on the node the deleted attempt ran on, the only one: no retryStrategy.affinity keeps a retry off it
    assert {nodes[c].get("hostNodeName") for c in step["children"]} == {"bertology-node"}

    store, study, study_id = plan_outputs(done)
    assert store == studies["store"]
    local_store = f"s3://{new_bucket(s3_server)}/store"
    run([sys.executable, "-m", "bertology.cli", "run", "workflows/reversed-layers.yaml", *small,
         "--store", local_store], in_process_env(), timeout=3600)
    on_argo, in_process = _plan_runs(store, study, study_id), _plan_runs(local_store, study)
    assert on_argo.height == 3 and on_argo.equals(in_process)


def test_the_nightly_from_its_cronworkflow_promotes_then_passes(studies):
    """The chart's CronWorkflow, run now as its docs say (`argo submit --from cronwf/...`), offline with the
    tiny preset, one seed and RTE alone (3 runs a night): the first night with promote=true makes the
    baseline, the second compares against it."""
    env = studies["env"]
    for extra in (["-p", "promote=true"], []):
        done = run(["argo", "submit", "--from", "cronwf/bertology-nightly-regression", "-p", "preset=tiny",
                    "-p", "seeds=[1]", "-p", 'tasks=["rte"]', *extra, "--watch"], env, timeout=3600)
        night = workflow(env, submitted_name(done.stdout))
        assert night["status"]["phase"] == "Succeeded", night["status"].get("message")
        regress = [n for n in night["status"]["nodes"].values() if n["displayName"] == "regress"]
        assert regress and regress[0]["phase"] == "Succeeded"


def test_a_step_that_fails_for_good_fails_the_study_and_the_verdict_names_it(studies, admin_env, s3_server):
    """A platform whose analyze pods get too little memory (resources.analyze.limits.memory=48Mi): each analyze
    is OOM-killed at its start, which the retryStrategy does not retry, so the study ends Failed, and its
    message is the verdict's line naming the step, the kill and the limit to raise."""
    namespace = f"{NAMESPACE}-small"
    _kubectl(admin_env, "delete", "namespace", namespace, "--ignore-not-found", "--wait=true")
    _kubectl(admin_env, "create", "namespace", namespace)
    _kubectl(admin_env, "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    _kubectl(admin_env, "-n", namespace, "create", "secret", "generic", "bertology-s3",
             f"--from-literal=AWS_ACCESS_KEY_ID={S3_ENV['AWS_ACCESS_KEY_ID']}",
             f"--from-literal=AWS_SECRET_ACCESS_KEY={S3_ENV['AWS_SECRET_ACCESS_KEY']}")
    layout = lay.Layout.default()
    run([str(VENV_BIN / "helm"), "install", "bertology", "charts/bertology", "-n", namespace, "--wait",
         *chart_values(layout, new_bucket(s3_server)), "--set", "resources.analyze.requests.memory=48Mi",
         "--set", "resources.analyze.limits.memory=48Mi"],
        admin_env, timeout=300)
    env = {**admin_env}
    done = run(["argo", "submit", "-n", namespace, "workflows/reversed-layers.yaml", "-p", "preset=tiny",
                "-p", "seeds=[1]", "-p", 'tasks=["sst2"]', "--watch"], env, check=False, timeout=3600)
    study = json.loads(_kubectl(admin_env, "-n", namespace, "get", "workflow", submitted_name(done.stdout),
                                "-o", "json").stdout)
    assert study["status"]["phase"] == "Failed"
    # the verdict's line, as Argo words a failed pod's message: "<container>: Error (exit code N): <line>"
    message = study["status"]["message"]
    assert message.startswith("main: Error (exit code 1): analyze failed in 3 pods: "), message
    assert "OOMKilled (exit code 137)" in message and "resources.analyze.limits.memory" in message, message
