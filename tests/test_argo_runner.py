"""The local runner executes our Argo YAML with Argo's semantics (fixtures: tests/fixtures/argo/)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
import yaml

from bertology.argo.runner import RunResult, run_workflow
from bertology.errors import BadInput

FIXTURES = Path(__file__).parent / "fixtures" / "argo"
TEMPLATES = FIXTURES / "templates"


def run(
    name: str | Path,
    tmp_path: Path,
    params: dict[str, str] | None = None,
    parallelism: int = 2,
    lines: list[str] | None = None,
) -> RunResult:
    return run_workflow(
        FIXTURES / name if isinstance(name, str) else name,
        params=params or {},
        templates_dir=TEMPLATES,
        workdir=tmp_path / "work",
        project_root=tmp_path,
        parallelism=parallelism,
        log=(lines.append if lines is not None else lambda _: None),
    )


def child(result: RunResult, task: str, index: int, suffix: str = ""):
    """The node of fan-out child `index` of `task`: Argo names it `task(index:item)` (generateNodeName)."""
    pattern = re.compile(rf"{re.escape(task)}\({index}:[^()]*\){re.escape(suffix)}")
    found = [node for name, node in result.nodes.items() if pattern.fullmatch(name)]
    assert len(found) == 1, (task, index, suffix, sorted(result.nodes))
    return found[0]


def test_fan_out_nested_dag_and_aggregated_outputs(tmp_path):
    lines: list[str] = []
    result = run("toy.yaml", tmp_path, lines=lines)
    assert (result.phase, result.exit_code) == ("Succeeded", 0)
    nodes = result.nodes
    assert [child(result, "work", i).phase for i in range(3)] == ["Succeeded"] * 3
    # a map item names its child by its sorted key:value pairs; {{item.spec}} of an object is its JSON
    assert child(result, "work", 0).name == 'work(0:id:0,spec:{"x":0,"tags":["a","b"]})'
    assert nodes["cell(1:n1).second"].outputs["said"] == "second after first toy-n1!?"  # nested DAG, depends
    collected = json.loads((tmp_path / "work" / "collect" / "outputs" / "collected.json").read_text())
    # object values: a JSON list of the parsed objects, in item order
    assert json.loads(collected["results"]) == [
        {"id": i, "double": 2 * i, "tags": ["a", "b"]} for i in range(3)
    ]
    # "0", "1", "2" parse as JSON numbers, not objects or arrays: kept as strings (Argo's rule)
    assert collected["numbers"] == '["0","1","2"]'
    assert json.loads(collected["notes"]) == ["no note"] * 3  # valueFrom.default when the file is missing
    # each fan-out child wrote the same /tmp/outputs path into its own directory
    for i in range(3):
        out = next((tmp_path / "work").glob(f"work({i}:*"))
        assert json.loads((out / "outputs" / "result.json").read_text())["id"] == i
    assert "[cell(2:n2).first] first toy-n2!" in lines
    assert "second after first toy-n0!?" in (tmp_path / "work" / "cell(0:n0).second" / "log.txt").read_text()
    assert json.loads((tmp_path / "work" / "status.json").read_text())["phase"] == "Succeeded"


def test_parallelism_one_with_nested_fan_out_does_not_deadlock(tmp_path):
    outcome: list[RunResult] = []
    thread = threading.Thread(
        target=lambda: outcome.append(run("toy.yaml", tmp_path, parallelism=1)), daemon=True
    )
    thread.start()
    thread.join(timeout=45)
    assert not thread.is_alive(), "the run deadlocked"
    assert outcome[0].phase == "Succeeded"


def test_retry_on_exit_75_succeeds_on_the_second_try(tmp_path):
    result = run("retry.yaml", tmp_path, params={"marker": str(tmp_path / "marker")})
    assert (result.phase, result.exit_code) == ("Succeeded", 0)
    assert result.nodes["flaky"].attempts == 2
    log = (tmp_path / "work" / "flaky" / "log.txt").read_text()
    assert "transient failure, exit 75" in log and "second try works" in log


def test_exit_2_is_not_retried_and_the_workflow_exits_2(tmp_path):
    marker = tmp_path / "ran"
    result = run("exit.yaml", tmp_path, params={"marker": str(marker)})
    assert (result.phase, result.exit_code) == ("Failed", 2)
    assert (result.nodes["fail"].attempts, result.nodes["fail"].exit_code) == (1, 2)
    # dag.go: a failure stops nothing. The bare dependent (fail.Succeeded || .Skipped || .Daemoned) is
    # omitted, the .Failed handler runs, and the DAG fails: its target `after` inherits the failed branch.
    assert result.nodes["after"].phase == "Omitted"
    assert result.nodes["on-failure"].phase == "Succeeded"
    assert marker.read_text() == "ran\nran\n"


def test_other_failures_exit_1(tmp_path):
    result = run("exit.yaml", tmp_path, params={"code": "3", "marker": str(tmp_path / "ran")})
    assert (result.phase, result.exit_code) == ("Failed", 1)


def test_a_failed_child_does_not_stop_its_fan_out(tmp_path):
    """dag.go: failFast (the default) only picks the DAG's phase; Argo still starts every child (upstream
    #10312). The group is Failed (its last failed child's phase), and `after` is omitted."""
    marker = tmp_path / "ran"
    result = run("failfast.yaml", tmp_path, params={"marker": str(marker)}, parallelism=1)
    assert (result.phase, result.exit_code) == ("Failed", 1)
    assert [child(result, "fan", i).phase for i in range(3)] == ["Failed", "Succeeded", "Succeeded"]
    assert result.nodes["fan"].phase == "Failed"
    assert result.nodes["after"].phase == "Omitted"
    assert marker.read_text() == "ran\n" * 3


