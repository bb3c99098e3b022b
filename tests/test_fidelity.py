"""Each study computes what its report computed: the settings the reports state, pinned by their words.

Every quoted string below is checked against the paper text in ../shared/papers/ where that is present, so
a quote cannot drift from its source.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
import torch
import yaml

from bertology.errors import BadInput
from bertology.results import conventions
from bertology.study import PARAMS, StudySpec, unmark
from bertology.train.regimes import layer_set

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / "workflows"
PAPERS = REPO.parent / "shared" / "papers"


def quoted(paper: str, words: str) -> str:
    """The words, after checking that the report says them (whitespace-insensitive), where its text is here."""
    path = PAPERS / f"{paper}.txt"
    if path.exists():
        text = re.sub(r"\s+", " ", path.read_text())
        assert re.sub(r"\s+", " ", words) in text, f"{paper} does not say: {words!r}"
    return words


def workflow_params(study: str) -> dict[str, str]:
    """The parameters a study's Workflow passes (its `arguments`), as plan receives them."""
    doc = yaml.safe_load((WORKFLOWS / f"{study}.yaml").read_text())
    params = {p["name"]: str(p["value"]) for p in doc["spec"]["arguments"]["parameters"]}
    assert params.pop("study") == study
    return params


def study(name: str, **overrides: str) -> StudySpec:
    return StudySpec.from_params(name, {**workflow_params(name), **overrides})[0]


def chain(spec: StudySpec, variant: str) -> list[dict]:
    return [i.to_dict() for i in next(v for v in spec.variants if v.name == variant).interventions]


# 1. Shuffled embeddings, English tokens only (monolingual report, Tables 4 and 6)

@pytest.mark.parametrize("name", ["shuffled-embeddings", "init-distribution"])
def test_shuffled_embeddings_map_english_tokens_to_english_vectors_only(name):
    quoted("monolingual-pretraining-benefits", "we only map English tokens to English embedding vectors")
    assert chain(study(name), "shuffled") == [{"name": "shuffle-embeddings", "params": {"english_only": True}}]


# 2. English embeddings: clean is clean word embeddings, and the EN row (monolingual report, Table 5)

def test_english_embeddings_clean_reinitialises_the_word_embeddings_only():
    quoted("monolingual-pretraining-benefits", "a model with randomly initialized embeddings (clean)")
    spec = study("english-embeddings")
    assert chain(spec, "clean") == [{"name": "reinit", "params": {"scope": "word-embeddings"}}]
    # the same clean model as Table 4's clean column (shuffled-embeddings), so one checkpoint serves both
    table4 = study("shuffled-embeddings")
    ours = {c.run.checkpoint.id for c in spec.cells() if c.variant == "clean"}
    theirs = {c.run.checkpoint.id for c in table4.cells() if c.variant == "clean"}
    assert ours <= theirs


def test_english_embeddings_has_the_english_row_without_swapping_english_into_english():
    quoted("monolingual-pretraining-benefits", "This modification is applied only to non-English pre-trained models.")
    spec = study("english-embeddings")
    english = "google-bert/bert-base-uncased"
    by_model: dict[str, set[str]] = {}
    for cell in spec.cells():
        by_model.setdefault(cell.model, set()).add(cell.variant)
    assert by_model[english] == {"base", "clean"}  # Table 5's EN column: base, NA, clean
    assert all(variants == {"base", "english", "clean"} for m, variants in by_model.items() if m != english)
    assert len(by_model) == 5
    # under the tiny preset every model is the stand-in, and the swap still runs as a smoke test
    tiny = study("english-embeddings", preset="tiny")
    assert {c.variant for c in tiny.cells()} == {"base", "english", "clean"}


def test_english_embeddings_runs_read_the_english_tokenizers_word_pieces():
    quoted("monolingual-pretraining-benefits", "The tokenizer and word-piece embeddings from the non-English pre-trained "
           "model are replaced with the ones from the English pre-trained model.")
    english = "google-bert/bert-base-uncased"
    cells = study("english-embeddings").cells()
    for cell in cells:  # each run's data is tokenized with its checkpoint's tokenizer: the donor's for english
        assert cell.run.dataset.tokenizer == (english if cell.variant == "english" else cell.model), cell
    for model in {c.model for c in cells if c.variant == "english"}:
        data: dict[str, set[str]] = {}
        for c in cells:
            if c.model == model and c.run.dataset.task == "rte":
                data.setdefault(c.variant, set()).add(c.run.dataset.id)
        assert data["base"] == data["clean"] and data["base"].isdisjoint(data["english"]), model
    # the english rows of all four foreign models read the same English word-pieces: one dataset per task
    assert len({c.run.dataset.id for c in cells if c.variant == "english" and c.run.dataset.task == "rte"}) == 1


