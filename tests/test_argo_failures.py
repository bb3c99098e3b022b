"""How a workflow fails, against Argo's own code and tests: the DAG's phase over a partly failed fan-out,
continueOn, deadlines (a template's and the Workflow's), retries of pods without an exit code, backoff
and locks, termination messages, the exit handler and the Workflow's status.message, ttlStrategy.

Each expected value names the argoproj/argo-workflows file (read at v4.1.2; v3.6.19 where they differ)
it comes from. DAG cases run small workflows through the local runner with `python -c` containers.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from bertology.argo import deadlines, exit_handler, ttl
from bertology.argo.dag import DAG, LEAF, RETRY, TASK_GROUP, Node, dag_phase, outbound, retry_node
from bertology.argo.expressions import ExpressionError, parse_retry
from bertology.argo.retries import Attempt, RetryStrategy, go_time
from bertology.argo.runner import run_workflow
from bertology.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
OURS = yaml.safe_load((ROOT / "workflows/templates/steps.yaml").read_text())
OUR_RETRY = OURS["spec"]["templates"][0]["retryStrategy"]


def _workflow(tmp_path: Path, spec: dict, params: dict | None = None, **kwargs):
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"generateName": "fail-"},
           "spec": spec}
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "templates").mkdir(exist_ok=True)
    kwargs.setdefault("log", lambda _: None)
    return run_workflow(path, params=params or {}, templates_dir=tmp_path / "templates", workdir=tmp_path / "work",
                        project_root=tmp_path, **kwargs)


def _script(name: str, code: str, inputs=(), **extra) -> dict:
    template = {"name": name, "container": {"image": "x:1", "command": [PY, "-c", textwrap.dedent(code),
                                                                          *[f"{{{{inputs.parameters.{i}}}}}" for i in inputs]]}}
    if inputs:
        template["inputs"] = {"parameters": [{"name": i} for i in inputs]}
    return {**template, **extra}


EXIT_WITH = _script("exit-with", "import sys; sys.exit(int(sys.argv[1]))", inputs=["code"])
OK = _script("ok", "pass")


# --- dag.go: depends on a partly failed fan-out, the DAG's phase ------------------------------------------


def test_a_bare_depends_on_a_partly_failed_fan_out_omits_the_dependent_and_fails_the_workflow(tmp_path):
    # dag_test.go TestFailsWithParamDAG: process-tasks(3:3) fails, `finish` (dependencies: [process-tasks])
    # is Omitted ('omitted: depends condition not met') and the Workflow is Failed
    result = _workflow(tmp_path, {"entrypoint": "start", "templates": [
        {"name": "start", "dag": {"tasks": [
            {"name": "process-tasks", "template": "exit-with", "withItems": [str(i) for i in range(5)],
             "arguments": {"parameters": [{"name": "code", "value": "{{item}}"}]}},
            {"name": "finish", "template": "ok", "dependencies": ["process-tasks"]}]}},
        EXIT_WITH, OK]})
    assert result.nodes["process-tasks"].phase == "Failed"  # a group takes its last failed child's phase
    assert [result.nodes[f"process-tasks({i}:{i})"].phase for i in range(5)] == [
        "Succeeded", "Failed", "Failed", "Failed", "Failed"]
    finish = result.nodes["finish"]
    assert (finish.phase, finish.message) == ("Omitted", "omitted: depends condition not met")
    assert result.phase == "Failed" and result.message == ""  # a DAG node is marked without a message


def test_a_dependent_that_accepts_failure_runs_and_its_success_is_the_workflow_s(tmp_path):
    # dag_test.go TestDagAssessPhaseContinueOnExpandedTask: one of `one-will-fail`'s items fails; with
    # continueOn.failed its bare dependent runs (ancestry.go expandDependency adds `.Failed`), and the
    # Workflow Succeeded; our study's aggregate states the same with `depends: cell.Succeeded || ... Failed`
    fan = {"name": "one-will-fail", "template": "exit-with", "withItems": ["1", "0"],
           "arguments": {"parameters": [{"name": "code", "value": "{{item}}"}]}, "continueOn": {"failed": True}}
    leaf = {"name": "whalesay", "template": "ok", "continueOn": {"failed": True}, "dependencies": ["one-will-fail"]}
    spec = {"entrypoint": "main", "templates": [{"name": "main", "dag": {"tasks": [fan, leaf]}}, EXIT_WITH, OK]}
    result = _workflow(tmp_path, spec)
    assert result.nodes["whalesay"].phase == "Succeeded" and result.phase == "Succeeded"
    # without continueOn the bare dependency omits whalesay: the omitted target inherits the failed branch
    # (assessDAGPhase), unless it has continueOn itself
    del fan["continueOn"]
    result = _workflow(tmp_path, spec)
    assert result.nodes["whalesay"].phase == "Omitted" and result.phase == "Succeeded"
    del leaf["continueOn"]
    result = _workflow(tmp_path, spec)
    assert result.nodes["whalesay"].phase == "Omitted" and result.phase == "Failed"


def test_a_failed_target_with_continue_on_leaves_the_dag_succeeded(tmp_path):
    # dag_test.go TestLeafContinueOn: leaf B (continueOn.failed) fails after A: WorkflowSucceeded
    # (assessDAGPhase: `if task.ContinuesOn(branchPhase) { continue }`)
    fail = _script("fail", "import sys; sys.exit(1)")
    result = _workflow(tmp_path, {"entrypoint": "test-workflow", "templates": [
        {"name": "test-workflow", "dag": {"tasks": [
            {"name": "A", "template": "ok"},
            {"name": "B", "template": "fail", "dependencies": ["A"], "continueOn": {"failed": True}}]}},
        OK, fail]})
    assert result.nodes["B"].phase == "Failed" and result.phase == "Succeeded"


def test_an_omitted_target_gets_the_first_failure_that_reaches_it_in_the_node_graph():
    # dag.go assessDAGPhase walks the node graph breadth first (phase_node.go uniquePhaseNodeQueue): an
    # omitted target gets the first Failed or Error branch phase; a TaskGroup's own phase is its last failed
    # child's (executeDAGTask). Children [Error, Failed]: the group is Failed, the omitted dependent Error.
    group = Node("fan", TASK_GROUP, "Failed", [Node("fan(0:a)", LEAF, "Error"), Node("fan(1:b)", LEAF, "Failed")])
    nodes = {"fan": group, "next": Node("next", LEAF, "Omitted")}
    assert dag_phase(Node("d", DAG, ""), ["fan", "next"], {"fan": [], "next": ["fan"]}, nodes) == "Error"
    # a Retry node's outbound node is its last attempt (operator.go getOutboundNodes), a DAG's its targets'
    retried = retry_node("step", "Succeeded", ["Failed", "Succeeded"])
    assert [n.name for n in outbound(retried)] == ["step(1)"] and retried.kind == RETRY
    inner = Node("cell", DAG, "Failed", outbound_nodes=[Node("evaluate", LEAF, "Succeeded"), Node("analyze", LEAF, "Failed")])
    assert [n.name for n in outbound(inner)] == ["evaluate", "analyze"]


# --- deadlines.py: activeDeadlineSeconds ----------------------------------------------------------------

SLEEPER = """
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))  # as our steps do (harness: Transient)
    time.sleep(30)
