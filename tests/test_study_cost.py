"""What a study costs on a GPU (bertology.study.cost): the `cost:` line of `bertology run --dry-run`, counted
from its plan, and the measured rates file it prices the study at, by the way its pods train."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from bertology import tasks
from bertology.canonical import canonical_json
from bertology.cli import main
from bertology.data import subset_indices
from bertology.errors import BadInput
from bertology.study import StudySpec, cost

REPO = Path(__file__).resolve().parents[1]
SEQUENTIAL = REPO / "workflows" / "sequential-finetune.yaml"
COST = re.compile(r"^cost: ([\d,]+) runs?(?: \((\d+) of them train nothing: regime none\))?, ([\d,]+) training sequences; "
                  r"(.+)$", re.MULTILINE)


def _dry_run(capsys, store: Path, *params: str) -> tuple[int, str, str]:
    code = main(["run", str(SEQUENTIAL), "--dry-run", "--show", "1", "--store", str(store),
                 *[arg for p in params for arg in ("-p", p)]])
    out, err = capsys.readouterr()
    return code, out, err


def _cells(*params: str) -> list[dict]:
    """The cells plan makes of the study with these parameters (a dry run stores no plan), as plan writes them."""
    doc = yaml.safe_load(SEQUENTIAL.read_text())
    given = {p["name"]: str(p["value"]) for p in doc["spec"]["arguments"]["parameters"]}
    spec, _ = StudySpec.from_params(given.pop("study"), {**given, **dict(p.split("=", 1) for p in params)})
    return [json.loads(canonical_json(c)) for c in spec.cells()]


def _runs_of_plan(cells: list[dict]) -> dict[str, dict]:
    """The plan's distinct runs, each cell's and its intermediate run's, by their JSON (no ids computed)."""
    runs = {}
    for cell in cells:
        run = cell["run"]
        while run is not None:
            runs.setdefault(json.dumps({k: v for k, v in run.items() if k != "after"}, sort_keys=True)
                            + json.dumps(run.get("after"), sort_keys=True), run)
            run = run.get("after")
    return runs


def _trained_rows(dataset: dict) -> int:
    """The rows prepare-data trains on: the task's train split from its source, subset by its own rule."""
    split = tasks.load_split(dataset["task"], dataset["source"], "train")
    if dataset.get("fraction") is None and dataset.get("count") is None:
        return len(split)
    return len(subset_indices(split["label"], fraction=dataset.get("fraction"), count=dataset.get("count"),
                              seed=dataset.get("subset_seed", 0)))


def test_a_dry_run_prints_the_runs_sequences_and_gpu_hours_of_its_plan(tmp_path, capsys):
    """The study as given with -p (a quarter of the data, one epoch, not the preset's 128 rows and 2 epochs):
    the printed runs and sequences are the plan's cells', counted here from the stored plan and the data
    itself, an intermediate run once; the GPU-hours are at the rates file's solo rate, with its device and
    date; fused is not measured yet. The cost comes before the argv."""
    params = ("preset=tiny", "fraction=0.25", "epochs=1", "seeds=[1]")
    code, out, err = _dry_run(capsys, tmp_path / "store", *params)
    assert code == 0, err
    match = COST.search(out)
    assert match, out
    cells = _cells(*params)
    runs = _runs_of_plan(cells)
    assert {r["regime"]["epochs"] for r in runs.values()} == {1}
    assert {r["dataset"]["fraction"] for r in runs.values()} == {0.25}
    sequences = sum(_trained_rows(r["dataset"]) * r["regime"]["epochs"] for r in runs.values())
    assert int(match[1].replace(",", "")) == len(runs) and match[2] is None
    assert int(match[3].replace(",", "")) == sequences
    assert len(runs) < len(cells) + sum(1 for r in runs.values() if r.get("after"))  # intermediates counted once
    rates = json.loads(cost.RATES_FILE.read_text())
    hours = sequences / rates["solo_seq_per_s"] / 3600
    solo = (f"{hours:.2g} GPU-hours solo at {rates['solo_seq_per_s']:,.0f} seq/s ({rates['device']}, "
            f"measured {rates['measured']}; {rates['workload']})")
    fused = sequences / rates["fused_seq_per_s"] / 3600
    assert match[4] == f"{solo}; {fused:.2g} GPU-hours fused at {rates['fused_seq_per_s']:,.0f} seq/s"
    assert out.index("cost: ") < out.index("python -m jobs.plan")
    # runs side by side are priced at their own rate, which no GPU has measured yet: said, with the solo figure
    code, out, err = _dry_run(capsys, tmp_path / "store", *params, "gpu_concurrency=2")
    assert code == 0, err
    assert rates["side_by_side_seq_per_s"] is None
    assert COST.search(out)[4] == f"side by side (gpu_concurrency 2): not measured yet; {solo}"
    # compiled runs side by side: their own rate again
    code, out, err = _dry_run(capsys, tmp_path / "store", *params, "gpu_concurrency=2", "compile=true")
    assert code == 0, err
    assert rates["compiled_side_by_side_seq_per_s"] is None
    assert COST.search(out)[4] == f"compiled side by side (gpu_concurrency 2, compile true): not measured yet; {solo}"