# 3. Cross-lingual MLM: the last 1, 3, 6 and 12 layers, three runs, 10,000 evaluation sentences

def test_crosslingual_trains_the_last_1_3_6_12_layers_over_three_runs():
    quoted("crosslingual-finetuning-representations", "we train the last 1, 3, 6, 12 layers of BERT")
    quoted("crosslingual-finetuning-representations",
           "the second run fine-tunes only layers from 6 to 12, the third run fine-tunes only layers from 9 to 12, "
           "the fourth run fine-tunes only layers from 11 to 12")
    spec = study("crosslingual-mlm")
    trained = {v.name: spec.regime_of(v).train_layers for v in spec.variants if spec.regime_of(v).name == "freeze"}
    # half-open ranges of 12 layers: 0-12 is all 12, 6-12 the last 6, 9-12 the last 3, 11-12 the last 1
    assert trained == {"all layers": "from:0", "last 6": "last:6", "last 3": "last:3", "last 1": "last:1"}
    counts = {name: sorted(layer_set(layers, 12)) for name, layers in trained.items()}  # of BERT-base's 12
    assert counts == {"all layers": list(range(12)), "last 6": list(range(6, 12)), "last 3": [9, 10, 11],
                      "last 1": [11]}
    assert "assumed: its\n# labels 0-12, 6-12" in (WORKFLOWS / "crosslingual-mlm.yaml").read_text()
    quoted("crosslingual-finetuning-representations", "measured across three different runs")
    assert len(spec.seeds) == 3
    quoted("crosslingual-finetuning-representations",
           "our validation and test sets each have 10,000 sentences. The XNLI set used also has 10,000 sentences")
    assert {c.run.dataset.eval_count for c in spec.cells()} == {10_000}
    quoted("crosslingual-finetuning-representations", "batch size of 8, learning rate of 5×10^{-5}")
    assert (spec.regime.batch_size, spec.regime.lr, spec.regime.epochs) == (8, 5e-5, 3)


# 4. Layer-wise reinit: only SQuAD sampled, at batch size 1 (college report, Experiment 2)

def test_layerwise_reinit_samples_only_squad_at_batch_size_1():
    quoted("bert-goes-to-college", "SQuAD plot generated with 10% dataset sampling")
    quoted("bert-goes-to-college", "batch size was 1 for SQuAD (due to limited CUDA memory). For GLUE tasks, "
                                   "we used a batch size of 32")
    spec = study("layerwise-reinit")
    runs = {c.run.dataset.task: c.run for c in spec.cells()}
    squad = runs.pop("squad2")
    assert (squad.dataset.fraction, squad.regime.batch_size) == (0.1, 1)
    assert (squad.dataset.max_length, squad.dataset.doc_stride) == (384, 128)
    assert set(runs) == {"rte", "stsb", "cola", "mrpc"}
    for run in runs.values():  # the GLUE tasks use all their training data, at batch size 32
        assert (run.dataset.fraction, run.dataset.count, run.regime.batch_size) == (None, None, 32)
        assert run.dataset.max_length == 128
    quoted("bert-goes-to-college", "Our learning rate was $2 * 10^{-5}$")
    assert spec.regime.lr == 2e-5


def test_task_settings_leave_other_tasks_run_ids_alone():
    plain = StudySpec.from_params("s", {"tasks": '["rte", "squad2"]', "seeds": "[1]"})[0]
    tuned = StudySpec.from_params("s", {"tasks": '["rte", "squad2"]', "seeds": "[1]",
                                        "task_settings": '{"squad2": {"fraction": 0.1, "batch_size": 1}}'})[0]
    ids = {c.run.dataset.task: c.run.id for c in plain.cells()}
    tuned_ids = {c.run.dataset.task: c.run.id for c in tuned.cells()}
    assert tuned_ids["rte"] == ids["rte"] and tuned_ids["squad2"] != ids["squad2"]
    assert plain.id != tuned.id
    # a task's fraction replaces the study's count for that task only
    sized = StudySpec.from_params("s", {"tasks": '["rte", "squad2"]', "count": "50",
                                        "task_settings": '{"squad2": {"fraction": 0.1}}'})[0]
    sizes = {c.run.dataset.task: (c.run.dataset.fraction, c.run.dataset.count) for c in sized.cells()}
    assert sizes == {"rte": (None, 50), "squad2": (0.1, None)}


