"""A catalogue of the bad inputs real users give, one row each: study parameters, the workflow YAML, store
URIs, checkpoints, data files and the command line.

Every row must end with the contract of docs/getting-started.md, "Exit codes and bad input": exit 2, exactly
one line on stderr naming the bad value and what is allowed, before any training step, and nothing written
to the store (nor a stray ./.bertology). Rows run through the code path a user reaches:
- `plan` rows call the plan step's entry in-process (harness.main, what the plan pod runs), with the
  parameters the Workflow passes it: the study YAML's own values (marked `default:`) and the user's
  (unmarked, as `argo submit -p` and `bertology run -p` pass them alike);
- `cli` rows call `bertology` in-process (they fail before any step starts);
- `run` rows start `bertology run` itself (subprocesses, in parallel threads): the observed bugs end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bertology import cli
from bertology.cli.catalogue import study_entry
from bertology.steps import harness, plan

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "workflows" / "reversed-layers.yaml"
TEMPLATES = ROOT / "workflows" / "templates"
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


# -- the catalogue: (id, how, arguments, what the one line must say) ------------------------------------------
REVERSE_99 = '[{"name": "r", "interventions": [{"name": "reinit", "params": {"scope": "layers", "layers": [99]}}]}]'
UNKNOWN_STEP = '[{"name": "r", "interventions": [{"name": "reinitialise"}]}]'
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
    ("model-hub-id-malformed", {"models": '["bert--base"]'}, ["bert--base", "not a valid hub id", "allowed"]),
    ("models-not-a-list", {"models": "bert-base-uncased"}, ["models", "'bert-base-uncased'", "JSON list"]),
    ("seeds-repeated", {"seeds": "[1, 1]"}, ["seeds", "unique", "[1, 1]"]),
    ("seed-negative", {"seeds": "[-1]"}, ["seed", ">= 0", "-1"]),
    ("tasks-typo", {"tasks": '["sst3"]'}, ["'sst3'", "known:", "sst2"]),
    ("tasks-empty", {"tasks": "[]"}, ["tasks", "empty", "at least one"]),
    ("regime-typo", {"regime": "frozen"}, ["'frozen'", "known:", "freeze"]),
    ("sizes-zero", {"sizes": "[0]"}, ["sizes", "0", "(0, 1]"]),
    ("source-typo", {"source": "glu"}, ["'glu'", "allowed:", "glue-dir:PATH"]),
    ("reinit-layer-99", {"variants": REVERSE_99}, ["layer 99", "BERT-large", "24 layers"]),
    ("intervention-typo", {"variants": UNKNOWN_STEP}, ["reinitialise", "reinit"]),
    ("variants-not-json", {"variants": "[{name: r}"}, ["variants", "JSON list", "[{name: r}"]),
    ("task-settings-other-task", {"task_settings": '{"squad2": {"lr": 1e-4}}'}, ["'squad2'", "study's tasks", "cola"]),
    ("bundle-zero", {"bundle": "0"}, ["bundle", ">= 1", "got 0"]),
    ("intervention-seed-negative", {"intervention_seed": "-1"}, ["intervention_seed", "'-1'", "integer >= 0"]),
    ("selection-typo", {"selection": "first"}, ["selection", "best, last", "'first'"]),
    ("parameter-unknown", {"learning_rate": "1e-3"}, ["'learning_rate'", "known:", "lr"]),
    ("preset-typo", {"preset": "tinyy"}, ["'tinyy'", "known:", "tiny"]),
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
    ("flag-typo", ["run", "{wf}", "--paralelism", "2"], ["--paralelism", "unrecognized"]),
    ("parallelism-zero", ["run", "{wf}", "--parallelism", "0"], ["parallelism", "at least 1", "0"]),
    ("semaphore-malformed", ["run", "{wf}", "--semaphore", "gpu"], ["'gpu'", "CONFIGMAP/KEY=N"]),
    ("command-typo", ["rnu", "{wf}"], ["'rnu'", "choose from"]),
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
    return text.replace("{tmp}", str(tmp)).replace("{wf}", str(WORKFLOW)).replace("{templates}", str(TEMPLATES))


def _one_line(err: str, must: list[str], tmp: Path) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected exactly one line on stderr, got {lines}"
    for part in must:
        assert _fill(part, tmp) in lines[0], f"{part!r} not in {lines[0]!r}"


def _untouched(tmp: Path, store: Path) -> None:
    """Nothing written to the store, nor a default store in the working directory: nothing ran."""
    assert not store.exists() or not any(store.rglob("*")), sorted(store.rglob("*"))
    assert not (tmp / ".bertology").exists()


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BERTOLOGY_STORE", raising=False)
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
    if argv[0] == "run" and "--store" not in argv and not any(a.startswith("store=") for a in argv):
        argv += ["--store", str(store)]
    assert cli.main(argv) == 2
    _one_line(capsys.readouterr().err, must, tmp)
    _untouched(tmp, store)
    assert not (tmp / "o").exists()  # a refused checkpoint leaves no --out behind
    assert (tmp / "a-file").read_text() == "not a directory"


def _bertology(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertology.cli", *args], check=False, capture_output=True,
                          text=True, env=env, cwd=env["HOME"], timeout=300)


RUNS = [  # two observed bugs end to end through `bertology run` (the rest are rows above, in-process)
    ("preset-hid-lr", ["-p", "lr=-1"], ["plan: error:", "lr", "(0.0, 1.0]"]),
    ("max-length-crashed-evaluate", ["-p", "max_length=100000"], ["plan: error:", "100000", "8..128"]),
]


def test_bertology_run_refuses_in_plan_with_one_line(tmp, subprocess_env):
    """`bertology run` itself: the plan pod's exit 2 becomes the run's, and its one line is the only one on
    stderr (the progress display does not echo a bad input's failure a second time)."""
    env = {**subprocess_env, "HOME": str(tmp), "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    jobs = [["run", str(WORKFLOW), "-p", "preset=tiny", *args, "--store", str(tmp / name)] for name, args, _ in RUNS]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: _bertology(job, env), jobs))
    for (name, _, must), result in zip(RUNS, results, strict=True):
        assert result.returncode == 2, (name, result.stdout[-2000:], result.stderr[-2000:])
        _one_line(result.stderr, must, tmp)
        _untouched(tmp, tmp / name)


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
