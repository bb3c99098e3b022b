"""Every study has a verdict: the exit handler `verdict` (bertology.steps.verdict) of each WorkflowTemplate
that runs a study, what it says about the failures Argo hands it, and the limit it names for a pod that
ran into one. Whole studies that end in it: tests/test_failed_cells.py and tests/test_regression.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertology.argo.documents import load_library
from bertology.argo.exit_handler import parse_failures
from bertology.steps import verdict

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "workflows" / "templates"
STUDIES = ("bertology-study", "bertology-vocab-overlap", "bertology-nightly-regression")


def failed(display: str, template: str, message: str, finished: str = "2026-01-01T00:00:00Z") -> dict:
    # operator.go operate, struct failedNodeStatus: displayName, message, templateName (GetTemplateFromNode:
    # the templateRef's template), phase, podName, finishedAt
    return {"displayName": display, "message": message, "templateName": template, "phase": "Failed",
            "podName": f"wf-{display}", "finishedAt": finished}


# The Retry node's message when the expression refuses a retry (operator.go processNodeRetries:
# "retryStrategy.expression evaluated to false"); its pod's, the reason Argo or the kubelet gave.
NOT_RETRIED = "retryStrategy.expression evaluated to false"


def test_an_oom_kill_names_the_memory_limit_of_its_step():
    # operator.go inferFailedReason: "main: OOMKilled (exit code 137)" (v3.6: no "main: ")
    for pod in ("main: OOMKilled (exit code 137)", "OOMKilled (exit code 137)"):
        line = verdict.judge("Succeeded", [failed("finetune", "finetune", NOT_RETRIED),
                                           failed("finetune(0)", "finetune", pod)])
        assert line == ("finetune failed: OOMKilled (exit code 137); out of memory: raise the chart's "
                        "resources.finetune.limits.memory (the finetune template's resources.limits.memory, "
                        "workflows/templates/steps.yaml), not retried")


def test_an_eviction_for_tmp_names_the_chart_s_size_limit():
    # kubernetes pkg/kubelet/eviction/helpers.go emptyDirMessageFmt: "Usage of EmptyDir volume %q exceeds the
    # limit %q. ", the pod's status.message, which inferFailedReason makes the node's
    evicted = 'Usage of EmptyDir volume "tmp" exceeds the limit "20Gi". '
    line = verdict.judge("Succeeded", [failed("evaluate", "evaluate", NOT_RETRIED),
                                       failed("evaluate(0)", "evaluate", evicted)])
    assert line.startswith('evaluate failed: Usage of EmptyDir volume "tmp" exceeds the limit "20Gi".; /tmp over its '
                           "sizeLimit: raise the chart's tmp.sizeLimit")
    # podEphemeralStorageMessageFmt, containerEphemeralStorageMessageFmt
    for message in ("Pod ephemeral local storage usage exceeds the total limit of containers 20Gi. ",
                    'Container main exceeded its local ephemeral storage limit "1Gi". '):
        assert "raise resources.limits.ephemeral-storage of the analyze template, not retried" in verdict.judge(
            "Succeeded", [failed("analyze", "analyze", NOT_RETRIED), failed("analyze(0)", "analyze", message)])


def test_each_failed_step_once_in_pipeline_order_with_its_latest_pod_s_cause():
    failures = [
        failed("aggregate", "aggregate", "main: Error (exit code 1): error: study x (1) is incomplete: 1 of 2 runs"),
        failed("analyze", "analyze", "No more retries left"),
        failed("analyze(0)", "analyze", "main: Error (exit code 75): transient error (will be retried): early",
               "2026-01-01T00:00:01Z"),
        failed("analyze(3)", "analyze", "main: Error (exit code 75): transient error (will be retried): S3 down",
               "2026-01-01T00:00:09Z"),
        # a fan-out's TaskGroup fails with its child: one pod, not two
        failed("prepare-data", "prepare-data", ""),
        failed("prepare-data(0:abc)", "prepare-data", "No more retries left"),
        failed("prepare-data(0:abc)(0)", "prepare-data", "main: Error (exit code 137)"),
        # the DAG nodes above them say nothing of their own
        failed("cell(0:abc)", "cell", ""), failed("cell", "cell", ""),
    ]
    assert verdict.judge("Succeeded", failures) == (
        "prepare-data failed: exit code 137; analyze failed: S3 down; aggregate failed: study x (1) is incomplete: "
        "1 of 2 runs")


def test_a_step_the_verdict_does_not_know_still_fails_the_workflow():
    line = verdict.judge("Succeeded", [failed("report-card", "report-card", "main: Error (exit code 3)")])
    assert line == "report-card failed: exit code 3"
    assert verdict.judge("Succeeded", [failed("cell", "cell", "")]) is None  # a DAG node alone names no step
    assert verdict.judge("Failed", []) == "the workflow ended Failed"


def test_the_verdict_leaves_its_line_as_the_termination_message(tmp_path, monkeypatch, capsys):
    log = tmp_path / "termination-log"
    monkeypatch.setenv("BERTOLOGY_TERMINATION_LOG", str(log))
    # what the exit handler gets in {{workflow.failures}}: a JSON string holding the JSON list
    # (operator_test.go TestStepsOnExitFailures)
    passed = json.dumps(json.dumps([failed("finetune", "finetune", NOT_RETRIED),
                                    failed("finetune(0)", "finetune", "main: OOMKilled (exit code 137)")]))
    assert len(parse_failures(passed)) == 2
    assert verdict.main(["--status", "Succeeded", "--failures", passed]) == 1
    assert log.read_text().startswith("finetune failed: OOMKilled (exit code 137); out of memory")
    assert capsys.readouterr().err.startswith("error: finetune failed: OOMKilled")
    assert verdict.main(["--status", "Succeeded", "--failures", json.dumps("[]")]) == 0
    assert verdict.main(["--status", "Succeeded", "--failures", "[not json"]) == 2


def test_no_failure_is_null_as_argo_marshals_it(capsys):
    """Argo passes strconv.Quote(json.Marshal(failures)) of a nil slice when no node failed: `"null"`, not
    `"[]"` (operator.go operate, `var failures []failedNodeStatus`); seen on a real 3.7.18 controller, where
    the verdict of every study that succeeded failed with TypeError until it read null as no failure."""
    from bertology.argo.exit_handler import failures

    assert failures([], lambda name: name) == json.dumps("null")
    assert parse_failures(json.dumps("null")) == []
    assert verdict.main(["--status", "Succeeded", "--failures", json.dumps("null")]) == 0
    assert capsys.readouterr().out.strip() == "workflow Succeeded: no step failed"


def test_a_workflow_the_queue_watch_stopped_says_so_first(tmp_path, monkeypatch):
    """The watch's line (the annotation it left, in {{workflow.annotations.json}}: json.Marshal of the
    Workflow's annotations, `null` when there are none) comes first; the nodes the stop failed ("Stopped with
    strategy 'Stop'", operator.go failNodesWithoutCreatedPodsAfterDeadlineOrShutdown) add nothing, a step
    that failed on its own is still named."""
    log = tmp_path / "termination-log"
    monkeypatch.setenv("BERTOLOGY_TERMINATION_LOG", str(log))
    why = ("stopped by the queue watch: cell(3:ab).finetune waited 7d 2h for semaphore "
           "studies/ConfigMap/bertology-semaphores/gpu while its Workflow held none of it, past the queue limit "
           "of 7d (chart value queueWatch.queueLimit)")
    annotations = json.dumps({"bertology.io/stopped-by-queue-watch": why, "workflows.argoproj.io/pod-name-format": "v2"})
    stopped = [failed("finetune", "finetune", "Stopped with strategy 'Stop'"),
               failed("aggregate", "aggregate", "Stopped with strategy 'Stop'")]
    args = ["--status", "Failed", "--failures", json.dumps(json.dumps(stopped)), "--annotations", annotations]
    assert verdict.main(args) == 1
    assert log.read_text() == why
    own = [*stopped, failed("analyze", "analyze", "main: Error (exit code 1): error: no such layer 13")]
    assert verdict.main([*args[:3], json.dumps(json.dumps(own)), *args[4:]]) == 1
    assert log.read_text() == why + "; besides, analyze failed: no such layer 13"
    # no annotations at all (`null`), or none of the watch's: the verdict as before
    for none in ("null", json.dumps({"other": "x"})):
        assert verdict.main(["--status", "Succeeded", "--failures", json.dumps("[]"), "--annotations", none]) == 0


def test_every_step_of_the_library_is_one_the_verdict_orders():
    library = load_library(TEMPLATES)
    # the queue watch (`watch`) runs in a Workflow of its own, never in a study
    steps = {t["name"] for s in library.values() for t in s.spec["templates"] if "container" in t} - {"verdict", "watch"}
    dags = {t["name"] for s in library.values() for t in s.spec["templates"] if "dag" in t}
    assert steps <= set(verdict.ORDER), steps - set(verdict.ORDER)
    assert dags <= set(verdict.DAGS), dags - set(verdict.DAGS)


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_ends_in_the_same_verdict_with_a_timeout(name):
    """The exit handler of every WorkflowTemplate that runs a study: `onExit: verdict`, one template text for
    all (bertology-study's), a `timeout` (it covers Pending time, unlike activeDeadlineSeconds: operator.go
    checkTemplateTimeout, `if node.Phase == wfv1.NodePending && time.Now().After(deadline) { return nil,
    ErrTimeout }`) and no retryStrategy (a Retry node's message would replace its line). The DAG's last task
    has continueOn, so the DAG succeeds and Argo takes the exit handler's message (operator.go operate:
    `woc.markWorkflowFailed(ctx, onExitNode.Message)` only when the entry node succeeded)."""
    library = load_library(TEMPLATES)
    spec = library[name].spec
    assert spec["onExit"] == "verdict"
    (handler,) = [t for t in spec["templates"] if t["name"] == "verdict"]
    (reference,) = [t for t in library["bertology-study"].spec["templates"] if t["name"] == "verdict"]
    assert handler == reference
    assert handler["timeout"] == "10m" and "activeDeadlineSeconds" not in handler and "retryStrategy" not in handler
    assert handler["container"]["command"] == ["python", "-m", "jobs.verdict"]
    assert handler["container"]["args"] == ["--status", "{{workflow.status}}", "--failures", "{{workflow.failures}}",
                                            "--annotations", "{{workflow.annotations.json}}"]
    (entry,) = [t for t in spec["templates"] if t["name"] == spec["entrypoint"]]
    tasks = entry["dag"]["tasks"]
    # `dependencies`, not `depends`: Argo refuses continueOn in a DAG that uses `depends` (validate.go)
    assert not any("depends" in t for t in tasks)
    depended = {d for t in tasks for d in t.get("dependencies", [])}
    targets = [t for t in tasks if t["name"] not in depended]
    assert targets and all(t.get("continueOn") == {"failed": True, "error": True} for t in targets), targets
