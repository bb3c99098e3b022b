import pytest

from bertology.errors import BadInput
from bertology.spec import (
    Cell,
    CheckpointSpec,
    DatasetSpec,
    Intervention,
    Regime,
    RunSpec,
    canonical_json,
    content_id,
    parse_json_arg,
)


def test_canonical_json_sorts_keys_and_normalises_integral_floats():
    assert canonical_json({"b": 1, "a": [3.0, 2e-5]}) == '{"a":[3,2e-05],"b":1}'
    assert content_id("run", {"x": 3}) == content_id("run", {"x": 3.0})


def test_non_finite_numbers_are_refused():
    with pytest.raises(BadInput, match="non-finite"):
        canonical_json({"lr": float("nan")})


def test_ids_depend_on_content_and_kind_but_not_on_key_order():
    a = CheckpointSpec.from_dict({"model": "m", "interventions": [{"name": "reinit", "params": {"scope": "all", "std": 0.02}}]})
    b = CheckpointSpec.from_dict({"interventions": [{"params": {"std": 0.02, "scope": "all"}, "name": "reinit"}], "model": "m"})
    assert a.id == b.id and len(a.id) == 16
    assert a.id != CheckpointSpec("m").id
    assert CheckpointSpec("m", seed=1).id != CheckpointSpec("m", seed=0).id


def test_roundtrip_through_json_keeps_the_id():
    run = RunSpec(CheckpointSpec("tiny:bert", (Intervention("reverse-layers"),)),
                  DatasetSpec("sst2", "synthetic", "tiny:bert", 32, count=64), Regime(lr=1e-3), seed=2)
    cell = Cell("s", "reversed", "tiny:bert", run)
    again = Cell.from_dict(parse_json_arg(canonical_json(cell), "--spec"))
    assert again == cell and again.run.id == run.id
    assert cell.labels()["run_id"] == run.id


def test_labels_are_not_part_of_the_run_id():
    run = RunSpec(CheckpointSpec("m"), DatasetSpec("rte", tokenizer="m"))
    assert Cell("a", "x", "m", run).run.id == Cell("b", "y", "m", run).run.id


@pytest.mark.parametrize("payload, message", [
    ({"model": "m", "colour": 1}, "unknown key 'colour' in checkpoint spec"),
    ({"interventions": []}, "checkpoint spec is missing 'model'"),
    ({"model": "m", "seed": -1}, "intervention seed must be >= 0"),
    ({"model": "m", "interventions": "reinit"}, "interventions must be a list"),
])
def test_bad_checkpoint_specs_name_the_problem(payload, message):
    with pytest.raises(BadInput, match=message):
        CheckpointSpec.from_dict(payload)


def test_bad_dataset_and_regime_values():
    with pytest.raises(BadInput, match="fraction must be in"):
        DatasetSpec.from_dict({"task": "rte", "tokenizer": "m", "fraction": 1.5})
    with pytest.raises(BadInput, match="not both"):
        DatasetSpec.from_dict({"task": "rte", "tokenizer": "m", "fraction": 0.5, "count": 10})
    with pytest.raises(BadInput, match="unknown regime 'gradual'"):
        Regime.from_dict({"name": "gradual"})
    with pytest.raises(BadInput, match="epochs must be an integer"):
        Regime.from_dict({"epochs": 2.5})


def test_parse_json_arg_is_one_line_and_names_the_argument():
    with pytest.raises(BadInput) as e:
        parse_json_arg('{"a": ', "--spec")
    assert "--spec is not valid JSON" in str(e.value) and "\n" not in str(e.value)


def test_a_regime_schedule_is_part_of_the_run_id_and_roundtrips():
    ds = DatasetSpec("rte", tokenizer="m")
    full = RunSpec(CheckpointSpec("m"), ds, Regime())
    frozen = RunSpec(CheckpointSpec("m"), ds, Regime.from_dict({"name": "freeze", "train_layers": [10, 11]}))
    gradual = RunSpec(CheckpointSpec("m"), ds, Regime.from_dict({"name": "gradual-unfreeze", "unfreeze_per_epoch": 2}))
    assert len({full.id, frozen.id, gradual.id}) == 3
    assert "train_layers" not in full.to_dict()["regime"]
    assert RunSpec.from_dict(frozen.to_dict()) == frozen and frozen.regime.train_layers == (10, 11)
    with pytest.raises(BadInput, match="train_layers must be"):
        Regime.from_dict({"name": "freeze", "train_layers": 3})


def test_being_fused_is_part_of_a_run_id_and_every_id_made_before_it_still_holds():
    """A run trained fused with others (the study parameter fuse) computes something else than the run alone
    (float noise, the group's shared dropout draws), so `fused: true` is part of its id; at its default it is
    left out, so the ids made before it existed hold (this one was computed before `fused` existed)."""
    model = "google-bert/bert-base-uncased"
    alone = RunSpec(CheckpointSpec(model), DatasetSpec("rte", tokenizer=model), Regime(lr=3e-5, eval_every=50), seed=2)
    assert alone.id == "2c3efa35a4fe6fad"
    assert "fused" not in alone.to_dict()["regime"] and "fused" not in alone.to_dict(execution=False)["regime"]
    fused = RunSpec(alone.checkpoint, alone.dataset, Regime(lr=3e-5, eval_every=50, fused=True), seed=2)
    assert fused.id != alone.id and fused.to_dict(execution=False)["regime"]["fused"] is True
    assert RunSpec.from_dict(fused.to_dict()) == fused and RunSpec.from_dict(alone.to_dict()) == alone
    assert RunSpec.from_dict({**alone.to_dict(), "regime": {**alone.to_dict()["regime"], "fused": False}}).id == alone.id
    with pytest.raises(BadInput, match="fused must be true or false, got 'yes'"):
        Regime.from_dict({"fused": "yes"})
