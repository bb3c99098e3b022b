"""The nightly regression: compare a study's table with its baseline within per-metric tolerances, promote a
baseline on purpose (atomically, keeping the previous one), and the CronWorkflow that runs it all, end to end
through the local runner.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
import yaml

from bertology.argo.documents import load_documents
from bertology.errors import BadInput, Transient
from bertology.results.regression import (
    DRIFT,
    MISSING,
    N_CHANGED,
    NEW,
    Drift,
    baseline_key,
    compare,
    parse_tolerances,
    promote,
    read_baseline,
    regress,
)
from bertology.steps import harness
from bertology.steps import regress as regress_step
from bertology.store import LocalStore, open_store

REPO = Path(__file__).resolve().parent.parent
NIGHTLY = REPO / "workflows" / "nightly-regression.yaml"
NIGHTLY_TEMPLATE = REPO / "workflows" / "templates" / "nightly-regression.yaml"
TEMPLATES = REPO / "workflows" / "templates"
STUDY, STUDY_ID = "reversed-layers", "0123456789abcdef"


def table(rows: list[tuple], sd: float | None = None) -> pl.DataFrame:
    """A study table as aggregate writes it (the columns compare reads, plus a few it ignores); without an
    `sd` the rows have no spread, so their metrics' fixed tolerances apply."""
    return pl.DataFrame(
        [{"model": m, "task": t, "split": "validation", "metric": metric, "variant": v, "n": n, "mean": mean,
          "sd": sd, "study": STUDY, "study_id": STUDY_ID} for m, t, metric, v, n, mean in rows],
        schema_overrides={"n": pl.UInt32, "sd": pl.Float64})


BASE = [
    ("bert", "rte", "accuracy", "pre-trained", 3, 0.6600),
    ("bert", "rte", "accuracy", "reversed", 3, 0.5500),
    ("bert", "stsb", "pearson", "pre-trained", 3, 0.8800),
    ("bert", "mlm-nl", "perplexity", "pre-trained", 3, 100.0),
]


def edited(means: dict[int, float] | None = None, ns: dict[int, int] | None = None, rows=BASE) -> list[tuple]:
    """`rows` with some means or n replaced, by row index."""
    means, ns = means or {}, ns or {}
    return [(*r[:4], ns.get(i, r[4]), means.get(i, r[5])) for i, r in enumerate(rows)]


# --- compare --------------------------------------------------------------------------------------------


def test_results_within_tolerance_pass():
    current = edited(means={0: 0.6750, 2: 0.8600, 3: 104.0})  # +0.015 < 0.02, -0.02 < 0.03, +4% < 5%
    result = compare(table(current), table(BASE), parse_tolerances(""))
    assert result.failures == []
    assert result.summary() == "all 4 rows within tolerance of the baseline"
    assert "+0.0150" in result.text() and "DRIFT" not in result.text()


def test_drift_fails_naming_the_row_and_both_values():
    result = compare(table(edited(means={1: 0.6000})), table(BASE), parse_tolerances(""))
    (failure,) = result.failures
    assert (failure["task"], failure["variant"], failure["flags"]) == ("rte", "reversed", [DRIFT])
    line = next(x for x in result.text().splitlines() if "reversed" in x)
    assert line.split() == ["bert", "rte", "validation", "accuracy", "reversed", "3", "0.5500", "0.6000",
                            "+0.0500", "±0.02", "DRIFT"]
    assert "DRIFT: the mean moved beyond its tolerance" in result.text()
    assert result.summary() == "1 of 4 rows differ from the baseline (1 DRIFT)"


def test_rows_missing_on_either_side_and_a_changed_n_fail():
    current = [*edited(ns={0: 2, 1: 2}, means={1: 0.5})[:3], ("bert", "mrpc", "f1", "pre-trained", 3, 0.85)]
    result = compare(table(current), table(BASE), parse_tolerances(""))  # the perplexity row is gone
    flags = {(r["task"], r["variant"]): r["flags"] for r in result.failures}
    assert flags == {("rte", "pre-trained"): [N_CHANGED], ("rte", "reversed"): [DRIFT, N_CHANGED],
                     ("mlm-nl", "pre-trained"): [MISSING], ("mrpc", "pre-trained"): [NEW]}
    text = result.text()
    assert "3 -> 2" in text and "3 -> —" in text and "— -> 3" in text and "DRIFT, N CHANGED" in text
    assert "MISSING: in the baseline, not in this run" in text
    assert "NEW: in this run, not in the baseline" in text
    assert result.summary() == "4 of 5 rows differ from the baseline (1 DRIFT, 2 N CHANGED, 1 MISSING, 1 NEW)"


