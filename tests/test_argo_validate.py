"""The strict validator catches what Argo would drop silently or reject late (tests/fixtures/argo/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import errors_after

from bertology.argo.documents import load_documents
from bertology.argo.validate import ValidationFailed, validate_file, validate_or_raise
from bertology.errors import BadInput

FIXTURES = Path(__file__).parent / "fixtures" / "argo"
TEMPLATES = FIXTURES / "templates"


def main_tasks(doc: dict) -> dict[str, dict]:
    return {t["name"]: t for t in doc["spec"]["templates"][0]["dag"]["tasks"]}


def steps_template(doc: dict, name: str) -> dict:
    return next(t for t in doc["spec"]["templates"] if t["name"] == name)


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.yaml")))
def test_fixtures_are_valid(fixture):
    assert validate_file(FIXTURES / fixture, TEMPLATES) == []


@pytest.mark.parametrize("fixture", sorted(p.name for p in TEMPLATES.glob("*.yaml")))
def test_template_library_is_valid(fixture):
    assert validate_file(TEMPLATES / fixture, TEMPLATES) == []


# --- schema ---------------------------------------------------------------------------------------------


def test_unknown_spec_key(tmp_path):
    errors = errors_after(tmp_path, lambda d: d["spec"].__setitem__("entrypointt", "main"))
    assert errors == [
        f"{tmp_path / 'toy.yaml'}: Workflow toy-: spec: unknown field 'entrypointt' (not in Argo's schema)"
    ]


def test_misspelled_container_field_in_a_template_library(tmp_path):
    def change(doc):
        steps_template(doc, "plan")["container"]["comand"] = steps_template(doc, "plan")["container"].pop(
            "command"
        )

    errors = errors_after(tmp_path, change, fixture="toy-steps.yaml")
    assert any("spec.templates[plan].container: unknown field 'comand'" in e for e in errors)


def test_wrong_type(tmp_path):
    errors = errors_after(tmp_path, lambda d: d["spec"].__setitem__("parallelism", "abc"))
    assert len(errors) == 1 and "spec.parallelism: Input should be a valid integer" in errors[0]


def test_quantities_must_be_quoted(tmp_path):
    errors = errors_after(
        tmp_path,
        lambda d: steps_template(d, "work")["container"]["resources"]["limits"].__setitem__(
            "nvidia.com/gpu", 1
        ),
        fixture="toy-steps.yaml",
    )
    assert any("resources.limits.nvidia.com/gpu: Input should be a valid string" in e for e in errors)


def test_renamed_keys_get_a_hint(tmp_path):
    def change(doc):
        steps_template(doc, "work")["synchronization"] = {
            "semaphore": {"configMapKeyRef": {"name": "s", "key": "gpu"}}
        }

    errors = errors_after(tmp_path, change, fixture="toy-steps.yaml")
    assert any("unknown field 'semaphore'" in e and "use 'semaphores: [...]'" in e for e in errors)


def test_api_version_and_kind(tmp_path):
    assert (
        "must be argoproj.io/v1alpha1"
        in errors_after(tmp_path, lambda d: d.__setitem__("apiVersion", "v1"))[0]
    )
    assert "'Pod' is not one of" in errors_after(tmp_path, lambda d: d.__setitem__("kind", "Pod"))[0]


def test_flag_takes_effect_even_if_hera_was_imported_first():
    code = (
        "import hera.workflows, sys\n"
        "from bertology.argo.schema import _strict_models\n"
        "m = _strict_models()['Workflow']\n"
        "try:\n"
        "    m.model_validate({'spec': {'templates': [{'name': 'a', 'container': {'imagee': 'x'}}]}})\n"
        "except Exception:\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=60).returncode == 0


# --- references -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d["spec"].__setitem__("entrypoint", "mian"), "spec.entrypoint: template 'mian' not found"),
        (
            lambda d: main_tasks(d)["collect"]["templateRef"].__setitem__("template", "colect"),
            "tasks[collect].templateRef: WorkflowTemplate 'toy-steps' has no template 'colect'",
        ),
        (
            lambda d: main_tasks(d)["collect"]["templateRef"].__setitem__("name", "toy-stepz"),
            "templateRef names WorkflowTemplate 'toy-stepz', not found (known: toy-pipeline, toy-steps)",
        ),
        (
            lambda d: main_tasks(d)["collect"].__setitem__("template", "main"),
            "tasks[collect]: needs exactly one of template, templateRef (has template, templateRef)",
        ),
        (
            lambda d: main_tasks(d)["collect"].__setitem__("depends", "work && cel"),
            "tasks[collect].depends: unknown task 'cel' (tasks in this DAG: plan, work, cell, collect)",
        ),
        (
            lambda d: main_tasks(d)["collect"].__setitem__("depends", "work.Completed"),
            "unknown task result '.Completed' in depends",
        ),
        (
            lambda d: main_tasks(d)["plan"].__setitem__("depends", "collect"),
            "dependency cycle: plan -> collect -> work -> plan",
        ),
        (
            lambda d: main_tasks(d)["plan"]["arguments"]["parameters"][0].__setitem__(
                "value", "{{workflow.parameters.cuont}}"
            ),
            "workflow parameter 'cuont' is not declared in spec.arguments.parameters (declared: count, label",
        ),
        (
            lambda d: main_tasks(d)["plan"]["arguments"]["parameters"][0].__setitem__(
                "value", "{{inputs.parameters.n}}"
            ),
            "template 'main' declares no input 'n' (inputs: none)",
        ),
        (
            lambda d: main_tasks(d)["collect"]["arguments"]["parameters"][0].__setitem__(
                "value", "{{tasks.work.outputs.parameters.reslt}}"
            ),
            "template 'work' of task 'work' declares no output parameter 'reslt' (outputs: result, number",
        ),
        (
            lambda d: main_tasks(d)["collect"].__setitem__("depends", "cell"),
            "unresolved '{{tasks.work.outputs.parameters.result}}': task 'work' is not a dependency",
        ),
        (
            lambda d: main_tasks(d)["collect"]["arguments"]["parameters"][0].__setitem__(
                "value", "{{tasks.wrk.outputs.parameters.result}}"
            ),
            "no task 'wrk' in this DAG",
        ),
        (
            lambda d: main_tasks(d)["collect"]["arguments"]["parameters"][0].__setitem__("value", "{{item}}"),
            "'item' is only defined in a task with withParam or withItems ('collect' has neither)",
        ),
        (
            lambda d: main_tasks(d)["collect"]["arguments"]["parameters"][0].__setitem__(
                "value", "{{steps.x.outputs}}"
            ),
            "not a supported variable",
        ),
        (
            lambda d: main_tasks(d)["collect"]["arguments"]["parameters"].append(
                {"name": "extra", "value": "1"}
            ),
            "parameter 'extra' is not an input of template 'collect' (inputs: results, numbers, notes)",
        ),
        (
            lambda d: main_tasks(d)["collect"]["arguments"]["parameters"].pop(),
            "missing parameter 'notes' required by template 'collect'",
        ),
    ],
)
def test_dangling_references(tmp_path, change, expected):
    errors = errors_after(tmp_path, change)
    assert any(expected in e for e in errors), errors


def test_template_inputs_must_be_declared(tmp_path):
    def change(doc):
        steps_template(doc, "echo")["container"]["args"][1] = "{{inputs.parameters.sufix}}"

    errors = errors_after(tmp_path, change, fixture="toy-steps.yaml")
    assert any(
        "spec.templates[echo].container: unresolved '{{inputs.parameters.sufix}}': template 'echo' "
        "declares no input 'sufix' (inputs: message, suffix)" in e
        for e in errors
    )


def test_library_templates_see_the_calling_workflows_parameters(tmp_path):
    steps = load_documents(TEMPLATES / "toy-steps.yaml")[0]
    steps_template(steps, "echo")["container"]["args"].append("{{workflow.parameters.mode}}")
    library = tmp_path / "templates"
    library.mkdir()
    (library / "toy-steps.yaml").write_text(yaml.safe_dump(steps))
    assert validate_file(library / "toy-steps.yaml", library) == []  # fine alone: callers declare it
    errors = validate_file(FIXTURES / "toy.yaml", library)
    assert any(
        "(via WorkflowTemplate toy-steps) template 'echo': uses '{{workflow.parameters.mode}}'" in e
        for e in errors
    ), errors


def test_cron_workflow(tmp_path):
    assert validate_file(FIXTURES / "cron.yaml", TEMPLATES) == []
    errors = errors_after(
        tmp_path,
        lambda d: d["spec"].__setitem__("schedule", d["spec"].pop("schedules")[0]),
        fixture="cron.yaml",
    )
    assert any("unknown field 'schedule'" in e and "schedules" in e for e in errors), errors
    errors = errors_after(
        tmp_path,
        lambda d: d["spec"]["workflowSpec"]["workflowTemplateRef"].__setitem__("name", "x"),
        fixture="cron.yaml",
    )
    assert any("spec.workflowSpec.workflowTemplateRef: WorkflowTemplate 'x' not found" in e for e in errors)
    errors = errors_after(
        tmp_path, lambda d: d["spec"].__setitem__("schedules", ["every night"]), fixture="cron.yaml"
    )
    assert any(
        "cron schedule 'every night' is malformed: expected exactly 5 fields, found 2" in e for e in errors
    )


def test_validate_or_raise_is_one_line_bad_input(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("kind: Workflow\nspec: [unclosed\n")
    with pytest.raises(BadInput, match="invalid YAML") as info:
        validate_or_raise(path, TEMPLATES)
    assert "\n" not in str(info.value)
    doc = load_documents(FIXTURES / "toy.yaml")[0]
    doc["spec"]["parallelism"] = "abc"
    doc["spec"]["entrypointt"] = "main"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValidationFailed, match=r"\(and 1 more\)$") as info:
        validate_or_raise(path, TEMPLATES)
    assert len(info.value.errors) == 2 and info.value.exit_code == 2
