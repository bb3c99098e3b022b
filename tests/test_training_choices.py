"""Training choices where Hugging Face's run_glue (whose defaults a study assumes where its report is silent)
could differ from the loop: batching (`group_by_length`, off by default in a study: run_glue's random
batches) and precision (bf16 autocast on a GPU, kept and said). Each is visible in the study's settings."""

from __future__ import annotations

import json

import pytest

from bertology.errors import BadInput
from bertology.results.report.document import settings
from bertology.results.study_results import with_defaults
from bertology.spec import CheckpointSpec, DatasetSpec, Regime, RunSpec
from bertology.study import PARAMS, StudySpec

EN = "google-bert/bert-base-uncased"


def _run(regime: Regime) -> RunSpec:
    return RunSpec(CheckpointSpec(EN), DatasetSpec("rte", "hub", EN), regime)


def test_a_study_trains_on_random_batches_unless_told_and_every_preset_does_too():
    assert PARAMS["group_by_length"] == ("bool", "false")
    for preset in ("paper", "demo", "tiny"):
        spec, changes = StudySpec.from_params("s", {"preset": preset})
        assert not spec.regime.group_by_length and all(not c.run.regime.group_by_length for c in spec.cells())
        assert not any("group_by_length" in change for change in changes)
    grouped, _ = StudySpec.from_params("s", {"group_by_length": "true"})
    assert all(c.run.regime.group_by_length for c in grouped.cells())
    with pytest.raises(BadInput, match="parameter 'group_by_length' must be true or false, got 'maybe'"):
        StudySpec.from_params("s", {"group_by_length": "maybe"})


def test_runs_made_before_the_setting_keep_their_ids_and_random_batches_get_their_own():
    """Every run before the setting was length-grouped: a spec without the key reads as grouped and keeps
    its id, so a store's grouped runs are never reused for random batches."""
    old = _run(Regime())
    assert Regime.from_dict({}).group_by_length and "group_by_length" not in old.regime.to_dict()
    assert _run(Regime.from_dict({"group_by_length": True})).id == old.id
    assert RunSpec.from_dict(json.loads(json.dumps(old.to_dict()))).id == old.id
    random = _run(Regime(group_by_length=False))
    assert random.regime.to_dict()["group_by_length"] is False and random.id != old.id
    assert RunSpec.from_dict(json.loads(json.dumps(random.to_dict()))).id == random.id
    with pytest.raises(BadInput, match="group_by_length must be true or false, got 'yes'"):
        Regime.from_dict({"group_by_length": "yes"})


def _settings(params: dict) -> str:
    spec, _ = StudySpec.from_params("s", params)
    return settings(with_defaults(json.loads(json.dumps(spec.to_dict()))))


def test_the_settings_line_says_how_batches_were_drawn_and_in_which_precision():
    paper = _settings({})
    assert "Training batches: random, as run_glue draws them (`group_by_length=false`)" in paper
    assert "bf16 autocast on a GPU (run_glue computes in fp32" in paper and "fp32 on CPU." in paper
    grouped = _settings({"group_by_length": "true"})
    assert "Training batches: of similar-length examples (`group_by_length=true`; run_glue's are random)" in grouped
    variants = json.dumps([{"name": "a", "interventions": []},
                           {"name": "b", "interventions": [], "regime": {"group_by_length": True}}])
    assert "random, as run_glue draws them (`group_by_length=false`), except `b` (its own" in _settings(
        {"variants": variants})
    # a plan from before the setting has no key in its regime: its runs were grouped
    old = with_defaults({"preset": "paper", "models": [EN], "seeds": [1],
                         "regime": {"name": "full", "lr": 2e-5, "batch_size": 32, "epochs": 3},
                         "variants": [{"name": "a"}]})
    assert "Training batches: of similar-length examples" in settings(old)


def test_every_studys_header_discloses_its_batches_and_precision_and_a_study_can_group():
    """Each header says its unstated settings are a Hugging Face script's defaults: the two choices where the
    loop could differ are said there too; and `-p group_by_length=true` reaches plan through the templates."""
    import re
    from pathlib import Path

    import yaml

    workflows = Path(__file__).resolve().parents[1] / "workflows"
    for path in sorted(workflows.glob("*.yaml")):
        if path.stem == "vocab-overlap":  # trains nothing
            continue
        header = " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
        header = re.sub(r"\s+", " ", header)
        assert "Batches and precision, disclosed: training batches are random" in header, path.name
        assert "bf16 autocast" in header and "its effect on the numbers is not measured" in header, path.name
    for template in ("study", "nightly-regression"):
        doc = yaml.safe_load((workflows / "templates" / f"{template}.yaml").read_text())
        assert "group_by_length" in {p["name"] for p in doc["spec"]["arguments"]["parameters"]}, template
    steps = (workflows / "templates" / "steps.yaml").read_text()
    assert '"group_by_length={{inputs.parameters.group_by_length}}"' in steps
