"""Whole studies through the local runner, as a user runs them: real processes, the real YAML.

`bertology run workflows/<study>.yaml -p preset=tiny` against a local store and against a real S3
server on loopback; a rerun computes nothing; bad input exits 2 with one line and writes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import boto3
import polars as pl
import pytest
import yaml

from bertology.results import SCHEMA_VERSION, scan
from bertology.results.paper_comparison import paper_numbers
from bertology.results.summary import study_result
from bertology.spec import Cell
from bertology.store import open_store

REPO = Path(__file__).resolve().parent.parent

# The study Workflows; the nightly CronWorkflow has its own end-to-end test (test_regression.py).
STUDIES = sorted(p for p in (REPO / "workflows").glob("*.yaml") if yaml.safe_load(p.read_text())["kind"] == "Workflow")


def bertology(*args, env, timeout=900):
    if args[:1] == ("run",):  # -v: these tests read the steps' own lines (by default, only the node logs have them)
        args = ("run", "-v", *args[1:])
    return subprocess.run([sys.executable, "-m", "bertology.cli", *args], check=False, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _table(store, table, study):
    return scan(str(store), table, study=study).collect()


# What each study must show beyond "every planned run has its result" (tiny preset, see bertology.study).
STUDY_CHECKS = {
    "layer-removal": lambda store, plan: _layer_removal_profile(store),
    # tiny scales the sizes 100% and 10% onto its own 128 examples
    "partial-reinit": lambda store, plan: set(_table(store, "runs", "partial-reinit")["count"].to_list())
    == {128, 13} and {v.get("levels", {}).get("k") for v in plan["spec"]["variants"]} == {None, 1, 2},
    "weight-similarity": lambda store, plan: _table(store, "weight_distance", "weight-similarity")
    .group_by("count").agg(pl.col("l2").sum()).height == 2,
    "sequential-finetune": lambda store, plan: set(_table(store, "runs", "sequential-finetune")["intermediate"]
                                                   .to_list()) == {None, "cola", "mrpc"},
    "head-reinit": lambda store, plan: [v.get("levels") for v in plan["spec"]["variants"]]
    == [None, {"layer": 0, "head": 0}, {"layer": 0, "head": 1}],
    "crosslingual-mlm": lambda store, plan: (
        set(_table(store, "activation_distance", "crosslingual-mlm")["reference"]) == {"tiny:bert"}
        and set(_table(store, "runs", "crosslingual-mlm").filter(pl.col("primary"))["metric"]) == {"perplexity"}
        # the native model (regime none) is evaluated once, untrained; the others train past step 0
        and set(_table(store, "curves", "crosslingual-mlm").filter(pl.col("variant") == "native")["step"]) == {0}
        and _table(store, "curves", "crosslingual-mlm").filter(pl.col("variant") == "gradual")["step"].max() > 0),
}


def _pods_get_only_plain_tokens_from_items(stdout: str) -> None:
    """Every value a pod got from a fan-out item is a plain token (no JSON, nothing Argo escapes), and so
    is every --plan/--ids argument: what Argo substitutes is then exactly what the step reads."""
    from bertology.steps.planned import TOKEN

    workdir = Path(stdout.split("step logs in ", 1)[1].split(")", 1)[0])
    pods = json.loads((workdir / "status.json").read_text())["pods"]
    fanned = [pod for pod in pods if pod["items"]]
    assert fanned, "a study fans out"
    for pod in pods:
        for name, value in pod["items"].items():
            assert TOKEN.fullmatch(value), (pod["node"], name, value)
        for flag, value in zip(pod["argv"], pod["argv"][1:]):
            if flag in ("--plan", "--ids"):
                assert TOKEN.fullmatch(value), (pod["node"], flag, value)


def _report_renders_in_a_browser(browser, report: Path) -> None:
    """In headless Chromium (tests/conftest.py's `browser`; None with BERTOLOGY_NO_BROWSER=1): the page
    loads with no console error and every <svg> of the file is laid out at a non-zero size. docs/reports.md: "one
    self-contained page (tables, plots as inline SVG, no scripts, nothing fetched)"."""
    if browser is None:
        return
    page = browser.open(report)
    assert page.problems == [], page.problems
    assert page.requests == []  # nothing fetched
    assert len(page.svgs) == report.read_text().count("<svg")  # the browser parsed every plot


def _prints_its_result(store: Path, study: str, study_id: str, stdout: str) -> None:
    """`bertology run` ends with the study's result (bertology.results.summary, from the tables aggregate
    wrote): a table (the main one, or vocab-overlap's vocabulary table), the report's orderings for a study of
    one of the reports, and last the report's path."""
    lines = study_result(open_store(str(store)), study, study_id)
    printed = stdout.splitlines()
    assert printed[-1] == f"report: {store / 'studies' / study / study_id / 'report.html'}"
    assert printed[-1 - len(lines):-1] == lines
    assert any(line.startswith("|---") for line in lines)  # a table
    assert any(line.startswith("the report vs this run: ") for line in lines) == (
        not paper_numbers(study).is_empty())  # a study with a table of its report's numbers


def _report_shows_no_placeholders(text: str) -> None:
    """No table without rows (a header alone says nothing) and no `None` printed where a value is missing."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("|") and lines[i + 1].startswith("|---"):
            following = lines[i + 2] if i + 2 < len(lines) else ""
            assert following.startswith("|"), f"a table with no rows: {line}"
    assert "=None" not in text and "| None |" not in text


def _pre_training_shows(store, study: str, plan: dict) -> None:
    """Where a tiny study fine-tunes the unmodified model and a clean one on sst2, the pre-trained tiny
    BERT beats the clean one, seed for seed: its masked-LM pre-training placed the held-out evaluation
    words beside their polarity (bertology.tiny_pretrain), as real pre-training does; measured 0.77-0.79
    against 0.50."""
    variants = {v["name"]: v for v in plan["spec"]["variants"]}
    unmodified = [name for name, v in variants.items() if not any(v.get(k) for k in ("interventions", "model", "regime"))]
    if "sst2" not in plan["spec"]["tasks"] or "clean" not in variants or not unmodified:
        return
    runs = _table(store, "runs", study).filter(pl.col("primary") & (pl.col("task") == "sst2"))
    score = {name: runs.filter(pl.col("variant") == name).sort("seed")["value"].to_list() for name in (*unmodified, "clean")}
    pre_trained, clean = score[unmodified[0]], score["clean"]
    assert pre_trained and len(pre_trained) == len(clean), score  # seed for seed
    assert all(p > c + 0.1 for p, c in zip(pre_trained, clean)), (study, score)


def _layer_removal_profile(store) -> bool:
    """Table 7's inputs: depth and parameters per variant (tiny: a 4-layer BERT, 2 layers after every:2, a
    2-layer DistilBERT stand-in), measured speeds, and the intervention's cost."""
    profile = {r["variant"]: r for r in _table(store, "model_profile", "layer-removal").to_dicts()}
    assert {v: r["encoder_layers"] for v, r in profile.items()} == {
        "base": 4, "clean": 4, "distil": 2, "remove every 2": 2}
    assert profile["remove every 2"]["encoder_params"] < profile["base"]["encoder_params"] == profile["clean"]["encoder_params"]
    assert profile["distil"]["model"] == "tiny:distilbert"
    assert all(r["examples_per_second"] > 0 for r in profile.values())
    return profile["remove every 2"]["intervention_cpu_seconds"] >= 0


