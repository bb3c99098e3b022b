"""The validator's Argo rules, each case taken from Argo's (or robfig/cron's) own code, tests or docs.

Upstream sources (argoproj/argo-workflows v3.6.19 to v4.1.2, robfig/cron v3.0.1) are named in each case.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import errors_after

from bertology.argo.cron import CronError, load_location, parse_standard
from bertology.argo.documents import load_documents
from bertology.argo.validate import validate_file

FIXTURES = Path(__file__).parent / "fixtures" / "argo"
TEMPLATES = FIXTURES / "templates"


def template(doc: dict, name: str) -> dict:
    return next(t for t in doc["spec"]["templates"] if t["name"] == name)


def tasks(doc: dict) -> dict[str, dict]:
    return {t["name"]: t for t in template(doc, "main")["dag"]["tasks"]}


def only(errors: list[str], expected: str) -> None:
    """Exactly one error, on one line, containing `expected`."""
    assert len(errors) == 1 and expected in errors[0] and "\n" not in errors[0], errors


# --- cron: robfig/cron v3.0.1 parser_test.go and Argo's ParseStandard ------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        "5 * * * *",  # parser_test.go TestStandardSpecSchedule / TestParseSchedule (standardParser)
        "CRON_TZ=UTC  5 * * * *",  # parser_test.go TestParseSchedule
        "@every 5m",  # parser_test.go TestStandardSpecSchedule
        "* * * * ?",  # parser.go ParseStandard doc comment: "Standard crontab specs, e.g. "* * * * ?""
        "@midnight",  # parser.go ParseStandard doc comment
        "@every 1h30m",  # parser.go ParseStandard doc comment
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@hourly",  # parser.go parseDescriptor cases
        "0 0 1-31/2 JAN-dec SUN,sat",  # spec.go bounds: names are matched lower-cased
        "*/15 0-23 ? * mon-fri",
    ],
)
def test_cron_schedules_robfig_accepts(spec):
    parse_standard(spec)


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("* * * *", "expected exactly 5 fields"),  # parser_test.go TestStandardSpecSchedule
        ("5 j * * *", "failed to parse int from"),  # parser_test.go TestStandardSpecSchedule
        ("0 5 * * * *", "expected exactly 5 fields, found 6"),  # six fields: seconds are not standard
        ("@every Xm", "failed to parse duration"),  # parser_test.go TestParseScheduleErrors
        ("@unrecognized", "unrecognized descriptor"),  # parser_test.go TestParseScheduleErrors
        ("", "empty spec string"),  # parser_test.go TestParseScheduleErrors
        ("5--5 * * * *", "too many hyphens"),  # parser_test.go TestRange
        ("*//2 * * * *", "too many slashes"),  # parser_test.go TestRange
        ("*/-12 * * * *", "negative number"),  # parser_test.go TestRange
        ("*/0 * * * *", "should be a positive number"),  # parser_test.go TestRange
        ("60 * * * *", "end of range (60) above maximum (59)"),  # spec.go minutes 0-59
        ("0 24 * * *", "above maximum (23)"),  # spec.go hours 0-23
        ("0 0 0 * *", "beginning of range (0) below minimum (1)"),  # spec.go dom 1-31
        ("0 0 * 13 *", "above maximum (12)"),  # spec.go months 1-12
        ("0 0 * * 7", "above maximum (6)"),  # spec.go dow 0-6
        ("0 0 * * 5-3", "beginning of range (5) beyond end of range (3)"),  # parser_test.go TestRange
        ("@Daily", "unrecognized descriptor"),  # parseDescriptor matches exactly
        ("TZ=Not/A_Zone 0 0 * * *", "provided bad location Not/A_Zone"),  # parser.go Parse
    ],
)
def test_cron_schedules_robfig_rejects(spec, error):
    with pytest.raises(CronError, match=None) as info:
        parse_standard(spec)
    assert error in str(info.value)


def test_cron_workflow_schedules_and_timezone(tmp_path):
    # validate.go CronWorkflow: "cron schedule %s is malformed: %s"
    errors = errors_after(
        tmp_path, lambda d: d["spec"].__setitem__("schedules", ["0 3 * * * *"]), "cron.yaml"
    )
    only(
        errors, "spec.schedules: cron schedule '0 3 * * * *' is malformed: expected exactly 5 fields, found 6"
    )
    assert "@every <duration>" in errors[0]  # says what is allowed
    errors = errors_after(
        tmp_path, lambda d: d["spec"].__setitem__("schedules", ["@weekly", "0 3 * * 1-5"]), "cron.yaml"
    )
    assert errors == []
    # validate_test.go TestCronWorkflowInvalidTimezoneRejected: `invalid timezone "Not/A_Real_Timezone"`
    errors = errors_after(
        tmp_path, lambda d: d["spec"].__setitem__("timezone", "Not/A_Real_Timezone"), "cron.yaml"
    )
    only(errors, "spec.timezone: invalid timezone 'Not/A_Real_Timezone'")
    # Go time.LoadLocation (time/zoneinfo.go): "UTC" and "Local" need no zone database
    load_location("UTC")
    load_location("Local")
    with pytest.raises(CronError):
        load_location("../etc/passwd")


# --- names: validate.go maxCharsInObjectName, maxCharsInCronWorkflowName, validateWorkflowFieldNames -----


def test_object_name_lengths(tmp_path):
    # validate_test.go TestMaxLengthName: 70 characters is refused for a Workflow / WorkflowTemplate
    # ("must not be more than 63 characters long"), 60 for a CronWorkflow ("more than 52").
    def named(n):
        return lambda d: d["metadata"].update({"name": "a" * n})

    errors = errors_after(tmp_path, lambda d: (d["metadata"].pop("generateName"), named(70)(d)))
    only(errors, f"metadata.name: '{'a' * 70}' is 70 characters; a Workflow name may have at most 63")
    assert errors_after(tmp_path, lambda d: (d["metadata"].pop("generateName"), named(63)(d))) == []
    only(errors_after(tmp_path, named(70), "toy-steps.yaml"), "a WorkflowTemplate name may have at most 63")
    errors = errors_after(tmp_path, named(60), "cron.yaml")
    only(errors, "'" + "a" * 60 + "' is 60 characters; a CronWorkflow name may have at most 52")
    assert errors_after(tmp_path, named(52), "cron.yaml") == []


def test_object_names_are_dns_subdomains(tmp_path):
    # Kubernetes apimachinery IsDNS1123Subdomain (custom resources: NameIsDNSSubdomain)
    errors = errors_after(tmp_path, lambda d: d["metadata"].update({"name": "Toy_Nightly"}), "cron.yaml")
    only(errors, "metadata.name: 'Toy_Nightly' is not a DNS-1123 subdomain")
    errors = errors_after(tmp_path, lambda d: d["metadata"].update({"generateName": "Toy-"}))
    only(errors, "metadata.generateName: 'Toy-' is not a DNS-1123 subdomain prefix")
    assert errors_after(tmp_path, lambda d: d["metadata"].update({"generateName": "toy.v2-"})) == []
    errors = errors_after(tmp_path, lambda d: d["metadata"].pop("generateName"))
    only(errors, "metadata: name or generateName is required")


@pytest.mark.parametrize(
    "name",
    [
        "whalesay_d",  # validate_test.go TestInvalidTemplateName ("whalesay_d")
        "-leading-dash",  # workflowFieldNameFmt "[a-zA-Z0-9][-a-zA-Z0-9]*"
        "x" * 129,  # workflowFieldMaxLength = 128
    ],
)
def test_template_names(tmp_path, name):
    def change(doc):
        doc["spec"]["templates"].append({"name": name, "suspend": {}})

    errors = errors_after(tmp_path, change, "toy-steps.yaml")
    only(
        errors, f"spec.templates[{name}]: template name '{name}' is invalid ({len(name)} characters; allowed:"
    )
    assert "at most 128 characters" in errors[0]


def test_template_name_limits_accept(tmp_path):
    # workflowFieldNameFmt allows upper case and a leading digit ("e.g. My-name1-2, 123-NAME"), 128 chars
    for name in ("My-name1-2", "123-NAME", "x" * 128):
        doc = load_documents(TEMPLATES / "toy-steps.yaml")[0]
        doc["spec"]["templates"].append({"name": name, "suspend": {}})
        path = tmp_path / "toy-steps.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert validate_file(path, tmp_path) == []


def test_task_names(tmp_path):
    def rename(old, new):
        def change(doc):
            task = tasks(doc)[old]
            task["name"] = new
            for t in tasks(doc).values():
                if "depends" in t:
                    t["depends"] = t["depends"].replace(old, new)

        return change

    errors = errors_after(tmp_path, rename("cell", "cell_b"))
    assert any("dag.tasks[cell_b]: task name 'cell_b' is invalid" in e for e in errors), errors
    # validate_dag_test.go TestDAGDependenciesDigit: "name cannot begin with a digit when using either
    # 'depends' or 'dependencies'"; TestDAGWithDigitNameNoDepends: allowed without them.
    errors = errors_after(tmp_path, rename("cell", "5cell"))
    assert any("task name '5cell' cannot begin with a digit when using either 'depends'" in e for e in errors)


def test_parameter_names(tmp_path):
    # validate_test.go TestInvalidArgParamName: a workflow argument named "param#1" is an error;
    # paramOrArtifactNameRegex `^[-a-zA-Z0-9_]+$` allows '_' (unlike template names).
    errors = errors_after(
        tmp_path, lambda d: d["spec"]["arguments"]["parameters"].append({"name": "param#1", "value": "x"})
    )
    only(
        errors,
        "spec.arguments.parameters: parameter name 'param#1' is invalid (allowed: letters, digits, '_' and '-')",
    )
    ok = errors_after(
        tmp_path, lambda d: d["spec"]["arguments"]["parameters"].append({"name": "my_param_1", "value": "x"})
    )
    assert ok == []

    def bad_input(doc):  # validate_test.go TestInvalidInputParamName (validateInputs)
        template(doc, "echo")["inputs"]["parameters"].append({"name": "bad name", "default": "x"})

    errors = errors_after(tmp_path, bad_input, "toy-steps.yaml")
    assert any("templates[echo].inputs.parameters: parameter name 'bad name' is invalid" in e for e in errors)


# --- enum: validate.go validateArgumentsValues; validate_test.go TestWorkflowTemplateWith*Enum* -----------


def set_param(name, **fields):
    def change(doc):
        param = next(p for p in doc["spec"]["arguments"]["parameters"] if p["name"] == name)
        param.update(fields)
        for key in [k for k, v in fields.items() if v is None]:
            del param[key]

    return change


def test_workflow_argument_enum(tmp_path):
    # TestWorkflowTemplateWithEnumValue: a value in the enum is fine
    assert errors_after(tmp_path, set_param("label", value="two", enum=["one", "two", "three"])) == []
    # TestWorkflowTemplateWithArgumentValueNotFromEnumList: "value should be present in ... enum list"
    errors = errors_after(tmp_path, set_param("label", value="one", enum=["two", "three", "four"]))
    only(
        errors,
        "spec.arguments.parameters[label].value: 'one' is not in the enum list ('two', 'three', 'four')",
    )
    # TestWorkflowTemplateWithEmptyEnumList: "enum should contain at least one value"
    errors = errors_after(tmp_path, set_param("label", enum=[]))
    only(errors, "spec.arguments.parameters[label].enum: should contain at least one value")
    # TestWorkflowTemplateWithEnumValueWithoutValue: no error under lint (a value comes at submission)
    assert errors_after(tmp_path, set_param("label", value=None, enum=["one", "two"])) == []


def test_cron_workflow_argument_enum(tmp_path):
    def change(doc):
        doc["spec"]["workflowSpec"]["arguments"]["parameters"][0].update({"value": "7", "enum": ["1", "2"]})

    errors = errors_after(tmp_path, change, "cron.yaml")
    only(
        errors, "spec.workflowSpec.arguments.parameters[count].value: '7' is not in the enum list ('1', '2')"
    )


def test_task_argument_enum_and_value_from(tmp_path):
    # validate.go validateDAG calls validateArguments(..., task.Arguments, false): same enum rule
    def change(doc):
        tasks(doc)["plan"]["arguments"]["parameters"][0]["enum"] = ["1", "2"]

    errors = errors_after(tmp_path, change)
    only(
        errors,
        "dag.tasks[plan].arguments.parameters[count].value: '{{workflow.parameters.count}}' is not in the enum",
    )
    # validateArgumentsValues: "valueFrom only allows: default, configMapKeyRef and supplied"
    errors = errors_after(tmp_path, set_param("label", value=None, valueFrom={"path": "/tmp/x"}))
    only(
        errors,
        "spec.arguments.parameters[label].valueFrom: has path; arguments allow only: default, configMapKeyRef and supplied",
    )
    ok = set_param(
        "label", value=None, valueFrom={"configMapKeyRef": {"name": "c", "key": "k"}, "default": "x"}
    )
    assert errors_after(tmp_path, ok) == []


# --- parallelism / activeDeadlineSeconds: validate.go validateLeaf, validateNonLeaf ---------------------


def test_parallelism_on_a_leaf_template_is_refused(tmp_path):
    # validate_test.go TestLeafWithParallelism: "templates.%s.parallelism is only valid for steps and dag
    # templates"; Argo rejects the workflow, so this is an error, not a warning.
    errors = errors_after(
        tmp_path, lambda d: template(d, "echo").__setitem__("parallelism", 2), "toy-steps.yaml"
    )
    only(
        errors,
        "spec.templates[echo].parallelism: is only valid for steps and dag templates, not a container template",
    )
    assert errors_after(tmp_path, lambda d: template(d, "main").__setitem__("parallelism", 2)) == []


def test_active_deadline_on_a_dag_is_refused(tmp_path):
    # validate.go validateNonLeaf: "templates.%s.activeDeadlineSeconds is only valid for leaf templates"
    errors = errors_after(tmp_path, lambda d: template(d, "main").__setitem__("activeDeadlineSeconds", 60))
    only(
        errors,
        "spec.templates[main].activeDeadlineSeconds: is only valid for leaf templates, not a dag template",
    )


# --- fields from later Argo versions: api/jsonschema/schema.json v3.6.19 vs v4.0.0 ------------------------


def test_backoff_cap_needs_argo_4(tmp_path):
    # pkg/apis/workflow/v1alpha1/workflow_types.go: Backoff.Cap exists from v4.0.0, not in v3.6.19
    def change(doc):
        template(doc, "work")["retryStrategy"]["backoff"] = {"duration": "10s", "factor": 2, "cap": "5m"}

    errors = errors_after(tmp_path, change, "toy-steps.yaml")
    only(errors, "spec.templates[work].retryStrategy.backoff: field 'cap' needs Argo v4.0.0 or later")
    assert "v3.6.19 to v4.1.2" in errors[0]


def test_template_annotations_and_mutex_database_need_argo_4(tmp_path):
    # schema.json: Template.annotations and Mutex.database appear in v4.0.0
    def change(doc):
        template(doc, "echo")["metadata"] = {"annotations": {"a": "b"}}  # pod metadata: fine in v3.6
        template(doc, "echo")["annotations"] = {"a": "b"}
        template(doc, "echo")["synchronization"] = {"mutexes": [{"name": "m", "database": True}]}

    errors = errors_after(tmp_path, change, "toy-steps.yaml")
    assert len(errors) == 2, errors
    assert any("spec.templates[echo]: field 'annotations' needs Argo v4.0.0" in e for e in errors)
    assert any("synchronization.mutexes[m]: field 'database' needs Argo v4.0.0" in e for e in errors)


def test_fields_of_argo_4_1_and_removed_fields_get_hints(tmp_path):
    # schema.json: Template.pendingTimeout appears in v4.1.0; WorkflowSpec.podPriority is gone in v4.0.0
    errors = errors_after(
        tmp_path, lambda d: template(d, "echo").__setitem__("pendingTimeout", "5m"), "toy-steps.yaml"
    )
    only(errors, "unknown field 'pendingTimeout' (not in Argo's schema; only in Argo v4.1.0 and later")
    errors = errors_after(tmp_path, lambda d: d["spec"].__setitem__("podPriority", 1))
    only(errors, "unknown field 'podPriority' (not in Argo's schema; removed in Argo v4.0.0")


def test_timeout_is_a_duration_on_a_leaf_template(tmp_path):
    # validate.go validateTemplate: `if !newTmpl.IsLeaf() { return fmt.Errorf("%s template doesn't support
    # timeout field", ...)`; `_, atoiErr := strconv.Atoi(newTmpl.Timeout); if atoiErr == nil { return
    # fmt.Errorf("%s has invalid duration format in timeout", ...)`
    errors = errors_after(tmp_path, lambda d: template(d, "main").__setitem__("timeout", "10m"))
    only(errors, "spec.templates[main].timeout: a dag template doesn't support the timeout field")
    errors = errors_after(tmp_path, lambda d: template(d, "echo").__setitem__("timeout", "600"), "toy-steps.yaml")
    only(errors, "spec.templates[echo].timeout: '600' has invalid duration format (a whole number")
    assert errors_after(tmp_path, lambda d: template(d, "echo").__setitem__("timeout", "10m"), "toy-steps.yaml") == []