def test_a_malformed_rates_file_is_named_in_the_cost_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "measured_rates.json"
    bad.write_text(json.dumps({"device": "NVIDIA H200", "measured": "2026-11-26", "source": "docs",
                               "solo_seq_per_s": "fast", "fused_seq_per_s": None}))
    monkeypatch.setattr(cost, "RATES_FILE", bad)
    code, out, err = _dry_run(capsys, tmp_path / "store", "preset=tiny", "seeds=[1]")
    assert code == 0 and "Traceback" not in out + err, err
    (line,) = [x for x in out.splitlines() if x.startswith("cost: ")]
    assert line.endswith(f"; GPU-hours: no measured rate (measured rates file {bad}: 'solo_seq_per_s' is \"fast\" "
                         f"(expected {cost.RATES_EXPECTED}))")
    assert COST.match(line)  # the runs and sequences do not depend on the rates


@pytest.mark.parametrize(("text", "what"), [
    (None, "not found"),
    ("{", "not JSON (Expecting property name enclosed in double quotes, line 1 column 2)"),
    ("[651]", "a JSON list, not an object"),
    ('{"device": "H200", "measured": "2026-11-26", "source": "docs", "fused_seq_per_s": null}',
     "'solo_seq_per_s' is missing"),
    ('{"device": "H200", "measured": "2026-11-26", "source": "docs", "solo_seq_per_s": 0, "fused_seq_per_s": null}',
     "'solo_seq_per_s' is 0"),
    ('{"device": "H200", "measured": "yesterday", "source": "docs", "solo_seq_per_s": 651}',
     "'measured' is 'yesterday', not a date"),
    ('{"device": "", "measured": "2026-11-26", "source": "docs", "solo_seq_per_s": 651}', "'device' is \"\""),
    ('{"device": "H200", "measured": "2026-11-26", "source": "docs", "solo_seq_per_s": 651, "fused_seq_per_s": true}',
     "'fused_seq_per_s' is true"),
])
def test_a_bad_rates_file_is_one_line_naming_the_file_and_what_it_must_hold(tmp_path, text, what):
    path = tmp_path / "rates.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(BadInput) as e:
        cost.load_rates(path)
    assert str(e.value) == f"measured rates file {path}: {what} (expected {cost.RATES_EXPECTED})"
    assert "\n" not in str(e.value)


def test_the_packaged_rates_are_the_last_gpu_measurement():
    rates = cost.load_rates()
    assert (rates.device, rates.measured, rates.solo_seq_per_s, rates.fused_seq_per_s) == (
        "NVIDIA H200", "2026-11-28", 2706.0, 1784.0)
    assert (rates.side_by_side_seq_per_s, rates.compiled_seq_per_s, rates.compiled_side_by_side_seq_per_s) == (
        None, None, None)  # not measured yet
    page = (REPO / "docs" / "measurements.md").read_text()  # where they are written up
    assert "| fixed 128 | 1,604 | 3.3 s | 2,706 |" in page and "| fused, CUDA graphs | 8 | 1,784 |" in page


def test_every_task_has_a_hub_training_size_and_subsets_as_prepare_data_does():
    assert set(cost.TRAIN_SIZES) == set(tasks.TASKS)
    for rows in (1, 7, 635, 2_490):
        for fraction in (0.001, 0.006, 0.01, 0.1, 0.25, 0.5, 1.0):
            assert cost.subset_rows(rows, fraction, None) == len(subset_indices([0] * rows, fraction=fraction, seed=0))
        assert cost.subset_rows(rows, None, 1) == 1 and cost.subset_rows(rows, None, None) == rows


def test_a_run_with_regime_none_trains_nothing():
    """crosslingual-mlm's native BERTje is evaluated as built: a run, with no training sequences."""
    doc = yaml.safe_load((REPO / "workflows" / "crosslingual-mlm.yaml").read_text())
    params = {p["name"]: str(p["value"]) for p in doc["spec"]["arguments"]["parameters"]}
    spec, _ = StudySpec.from_params(params.pop("study"), params)
    cells = spec.cells()
    work = cost.training_work(cells)
    trained = [c for c in cells if c.run.regime.name != "none"]
    assert work.runs == len(cells) and work.untrained == len(cells) - len(trained) > 0
    assert work.sequences == sum(cost.TRAIN_SIZES[c.run.dataset.task] * c.run.regime.epochs for c in trained)