"""


def test_a_pod_past_its_deadline_fails_with_the_kubelet_s_message_and_our_policy_does_not_retry_it(tmp_path):
    # kubelet active_deadline.go; test/e2e/workflow_test.go: node.Message contains "Pod was active on the
    # node longer than the specified deadline"; the exit code is the process's (SIGTERM -> 75 here)
    sleeper = _script("sleeper", SLEEPER, activeDeadlineSeconds=1, retryStrategy=OUR_RETRY)
    start = time.time()
    result = _workflow(tmp_path, {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "s", "template": "sleeper"}]}}, sleeper]})
    node = result.nodes["s"]
    assert time.time() - start < 15
    assert (node.phase, node.attempts, node.tries[0].exit_code) == ("Failed", 1, 75)
    assert node.tries[0].message == deadlines.KUBELET_MESSAGE
    # the Retry node's message when the expression says no (operator.go processNodeRetries)
    assert node.message == "retryStrategy.expression evaluated to false"


def test_argo_itself_retries_a_pod_past_its_deadline(tmp_path):
    # operator.go processNodeRetries has no rule for deadlines: retryPolicy Always retries it
    sleeper = _script("sleeper", SLEEPER, activeDeadlineSeconds=1,
                      retryStrategy={"limit": "1", "retryPolicy": "Always"})
    result = _workflow(tmp_path, {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "s", "template": "sleeper"}]}}, sleeper]})
    assert result.nodes["s"].attempts == 2 and result.nodes["s"].message == "No more retries left"


def test_a_deadline_that_is_no_integer_errors_the_node(tmp_path):
    # util/intstr Int: "value '%s' cannot be resolved to an int"
    sleeper = _script("sleeper", "pass", inputs=["d"], activeDeadlineSeconds="{{inputs.parameters.d}}")
    result = _workflow(tmp_path, {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "s", "template": "sleeper",
                                            "arguments": {"parameters": [{"name": "d", "value": "soon"}]}}]}},
        sleeper]})
    assert (result.nodes["s"].phase, result.nodes["s"].message) == ("Error", "value 'soon' cannot be resolved to an int")


def test_the_workflow_deadline_fails_running_and_waiting_pods_and_stops_retries(tmp_path):
    # exec_control.go applyExecutionControl: a running pod past the Workflow's deadline is terminated and
    # its node Failed "Step exceeded its deadline"; failNodesWithoutCreatedPodsAfterDeadlineOrShutdown: so
    # is a node still waiting for a lock (which it never held: the next one may run); processNodeRetries:
    # "retry exceeded workflow deadline <time>"; the exit handler still runs (workflowpod.go onExitPod)
    gpu = _script("gpu", SLEEPER, inputs=["i"], retryStrategy={"limit": "2", "retryPolicy": "Always"},
                  synchronization={"semaphores": [{"configMapKeyRef": {"name": "s", "key": "gpu"}}]})
    marker = tmp_path / "exit-ran"
    on_exit = _script("bye", f"open({str(marker)!r}, 'w').write('{{{{workflow.status}}}}')")
    result = _workflow(tmp_path, {"entrypoint": "main", "activeDeadlineSeconds": 2, "onExit": "bye", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "fan", "template": "gpu", "withItems": ["a", "b"],
                                            "arguments": {"parameters": [{"name": "i", "value": "{{item}}"}]}}]}},
        gpu, on_exit]}, parallelism=2)
    first, second = result.nodes["fan(0:a)"], result.nodes["fan(1:b)"]
    assert first.tries[0].message == deadlines.WORKFLOW_MESSAGE and first.attempts == 1
    assert first.message.startswith("retry exceeded workflow deadline ") and first.message.endswith(" +0000 UTC")
    assert (second.phase, second.message, second.attempts) == ("Failed", deadlines.WORKFLOW_MESSAGE, 0)
    assert result.phase == "Failed" and marker.read_text() == "Failed"


def test_deadline_arithmetic():
    # operator.go getWorkflowDeadline: status.startedAt truncated to the second + activeDeadlineSeconds
    assert deadlines.Deadlines.of({"activeDeadlineSeconds": 10}, 100.7).workflow == 110
    assert deadlines.Deadlines.of({}, 100.7).workflow is None
    # the earlier of the pod's own deadline (from its start) and the Workflow's; an exit pod only its own
    d = deadlines.Deadlines(110)
    assert d.kill(30, 100) == (110, deadlines.WORKFLOW_MESSAGE)
    assert d.kill(5, 100) == (105, deadlines.KUBELET_MESSAGE)
    assert d.kill(None, 100, on_exit=True) is None
    # retries.go_time: fmt %s of a time.Time, as "retry exceeded workflow deadline %s" prints it
    assert go_time(0) == "1970-01-01 00:00:00 +0000 UTC"


@pytest.mark.parametrize(("key", "where"), [("timeout", "template"), ("pendingTimeout", "template"),
                                            ("maxDuration", "backoff")])
def test_deadline_forms_the_runner_cannot_emulate_are_refused_by_name(tmp_path, key, where):
    template = _script("s", "pass", retryStrategy={"limit": "1", "backoff": {"duration": "1s"}})
    if where == "template":
        template[key] = "10s"
    else:
        template["retryStrategy"]["backoff"][key] = "1m"
    with pytest.raises(BadInput, match=f"'{key}'"):
        _workflow(tmp_path, {"entrypoint": "main", "templates": [
            {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s"}]}}, template]})


# --- retries.py / expressions.py: our policy, exit code "-1", backoff and locks ---------------------------


def _attempt(phase: str, code: int | None, message: str = "") -> Attempt:
    return Attempt(phase, code, 0, 1, message)


# Pods that ran into a limit a retry cannot help, with their node messages:
# - an OOM kill: operator.go inferFailedReason, `msg := fmt.Sprintf("%s (exit code %d)", t.Reason, t.ExitCode)`
#   of the container's terminated reason "OOMKilled", prefixed `msg = fmt.Sprintf("%s: %s", ctr.Name, msg)`
#   from v3.7.0 (v3.6.19 has no prefix);
# - an eviction: inferFailedReason `if pod.Status.Message != "" { return wfv1.NodeFailed, pod.Status.Message }`,
#   the kubelet's message (kubernetes pkg/kubelet/eviction/helpers.go): emptyDirMessageFmt "Usage of EmptyDir
#   volume %q exceeds the limit %q. ", podEphemeralStorageMessageFmt "Pod ephemeral local storage usage
#   exceeds the total limit of containers %s. ", containerEphemeralStorageMessageFmt "Container %s exceeded
#   its local ephemeral storage limit %q. "; the pod is killed with no grace period (137).
LIMIT_KILLS = [
    _attempt("Failed", 137, "main: OOMKilled (exit code 137)"),
    _attempt("Failed", 137, "OOMKilled (exit code 137)"),
    _attempt("Failed", 137, 'Usage of EmptyDir volume "tmp" exceeds the limit "20Gi". '),
    _attempt("Failed", 137, "Pod ephemeral local storage usage exceeds the total limit of containers 20Gi. "),
    _attempt("Failed", 137, 'Container main exceeded its local ephemeral storage limit "1Gi". '),
]


def test_our_retry_policy_over_argo_s_last_retry_variables():
    # operator.go buildRetryStrategyLocalScope: lastRetry.exitCode is "-1" for a node without an exit code
    # (a pod the kubelet rejected: phase Failed, no container ran); asInt is expr's int
    # (util/expr/env/env.go GetFuncMap); `in` and `contains` are expr-lang operators
    ours = RetryStrategy.parse(OUR_RETRY)
    assert ours.duration_s is None  # no backoff (see steps.yaml)
    retried = [_attempt("Failed", None, "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu"),
               _attempt("Failed", 75, "main: Error (exit code 75)"), _attempt("Failed", 137),
               _attempt("Failed", 137, "main: Error (exit code 137)"), _attempt("Error", None, "pod deleted"),
               # a node under memory pressure evicts the pod (helpers.go nodeLowMessageFmt): another node may do
               _attempt("Failed", 137, "The node was low on resource: memory. Threshold quantity: 100Mi, "
                                       "available: 90Mi. ")]
    for attempt in retried:
        assert ours.decide([attempt], now=1).retry, attempt
    never = [_attempt("Failed", 1), _attempt("Failed", 2), _attempt("Failed", 75, deadlines.KUBELET_MESSAGE),
             _attempt("Failed", None, deadlines.KUBELET_MESSAGE), *LIMIT_KILLS]
    for attempt in never:
        decision = ours.decide([attempt], now=1)
        assert not decision.retry and decision.message == "retryStrategy.expression evaluated to false", attempt
    with pytest.raises(ExpressionError, match="unsupported"):
        parse_retry("lastRetry.duration > 10")


def test_a_backoff_is_waited_out_before_the_policy_is_read():
    # operator.go processNodeRetries: the backoff block (`if time.Now().Before(waitingDeadline) && Limit !=
    # nil && len(childNodeIds) <= limit { requeueAfter(timeToWait) ... return }`) comes before the
    # retryPolicy and the expression: a failure that is never retried still waits
    strategy = RetryStrategy.parse({"limit": "3", "expression": "asInt(lastRetry.exitCode) == 75",
                                    "backoff": {"duration": "30s"}})
    never = strategy.decide([_attempt("Failed", 2)], now=1)
    assert (never.retry, never.wait_s, never.message) == (False, 30, "retryStrategy.expression evaluated to false")
    assert strategy.decide([_attempt("Failed", 75)], now=1).wait_s == 30
    # once the limit is used up there is no wait (`len(childNodeIds) <= limit` is false)
    used = strategy.decide([_attempt("Failed", 75)] * 4, now=1)
    assert (used.retry, used.wait_s, used.message) == (False, 0, "No more retries left")


def test_a_retry_node_holds_its_semaphore_through_its_backoff(tmp_path):
    # operator.go executeTemplate: TryAcquire(…, woc.wf.NodeID(nodeName), …) for the Retry node, Release only
    # when it is fulfilled (upstream #9875): a second GPU step cannot start during the first's backoff.
    # Why our templates have no backoff.
    log = tmp_path / "log"
    code = f"""
        import pathlib, sys, time
        marker = pathlib.Path({str(tmp_path)!r}) / ("once-" + sys.argv[1])
        with open({str(log)!r}, "a") as f: f.write(f"{{sys.argv[1]}} {{time.time()}}\\n")
        if not marker.exists():
            marker.write_text("x"); sys.exit(75)
    """
    gpu = _script("gpu", code, inputs=["i"], retryStrategy={"limit": "1", "backoff": {"duration": "2s"}},
                  synchronization={"semaphores": [{"configMapKeyRef": {"name": "s", "key": "gpu"}}]})
    result = _workflow(tmp_path, {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "fan", "template": "gpu", "withItems": ["a", "b"],
                                            "arguments": {"parameters": [{"name": "i", "value": "{{item}}"}]}}]}},
        gpu]}, parallelism=2, max_backoff_s=2)
    assert result.phase == "Succeeded"
    order = [line.split()[0] for line in log.read_text().splitlines()]
    assert order == ["a", "a", "b", "b"]  # b waited for a's lock through a's backoff


def test_a_retry_with_node_anti_affinity_runs_on_this_machine_the_only_node(tmp_path):
    # workflow/controller/retry_tweak.go RetryOnDifferentHost (v3.7.1+ for a step inside a DAG: FindRetryNode,
    # upstream #14576): `hostNames := wfretry.GetFailHosts(nodes, retryNodeName)` ... `pod.Spec.Affinity =
    # wfretry.AddHostnamesToAffinity(hostLabel, hostNames, ...)`: the retry may not run where an attempt failed,
    # and waits Pending for another node. Locally there is one node: the retry runs here, and says so. Our own
    # templates set no affinity (a retry may run on the same node: tests/test_workflows.py)
    assert not RetryStrategy.parse(OUR_RETRY).other_node
    users = {**OUR_RETRY, "affinity": {"nodeAntiAffinity": {}}}
    assert RetryStrategy.parse(users).other_node
    lines: list[str] = []
    code = f"""
        import pathlib, sys
        marker = pathlib.Path({str(tmp_path)!r}) / "once"
        if not marker.exists():
            marker.write_text("x"); sys.exit(75)
    """
    step = _script("s", code, retryStrategy=users)
    result = _workflow(tmp_path, {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s"}]}}, step]}, log=lines.append)
    assert (result.phase, result.nodes["a"].attempts) == ("Succeeded", 2)
    assert any("retry 1/3 on a node where no attempt failed, or Pending until there is one (retryStrategy.affinity."
               "nodeAntiAffinity, Argo 3.7.1+" in line for line in lines), lines
    # pkg/apis/workflow/v1alpha1/workflow_types.go: "RetryNodeAntiAffinity is a placeholder for future
    # expansion, only empty nodeAntiAffinity is allowed" (`type RetryNodeAntiAffinity struct{}`)
    bad = _script("s", "pass", retryStrategy={"limit": "1", "affinity": {"nodeAntiAffinity": {"key": "zone"}}})
    with pytest.raises(BadInput, match=r"retryStrategy.affinity.nodeAntiAffinity: unknown field 'key'"):
        _workflow(tmp_path, {"entrypoint": "main", "templates": [
            {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s"}]}}, bad]})


def test_an_exit_handler_s_timeout_ends_it_though_the_workflow_deadline_does_not(tmp_path):
    # workflowpod.go createWorkflowPod: `if wfDeadline == nil || opts.onExitPod { // ignore the workflow deadline
    # for exit handler` -- but the template's timeout: `templateDeadline, err := woc.checkTemplateTimeout(tmpl,
    # node)` ... `if templateDeadline != nil && (pod.Spec.ActiveDeadlineSeconds == nil ||
    # time.Since(*templateDeadline).Seconds() < float64(*pod.Spec.ActiveDeadlineSeconds)) {` the time left
    # becomes the pod's activeDeadlineSeconds, which the kubelet enforces with its message
    on_exit = _script("bye", SLEEPER, timeout="2s", activeDeadlineSeconds=60)
    start = time.time()
    result = _workflow(tmp_path, {"entrypoint": "main", "activeDeadlineSeconds": 1, "onExit": "bye", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "s", "template": "sleeper"}]}}, _script("sleeper", SLEEPER),
        on_exit]})
    assert result.nodes["s"].message == deadlines.WORKFLOW_MESSAGE
    node = result.nodes["onExit"]
    assert (node.phase, node.message, node.exit_code) == ("Failed", deadlines.KUBELET_MESSAGE, 75)
    assert time.time() - start < 15  # the exit handler's 2 s, not its 60 s nor the step's 30 s
    assert result.phase == "Failed"


@pytest.mark.parametrize(("extra", "match"), [
    ({"synchronization": {"semaphores": [{"configMapKeyRef": {"name": "s", "key": "gpu"}}]}},
     "unsupported Argo feature 'timeout'.*semaphore wait"),
    ({"timeout": "600"}, r"timeout: '600' has invalid duration format \(a whole number"),  # the validator (rules.py)
    ({"timeout": "ten minutes"}, "timeout 'ten minutes' is not a duration"),
])
def test_a_timeout_the_runner_cannot_emulate_or_read_is_refused(tmp_path, extra, match):
    # a timeout counts from the node's StartedAt: for a node waiting on a semaphore, from the wait's start
    # (executeTemplate initialises the node Pending before TryAcquire)
    template = _script("s", "pass", **{"timeout": "10s", **extra})
    with pytest.raises(BadInput, match=match):
        _workflow(tmp_path, {"entrypoint": "main", "templates": [
            {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s"}]}}, template]})


# --- termination.py, exit_handler.py: messages -----------------------------------------------------------


def test_a_termination_message_becomes_the_node_s_message(tmp_path):
    # operator.go inferFailedReason (v4.1): "main: Error (exit code 1): <terminated.message>"
    step = _script("s", "import os, sys; open(os.environ['T'], 'w').write('drift: rte accuracy -0.05'); sys.exit(1)")
    step["container"]["env"] = [{"name": "T", "value": "/dev/termination-log"}]
    result = _workflow(tmp_path, {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s"}]}}, step]})
    assert result.nodes["a"].message == "main: Error (exit code 1): drift: rte accuracy -0.05"


def test_the_exit_handler_reads_workflow_failures_and_decides_the_message_only_when_the_dag_succeeded(tmp_path):
    # operator.go operate: workflow.failures is strconv.Quote(json.Marshal([]failedNodeStatus)): the
    # handler gets a quoted JSON string (operator_test.go TestStepsOnExitFailures: `[{\"displayName\":
    # \"exit-handlers\",\"message\":…,\"templateName\":\"intentional-fail\",\"phase\":\"Failed\",\"podName\":…`);
    # status.message: the exit node's when the entry node Succeeded, else the entry node's (a DAG: none)
    got = tmp_path / "failures"
    report = _script("report", f"""
        import sys
        open({str(got)!r}, "w").write(sys.argv[1])
        sys.exit(1)
    """)
    report["container"]["command"].append("{{workflow.failures}}")
    fail = _script("intentional-fail", "import sys; sys.exit(3)")
    spec = {"entrypoint": "main", "onExit": "report", "templates": [
        {"name": "main", "dag": {"tasks": [
            {"name": "a", "template": "intentional-fail", "continueOn": {"failed": True}}]}}, fail, report]}
    result = _workflow(tmp_path, spec)
    raw = got.read_text()
    assert raw.startswith('"[{\\"displayName\\":\\"a\\",\\"message\\":\\"main: Error (exit code 3)\\",'
                          '\\"templateName\\":\\"intentional-fail\\",\\"phase\\":\\"Failed\\",\\"podName\\":')
    (entry,) = exit_handler.parse_failures(raw)
    assert list(entry) == ["displayName", "message", "templateName", "phase", "podName", "finishedAt"]
    assert result.nodes["onExit"].phase == "Failed"
    assert (result.phase, result.message) == ("Failed", "main: Error (exit code 1)")
    del spec["templates"][0]["dag"]["tasks"][0]["continueOn"]  # the DAG fails: no message at all
    result = _workflow(tmp_path, spec)
    assert (result.phase, result.message) == ("Failed", "")


def test_workflow_failures_is_only_for_the_exit_handler(tmp_path):
    # validate.go sets the workflow.failures placeholder only for the onExit template
    step = _script("s", "pass", inputs=["f"])
    with pytest.raises(BadInput, match="only the exit handler"):
        _workflow(tmp_path, {"entrypoint": "main", "templates": [
            {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s", "arguments": {
                "parameters": [{"name": "f", "value": "{{workflow.failures}}"}]}}]}}, step]})


# --- ttl.py: gc_controller.go ------------------------------------------------------------------------------


def test_ttl_follows_the_gc_controller():
    # workflow/gccontroller/gc_controller.go ttl: Failed -> secondsAfterFailure, Succeeded ->
    # secondsAfterSuccess, any completed phase -> secondsAfterCompletion; an Error Workflow is not "Failed"
    # (WorkflowStatus.Failed: Phase == Failed); gc_controller_test.go: a Failed workflow with only
    # secondsAfterSuccess is never deleted
    assert ttl.seconds({"secondsAfterSuccess": 10}, "Failed") is None
    assert ttl.seconds({"secondsAfterFailure": 10}, "Failed") == 10
    assert ttl.seconds({"secondsAfterFailure": 10}, "Error") is None
    assert ttl.seconds({"secondsAfterCompletion": 10}, "Error") == 10
    assert ttl.seconds({"secondsAfterSuccess": 5, "secondsAfterCompletion": 10}, "Succeeded") == 5


@pytest.mark.parametrize("name", ["study.yaml", "vocab-overlap.yaml", "nightly-regression.yaml"])
def test_every_finished_workflow_of_ours_is_cleaned_up(name):
    (doc,) = [d for d in yaml.safe_load_all((ROOT / "workflows/templates" / name).read_text())
              if d.get("kind") == "WorkflowTemplate"]
    for phase in ("Succeeded", "Failed", "Error"):
        assert ttl.seconds(doc["spec"]["ttlStrategy"], phase) is not None, (name, phase)
    assert doc["spec"]["activeDeadlineSeconds"] > 0


def test_failures_json_is_go_s():
    # encoding/json escapes <, > and & (HTMLEscape); strconv.Quote then escapes the quotes
    class N:
        name, template, phase, message, tries, retried, finished = "a", "t", "Failed", "x < y & z", [], False, 0.0
    assert json.loads(exit_handler.failures([N()], lambda n: n)) == (
        '[{"displayName":"a","message":"x \\u003c y \\u0026 z","templateName":"t","phase":"Failed",'
        '"podName":"a","finishedAt":"1970-01-01T00:00:00Z"}]')
