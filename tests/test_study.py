import pytest

from bertology.errors import BadInput
from bertology.study import PRESETS, StudySpec

VARIANTS = ('[{"name": "pre-trained", "interventions": []}, '
            '{"name": "reversed", "interventions": [{"name": "reverse-layers"}]}]')


def test_defaults_are_the_reports_settings():
    spec, changes = StudySpec.from_params("s", {})
    assert changes == []
    assert spec.models == ("google-bert/bert-base-uncased",)
    assert (spec.regime.lr, spec.regime.batch_size, spec.regime.epochs, spec.max_length) == (2e-5, 32, 3, 128)
    assert spec.seeds == (1, 2, 3) and spec.source == "hub"


def test_params_are_typed_and_empty_means_default():
    spec, _ = StudySpec.from_params("s", {"lr": "3e-5", "epochs": "2", "tasks": '["rte"]', "seeds": "[7]",
                                          "variants": VARIANTS, "fraction": "", "count": "100"})
    assert spec.regime.lr == 3e-5 and spec.regime.epochs == 2 and spec.tasks == ("rte",)
    assert spec.sizes == ((None, 100),)
    assert [v.name for v in spec.variants] == ["pre-trained", "reversed"]


def test_expansion_is_models_x_tasks_x_variants_x_seeds_with_shared_checkpoints_and_datasets():
    spec, _ = StudySpec.from_params("s", {"tasks": '["sst2", "rte"]', "seeds": "[1, 2]", "variants": VARIANTS})
    cells = spec.cells()
    assert len(cells) == 2 * 2 * 2
    assert len({c.run.id for c in cells}) == 8
    assert len({c.run.checkpoint.id for c in cells}) == 2  # built once, used by every task and seed
    assert len({c.run.dataset.id for c in cells}) == 2  # prepared once per task
    assert spec.id == StudySpec.from_params("s", {"tasks": '["sst2","rte"]', "seeds": "[1,2]",
                                                  "variants": VARIANTS})[0].id


@pytest.mark.parametrize("preset", ["demo", "tiny"])
def test_presets_override_and_report_what_they_changed(preset):
    spec, changes = StudySpec.from_params("s", {"preset": preset})
    assert spec.models == tuple(PRESETS[preset]["models"]) and spec.source == "synthetic"
    assert any(c.startswith("models: ") for c in changes)


@pytest.mark.parametrize("params, message", [
    ({"lr": "fast"}, "parameter 'lr' must be a number, got 'fast'"),
    ({"epochs": "2.5"}, "parameter 'epochs' must be an integer"),
    ({"tasks": "sst2"}, "parameter 'tasks' must be a JSON list"),
    ({"seeds": '["a"]'}, "parameter 'seeds' must be a list of ints"),
    ({"preset": "huge"}, "unknown preset 'huge' \\(known: paper, demo, tiny\\)"),
    ({"colour": "red"}, "unknown study parameter 'colour'"),
    ({"tasks": "[]"}, "study parameter 'tasks' is empty"),
    ({"seeds": "[1, 1]"}, "seeds must be unique"),
    ({"variants": '[{"name": "a"}, {"name": "a"}]'}, "variant names must be unique"),
    ({"variants": '[{"nom": "a"}]'}, "each variant must be"),
    ({"fraction": "0.1", "count": "5"}, "not both"),
])
def test_bad_parameters_are_named(params, message):
    with pytest.raises(BadInput, match=message):
        StudySpec.from_params("s", params)