def test_perplexity_tolerance_is_relative_to_the_baseline():
    tolerances = parse_tolerances("")
    within = compare(table(edited(means={3: 95.5})), table(BASE), tolerances)
    beyond = compare(table(edited(means={3: 105.5})), table(BASE), tolerances)
    assert within.failures == [] and [r["metric"] for r in beyond.failures] == ["perplexity"]
    assert "±5% (±5)" in beyond.text()
    scaled = edited(means={3: 1000.0})  # the same +5.5% of a ten times larger perplexity
    drifted = compare(table(edited(means={3: 1055.0})), table(scaled), tolerances)
    assert [r["metric"] for r in drifted.failures] == ["perplexity"] and "±5% (±50)" in drifted.text()


def test_the_tolerance_comes_from_both_sides_spread_by_welch_s_t_test():
    # sd 0.02 over 3 seeds on each side: SE = sqrt(2 × 0.02² / 3) = 0.01633, ν = 4, t(0.9995, 4) = 8.610
    se, t = math.sqrt(2 * 0.02 ** 2 / 3), 8.610302
    allowed = t * se + 0.005
    rows = [("bert", "rte", "accuracy", "pre-trained", 3, 0.6600)]
    inside = compare(table([(*rows[0][:5], 0.66 + allowed - 1e-4)], sd=0.02), table(rows, sd=0.02), parse_tolerances(""))
    outside = compare(table([(*rows[0][:5], 0.66 + allowed + 1e-4)], sd=0.02), table(rows, sd=0.02), parse_tolerances(""))
    assert inside.failures == [] and [r["flags"] for r in outside.failures] == [[DRIFT]]
    assert outside.rows[0]["allowed"] == pytest.approx(allowed, rel=1e-5)
    assert "(8.6 SE + 0.005)" in outside.text()
    # the baseline's own spread counts: a noisier baseline allows more
    noisy = table(rows, sd=0.05)
    assert compare(table([(*rows[0][:5], 0.66 + allowed + 1e-4)], sd=0.02), noisy, parse_tolerances("")).failures == []
    # identical seeds (sd 0): only the floor, 0.005 absolute, 0.5% of a perplexity
    assert [r["flags"] for r in compare(table([(*rows[0][:5], 0.666)], sd=0.0), table(rows, sd=0.0),
                                        parse_tolerances("")).failures] == [[DRIFT]]
    ppl = [("bert", "mlm-nl", "perplexity", "pre-trained", 3, 100.0)]
    assert compare(table([(*ppl[0][:5], 100.4)], sd=0.0), table(ppl, sd=0.0), parse_tolerances("")).failures == []
    assert compare(table([(*ppl[0][:5], 100.6)], sd=0.0), table(ppl, sd=0.0), parse_tolerances("")).failures != []
    # a metric set by hand keeps its fixed tolerance, spread or not
    assert compare(table([(*rows[0][:5], 0.70)], sd=0.02), table(rows, sd=0.02),
                   parse_tolerances('{"accuracy": 0.01}')).failures != []


def test_a_drift_names_its_rows_in_one_line():
    result = compare(table(edited(means={1: 0.6000})), table(BASE), parse_tolerances(""))
    assert result.worst() == "rte accuracy reversed 0.5500 -> 0.6000 (allowed ±0.0200)"


def test_tolerances_are_overridden_per_metric():
    current = table(edited(means={1: 0.6000}))
    assert compare(current, table(BASE), parse_tolerances('{"accuracy": 0.06}')).failures == []
    strict = parse_tolerances('{"accuracy": 0}')
    assert compare(table(BASE), table(BASE), strict).failures == []  # identical values pass a zero tolerance
    assert str(parse_tolerances('{"perplexity": "12.5%", "*": 0.1}')["perplexity"]) == "12.5%"