@pytest.mark.parametrize("settings, message", [
    ('{"sst2": {"fraction": 0.1}}', "task_settings names task 'sst2', which is not one of the study's tasks"),
    ('{"rte": {"dropout": 0.1}}', "task_settings 'rte' has unknown setting 'dropout'"),
    ('{"rte": {"fraction": 0.1, "count": 5}}', "task_settings 'rte': give a fraction or a count, not both"),
    ('{"rte": {"batch_size": 0}}', "task_settings 'rte': batch_size must be >= 1"),
    ('{"rte": {"fraction": 2}}', "fraction must be in (0.0, 1.0]"),
    ('["rte"]', "parameter 'task_settings' must be a JSON object"),
])
def test_bad_task_settings_are_one_line_errors_naming_them(settings, message):
    with pytest.raises(BadInput, match=re.escape(message)) as e:
        StudySpec.from_params("s", {"tasks": '["rte"]', "task_settings": settings})
    assert "\n" not in str(e.value)


def test_a_preset_keeps_its_own_sizes_over_a_tasks():
    spec, changes = StudySpec.from_params("layerwise-reinit", {**workflow_params("layerwise-reinit"),
                                                               "preset": "tiny", "tasks": '["squad2"]'})
    run = spec.cells()[0].run
    assert (run.regime.batch_size, run.dataset.max_length, run.dataset.count) == (16, 32, 128)
    assert run.dataset.doc_stride == 128  # not a preset setting: the task's own stands
    assert any("task_settings 'squad2': batch_size, fraction, max_length dropped" in c for c in changes)


# 5. Fine-tuning hyper-parameters: what the reports state, else their scripts' defaults