def test_depends_failed_handler_runs_without_fail_fast(tmp_path):
    doc = yaml.safe_load((FIXTURES / "exit.yaml").read_text())
    doc["spec"]["templates"][0]["dag"]["failFast"] = False
    path = tmp_path / "exit-no-failfast.yaml"
    path.write_text(yaml.safe_dump(doc))
    marker = tmp_path / "ran"
    result = run(path, tmp_path, params={"code": "3", "marker": str(marker)})
    assert result.nodes["on-failure"].phase == "Succeeded"
    assert result.nodes["after"].phase == "Omitted"
    assert result.phase == "Failed"  # `after`, a leaf, inherits the failed branch (Argo's assessDAGPhase)
    assert marker.read_text() == "ran\nran\n"


def test_env_values_and_secrets_from_the_host(tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_SECRET", "s3cr3t")
    monkeypatch.setenv("TOY_CONFIG", "from-host")
    monkeypatch.delenv("TOY_ABSENT_SECRET", raising=False)
    result = run("env.yaml", tmp_path)
    assert result.phase == "Succeeded"
    env = json.loads(result.nodes["env-check"].outputs["env"])
    assert env == {
        "TOY_SECRET": "s3cr3t",
        "TOY_ABSENT_SECRET": None,
        "TOY_CONFIG": "from-host",
        "TOY_PLAIN": "plain",
        "TOY_OUT": str(tmp_path / "work" / "env-check" / "outputs"),
    }


def test_cron_workflow_runs_its_workflow_spec_once(tmp_path):
    result = run("cron.yaml", tmp_path)
    assert result.phase == "Succeeded"
    assert result.workflow.startswith("toy-nightly-")
    assert result.nodes["cell(0:n0).second"].phase == "Succeeded"
    assert "cell(1:n1)" not in result.nodes  # the CronWorkflow's count=1 overrides the template's default 2


def test_parameters_override_defaults(tmp_path):
    result = run("toy.yaml", tmp_path, params={"count": "1", "label": "p"})
    assert result.nodes["cell(0:n0).first"].outputs["said"] == "first p-n0!"
    assert not any(name.startswith("work(1:") for name in result.nodes)


def test_unknown_parameter_is_refused(tmp_path):
    with pytest.raises(BadInput, match=r"unknown parameter 'cuont'.*declared: count, label; Argo would accept it"):
        run("toy.yaml", tmp_path, params={"cuont": "2"})


def test_missing_parameter_value_is_refused(tmp_path):
    with pytest.raises(BadInput, match=r"'marker' has no value; pass -p marker="):
        run("retry.yaml", tmp_path)


def test_unsupported_feature_is_refused_by_name_before_running(tmp_path):
    with pytest.raises(
        BadInput, match=r"unsupported Argo feature 'steps' in template 'main'.*supports: name, inputs"
    ):
        run("unsupported-steps.yaml", tmp_path)
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    ("where", "key", "value"),
    [
        ("task", "when", "{{workflow.parameters.count}} > 1"),
        ("task", "hooks", {"exit": {"template": "main"}}),
        ("spec", "hooks", {"exit": {"template": "main"}}),
        ("template", "memoize", {"key": "x", "maxAge": "1h", "cache": {"configMap": {"name": "c"}}}),
    ],
)
def test_other_unsupported_features(tmp_path, where, key, value):
    doc = yaml.safe_load((FIXTURES / "toy.yaml").read_text())
    target = {
        "spec": doc["spec"],
        "template": doc["spec"]["templates"][0],
        "task": doc["spec"]["templates"][0]["dag"]["tasks"][1],
    }[where]
    target[key] = value
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BadInput, match=f"unsupported Argo feature '{key}'"):
        run(path, tmp_path)


def test_invalid_workflow_is_refused_before_running(tmp_path):
    doc = yaml.safe_load((FIXTURES / "toy.yaml").read_text())
    doc["spec"]["entrypointt"] = doc["spec"].pop("entrypoint")
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BadInput, match="unknown field 'entrypointt'"):
        run(path, tmp_path)