@pytest.mark.parametrize("text, message", [
    ("accuracy=0.1", "tolerances must be a JSON object of metric -> tolerance such as"),
    ("[0.02]", "tolerances must be a JSON object"),
    ('{"acuracy": 0.01}', "tolerances: 'acuracy' is not a metric (allowed: accuracy, "),
    ('{"accuracy": -0.01}', ('tolerances: accuracy = -0.01 is not allowed (a number >= 0 for an absolute '
                             'tolerance or "N%" for a relative one')),
    ('{"f1": "two"}', 'tolerances: f1 = "two" is not allowed'),
    ('{"perplexity": "-5%"}', 'tolerances: perplexity = "-5%" is not allowed'),
    ('{"pearson": true}', "tolerances: pearson = true is not allowed"),
])
def test_bad_tolerances_are_refused_in_one_line_naming_the_value(text, message):
    with pytest.raises(BadInput) as e:
        parse_tolerances(text)
    assert message in str(e.value) and "\n" not in str(e.value)


# --- promote and the regress step ------------------------------------------------------------------------


def write_table(store, rows) -> None:
    store.write_parquet(f"studies/{STUDY}/{STUDY_ID}/tables/main.parquet", table(rows).to_arrow())


def check(store, *, promote_it=False, tolerances=""):
    return regress(store, STUDY, STUDY_ID, baseline_store=store, baseline="nightly", promote_it=promote_it,
                   tolerances=parse_tolerances(tolerances))


def test_promote_writes_the_baseline_in_one_write_and_keeps_the_previous_one(tmp_path, monkeypatch):
    store = LocalStore(tmp_path)
    key = baseline_key(STUDY, "nightly")
    def promoted(rows, at):
        return promote(store, STUDY, "nightly", table(rows).to_arrow(), {"promoted_at": at})

    assert promoted(BASE, "2025-01-30T02:00:00Z") is None
    first = store.read_bytes(key)
    kept = promoted(edited(means={0: 0.7}), "2025-01-31T02:00:00Z")
    assert kept == f"baselines/{STUDY}/history/nightly-20250130T020000Z.parquet"
    assert store.read_bytes(kept) == first
    new, info = read_baseline(store, key)
    assert new["mean"][0] == 0.7 and info == {"promoted_at": "2025-01-31T02:00:00Z"}
    assert store.list("baselines") == sorted([key, kept])  # no staging leftovers

    # a promotion whose write fails leaves the baseline as it was, whole
    writes = []

    def failing(self, k, data):
        writes.append(k)
        if k == key:
            raise Transient("S3 unreachable")
        return original(self, k, data)

    original = LocalStore.write_bytes
    before = store.read_bytes(key)
    monkeypatch.setattr(LocalStore, "write_bytes", failing)
    with pytest.raises(Transient):
        promoted(edited(means={0: 0.1}), "2025-02-01T02:00:00Z")
    monkeypatch.setattr(LocalStore, "write_bytes", original)
    assert writes == [f"baselines/{STUDY}/history/nightly-20250131T020000Z.parquet", key]
    assert store.read_bytes(key) == before and read_baseline(store, key)[0]["mean"][0] == 0.7


def test_without_a_baseline_the_check_fails_saying_how_to_promote(tmp_path):
    store = LocalStore(tmp_path)
    write_table(store, BASE)
    with pytest.raises(BadInput) as e:
        check(store)
    where = store.url(baseline_key(STUDY, "nightly"))
    assert f"no baseline 'nightly' for study '{STUDY}' at {where}" in str(e.value)
    assert "-p promote=true" in str(e.value)
    assert not store.exists(baseline_key(STUDY, "nightly"))


