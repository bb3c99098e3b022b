"""The study parameter `fuse` as plan sees it: K > 1 makes every run a fused one (Regime.fused, part of its
id; K itself is how the runs execute, not part of any id), plan puts the runs that can train together (one
dataset, regime and seed) side by side in pods of whole groups, the plan records K for the finetune step, and
`bertology run --dry-run` prices the study at the fused rate."""

from __future__ import annotations

import itertools
import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from bertology.cli import main
from bertology.cli.dry_run import cost_line
from bertology.errors import BadInput
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec
from bertology.steps import budget, planned
from bertology.steps.plan import fusable, fusing_order, pack, plan_study
from bertology.store import open_store
from bertology.study import PARAMS, StudySpec, cost

REPO = Path(__file__).resolve().parents[1]
THREE = ('[{"name": "pre-trained", "interventions": []}, '
         '{"name": "reversed", "interventions": [{"name": "reverse-layers"}]}, '
         '{"name": "faster", "interventions": [], "regime": {"lr": 1e-4}}]')
ONE_REGIME = ('[{"name": "pre-trained", "interventions": []}, '
              '{"name": "reversed", "interventions": [{"name": "reverse-layers"}]}, '
              '{"name": "clean", "interventions": [{"name": "reinit", "params": {"scope": "all"}}]}]')
TWO = ('[{"name": "pre-trained", "interventions": []}, '
       '{"name": "reversed", "interventions": [{"name": "reverse-layers"}]}]')


def tiny(**params: str) -> StudySpec:
    return StudySpec.from_params("fuse", {"preset": "tiny", **params})[0]


def planned_pods(tmp_path: Path, spec: StudySpec) -> tuple[dict, list[list[Cell]]]:
    """The stored plan, and each pod's cells in the order of its ids."""
    work = plan_study(open_store(str(tmp_path)), spec)
    plan = json.loads(next(tmp_path.glob("studies/fuse/*/plan.json")).read_text())
    cells = {c.run.id: c for c in (Cell.from_dict(raw) for raw in plan["cells"])}
    return plan, [[cells[i] for i in item.split(",")] for item in work["runs"]]


def test_fuse_makes_every_run_fused_and_k_is_in_no_id():
    assert PARAMS["fuse"] == ("int", "1")
    alone, two, four = tiny(variants=THREE), tiny(variants=THREE, fuse="2"), tiny(variants=THREE, fuse="4")
    assert (alone.fuse, two.fuse, four.fuse) == (1, 2, 4)
    assert "fuse" not in two.to_dict() and two.id == four.id != alone.id  # K is how the runs execute
    assert two.to_dict()["regime"]["fused"] is True and "fused" not in alone.to_dict()["regime"]
    assert [c.run.id for c in two.cells()] == [c.run.id for c in four.cells()]
    assert not {c.run.id for c in two.cells()} & {c.run.id for c in alone.cells()}
    assert {c.run.regime.fused for c in alone.cells()} == {False}
    # through a variant's own regime and a task's settings too (regime_of)
    per_task = tiny(variants=THREE, fuse="2", task_settings='{"sst2": {"batch_size": 8}}')
    runs = [c.run for c in per_task.cells()]
    assert {r.regime.fused for r in runs} == {True}
    assert {r.regime.lr for r in runs} == {alone.regime.lr, 1e-4} and 8 in {r.regime.batch_size for r in runs}


def test_plan_puts_the_runs_that_train_together_side_by_side_and_records_fuse(tmp_path):
    """Three variants (two of one regime, one with its own learning rate) x two tasks x two seeds, fused two
    at a time: the runs of one task, regime and seed side by side, a pod of whole groups, every run fused."""
    spec = tiny(variants=THREE, fuse="2")
    plan, pods = planned_pods(tmp_path, spec)
    assert plan["execution"] == {"gpu_concurrency": 1, "fuse": 2}
    assert all(raw["run"]["regime"]["fused"] is True for raw in plan["cells"])
    ids = [c.run.id for pod in pods for c in pod]
    assert sorted(ids) == sorted(c.run.id for c in spec.cells())  # every cell once
    keys = [fusable(c) for pod in pods for c in pod]
    assert len(list(itertools.groupby(keys))) == len(set(keys))  # a key's runs side by side
    # the automatic bundle (1: the study fits) rounded up to 2; "faster" trains at its own rate, alone
    shown = [[(c.run.dataset.task, c.variant, c.run.seed) for c in pod] for pod in pods]
    assert shown == [pod for task in spec.tasks for pod in (
        [(task, "pre-trained", 1), (task, "reversed", 1)], [(task, "pre-trained", 2), (task, "reversed", 2)],
        [(task, "faster", 1), (task, "faster", 2)])]