# reversed-layers runs in test_reversed_layers_tiny_results_and_rerun, which makes these same checks
@pytest.mark.parametrize("workflow", [w for w in STUDIES if w.stem != "reversed-layers"], ids=lambda p: p.stem)
def test_every_study_runs_end_to_end_with_the_tiny_preset(workflow, tmp_path, subprocess_env, browser):
    store = tmp_path / "store"
    done = bertology("run", str(workflow), "-p", "preset=tiny", "--store", str(store), env=subprocess_env)
    _check_study(workflow, store, done, browser)


def _check_study(workflow: Path, store: Path, done: subprocess.CompletedProcess, browser) -> None:
    """What every tiny study must show: every planned run's results, a report that renders, its own checks
    (STUDY_CHECKS), pre-trained above clean where both ran on sst2, and weights kept only where needed."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _pods_get_only_plain_tokens_from_items(done.stdout)
    params = {p["name"]: p["value"] for p in yaml.safe_load(workflow.read_text())["spec"]["arguments"]["parameters"]}
    (plan_file,) = (store / "studies" / params["study"]).glob("*/plan.json")
    plan = json.loads(plan_file.read_text())
    assert (plan_file.parent / "report.md").exists() and (plan_file.parent / "report.html").exists()
    _prints_its_result(store, params["study"], plan["study_id"], done.stdout)
    _report_shows_no_placeholders((plan_file.parent / "report.md").read_text())
    _report_renders_in_a_browser(browser, plan_file.parent / "report.html")
    if not plan["cells"]:  # vocab-overlap: tokenizers only, one vocabulary row per (stand-in) model
        vocab = _table(store, "vocab_overlap", params["study"])
        assert sorted(vocab["model"]) == sorted(plan["spec"]["models"]) and (vocab["vocab_size"] > 0).all()
        assert "stand-in" in done.stdout + done.stderr
        return
    runs = _table(store, "runs", params["study"]).filter(pl.col("primary"))
    assert set(runs["run_id"]) == {Cell.from_dict(c).run.id for c in plan["cells"]}  # every planned run
    assert set(runs["variant"]) == {v["name"] for v in plan["spec"]["variants"]}
    assert "models:" in done.stdout + done.stderr  # the preset says which stand-ins replace the report's models
    check = STUDY_CHECKS.get(params["study"])
    assert check is None or check(store, plan), params["study"]
    _pre_training_shows(store, params["study"], plan)
    # fine-tuned weights stay only where needed later: here, a sequential run's intermediate runs
    cells = [Cell.from_dict(c) for c in plan["cells"]]
    kept = {p.relative_to(store).parts[1] for p in (store / "runs").rglob("*.safetensors")}
    assert kept == {c.run.after.id for c in cells if c.run.after is not None} == {c.run.id for c in cells if c.keep_weights}


def test_reversed_layers_tiny_results_and_rerun(tmp_path, subprocess_env, browser):
    store = tmp_path / "store"
    first = bertology("run", "workflows/reversed-layers.yaml", "-p", "preset=tiny", "--store", str(store),
                      env=subprocess_env)
    _check_study(REPO / "workflows" / "reversed-layers.yaml", store, first, browser)
    assert "| model | task | split | metric | pre-trained | reversed | clean |" in first.stdout
    # the tiny preset keeps two of the report's tasks, SST-2 (the one its pre-training informs) first, then
    # the first other: CoLA (MCC)
    assert "| tiny:bert | sst2 | validation | accuracy |" in first.stdout
    assert "| tiny:bert | cola | validation | matthews_corrcoef |" in first.stdout

    runs = scan(str(store), "runs", study="reversed-layers").collect()
    primary = runs.filter(pl.col("primary"))
    assert primary.height == (1 + 1) * 3 * 2  # eval splits (sst2 1, cola 1) x variants x seeds
    sst2 = primary.filter(pl.col("task") == "sst2").group_by("variant").agg(pl.col("value").mean())
    mean = dict(sst2.iter_rows())
    assert mean["pre-trained"] > 0.7 and mean["clean"] < 0.55, mean  # what pre-training gave, measured
    assert set(primary["variant"]) == {"pre-trained", "reversed", "clean"}
    assert primary["schema_version"].unique().to_list() == [SCHEMA_VERSION]
    assert primary["value"].is_between(-1, 1).all()
    curves = scan(str(store), "curves", study="reversed-layers").collect()
    assert set(curves["epoch"]) == {1, 2}
    preds = scan(str(store), "predictions", study="reversed-layers").collect()
    assert preds.height == (400 + 400) * 3 * 2  # every evaluation example of every run
    distance = scan(str(store), "weight_distance", study="reversed-layers").collect()
    assert set(distance["module"]) == {"embeddings", "pooler"} | {
        f"layer.{i}.{m}" for i in range(4)
        for m in ("attention.self", "attention.output", "intermediate", "output", "output.dense.weight")}
    assert (distance["l2"] > 0).all()  # fine-tuning moved every module

    manifests = {json.loads((p / "manifest.json").read_text())["spec"]["interventions"].__repr__():
                 json.loads((p / "manifest.json").read_text()) for p in (store / "checkpoints").iterdir()}
    assert len(manifests) == 3
    reversed_ = next(m for m in manifests.values() if m["chain"] and m["chain"][0]["name"] == "reverse-layers")
    changed = {t["name"] for t in reversed_["tensors"] if t["changed"]}
    assert changed and all(n.removeprefix("bert.").startswith("encoder.layer.") for n in changed)
    # the tiny BERT is pre-trained (masked-LM), so the clean model is not a copy of it (it was, bit for bit)
    clean = next(m for m in manifests.values() if m["chain"] and m["chain"][0]["name"] == "reinit")
    assert sum(t["changed"] for t in clean["tensors"]) > len(clean["tensors"]) // 2

    # the rerun computes nothing; by default (no -v) it prints one progress line, keeps the step output in
    # the node logs only, and ends with the result and the report's path
    quiet = subprocess.run([sys.executable, "-m", "bertology.cli", "run", "workflows/reversed-layers.yaml", "-p",
                            "preset=tiny", "--store", str(store)], check=False, cwd=REPO, env=subprocess_env,
                           capture_output=True, text=True, timeout=900)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "[plan]" not in quiet.stdout and "[aggregate]" not in quiet.stdout
    assert "nothing to run" in quiet.stdout and "0/0" not in quiet.stdout  # nothing left to run, and no empty count
    report = Path(quiet.stdout.strip().splitlines()[-1].removeprefix("report: "))
    assert report.name == "report.html" and report.is_file() and report.is_relative_to(store / "studies")
    _prints_its_result(store, "reversed-layers", report.parent.name, quiet.stdout)  # the table, then the path
    workdir = Path(quiet.stdout.split("step logs in ", 1)[1].split(")", 1)[0])
    plan_log = (workdir / "plan" / "log.txt").read_text()
    assert "12 cells, 0 to run in 0 pods" in plan_log and "; 0 checkpoints, 0 datasets to make" in plan_log
    pods = [pod["node"] for pod in json.loads((workdir / "status.json").read_text())["pods"]]
    # nothing recomputed: no build-checkpoint, no cell; then the exit handler (verdict), which finds no failure
    assert pods == ["plan", "aggregate", "onExit"], pods
    assert "| model | task | split | metric | pre-trained | reversed | clean |" in (
        workdir / "aggregate" / "log.txt").read_text()


def test_tiny_study_on_s3(s3_server, tmp_path, subprocess_env):
    bucket = "bertology-e2e"
    client = boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=bucket)
    env = {**subprocess_env, **s3_server}
    done = bertology("run", "workflows/reversed-layers.yaml", "-p", "preset=tiny", "-p", 'tasks=["rte"]',
                     "--store", f"s3://{bucket}/store", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| tiny:bert | rte | validation | accuracy |" in done.stdout
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]
    # pre-trained and reversed once; clean (a random reinit) drawn once per training seed (2 under tiny)
    assert sum(k.startswith("store/checkpoints/") and k.endswith("_SUCCESS.json") for k in keys) == 4
    assert sum(k.startswith("store/results/runs/study=reversed-layers/") for k in keys) == 6
    assert any(k.startswith("store/studies/reversed-layers/") and k.endswith("report.md") for k in keys)
    assert not any(k.endswith(".tmp") for k in keys)


BAD_INPUT = [
    (["-p", 'tasks=["nope"]'], "unknown task 'nope'"),
    (["-p", 'variants=[{"name": "x", "interventions": [{"name": "flip-layers"}]}]'], "intervention 'flip-layers' is unknown; allowed: reverse-layers, remove-layers, reinit"),
    (["-p", "preset=paper", "-p", "source=synthetic", "-p", 'models=["./no/such/model"]'], "no/such/model"),
    (["-p", "preset"], "malformed -p 'preset'"),
    (["-p", "lr=fast"], "parameter 'lr' must be a number, got 'fast'"),
    (["-p", "colour=red"], "colour"),
]


@pytest.mark.parametrize("args, message", BAD_INPUT, ids=lambda x: x if isinstance(x, str) else None)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(args, message, tmp_path, subprocess_env):
    store = tmp_path / "store"
    done = bertology("run", "workflows/reversed-layers.yaml", *(["-p", "preset=tiny"] if "preset=paper" not in args else []),
                     *args, "--store", str(store), env=subprocess_env)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error: " in line]
    assert errors and message in errors[-1], done.stderr
    assert not store.exists() or not any(store.rglob("*")), sorted(store.rglob("*"))