def test_no_warmup_and_no_weight_decay_unless_a_report_says_so():
    reports = [PAPERS / f"{p}.txt" for p in ("monolingual-pretraining-benefits", "bert-goes-to-college",
                                             "crosslingual-finetuning-representations", "partial-reinitialization")]
    for path in (p for p in reports if p.exists()):
        text = path.read_text().lower()
        assert "weight decay of" not in text and "warmup ratio" not in text and "warm-up ratio" not in text
    assert (PARAMS["warmup_ratio"][1], PARAMS["weight_decay"][1]) == ("0", "0")
    for path in sorted(WORKFLOWS.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc.get("spec", {}).get("workflowTemplateRef", {}).get("name") != "bertology-study":
            continue
        spec = study(path.stem)
        assert (spec.regime.warmup_ratio, spec.regime.weight_decay) == (0.0, 0.0), path.stem


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_workflow_header_says_where_each_setting_comes_from(path):
    header = " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
    header = re.sub(r"\s+", " ", header).lower()
    assert "from the report" in header and "assumed, because the report is silent" in header, path.stem


# 6. Random interventions per run (monolingual report §7)

REINIT = '[{"name": "clean", "interventions": [{"name": "reinit", "params": {"scope": "all"}}]}]'
REVERSED = '[{"name": "reversed", "interventions": [{"name": "reverse-layers"}]}]'


def checkpoints(variants: str, **params: str) -> dict[int, object]:
    spec = StudySpec.from_params("s", {"preset": "tiny", "tasks": '["rte"]', "seeds": "[1, 2]",
                                       "variants": variants, **params})[0]
    return {c.run.seed: c.run.checkpoint for c in spec.cells()}


def test_a_random_intervention_is_drawn_afresh_for_each_training_seed(tmp_path):
    quoted("monolingual-pretraining-benefits", "performed three times with no fixed random seed")
    from bertology.steps.build_checkpoint import make_checkpoint

    by_seed = checkpoints(REINIT)
    assert by_seed[1].id != by_seed[2].id and (by_seed[1].seed, by_seed[2].seed) == (1, 2)
    weights = []
    for seed, spec in by_seed.items():
        make_checkpoint(spec, tmp_path / str(seed))
        weights.append(_word_embeddings(tmp_path / str(seed)))
    assert not torch.equal(*weights)


def test_a_deterministic_chain_and_a_fixed_intervention_seed_share_one_checkpoint():
    reversed_ = checkpoints(REVERSED)
    assert reversed_[1] == reversed_[2] and reversed_[1].seed == 0
    fixed = checkpoints(REINIT, intervention_seed="7")
    assert fixed[1] == fixed[2] and fixed[1].seed == 7
    assert checkpoints(REINIT, intervention_seed="run")[1].seed == 1
    with pytest.raises(BadInput, match="parameter 'intervention_seed' must be run"):
        checkpoints(REINIT, intervention_seed="-1")


def test_the_pre_trained_weights_are_the_same_whatever_the_intervention_seed(tmp_path):
    """Only the intervention's draw follows the seed: what it leaves alone is the pre-trained model."""
    from bertology.steps.build_checkpoint import make_checkpoint

    variants = '[{"name": "clean-emb", "interventions": [{"name": "reinit", "params": {"scope": "word-embeddings"}}]}]'
    layers = []
    for seed, spec in checkpoints(variants).items():
        make_checkpoint(spec, tmp_path / str(seed))
        layers.append(_tensor(tmp_path / str(seed), "encoder.layer.0.attention.self.query.weight"))
    assert torch.equal(*layers)


def _tensor(directory: Path, suffix: str) -> torch.Tensor:
    from safetensors.torch import load_file

    state = load_file(str(directory / "model.safetensors"))
    return next(v for k, v in state.items() if k.endswith(suffix))


def _word_embeddings(directory: Path) -> torch.Tensor:
    return _tensor(directory, "word_embeddings.weight")


def test_study_ids_keep_the_new_parameters_out_when_unused():
    spec = StudySpec.from_params("s", {})[0]
    d = spec.to_dict()
    assert "task_settings" not in d and "not_applied" not in d and d["intervention_seed"] is None
    json.dumps(d)


def own_report(path: Path) -> str:
    """The report a workflow reproduces: its study label (the nightly regression is reversed-layers)."""
    label = yaml.safe_load(path.read_text())["metadata"]["labels"]["bertology/study"]
    return conventions.STUDY_PAPERS[label]


def header_quotes(path: Path) -> list[str]:
    prose = [line for line in path.read_text().splitlines() if line.startswith("#") and not line.startswith("#  ")]
    header = " ".join(line.lstrip("# ") for line in prose)  # the usage lines (indented) hold JSON, not quotes
    return re.findall(r'"([^"]+)"', re.sub(r"\s+", " ", header))


@pytest.mark.skipif(not PAPERS.exists(), reason="the reports' text is not here")
@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_quote_in_a_workflow_header_is_in_its_own_report(path):
    report = re.sub(r"\s+", " ", (PAPERS / f"{own_report(path)}.txt").read_text())
    for quote in header_quotes(path):
        assert quote in report, f"{path.stem}: {quote!r} is not in {own_report(path)}"


@pytest.mark.skipif(not PAPERS.exists(), reason="the reports' text is not here")
def test_a_quote_from_another_report_is_refused():
    """The check reads the study's own report only: a college quote in a monolingual header fails."""
    college = re.sub(r"\s+", " ", (PAPERS / "bert-goes-to-college.txt").read_text())
    mono = re.sub(r"\s+", " ", (PAPERS / "monolingual-pretraining-benefits.txt").read_text())
    quote = "Our learning rate was $2 * 10^{-5}$"
    assert quote in college and quote not in mono
    assert own_report(WORKFLOWS / "reversed-layers.yaml") == "monolingual-pretraining-benefits"
    assert own_report(WORKFLOWS / "nightly-regression.yaml") == "monolingual-pretraining-benefits"


# 7. Model selection: the best epoch where the report selects, the last where it does not

SELECTS = {"best": ("reversed-layers", "foreign-bert", "shuffled-embeddings", "english-embeddings",
                    "init-distribution", "layer-removal", "crosslingual-mlm"),
           "last": ("sequential-finetune", "layerwise-reinit", "head-reinit", "partial-reinit", "probing",
                    "weight-similarity")}


@pytest.mark.parametrize("rule, name", [(r, n) for r, names in SELECTS.items() for n in names])
def test_each_study_states_its_selection_rule_and_uses_it(rule, name):
    spec = study(name)
    assert spec.regime.selection == rule and unmark(workflow_params(name)["selection"]) == (rule, True)
    assert {c.run.regime.selection for c in spec.cells()} == {rule}
    header = re.sub(r"\s+", " ", " ".join(line.lstrip("# ") for line in
                                          (WORKFLOWS / f"{name}.yaml").read_text().splitlines() if line.startswith("#")))
    assert f"selection={rule}" in header
    paper = conventions.of_study(name).selection
    assert paper is not None and paper[0] == rule  # the study follows what its report did


def test_the_reports_say_how_they_select():
    quoted("monolingual-pretraining-benefits", "the best epoch of the best run is reported")
    quoted("monolingual-pretraining-benefits", "performed once and the best epoch is reported")
    quoted("crosslingual-finetuning-representations",
           "Early stopping is followed based on the best validation accuracy at every 100 steps")
    quoted("bert-goes-to-college", "For each experiment, we run for 3 epochs after reinitializing the relevant layers")
    quoted("bert-goes-to-college", "We finetune with 3 epochs on the first finetuning task, and then 3 epochs on "
                                   "the second finetuning task")
    quoted("partial-reinitialization", "between the *bert-pretrained* and *bert-finetuned* models")


def test_the_selection_is_part_of_a_run_id_and_absent_at_its_default():
    best = StudySpec.from_params("s", {"tasks": '["rte"]', "seeds": "[1]"})[0].cells()[0].run
    last = StudySpec.from_params("s", {"tasks": '["rte"]', "seeds": "[1]", "selection": "last"})[0].cells()[0].run
    assert best.id != last.id  # a run made with one rule is never reused for the other
    assert "selection" not in best.to_dict()["regime"]  # ids made before the setting existed still hold
    assert last.to_dict()["regime"]["selection"] == "last"
    per_variant = StudySpec.from_params("s", {"tasks": '["rte"]', "seeds": "[1]", "variants": json.dumps(
        [{"name": "a", "interventions": []}, {"name": "b", "interventions": [], "regime": {"selection": "last"}}])})[0]
    assert {c.variant: c.run.regime.selection for c in per_variant.cells()} == {"a": "best", "b": "last"}
    with pytest.raises(BadInput, match="selection must be one of best, last .*got 'first'") as e:
        StudySpec.from_params("s", {"selection": "first"})
    assert "\n" not in str(e.value)


# 8. Sequential fine-tuning: twice, the better score (college report, Experiment 1)

def test_sequential_finetuning_runs_each_pair_twice():
    quoted("bert-goes-to-college", "rather than running the experiment twice and taking the better score")
    spec = study("sequential-finetune")
    assert spec.seeds == (1, 2)
    pairs = {(c.run.dataset.task, c.run.after.dataset.task if c.run.after else None) for c in spec.cells()}
    assert len(spec.cells()) == 2 * len(pairs) == 2 * 4 * 5


# 9. Layer-wise re-initialisation's range (college report: §4.4 against §5.3.2)

def test_layerwise_reinit_follows_the_procedure_not_the_literal_scipy_call(tmp_path):
    quoted("bert-goes-to-college", "the bounds are $a = -0.04$ and $b = 0.04$, with mean $\\mu = 0$ and standard "
                                   "deviation $\\sigma = 0.02$")
    quoted("bert-goes-to-college", "Our reinitialization uses *scipy.stats.truncnorm.rvs* with -0.02 and 0.02 as "
                                   "the range")
    quoted("bert-goes-to-college", "We reinitialize all pre-trained layers except the embeddings using the same "
                                   "initialization scheme as the original BERT pretrained layers")
    from scipy.stats import truncnorm

    literal = truncnorm.rvs(-0.02, 0.02, size=100_000, random_state=0)  # scale 1: N(0, 1) cut to ±0.02
    assert abs(literal).max() <= 0.02 and literal.std() == pytest.approx(0.02 / 3 ** 0.5, rel=0.01)  # ~uniform
    from bertology.steps.build_checkpoint import make_checkpoint

    spec = study("layerwise-reinit", preset="tiny")
    variant = next(v for v in spec.variants if v.name == "reinit from 1")
    assert chain(spec, "reinit from 1") == [{"name": "reinit", "params": {
        "scope": "layers", "layers": "from:0", "layer_norms": True}}, {"name": "reinit", "params": {"scope": "pooler"}}]
    make_checkpoint(spec.checkpoint(spec.models[0], variant, 1), tmp_path)
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "model.safetensors"))
    drawn = torch.cat([t.flatten() for k, t in weights.items() if k.endswith("dense.weight") and ".layer." in k])
    assert drawn.abs().max() <= 0.04  # cut at ±2 sd
    assert drawn.std().item() == pytest.approx(0.02 * 0.8796, rel=0.05)  # a normal of sd 0.02 cut at ±2 sd
    norms = [t for k, t in weights.items() if "LayerNorm" in k and ".layer." in k]
    assert norms and all(torch.all(t == (1.0 if k.endswith("weight") else 0.0)) for k, t in weights.items()
                         if "LayerNorm" in k and ".layer." in k)