def test_a_pod_holds_whole_groups_and_the_bundle_rounds_up_to_a_multiple_of_fuse(tmp_path, caplog):
    spec = tiny(variants=TWO, fuse="2", bundle="3")
    with caplog.at_level(logging.INFO, logger="bertology"):
        _, pods = planned_pods(tmp_path, spec)
    assert "fuse 2: the study's bundle 3 rounded up to 4" in caplog.text
    assert [len(pod) for pod in pods] == [4, 4]
    for pod in pods:  # two groups of two: the variants at one task and seed
        assert fusable(pod[0]) == fusable(pod[1]) != fusable(pod[2]) == fusable(pod[3])
        assert {c.variant for c in pod[:2]} == {c.variant for c in pod[2:]} == {"pre-trained", "reversed"}
    # without fuse: the table order, `bundle` at a time, as before
    alone = tiny(variants=TWO, bundle="3")
    _, pods = planned_pods(tmp_path / "alone", alone)
    assert [c.run.id for pod in pods for c in pod] == [c.run.id for c in alone.cells()]
    assert [len(pod) for pod in pods] == [3, 3, 2]


def test_an_automatic_bundle_grows_by_whole_groups_until_the_pods_fit(tmp_path, monkeypatch):
    """Groups of three runs fused two at a time leave a pod of four a run short: with the node budget at three
    pods of four, the automatic bundle grows to six (two whole classes a pod) instead of cutting a group."""
    spec = tiny(variants=ONE_REGIME, fuse="2")
    cells = spec.cells()
    datasets = len({c.run.dataset.id for c in cells})
    checkpoints = len({c.run.checkpoint.id for c in cells})
    monkeypatch.setattr(budget, "MAX_NODES", budget.workflow_nodes(datasets, checkpoints, 3))
    assert budget.auto_bundle(len(cells), datasets, checkpoints) == 4
    assert len(pack(fusing_order(cells), 4, 2)) == 4  # over the budget
    _, pods = planned_pods(tmp_path, spec)
    assert [len(pod) for pod in pods] == [6, 6]
    assert len(pods) <= 3 and budget.workflow_nodes(datasets, checkpoints, len(pods)) <= budget.MAX_NODES


def _cell(variant: str, seed: int, task: str = "sst2") -> Cell:
    run = RunSpec(CheckpointSpec("tiny:bert"), DatasetSpec(task, "synthetic", "tiny:bert"), Regime(fused=True), seed)
    return Cell("s", variant, "tiny:bert", run)


def test_fusing_order_is_stable_and_pack_never_cuts_a_group():
    cells = [_cell(v, s, t) for t in ("sst2", "rte") for v in "abc" for s in (1, 2)]
    ordered = fusing_order(cells)
    assert [(c.run.dataset.task, c.variant, c.run.seed) for c in ordered] == [
        (t, v, s) for t in ("sst2", "rte") for s in (1, 2) for v in "abc"]
    assert fusing_order(ordered) == ordered
    assert [[c.variant for c in pod] for pod in pack(ordered, 4, 2)] == [["a", "b", "c"]] * 4
    assert [[c.variant for c in pod] for pod in pack(ordered, 4, 3)] == [["a", "b", "c"]] * 4
    assert [[c.variant for c in pod] for pod in pack(ordered, 6, 2)] == [["a", "b", "c"] * 2] * 2
    assert pack(cells, 4) == [cells[i:i + 4] for i in range(0, len(cells), 4)]  # fuse 1: `bundle` at a time


def _refused(k: int, what: str) -> str:
    return f"parameter 'fuse' is {k}, but {what} (allowed with it: fuse=1, each run alone)"


MONITOR, NOTHING = "the activation monitor is not supported fused", "nothing trains, so nothing fuses"