def test_regress_passes_drifts_and_promotes_on_purpose(tmp_path, capsys):
    store = LocalStore(tmp_path)
    write_table(store, BASE)
    check(store, promote_it=True)
    _, info = read_baseline(store, baseline_key(STUDY, "nightly"))
    assert info["study_id"] == STUDY_ID and info["table"].endswith("tables/main.parquet")

    assert check(store).failures == []
    report = store.read_bytes(f"studies/{STUDY}/{STUDY_ID}/regression.md").decode()
    assert "PASSED: all 4 rows within tolerance" in report

    write_table(store, edited(means={2: 0.80}))
    with pytest.raises(Drift) as e:
        check(store)
    assert e.value.exit_code == 1 and "1 of 4 rows differ from the baseline (1 DRIFT)" in str(e.value)
    report = store.read_bytes(f"studies/{STUDY}/{STUDY_ID}/regression.md").decode()
    assert "0.8800    0.8000" in report and "FAILED: 1 of 4 rows" in report
    assert "0.8800    0.8000" in capsys.readouterr().out

    check(store, promote_it=True)  # the drift was intended: the new table becomes the baseline
    assert check(store).failures == []
    assert len(store.list(f"baselines/{STUDY}/history")) == 1


def test_the_job_exit_codes_pass_drift_and_bad_input(tmp_path, capsys):
    from bertology.steps.harness import main

    store = LocalStore(tmp_path)
    write_table(store, BASE)
    spec = json.dumps({"name": STUDY, "id": STUDY_ID})

    def job(*params):
        return main("regress", regress_step.run, ["--store", store.uri, "--spec", spec,
                                                *[a for p in params for a in ("--param", p)]])

    assert job("promote=yes") == 2
    assert "parameter 'promote' must be true or false, got 'yes'" in capsys.readouterr().err
    assert job("promote=false") == 2  # no baseline yet
    assert job("promote=true", "baseline_store=" + store.uri) == 0
    assert job("tolerances={\"accuracy\": \"x\"}") == 2
    assert job() == 0
    write_table(store, edited(means={0: 0.5}))
    assert job() == 1
    assert "error: results drifted from baseline 'nightly'" in capsys.readouterr().err
    assert job("colour=red") == 2


def test_baseline_on_s3(s3_bucket, tmp_path):
    results, baselines = LocalStore(tmp_path), open_store(f"s3://{s3_bucket}/root")
    write_table(results, BASE)
    regress(results, STUDY, STUDY_ID, baseline_store=baselines, baseline="gpu", promote_it=True,
            tolerances=parse_tolerances(""))
    regress(results, STUDY, STUDY_ID, baseline_store=baselines, baseline="gpu", promote_it=True,
            tolerances=parse_tolerances(""))
    (kept,) = baselines.list(f"baselines/{STUDY}/history")
    assert baselines.list("baselines") == [f"baselines/{STUDY}/gpu.parquet", kept]
    assert regress(results, STUDY, STUDY_ID, baseline_store=baselines, baseline="gpu", promote_it=False,
                   tolerances=parse_tolerances("")).failures == []


# --- the CronWorkflow -----------------------------------------------------------------------------------


def _dag(doc: dict) -> dict[str, dict]:
    spec = doc["spec"].get("workflowSpec", doc["spec"])
    (template,) = [t for t in spec["templates"] if t["name"] == spec["entrypoint"]]
    return {t["name"]: t for t in template["dag"]["tasks"]}


def test_the_cron_workflow_is_a_nightly_with_no_overlap():
    (doc,) = load_documents(NIGHTLY)
    spec = doc["spec"]
    assert doc["kind"] == "CronWorkflow" and doc["metadata"]["name"] == "bertology-nightly-regression"
    assert spec["schedules"] == ["0 2 * * *"] and spec["timezone"] == "UTC"
    assert spec["concurrencyPolicy"] == "Forbid" and spec["startingDeadlineSeconds"] > 0
    assert spec["successfulJobsHistoryLimit"] > 0 and spec["failedJobsHistoryLimit"] > 0
    # templateReferencing: Strict runs only Workflows that reference a WorkflowTemplate (operator.go
    # setExecWorkflow: MustUseReference); no priority: a night queues by age, as a study does (a priority would
    # also reorder the controller's queue of Workflows across namespaces: tests/test_gpu_queue.py)
    assert spec["workflowSpec"] == {"workflowTemplateRef": {"name": "bertology-nightly-regression"}}
    (template,) = load_documents(NIGHTLY_TEMPLATE)
    params = {p["name"]: p.get("value") for p in template["spec"]["arguments"]["parameters"]}
    assert params["promote"] == "false" and params["preset"] == "paper"
    # the study's own defaults, marked so that a preset may replace them (bertology.study.DEFAULT_MARK)
    assert params["tasks"] == 'default:["rte", "mrpc", "stsb"]' and params["seeds"] == "default:[1, 2, 3]"