# 10. Partial re-initialisation's sizes (partial-reinitialization report, §4.3.1)

def test_partial_reinit_sizes_follow_the_report_per_task():
    quoted("partial-reinitialization", "We focus on two downstream tasks, QNLI and SST-2 and investigate three "
                                       "different sizes: 100%, 10%, 1%.")
    quoted("partial-reinitialization", "we run the experiment on 1% and 0.6% for SST-2 and QNLI respectively")
    spec = study("partial-reinit")
    sizes: dict[str, set] = {}
    for c in spec.cells():
        sizes.setdefault(c.run.dataset.task, set()).add(c.run.dataset.fraction)
    assert sizes == {"sst2": {None, 0.1, 0.01, 0.006}, "qnli": {None, 0.1, 0.01, 0.006}, "cola": {None}}
    # QNLI's 0.6% is 628 of its 104,743 training rows; SST-2's 1% is 673 of 67,349: "around 670 examples"
    assert (round(104_743 * 0.006), round(67_349 * 0.01)) == (628, 673)
    cola = {c.run.dataset.id for c in spec.cells() if c.run.dataset.task == "cola"}
    assert cola == {c.run.dataset.id for c in study("weight-similarity").cells()
                    if c.run.dataset.task == "cola" and c.run.dataset.fraction is None}  # 1 is all the data


