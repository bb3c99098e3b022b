"""The local runner against Argo's own documented and tested behaviour.

Each case's expected value is a fact taken from argoproj/argo-workflows (read at v4.1.2, with v3.6.19
where they differ), and names the upstream file it comes from. Unit cases call the emulating modules
(bertology.argo.substitution, fanout, retries, dag); DAG cases run small workflows through the runner,
with `python -c` containers.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from bertology.argo import fanout
from bertology.argo.dag import DAG, LEAF, Node, dag_phase
from bertology.argo.retries import Attempt, RetryStrategy, exit_code
from bertology.argo.runner import run_workflow
from bertology.argo.substitution import (
    SubstitutionError,
    go_json,
    item_description,
    item_scope,
    item_string,
    parse_items,
    render,
)
from bertology.errors import BadInput

# --- util/template: substitution ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ['This is " John', "This is ' John", "back\\slash", "tab\tnew\nline", "ünï"])
def test_a_substituted_value_reaches_the_pod_unchanged(value):
    # util/template/template_test.go Test_Template_Replace "SimpleWithEscapedCharacters": `This is " John`
    # and `This is ' John` come out as they went in; simple_template.go quotes with strconv.Quote and the
    # JSON unmarshal undoes it.
    assert render(["--x", "{{inputs.parameters.v}}"], {"inputs.parameters.v": value}) == ["--x", value]


def test_an_unresolved_tag_fails_to_resolve():
    # util/template/replace_test.go Test_Replace: `require.EqualError(t, err, "failed to resolve {{foo}}")`
    with pytest.raises(SubstitutionError, match=r"failed to resolve \{\{foo\}\}"):
        render("{{foo}}", {})
    assert render("{{foo}}", {}, strict=False) == "{{foo}}"  # allowUnresolved writes the tag back


@pytest.mark.parametrize("value", ["bell\a", "vertical\vtab", "del\x7f", "nul\x00"])
def test_characters_go_quotes_but_json_cannot_read_fail_the_substitution(value):
    # strconv.Quote writes \a, \v and \xHH, which are not JSON escapes: util/template/replace.go checks
    # the result with json.Valid ("cannot finish template replacement because the result was invalid JSON")
    with pytest.raises(SubstitutionError, match="invalid"):
        render("{{v}}", {"v": value})


# --- operator.go processItem / item.go Item.String: fan-out items ---------------------------------------


def test_scalar_and_list_items():
    # workflow/controller/operator_test.go Test_processItem: ["alpha\nbeta"] -> a real newline, [42] -> 42,
    # [true] -> true, [[1, "two", 3]] -> [1,"two",3]
    items = parse_items('["alpha\\nbeta", 42, true, [1, "two", 3], 1.50]')
    assert [item_scope(i)["item"] for i in items] == ["alpha\nbeta", "42", "true", '[1,"two",3]', "1.50"]


def test_with_param_items_as_expand_task_renders_them():
    # workflow/controller/dag_test.go TestExpandTaskWithParam: [1234, "foo\tbar", true, []] gives
    # "1234", "foo\tbar" (a real tab), "true", "[]"
    items = parse_items('[1234, "foo\\tbar", true, []]')
    assert [item_scope(i)["item"] for i in items] == ["1234", "foo\tbar", "true", "[]"]


def test_a_map_item_and_its_node_name():
    # operator_test.go Test_processItem: {{item}} of a map is its JSON with sorted top-level keys, and the
    # child is named task-name(0:json:{...},list:[0,"1"],number:2,string:foo) (operator.go generateNodeName)
    (item,) = parse_items('[{"number": 2, "string": "foo", "list": [0, "1"],'
                          ' "json": {"list": [0, "1"], "number": 2, "string": "foo"}}]')
    assert item_scope(item)["item"] == ('{"json":{"list":[0,"1"],"number":2,"string":"foo"},"list":[0,"1"],'
                                        '"number":2,"string":"foo"}')
    assert fanout.child_name("task-name", 0, item) == (
        'task-name(0:json:{"list":[0,"1"],"number":2,"string":"foo"},list:[0,"1"],number:2,string:foo)')


def test_item_string_keeps_json_escaping_and_undoes_html_escapes():
    # pkg/apis/workflow/v1alpha1/item_test.go TestItem_String: ["{\"foo\": \"bar\"}"] stays as it is;
    # map {"foo": "<&>"} is {"foo":"<&>"} (util/json.Fix undoes json.Marshal's \u003c, \u0026, \u003e)
    assert item_string(['{"foo": "bar"}']) == '["{\\"foo\\": \\"bar\\"}"]'
    assert item_string({"foo": "<&>"}) == '{"foo":"<&>"}'


def test_a_string_inside_a_map_item_keeps_its_json_escaping_upstream_16061():
    # operator.go processItem fills {{item.KEY}} with fmt.Sprintf("%v", value) = Item.String(): a JSON
    # string in a map reaches the pod as {\"x\":1} (argoproj/argo-workflows#16061, unfixed in every release).
    # This is why our items carry plain tokens only (bertology.steps.planned).
    (item,) = parse_items('[{"id": "a", "spec": "{\\"x\\":1}"}]')
    argv = render(["--spec", "{{item.spec}}"], item_scope(item))
    assert argv == ["--spec", '{\\"x\\":1}']
    with pytest.raises(json.JSONDecodeError):
        json.loads(argv[1])
    assert json.loads(render("{{item}}", item_scope(item)))["spec"] == '{"x":1}'  # {{item}} is valid JSON


def test_a_null_item_is_an_empty_list_and_parentheses_leave_node_names():
    # item.go GetType: null unmarshals into []any (List), GetListVal gives [] (docs: facts of processItem);
    # generateNodeName strips "(" and ")" from the description
    assert fanout.items({"withParam": "[null]"}, lambda v: v) == [[]]
    assert item_scope([])["item"] == "[]"
    assert item_description("f(x)") == "fx"


def test_with_param_must_be_a_json_list():
    # dag.go expandTask: "withParam value could not be parsed as a JSON list: <value>: <error>"
    with pytest.raises(fanout.FanOutError, match="withParam value could not be parsed as a JSON list"):
        fanout.items({"withParam": "{not json"}, lambda v: v)


def test_an_empty_with_items_is_no_fan_out():
    # workflow_types.go ShouldExpand: len(WithItems) != 0 || WithParam != "" (an empty list is omitted)
    assert fanout.items({"withItems": []}, lambda v: v) is None
    assert fanout.items({"withParam": "[]"}, lambda v: v) == []


# --- operator.go processAggregateNodeOutputs / aggregatedJSONValueList ------------------------------------


@pytest.mark.parametrize(("values", "expected"), [
    # workflow/controller/operator_aggregation_test.go TestAggregatedJsonValueList
    (["1", "2"], '["1","2"]'),
    (['["1"]', "2"], '["[\\"1\\"]","2"]'),
    (['{"number":"1"}', '{"number":"2"}'], '[{"number":"1"},{"number":"2"}]'),
    (['[{"foo":"apple", "bar":"pear"}]'], '[[{"bar":"pear","foo":"apple"}]]'),
])
def test_aggregated_output_values(values, expected):
    assert fanout.aggregate(values) == expected


def test_only_succeeded_children_count_and_none_means_unset():
    # operator.go processAggregateNodeOutputs: `if node.Outputs == nil || node.Phase != NodeSucceeded
    # { continue }`; a parameter no included child has is never set
    children = [("Succeeded", {"p": "a"}), ("Failed", {"p": "b"}), ("Succeeded", {"p": "c"})]
    assert fanout.aggregate_outputs(children, ["p"]) == {"p": '["a","c"]'}
    assert fanout.aggregate_outputs([("Failed", {"p": "b"})], ["p"]) == {}


def test_go_json_numbers():
    # encoding/json floatEncoder (aggregated values go through any -> float64): 'f' format in [1e-6, 1e21)
    assert [go_json(v) for v in (3.0, 0.5, 1e21, 1.5e-7, 100000.0)] == ["3", "0.5", "1e+21", "1.5e-7", "100000"]


# --- dag.go: task groups and the DAG's phase ---------------------------------------------------------------


def test_a_task_group_takes_its_last_failed_childs_phase():
    # dag.go executeDAGTask: groupPhase = node.Phase for every FailedOrError child, in item order
    assert fanout.group_phase(["Succeeded", "Failed", "Error", "Succeeded"]) == "Error"
    assert fanout.group_phase(["Succeeded", "Succeeded"]) == "Succeeded"


def _leaves(**phases: str) -> dict[str, Node]:
    return {name: Node(name, LEAF, phase) for name, phase in phases.items()}


def test_the_dag_phase_comes_from_its_targets():
    # dag.go assessDAGPhase: a completed target keeps its phase (a .Failed handler that succeeded makes the
    # DAG succeed, dag_test.go TestDagAssessPhaseContinueOnExpandedTask: WorkflowSucceeded); an omitted
    # target inherits its branch's failure
    order, upstream = ["cell", "aggregate"], {"cell": [], "aggregate": ["cell"]}
    assert dag_phase(Node("d", DAG, ""), order, upstream, _leaves(cell="Failed", aggregate="Succeeded")) \
        == "Succeeded"
    assert dag_phase(Node("d", DAG, ""), order, upstream, _leaves(cell="Failed", aggregate="Omitted")) == "Failed"
    # an empty fan-out (Skipped) is no failure: dag_test.go TestEmptyWithParamDAG, WorkflowSucceeded
    assert dag_phase(Node("d", DAG, ""), order, upstream, _leaves(cell="Skipped", aggregate="Succeeded")) \
        == "Succeeded"


def test_fail_fast_picks_the_first_failing_target_else_the_last():
    # dag.go assessDAGPhase: `if failFast { break }` after the first failed target; without, the loop
    # goes on and the last failed target's phase stands
    order, upstream = ["a", "b"], {"a": [], "b": []}
    assert dag_phase(Node("d", DAG, ""), order, upstream, _leaves(a="Failed", b="Error"), fail_fast=True) == "Failed"
    assert dag_phase(Node("d", DAG, ""), order, upstream, _leaves(a="Failed", b="Error"), fail_fast=False) == "Error"


# --- operator.go processNodeRetries ---------------------------------------------------------------------


def _failed(start: float, end: float, code: int = 75, phase: str = "Failed") -> Attempt:
    return Attempt(phase, code, start, end)


def test_exponential_backoff_with_a_cap():
    # operator_test.go TestProcessNodeRetriesWithExponentialBackoff: duration 5m, factor 2, cap 11m:
    # waits of 300 s, then 600 s, then "Third backoff should be limited to 660 seconds by the Cap"
    strategy = RetryStrategy.parse({"limit": "10", "backoff": {"duration": "5m", "factor": "2", "cap": "11m"}})
    assert [strategy.wait_before(n) for n in (1, 2, 3)] == [300, 600, 660]
    decision = strategy.decide([_failed(0, 10)], now=10)
    assert decision.retry and decision.wait_s == 300


def test_max_duration_is_a_window_from_the_first_attempt():
    # operator.go processNodeRetries: maxDurationDeadline = firstChildNode.StartedAt + maxDuration;
    # dag_test.go TestTerminateDAGWithMaxDurationLimitExpiredAndMoreAttempts: "Max duration limit exceeded";
    # operator_test.go TestBackoffExceedsMaxDuration: "Backoff would exceed max duration limit"
    strategy = RetryStrategy.parse({"limit": "3", "backoff": {"duration": "30s", "factor": "2", "maxDuration": "30m"}})
    preempted_late = strategy.decide([_failed(0, 40 * 60)], now=40 * 60)  # a fine-tune killed after 40 minutes
    assert not preempted_late.retry and preempted_late.message == "Max duration limit exceeded"
    near_the_end = strategy.decide([_failed(0, 29 * 60 + 50)], now=29 * 60 + 50)
    assert not near_the_end.retry and near_the_end.message == "Backoff would exceed max duration limit"
    early = strategy.decide([_failed(0, 60)], now=60)
    assert early.retry and early.deadline == 30 * 60  # the retry pod's activeDeadline: the window's end


def test_retry_policy_defaults_and_limit():
    # docs/retries.md: "The default retryPolicy is OnFailure, except in version 3.5 or later when an
    # expression is also supplied, when it is Always"; limit N allows N retries (N + 1 attempts)
    assert RetryStrategy.parse({"limit": "1"}).policy == "OnFailure"
    assert RetryStrategy.parse({"limit": "1", "expression": 'lastRetry.status == "Error"'}).policy == "Always"
    on_failure = RetryStrategy.parse({"limit": "1"})
    assert not on_failure.decide([_failed(0, 1, None, "Error")], now=1).retry  # an Error is not a failure
    assert on_failure.decide([_failed(0, 1)], now=1).retry
    assert on_failure.decide([_failed(0, 1), _failed(1, 2)], now=2).message == "No more retries left"


def test_the_expression_is_anded_with_the_policy():
    # docs/retries.md: "The expression result will be logical and with the retryPolicy";
    # operator.go buildRetryStrategyLocalScope: lastRetry.exitCode is "-1" when there is none
    ours = yaml.safe_load((Path(__file__).parents[1] / "workflows/templates/steps.yaml").read_text())
    strategy = RetryStrategy.parse(ours["spec"]["templates"][0]["retryStrategy"])
    assert strategy.decide([_failed(0, 1, 75)], now=1).retry
    assert strategy.decide([_failed(0, 1, 137)], now=1).retry  # an OOM kill or SIGKILL after the grace period
    assert not strategy.decide([_failed(0, 1, 2)], now=1).retry  # bad input
    assert not strategy.decide([_failed(0, 1, 1)], now=1).retry
    assert strategy.decide([_failed(0, 1, None, "Error")], now=1).retry  # a deleted pod


def test_a_signalled_process_exits_137():
    # cmd/argoexec/commands/emissary.go exitCodeFromErr: `return 137 // SIGTERM` for any signalled child
    assert exit_code(-9) == exit_code(-15) == 137 and exit_code(75) == 75


# --- whole workflows through the runner -----------------------------------------------------------------

PY = sys.executable


def _workflow(tmp_path: Path, spec: dict, params: dict | None = None, **kwargs):
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"generateName": "conf-"},
           "spec": spec}
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "templates").mkdir(exist_ok=True)
    return run_workflow(path, params=params or {}, templates_dir=tmp_path / "templates", workdir=tmp_path / "work",
                        project_root=tmp_path, log=lambda _: None, **kwargs)


def _script(name: str, code: str, inputs=(), outputs=(), **extra) -> dict:
    template = {"name": name, "container": {"image": "x:1", "command": [PY, "-c", textwrap.dedent(code),
                                                                          *[f"{{{{inputs.parameters.{i}}}}}" for i in inputs]]}}
    if inputs:
        template["inputs"] = {"parameters": [{"name": i} for i in inputs]}
    if outputs:
        template["outputs"] = {"parameters": [{"name": o, "valueFrom": {"path": f"/tmp/outputs/{o}"}} for o in outputs]}
    template["container"]["args"] = []
    return {**template, **extra}


def test_an_empty_fan_out_is_skipped_and_a_bare_dependent_still_runs(tmp_path):
    # dag.go executeDAGTask: "Skipped, empty params"; e2e functional_test.go TestDAGEmptyParam:
    # NodeSkipped with that message; a bare `depends: T` is T.Succeeded || T.Skipped || T.Daemoned and
    # runs; `T.Succeeded` is omitted; dag_test.go TestEmptyWithParamDAG: WorkflowSucceeded
    plan = _script("plan", "import os; open('/tmp/outputs/items'.replace('/tmp/outputs', os.environ['O']), 'w').write('[]')",
                   outputs=["items"])
    plan["container"]["env"] = [{"name": "O", "value": "/tmp/outputs"}]
    ok = _script("ok", "pass")
    result = _workflow(tmp_path, {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"failFast": False, "tasks": [
            {"name": "plan", "template": "plan"},
            {"name": "fan", "template": "ok", "depends": "plan", "withParam": "{{tasks.plan.outputs.parameters.items}}"},
            {"name": "bare", "template": "ok", "depends": "fan"},
            {"name": "strict", "template": "ok", "depends": "fan.Succeeded"}]}},
        plan, ok]})
    assert (result.nodes["fan"].phase, result.nodes["fan"].message) == ("Skipped", "Skipped, empty params")
    assert result.nodes["bare"].phase == "Succeeded" and result.nodes["strict"].phase == "Omitted"
    assert result.phase == "Succeeded"


def test_a_failed_child_stops_nothing_and_a_failed_handler_runs(tmp_path):
    # dag.go: failFast only chooses the DAG's phase (assessDAGPhase) and the DAG is Running while any node
    # runs, so every child of a fan-out starts (upstream #10312, #5223: "All steps in the pipeline are
    # scheduled and executed even though one step failed"); `aggregate` on `cell.Failed` runs
    # (TestDagAssessPhaseContinueOnExpandedTask) and, having succeeded, makes the DAG succeed
    fail_if = _script("maybe", "import sys; sys.exit(int(sys.argv[1]))", inputs=["code"])
    ok = _script("ok", "pass")
    result = _workflow(tmp_path, {"entrypoint": "main", "parallelism": 1, "templates": [
        {"name": "main", "dag": {"tasks": [
            {"name": "cell", "template": "maybe", "withItems": ["3", "0", "0"],
             "arguments": {"parameters": [{"name": "code", "value": "{{item}}"}]}},
            {"name": "aggregate", "template": "ok", "depends": "cell.Succeeded || cell.Failed"}]}},
        fail_if, ok]})
    assert [result.nodes[f"cell({i}:{c})"].phase for i, c in enumerate("300")] == ["Failed", "Succeeded", "Succeeded"]
    assert result.nodes["cell"].phase == "Failed"
    assert result.nodes["aggregate"].phase == "Succeeded" and result.phase == "Succeeded"


def test_a_reference_to_an_aggregate_no_child_produced_errors(tmp_path):
    # operator.go processAggregateNodeOutputs sets nothing when no child succeeded; the dependent's
    # `{{tasks.cell.outputs.parameters.p}}` then fails to resolve (util/template) - on a cluster the
    # controller requeues it forever (replace.go IsMissingVariableErr), locally the node is an Error
    fail = _script("fail", "import sys; sys.exit(1)", outputs=["p"])
    show = _script("show", "pass", inputs=["v"])
    result = _workflow(tmp_path, {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"failFast": False, "tasks": [
            {"name": "cell", "template": "fail", "withItems": ["a"]},
            {"name": "next", "template": "show", "depends": "cell.Failed",
             "arguments": {"parameters": [{"name": "v", "value": "{{tasks.cell.outputs.parameters.p}}"}]}}]}},
        fail, show]})
    assert result.nodes["next"].phase == "Error"
    assert "failed to resolve {{tasks.cell.outputs.parameters.p}}" in result.nodes["next"].message


def test_a_killed_process_is_137_and_retried(tmp_path):
    # emissary.go exitCodeFromErr (137 for a signalled process) + our retry expression
    ours = yaml.safe_load((Path(__file__).parents[1] / "workflows/templates/steps.yaml").read_text())
    retry = dict(ours["spec"]["templates"][0]["retryStrategy"])
    marker = tmp_path / "killed-once"
    code = f"""
        import os, pathlib, signal
        m = pathlib.Path({str(marker)!r})
        if not m.exists():
            m.write_text("x"); os.kill(os.getpid(), signal.SIGKILL)
    """
    result = _workflow(tmp_path, {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"failFast": False, "tasks": [{"name": "oom", "template": "oom"}]}},
        _script("oom", code, retryStrategy=retry)]}, max_backoff_s=0)
    assert result.nodes["oom"].phase == "Succeeded" and result.nodes["oom"].attempts == 2


def _overlap_script(log: Path) -> str:
    return f"""
        import time
        with open({str(log)!r}, "a") as f: f.write(f"start {{time.time()}}\\n")
        time.sleep(0.6)
        with open({str(log)!r}, "a") as f: f.write(f"end {{time.time()}}\\n")
    """


def _max_concurrent(log: Path) -> int:
    events = sorted((float(t), +1 if kind == "start" else -1)
                    for kind, t in (line.split() for line in log.read_text().splitlines()))
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


@pytest.mark.parametrize(("limit", "expected"), [(None, 1), (2, 2)])
def test_semaphores_cap_concurrent_pods(tmp_path, limit, expected):
    # workflow/sync: a template's semaphore (ConfigMap key) is acquired before its pod starts; the limit is
    # the key's integer value (controller.go createSynchronizationManager); locally 1 unless given
    log = tmp_path / "log"
    gpu = _script("gpu", _overlap_script(log), synchronization={
        "semaphores": [{"configMapKeyRef": {"name": "bertology-semaphores", "key": "gpu"}}]})
    spec = {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"failFast": False, "tasks": [{"name": "fan", "template": "gpu", "withItems": ["a", "b", "c", "d"]}]}},
        gpu]}
    semaphores = {"bertology-semaphores/gpu": limit} if limit else None
    start = time.time()
    result = _workflow(tmp_path, spec, parallelism=4, semaphores=semaphores)
    assert result.phase == "Succeeded"
    assert _max_concurrent(log) == expected, time.time() - start


def test_spec_parallelism_caps_pods(tmp_path):
    # operator.go checkParallelism: `woc.activePods >= *Spec.Parallelism` -> not started this pass
    log = tmp_path / "log"
    spec = {"entrypoint": "main", "parallelism": 1, "templates": [
        {"name": "main", "dag": {"failFast": False, "tasks": [{"name": "fan", "template": "s", "withItems": ["a", "b", "c"]}]}},
        _script("s", _overlap_script(log))]}
    assert _workflow(tmp_path, spec, parallelism=4).phase == "Succeeded"
    assert _max_concurrent(log) == 1


def test_an_output_default_outside_value_from_is_refused(tmp_path):
    # workflow_types.go: Parameter.Default is "the default value to use for an input parameter"; only
    # valueFrom.default is read for outputs (workflow/executor/executor.go SaveParameters)
    template = _script("s", "pass", outputs=["p"])
    template["outputs"]["parameters"][0]["default"] = "x"
    with pytest.raises(BadInput, match="'default'.*only valueFrom.default"):
        _workflow(tmp_path, {"entrypoint": "main", "templates": [
            {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s"}]}}, template]})


def test_template_level_fail_fast_and_parallelism_are_refused_by_name(tmp_path):
    for key, value in (("failFast", True), ("parallelism", 2)):
        spec = {"entrypoint": "main", "templates": [
            {"name": "main", key: value, "dag": {"tasks": [{"name": "a", "template": "s"}]}}, _script("s", "pass")]}
        with pytest.raises(BadInput, match=f"'{key}'"):
            _workflow(tmp_path, spec)


def test_an_unknown_parameter_is_refused_where_argo_would_ignore_it(tmp_path):
    # workflow/util/util.go overrideParameters adds `-p NAME=…` whatever NAME is: a typo is silently unused
    spec = {"entrypoint": "main", "arguments": {"parameters": [{"name": "known", "value": "1"}]}, "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s"}]}}, _script("s", "pass")]}
    with pytest.raises(BadInput, match="unknown parameter 'knwon'.*Argo would accept it and ignore it"):
        _workflow(tmp_path, spec, params={"knwon": "2"})


def test_a_parameter_from_a_config_map_in_the_templates_directory(tmp_path):
    # operator.go setGlobalParameters: `value` (or -p) wins, else valueFrom.configMapKeyRef, else its default
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "platform.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "labels": PARAMETER_LABEL},
         "data": {"store": "s3://b/p"}}))
    echo = _script("s", "import sys; open(sys.argv[2], 'w').write(sys.argv[1])", inputs=["v"])
    echo["container"]["command"].append("/tmp/outputs/v")
    echo["outputs"] = {"parameters": [{"name": "v", "valueFrom": {"path": "/tmp/outputs/v"}}]}
    spec = {"entrypoint": "main", "arguments": {"parameters": [
        {"name": "store", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "store"}}}]}, "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s", "arguments": {
            "parameters": [{"name": "v", "value": "{{workflow.parameters.store}}"}]}}]}}, echo]}
    assert _workflow(tmp_path, spec).nodes["a"].outputs["v"] == "s3://b/p"
    assert _workflow(tmp_path, spec, params={"store": "file:///x"}).nodes["a"].outputs["v"] == "file:///x"


# workflow/common/configmap.go GetConfigMapValue reads a parameter only from a ConfigMap with this label
PARAMETER_LABEL = {"workflows.argoproj.io/configmap-type": "Parameter"}


@pytest.mark.parametrize(("configmap", "error"), [
    (None, ("ConfigMap 'cfg' does not exist. Please make sure it has the label workflows.argoproj.io/configmap-type: "
            "Parameter to be detectable by the controller")),
    ({"metadata": {"name": "cfg"}, "data": {"store": "s3://b/p"}},
     "ConfigMap 'cfg' needs to have the label workflows.argoproj.io/configmap-type: Parameter to load parameters"),
    ({"metadata": {"name": "cfg", "labels": PARAMETER_LABEL}, "data": {"other": "x"}},
     "ConfigMap 'cfg' does not have the key 'store'"),
])
@pytest.mark.parametrize("version", ["3.6.19", "4.1.2"])
def test_a_config_map_parameter_that_cannot_be_read_takes_its_default_or_fails_as_argo_fails(
        tmp_path, configmap, error, version):
    """operator.go setGlobalParameters (v3.6.19, v3.7.18, v4.1.2): when GetConfigMapValue fails, for whatever
    reason (no such ConfigMap, no Parameter label, no such key), `valueFrom.default` is the value if there is one
    (`if param.ValueFrom.Default != nil`), else the Workflow fails: "failed to set global parameter %s from
    configmap with name %s and key %s: %w". Argo reads it again on every reconcile, so a WorkflowTemplate
    parameter without a default errors every running Workflow once its ConfigMap is deleted."""
    (tmp_path / "templates").mkdir()
    if configmap is not None:
        (tmp_path / "templates" / "platform.yaml").write_text(
            yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", **configmap}))
    echo = _script("s", "import sys; open(sys.argv[2], 'w').write(sys.argv[1] or '<empty>')", inputs=["v"])
    echo["container"]["command"].append("/tmp/outputs/v")
    echo["outputs"] = {"parameters": [{"name": "v", "valueFrom": {"path": "/tmp/outputs/v"}}]}

    def spec(value_from: dict) -> dict:
        return {"entrypoint": "main", "arguments": {"parameters": [{"name": "store", "valueFrom": value_from}]},
                "templates": [{"name": "main", "dag": {"tasks": [{"name": "a", "template": "s", "arguments": {
                    "parameters": [{"name": "v", "value": "{{workflow.parameters.store}}"}]}}]}}, echo]}

    ref = {"configMapKeyRef": {"name": "cfg", "key": "store"}}
    for default in ("", "s3://fallback/p"):
        result = _workflow(tmp_path, spec({**ref, "default": default}), argo_version=version)
        assert result.nodes["a"].outputs["v"] == (default or "<empty>")
    with pytest.raises(BadInput) as refused:
        _workflow(tmp_path, spec(ref), argo_version=version)
    assert str(refused.value).startswith(
        f"failed to set global parameter store from configmap with name cfg and key store: {error} "
        "(valueFrom has no default; ")
    assert "\n" not in str(refused.value)


def _template_ref_workflow(tmp_path: Path, own: list[dict]) -> Path:
    """A WorkflowTemplate whose `store` parameter comes from a ConfigMap, and a Workflow that references it
    with its own parameters `own`; the step echoes {{workflow.parameters.store}} as an output."""
    templates = tmp_path / "templates"
    templates.mkdir(exist_ok=True)
    echo = _script("s", "import sys; open(sys.argv[2], 'w').write(sys.argv[1])", inputs=["v"])
    echo["container"]["command"].append("/tmp/outputs/v")
    echo["outputs"] = {"parameters": [{"name": "v", "valueFrom": {"path": "/tmp/outputs/v"}}]}
    library = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "labels": PARAMETER_LABEL},
         "data": {"store": "s3://platform/p"}},
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate", "metadata": {"name": "wft"}, "spec": {
            "entrypoint": "main",
            "arguments": {"parameters": [{"name": "store", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "store"}}}]},
            "templates": [{"name": "main", "dag": {"tasks": [{"name": "a", "template": "s", "arguments": {
                "parameters": [{"name": "v", "value": "{{workflow.parameters.store}}"}]}}]}}, echo]}},
    ]
    (templates / "library.yaml").write_text(yaml.safe_dump_all(library, sort_keys=False))
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                    "metadata": {"generateName": "merge-"},
                                    "spec": {"workflowTemplateRef": {"name": "wft"},
                                             "arguments": {"parameters": own}}}, sort_keys=False))
    return path


@pytest.mark.parametrize(("version", "expected"), [("3.6.19", "s3://platform/p"), ("3.7.0", "s3://mine/p"),
                                                   ("3.7.18", "s3://mine/p"), ("4.1.2", "s3://mine/p")])
def test_a_submitted_value_and_a_workflow_template_s_config_map_merge_as_each_version_merges_them(
        tmp_path, version, expected):
    # v3.6.19 workflow/util/merge.go JoinWorkflowSpec -> MergeTo: `strategicpatch.StrategicMergePatch(
    # patchWfBytes, targetWfByte, wfv1.Workflow{})` (parameters `patchMergeKey:"name"`): -p's `value` and the
    # template's `valueFrom` end up in one parameter, and operator.go setGlobalParameters reads `if
    # param.ValueFrom != nil && param.ValueFrom.ConfigMapKeyRef != nil {` before `} else if param.Value != nil {`.
    # v3.7.0 (upstream #14462, "fix!: Adjust parameter value overriding. Fixes #14426"): JoinWorkflowSpec
    # replaces the joined parameter with the Workflow's (`if param, ok := wfParamsMap[parameter.Name]; ok {
    # targetWf.Spec.Arguments.Parameters[index] = *param.DeepCopy()`), and setGlobalParameters reads `if
    # param.Value != nil {` first (operator_workflow_template_ref_test.go TestWorkflowTemplateRefValueFromParamOverwrite:
    # "configmap argument overwrite with argument")
    path = _template_ref_workflow(tmp_path, [])
    result = run_workflow(path, params={"store": "s3://mine/p"}, templates_dir=tmp_path / "templates",
                          workdir=tmp_path / "work", project_root=tmp_path, log=lambda _: None, argo_version=version)
    assert result.nodes["a"].outputs["v"] == expected
    # a value written in the Workflow itself is joined the same way
    path = _template_ref_workflow(tmp_path, [{"name": "store", "value": "s3://mine/p"}])
    result = run_workflow(path, params={}, templates_dir=tmp_path / "templates", workdir=tmp_path / "work2",
                          project_root=tmp_path, log=lambda _: None, argo_version=version)
    assert result.nodes["a"].outputs["v"] == expected


@pytest.mark.parametrize("version", ["3.5.9", "3.6.18", "4.2.0", "latest"])
def test_an_argo_version_outside_the_supported_ones_is_refused(tmp_path, version):
    path = _template_ref_workflow(tmp_path, [])
    with pytest.raises(BadInput, match=f"Argo version '{version}' is not .*allowed: a version from 3.6.19 to 4.1.x"):
        run_workflow(path, params={}, templates_dir=tmp_path / "templates", workdir=tmp_path / "work",
                     project_root=tmp_path, log=lambda _: None, argo_version=version)


@pytest.mark.parametrize("annotations, expected", [
    (None, "null"),  # json.Marshal of a nil map
    ({"z": "last", "a": "<first>", "bertology.io/stopped-by-queue-watch": "why"},
     '{"a":"\\u003cfirst\\u003e","bertology.io/stopped-by-queue-watch":"why","z":"last"}'),
])
def test_workflow_annotations_json_is_go_s_marshal_of_the_workflow_s_annotations(tmp_path, annotations, expected):
    """operator.go setGlobalParameters: `workflow.annotations.json` = json.Marshal(woc.wf.Annotations), keys
    sorted and <, >, & escaped as encoding/json does; the exit handler verdict reads the queue watch's line
    from it."""
    show = _script("show", "import os, sys; open(os.environ['O'] + '/seen', 'w').write(sys.argv[1])", outputs=["seen"])
    show["container"]["args"] = ["{{workflow.annotations.json}}"]
    show["container"]["env"] = [{"name": "O", "value": "/tmp/outputs"}]
    meta = {"name": "annotated", **({"annotations": annotations} if annotations else {})}
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": meta,
                                    "spec": {"entrypoint": "show", "templates": [show]}}, sort_keys=False))
    (tmp_path / "templates").mkdir()
    result = run_workflow(path, params={}, templates_dir=tmp_path / "templates", workdir=tmp_path / "work",
                          project_root=tmp_path, log=lambda _: None)
    assert result.succeeded, result.message
    (node,) = result.nodes.values()
    assert node.outputs["seen"] == expected


def test_a_pod_spec_patch_of_argo_s_own_containers_is_accepted_and_any_other_refused(tmp_path):
    """Our templates give Argo's `init` and `wait` their securityContext through podSpecPatch
    (workflows/templates/steps.yaml; util.ApplyPodSpecPatch merges containers by name). A local pod has no
    init or wait container, so such a patch changes nothing here and runs; a patch of the step's own
    container or of the pod would change what runs, so it is refused by name before anything runs."""
    ours = yaml.safe_dump({"initContainers": [{"name": "init", "securityContext": {"allowPrivilegeEscalation": False}}],
                           "containers": [{"name": "wait", "securityContext": {"capabilities": {"drop": ["ALL"]}}}]})
    step = {**_script("s", "pass"), "podSpecPatch": ours}
    spec = {"entrypoint": "main", "templates": [
        {"name": "main", "dag": {"tasks": [{"name": "a", "template": "s"}]}}, step]}
    assert _workflow(tmp_path, spec).nodes["a"].phase == "Succeeded"
    assert _workflow(tmp_path, {**spec, "podSpecPatch": ours}).nodes["a"].phase == "Succeeded"
    for patch in ('{"containers": [{"name": "main", "resources": {"limits": {"memory": "1Gi"}}}]}',
                  '{"hostNetwork": true}'):
        with pytest.raises(BadInput, match=r"unsupported Argo feature 'podSpecPatch' in template 's' .*changes only "
                                           r"Argo's own containers, initContainers 'init' and containers 'wait'"):
            _workflow(tmp_path, {**spec, "templates": [spec["templates"][0], {**step, "podSpecPatch": patch}]})
    with pytest.raises(BadInput, match="podSpecPatch with .* is substituted per pod"):
        _workflow(tmp_path, {**spec, "podSpecPatch": '{"containers": [{"name": "wait", "image": "{{x}}"}]}'})