def test_the_nightly_runs_the_study_dag_in_a_scratch_store_then_regress():
    """The nightly's DAG is bertology-study's `main`, task for task, with the scratch store, then regress: a
    change to the study DAG or a new study parameter must reach the nightly too. plan fixes both stores
    (the scratch one, <store>/nightly/<workflow name>, and the store itself as the baseline store) once, for
    every later step."""
    (nightly,) = load_documents(NIGHTLY_TEMPLATE)
    (study,) = load_documents(TEMPLATES / "study.yaml")
    ours, theirs = _dag(nightly), _dag(study)
    assert list(ours) == [*theirs, "regress"]
    for name, task in theirs.items():
        expected = json.loads(json.dumps(task))
        if name == "plan":  # in its scratch store, which plan fixes with the baseline store
            expected["arguments"]["parameters"].insert(3, {"name": "scratch", "value": "nightly/{{workflow.name}}"})
        assert ours[name] == expected, (
            f"task '{name}' differs from bertology-study's: a new study parameter or step? "
            f"add it to {NIGHTLY_TEMPLATE.relative_to(REPO)} too")
    declared = [p["name"] for p in nightly["spec"]["arguments"]["parameters"]]
    assert set(declared) == {p["name"] for p in study["spec"]["arguments"]["parameters"]} | {
        "promote", "baseline", "tolerances"}
    regress_args = {p["name"]: p["value"] for p in ours["regress"]["arguments"]["parameters"]}
    # after aggregate, whatever it ended: `dependencies` with aggregate's continueOn (Argo refuses continueOn
    # in a DAG that uses `depends`: validate.go validateDAG)
    assert ours["regress"]["dependencies"] == ["aggregate"] and "depends" not in ours["regress"]
    assert ours["aggregate"]["continueOn"] == {"failed": True, "error": True}
    assert ours["regress"]["continueOn"] == {"failed": True, "error": True}  # the exit handler judges
    assert nightly["spec"]["onExit"] == "verdict"
    assert regress_args["plan"] == "{{tasks.plan.outputs.parameters.study}}"  # the id plan computed
    assert regress_args["store"] == "{{tasks.plan.outputs.parameters.store}}"
    assert regress_args["baseline_store"] == "{{tasks.plan.outputs.parameters.baseline_store}}"  # outlives the scratch
    # no step after plan reads the ConfigMap-backed `store` parameter again (setGlobalParameters re-reads it)
    after_plan = json.dumps([t for n, t in ours.items() if n != "plan"])
    assert "workflow.parameters.store" not in after_plan and "workflow.parameters.platform_store" not in after_plan


def test_plan_takes_the_store_given_else_the_platform_s_and_runs_a_night_in_its_scratch():
    """What the nightly's plan pod gets: `--store` (the Workflow's `store`, empty unless set), `--platform-store`
    (the ConfigMap's) and `--scratch nightly/<workflow name>`: the night's store is <store>/nightly/<name>, and
    <store> is the baseline store plan hands on."""
    def parsed(*argv):
        args = harness.parser("plan").parse_args(list(argv))
        return harness.store_root(args), args.baseline_store

    night = ("--platform-store", "s3://b/platform", "--scratch", "nightly/wf-1")
    assert parsed("--store", "", *night) == ("s3://b/platform/nightly/wf-1", "s3://b/platform")
    assert parsed("--store", "s3://b/mine/", *night) == ("s3://b/mine/nightly/wf-1", "s3://b/mine/")
    assert parsed("--store", "s3://b/mine", "--platform-store", "s3://b/platform") == ("s3://b/mine", None)
    assert parsed("--store", "", "--platform-store", "s3://b/platform") == ("s3://b/platform", None)
    with pytest.raises(BadInput, match="^no store: the Workflow's parameter store is empty and so is platform_store"):
        parsed("--store", "", "--platform-store", "")  # neither: refused in one line naming both, before any work


def _bertology(*args, env):
    if args[:1] == ("run",):  # -v: these tests read the steps' own lines (by default, only the node logs have them)
        args = ("run", "-v", *args[1:])
    return subprocess.run([sys.executable, "-m", "bertology.cli", *args], check=False, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)