# 11. Probing freezes the pooler; head re-init's tensors are an assumption

def test_probing_and_head_headers_say_what_is_assumed():
    quoted("partial-reinitialization", "freeze the remaining layers' parameters, and train a classifier")
    spec = study("probing")
    from bertology.train.regimes import Schedule

    assert spec.regime.name == "probe" and not Schedule.of(spec.regime).pooler_trained()
    text = (WORKFLOWS / "probing.yaml").read_text()
    assert "the pooler is frozen too" in text and "(and pooler) trains" not in text
    head = re.sub(r"\s+", " ", (WORKFLOWS / "head-reinit.yaml").read_text())
    assert "Assumed, because the report does not say which tensors a head owns" in head


def test_plan_refuses_bad_task_settings_in_one_line_before_any_work(tmp_path):
    from types import SimpleNamespace

    from bertology.steps import plan

    params = [f"{k}={v}" for k, v in {**workflow_params("layerwise-reinit"), "preset": "tiny"}.items()]
    args = SimpleNamespace(study="layerwise-reinit", outputs=str(tmp_path / "out"),
                           param=[*params, 'task_settings={"squad": {"fraction": 0.1}}'])
    with pytest.raises(BadInput, match="task_settings names task 'squad', which is not one of the study's tasks"):
        plan.run(None, args)
    args.param = [*params, 'task_settings={"squad2": {"stride": 128}}']
    with pytest.raises(BadInput, match="task_settings 'squad2' has unknown setting 'stride'"):
        plan.run(None, args)
    assert not (tmp_path / "out").exists()


# 12. The oracle initialisation: each weight matrix's elements shuffled (monolingual report §5.2, Table 6)

ORACLE_GLOBS = ["*_embeddings.weight", "*.attention.self.*.weight", "*encoder.layer.*.dense.weight",
                "*pooler.dense.weight"]


def _workflow_header(name: str) -> str:
    lines = [line.lstrip("# ") for line in (WORKFLOWS / f"{name}.yaml").read_text().splitlines() if line.startswith("#")]
    return re.sub(r"\s+", " ", " ".join(lines))