@pytest.mark.parametrize(("params", "message"), [
    ({"fuse": "0"}, "parameter 'fuse' must be >= 1 (runs trained as one model; 1: each run alone), got 0"),
    ({"fuse": "-2"}, "parameter 'fuse' must be >= 1 (runs trained as one model; 1: each run alone), got -2"),
    ({"fuse": "two"}, "parameter 'fuse' must be an integer, got 'two'"),
    ({"fuse": "2", "intermediates": '["mrpc"]', "final_head": "new"},  # new: MNLI cannot carry MRPC's head
     _refused(2, "sequential fine-tuning (intermediates mrpc) is not supported fused")),
    ({"fuse": "2", "reference": "tiny:bert"}, _refused(2, f"the study has reference tiny:bert: {MONITOR}")),
    ({"fuse": "3", "regime": "none"}, _refused(3, f"the study has regime none: {NOTHING}")),
    ({"fuse": "2", "variants": '[{"name": "native", "interventions": [], "regime": {"name": "none"}}]'},
     _refused(2, f"variant 'native' has regime none: {NOTHING}")),
    ({"fuse": "2", "variants": '[{"name": "m", "interventions": [], "regime": {"reference": "tiny:bert"}}]'},
     _refused(2, f"variant 'm' has reference tiny:bert: {MONITOR}")),
    ({"fuse": "2", "compile": "true"},
     _refused(2, "the study has compile true: a compiled model is not supported fused")),
    ({"fuse": "2", "gpu_concurrency": "2"},
     ("parameter 'fuse' is 2 and 'gpu_concurrency' is 2: a pod either fuses its runs or runs them side by side "
      "(allowed: one of them above 1)")),
    ({"variants": '[{"name": "f", "interventions": [], "regime": {"fused": true}}]'},
     ("variant 'f' regime sets 'fused'; the study parameter fuse sets it for every run (allowed: fuse=K, K > 1 "
      "fuses)")),
])
def test_what_fuse_cannot_train_is_refused_in_one_line(params, message):
    with pytest.raises(BadInput) as e:
        StudySpec.from_params("fuse", {"preset": "tiny", **params})
    assert str(e.value) == message and "\n" not in message


def _cost(tmp_path: Path, monkeypatch, spec: StudySpec, fused_rate: float | None) -> str:
    """The dry run's cost line over the plan `spec` makes, at a solo rate of 500 and this fused rate."""
    tmp_path.mkdir(exist_ok=True)
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"device": "GPU", "measured": "2026-12-01", "source": "docs",
                                 "solo_seq_per_s": 500, "fused_seq_per_s": fused_rate}))
    monkeypatch.setattr(cost, "RATES_FILE", rates)
    store = open_store(str(tmp_path / "store"))
    plan_study(store, spec)
    node = SimpleNamespace(outputs={"study": planned.plan_ref(spec.name, spec.id), "store": store.uri})
    return cost_line(SimpleNamespace(nodes={"plan": node}))


@pytest.mark.parametrize("fused_rate", [None, 2000.0])
def test_the_cost_of_a_fused_study_is_at_the_fused_rate_once_measured(tmp_path, monkeypatch, fused_rate):
    spec = tiny(fuse="2")
    work = cost.training_work(spec.cells())
    line = _cost(tmp_path, monkeypatch, spec, fused_rate)
    counted = f"cost: {work.runs} runs, {work.sequences:,} training sequences"
    solo = f"{work.sequences / 500 / 3600:.2g} GPU-hours solo at 500 seq/s (GPU, measured 2026-12-01)"
    if fused_rate is None:
        assert line == f"{counted}; fused (fuse 2): not measured yet; {solo}"
    else:
        assert line == (f"{counted}; {work.sequences / fused_rate / 3600:.2g} GPU-hours fused (fuse 2) at "
                        f"2,000 seq/s in all (GPU, measured 2026-12-01)")
    alone = _cost(tmp_path / "alone", monkeypatch, tiny(), fused_rate)  # a study that does not fuse: solo first
    assert re.search(r"; [\d.e-]+ GPU-hours solo at 500 seq/s \(GPU, measured 2026-12-01\); ", alone)
    assert "(fuse 2)" not in alone


def test_a_dry_run_passes_fuse_through_the_workflow_to_plan(tmp_path, capsys):
    """`-p fuse=2` reaches plan through the study template (its argv), the plan records it, and the cost line
    prices the runs fused."""
    code = main(["run", str(REPO / "workflows" / "reversed-layers.yaml"), "--dry-run", "--show", "1",
                 "--store", str(tmp_path), "-p", "preset=tiny", "-p", "seeds=[1]", "-p", "fuse=2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    # the cost line reads the plan's execution (fuse 2); a dry run writes no plan into the store
    assert "fuse=2" in out and re.search(r"^cost: .*fused \(fuse 2\)", out, re.MULTILINE)
    assert not list(tmp_path.rglob("plan.json"))


def test_a_fused_studys_report_says_its_runs_were_trained_fused(tmp_path):
    from bertology.results.report.document import settings

    def spec(plan):  # as the report reads it (bertology.results.study_results: every variant with its levels)
        return {**plan["spec"], "variants": [{"levels": {}, **v} for v in plan["spec"]["variants"]]}

    fused, _ = planned_pods(tmp_path / "fused", tiny(fuse="2"))
    alone, _ = planned_pods(tmp_path / "alone", tiny())
    assert "Runs trained fused: several runs of one architecture" in settings(spec(fused))
    assert "fused" not in settings(spec(alone))