def test_nightly_end_to_end_promote_pass_then_drift(tmp_path, subprocess_env):
    """Three nights of the tiny nightly against one store: promote, an identical rerun (every night starts
    from scratch, so this also shows the tiny runs are deterministic), then a tampered baseline."""
    store = LocalStore(tmp_path / "store")
    variants = [{"name": "reversed", "interventions": [{"name": "reverse-layers"}]}]  # 2 cells (seeds 1, 2)
    small = ["-p", "preset=tiny", "-p", 'tasks=["rte"]', "-p", f"variants={json.dumps(variants)}"]

    def night(*params):
        done = _bertology("run", str(NIGHTLY), *small, *params, "--store", store.uri, env=subprocess_env)
        return done, done.stdout + done.stderr

    first, out = night("-p", "promote=true")
    assert first.returncode == 0, out[-4000:]
    key = baseline_key("reversed-layers", "nightly")
    baseline, info = read_baseline(store, key)
    assert baseline.height == 1 and baseline["variant"].to_list() == ["reversed"]
    assert f"promoted {info['table']} as baseline {store.url(key)}" in out
    assert info["table"].startswith(store.url("nightly/bertology-nightly-regression-"))

    second, out = night()
    assert second.returncode == 0, out[-4000:]
    assert "PASSED: 1 row within tolerance of the baseline" in out
    assert len(store.list("nightly")) > 0 and len({k.split("/")[1] for k in store.list("nightly")}) == 2

    arrow = pq.read_table(io.BytesIO(store.read_bytes(key)))
    tampered = pl.from_arrow(arrow).with_columns(pl.col("mean") + 0.25)
    store.write_parquet(key, tampered.to_arrow().replace_schema_metadata(arrow.schema.metadata))
    # two tiny seeds a side say little about the spread (Welch's t with about one degree of freedom), so this
    # night sets the accuracy's tolerance by hand; the spread rule is tested on its own above
    third, out = night("-p", 'tolerances={"accuracy": 0.02}')
    assert third.returncode == 1, out[-4000:]
    # the Workflow fails with one line naming the cause, from its exit handler (bertology.steps.verdict)
    status = next(x for x in third.stdout.splitlines() if x.startswith("workflow nightly-regression.yaml: "))
    assert status.startswith("workflow nightly-regression.yaml: Failed: main: Error (exit code 1): regress failed: "
                             "results drifted from baseline 'nightly': 1 of 1 rows differ from the baseline "
                             "(1 DRIFT): rte accuracy reversed "), status
    original = baseline["mean"][0]
    line = next(x for x in third.stdout.splitlines() if "reversed" in x and "DRIFT" in x)
    line = line.removeprefix("[regress] ")  # the local runner's prefix
    assert line.split()[:5] == ["tiny:bert", "rte", "validation", "accuracy", "reversed"]
    assert f"{original + 0.25:.4f}" in line and f"{original:.4f}" in line and "-0.2500" in line
    assert "FAILED: 1 of 1 rows differ from the baseline (1 DRIFT)" in out
    assert "regress: error: results drifted from baseline 'nightly'" in third.stderr
    reports = sorted(k for k in store.list("nightly") if k.endswith("/regression.md"))
    assert len(reports) == 2  # the promoting night had no baseline to compare with
    assert line in store.read_bytes(reports[-1]).decode()  # tonight's (workflow names end in a timestamp)


def test_the_regress_template_is_a_cpu_step_with_the_library_settings():
    library = yaml.safe_load((TEMPLATES / "steps.yaml").read_text())
    steps = {t["name"]: t for t in library["spec"]["templates"]}
    regress_step, aggregate = steps["regress"], steps["aggregate"]
    assert regress_step["container"]["image"] == "ghcr.io/bertology/bertology-cpu:0.1.0"
    assert regress_step["container"]["command"] == ["python", "-m", "jobs.regress"]
    for field in ("retryStrategy", "securityContext", "volumes"):
        assert regress_step[field] == aggregate[field], field
    for field in ("env", "securityContext", "volumeMounts", "resources"):
        assert regress_step["container"][field] == aggregate["container"][field], field