def test_the_tiny_preset_keeps_sst2_and_the_first_other_task_and_says_so():
    # sst2 first: its synthetic task is the one tiny's pre-training informs (bertology.tiny_pretrain)
    spec, changes = StudySpec.from_params("s", {"preset": "tiny"})
    assert spec.tasks == ("sst2", "cola")
    assert any(c.startswith("tasks: ") and "(first 2)" in c for c in changes)
    # a study's own tasks (marked default:) are cut to two; tasks the user passed are kept as passed
    assert StudySpec.from_params("s", {"preset": "tiny", "tasks": 'default:["rte", "cola", "stsb"]'})[0].tasks \
        == ("rte", "cola")
    assert StudySpec.from_params("s", {"preset": "tiny", "tasks": '["rte", "cola", "stsb"]'})[0].tasks \
        == ("rte", "cola", "stsb")
    assert StudySpec.from_params("s", {"preset": "tiny", "tasks": '["rte"]'})[0].tasks == ("rte",)
    assert len(StudySpec.from_params("s", {})[0].tasks) == 9  # the report's nine GLUE tasks


def test_regime_parameters_reach_every_run():
    spec, _ = StudySpec.from_params("s", {"regime": "freeze", "train_layers": "from:6"})
    assert {c.run.regime.name for c in spec.cells()} == {"freeze"}
    assert spec.regime.train_layers == "from:6"
    assert StudySpec.from_params("s", {"regime": "freeze", "train_layers": "[10, 11]"})[0].regime.train_layers == (10, 11)
    assert StudySpec.from_params("s", {"regime": "gradual-unfreeze"})[0].regime.unfreeze_per_epoch == 4
    with pytest.raises(BadInput, match="unknown regime 'distill'"):
        StudySpec.from_params("s", {"regime": "distill"})


def test_tiny_scales_a_study_size_factor_onto_its_own_count_and_a_users_count_wins():
    # partial-reinit's sizes ("100%, 10%, 1% and ~670 examples"): under tiny the first two, at 128 and 13
    # examples, not the whole synthetic training set (issue: tiny partial-reinit took 8.5 min)
    spec, changes = StudySpec.from_params("s", {"preset": "tiny", "sizes": 'default:[1, 0.1, 0.01, {"count": 670}]'})
    assert spec.sizes == ((None, 128), (None, 13))
    assert 'sizes: [1, 0.1] -> [{"count": 128}, {"count": 13}] (scaled onto the preset\'s 128 examples)' in changes
    assert StudySpec.from_params("s", {"preset": "tiny", "sizes": 'default:[{"count": 20}]'})[0].sizes == ((None, 20),)
    # count and fraction are never passed by a workflow: given, they are the user's, and win over the preset
    assert StudySpec.from_params("s", {"preset": "tiny", "count": "100"})[0].sizes == ((None, 100),)
    assert StudySpec.from_params("s", {"preset": "tiny", "fraction": "0.5"})[0].sizes == ((0.5, None),)
    assert StudySpec.from_params("s", {"preset": "tiny"})[0].sizes == ((None, 128),)


def test_tiny_lowers_a_studys_own_evaluation_cap_and_leaves_whole_splits_whole():
    # crosslingual-mlm caps its evaluation sets at the report's 10,000 sentences; its tiny run scored 400 per
    # split against the 30,522-word vocabulary at every evaluation point, most of the tiny study's time
    spec, changes = StudySpec.from_params("s", {"preset": "tiny", "eval_count": "default:10000"})
    assert spec.eval_count == 128 and "eval_count: 10000 -> 128" in changes
    assert StudySpec.from_params("s", {"preset": "tiny", "eval_count": "default:50"})[0].eval_count == 50
    assert StudySpec.from_params("s", {"preset": "tiny"})[0].eval_count is None  # whole splits stay whole
    assert StudySpec.from_params("s", {"preset": "tiny", "eval_count": "1000"})[0].eval_count == 1000  # passed
    assert StudySpec.from_params("s", {"preset": "paper", "eval_count": "default:10000"})[0].eval_count == 10000
    # a task's own cap is lowered the same way
    spec, changes = StudySpec.from_params("s", {"preset": "tiny", "tasks": '["rte"]',
                                                "task_settings": 'default:{"rte": {"eval_count": 300}}'})
    assert spec.task_settings == {"rte": {"eval_count": 128}}
    assert "task_settings 'rte': eval_count 300 -> 128" in changes