def _oracle_all_tensors() -> str:
    """The variants of the header's command that runs the opt-in oracle-all-tensors."""
    (command,) = [line for line in (WORKFLOWS / "init-distribution.yaml").read_text().splitlines()
                  if line.startswith("#  ") and "oracle-all-tensors" in line]
    return re.search(r"-p variants='(.+)'", command)[1]


def test_the_oracle_shuffles_each_weight_matrix_and_names_its_globs():
    words = quoted("monolingual-pretraining-benefits", "for each weight matrix, we shuffle its elements.")
    quoted("monolingual-pretraining-benefits", "By re-permute elements within each weight matrix")
    spec = study("init-distribution")
    assert chain(spec, "oracle") == [{"name": "permute-within", "params": {"tensors": ORACLE_GLOBS}}]
    header = _workflow_header("init-distribution")
    assert f'"{words.rstrip(".")}"' in header
    assert all(f"`{glob}`" in header for glob in ORACLE_GLOBS)
    assert "Assumed: that the embeddings count as weight matrices" in header
    # the wider reading is opt-in: the default study runs one oracle, as many runs as before
    assert [v.name for v in spec.variants] == ["pre-trained", "shuffled", "oracle", "norm-matched",
                                               "variance-matched", "clean"]
    assert len(spec.cells()) == (3 * 3 + 3) * 9  # three seeds for the columns Table 6 repeats, one for its own
    wide = study("init-distribution", variants=_oracle_all_tensors())
    assert [v.name for v in wide.variants] == ["oracle-all-tensors"]
    assert chain(wide, "oracle-all-tensors") == [{"name": "permute-within", "params": {}}]  # default: every tensor


def test_the_oracle_globs_select_bert_bases_weight_matrices_only():
    """On BERT-base's names (a BertForPreTraining, as a checkpoint with its masked-LM head loads): the 76
    matrices of the encoder, no bias, no LayerNorm and nothing of the pre-training head."""
    from transformers import BertConfig, BertForPreTraining, BertModel

    from bertology.interventions import tensor_globs

    tensor_globs.check(ORACLE_GLOBS, BertConfig(), "oracle")  # what plan checks, against a BertModel
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        checkpoint = BertForPreTraining(BertConfig())
        encoder = BertModel(BertConfig())
    for model, prefix in ((checkpoint, "bert."), (encoder, "")):
        chosen = {name for name, _ in tensor_globs.select(model, ORACLE_GLOBS, "oracle")}
        matrices = {n for n, p in model.named_parameters() if p.dim() == 2 and n.startswith(prefix)}
        assert chosen == matrices and len(chosen) == 76
        per_layer = {n.removeprefix(f"{prefix}encoder.layer.0.") for n in chosen if ".layer.0." in n}
        assert per_layer == {"attention.self.query.weight", "attention.self.key.weight",
                             "attention.self.value.weight", "attention.output.dense.weight",
                             "intermediate.dense.weight", "output.dense.weight"}
        assert {n for n in chosen if ".layer." not in n} == {
            f"{prefix}embeddings.{e}_embeddings.weight" for e in ("word", "position", "token_type")} | {
            f"{prefix}pooler.dense.weight"}
    assert sum(p.numel() for n, p in encoder.named_parameters() if n in
               {n for n, _ in tensor_globs.select(encoder, ORACLE_GLOBS, "oracle")}) == 109_360_128


def test_the_oracle_checkpoint_permutes_the_weight_matrices_and_leaves_the_rest_bit_identical(tmp_path):
    """The tiny preset's checkpoints, built as a study builds them: oracle against pre-trained."""
    from safetensors.torch import load_file

    from bertology.steps.build_checkpoint import make_checkpoint

    spec = study("init-distribution", preset="tiny")
    saved = {}
    for variant in ("pre-trained", "oracle"):
        chosen = next(v for v in spec.variants if v.name == variant)
        make_checkpoint(spec.checkpoint(spec.models[0], chosen, 1), tmp_path / variant)
        saved[variant] = load_file(str(tmp_path / variant / "model.safetensors"))
    before, oracle = saved["pre-trained"], saved["oracle"]
    assert before.keys() == oracle.keys()
    changed = {k for k in before if not torch.equal(before[k], oracle[k])}
    assert changed == {k for k, t in before.items() if t.dim() == 2} and len(changed) == 3 + 6 * 4 + 1
    for k in changed:  # a permutation: the same values, elsewhere
        assert torch.equal(before[k].flatten().sort().values, oracle[k].flatten().sort().values), k


def test_the_oracle_leaves_biases_layernorms_and_the_pretraining_head_alone_and_the_wide_one_does_not():
    """The tiny BERT with a pre-training head (BertForPreTraining, as a checkpoint with its masked-LM head
    loads), every tensor moved off its init values so that a permuted bias or LayerNorm shows: the oracle
    changes exactly the encoder's weight matrices and every other tensor stays bit-identical;
    oracle-all-tensors changes every parameter."""
    from test_interventions import perturbed
    from transformers import BertForPreTraining

    from bertology.interventions import apply_chain
    from bertology.models import tiny_config

    def after(variant: str, spec: StudySpec) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        model = perturbed(BertForPreTraining(tiny_config()))
        before = {k: v.clone() for k, v in model.state_dict().items()}
        return before, apply_chain(model, None, chain(spec, variant), seed=3)[0].state_dict()

    before, oracle = after("oracle", study("init-distribution", preset="tiny"))
    changed = {k for k in before if not torch.equal(before[k], oracle[k])}
    matrices = {k for k, t in before.items() if t.dim() == 2 and k.startswith("bert.")}
    tied = "cls.predictions.decoder.weight"  # the word embeddings themselves, tied
    assert changed == matrices | {tied} and len(matrices) == 28
    assert torch.equal(oracle[tied], oracle["bert.embeddings.word_embeddings.weight"])
    assert all(torch.equal(before[k], oracle[k]) for k in before.keys() - changed)  # biases, LayerNorms, cls.*
    assert {k for k in before.keys() - changed if k.startswith("cls.")} == {
        "cls.predictions.bias", "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
        "cls.seq_relationship.weight", "cls.seq_relationship.bias", "cls.predictions.decoder.bias"}
    before, everything = after("oracle-all-tensors", study("init-distribution", preset="tiny",
                                                           variants=_oracle_all_tensors()))
    assert {k for k in before if not torch.equal(before[k], everything[k])} == {
        k for k in before if k != "bert.embeddings.position_ids"}  # a buffer, not a parameter


# 13. Best of three beside one run: Tables 6 and 8 (monolingual report §7)

SECTION_7 = ("Each experiment in section 3 and section 4 is performed three times with no fixed random seed and the "
             "best epoch of the best run is reported. Each experiment in section 5 and section 6 is performed once "
             "and the best epoch is reported.")


@pytest.mark.parametrize("name, repeated, own", [
    ("init-distribution", {"pre-trained", "shuffled", "clean"}, {"oracle", "norm-matched", "variance-matched"}),
    ("layer-removal", {"base", "clean"}, {"distil", "remove last 6", "remove every 2"}),
])
def test_the_columns_a_section_5_6_table_repeats_run_three_times_and_its_own_once(name, repeated, own):
    """Table 6 (§5.2) and Table 8 (§6) repeat Table 1's and Table 4's columns (§3–4, best of three) beside
    their own one-run columns: the study runs each column as the report did, and compares like with like."""
    from bertology.results import paper_comparison as pc

    words = quoted("monolingual-pretraining-benefits", SECTION_7)
    assert f'"{words}"' in _workflow_header(name)
    spec = study(name)
    assert spec.seeds == (1, 2, 3)
    seeds: dict[str, set[int]] = {}
    for cell in spec.cells():
        seeds.setdefault(cell.variant, set()).add(cell.run.seed)
    assert seeds == {**{v: {1, 2, 3} for v in repeated}, **{v: {1} for v in own}}
    # the report's cells of those columns are its best run, the others one run
    numbers = pc.paper_numbers(name).filter(pl.col("quantity").is_in(["best", "single"]))
    quantity = dict(numbers.select("variant", "quantity").unique().iter_rows())
    printed = own & set(quantity)  # §5.1's norm- and variance-matched runs have no column ("no significant differences")
    assert quantity == {**{v: "best" for v in repeated}, **{v: "single" for v in printed}} and printed
    assert "Assumed: seeds 1, 2 and 3" in _workflow_header(name)
