"""The partial re-initialisation studies compute what their reports computed: which split they evaluate on,
which tensors a re-initialisation re-draws, pinned by the reports' words (checked against ../shared/papers/
where that is present, as in tests/test_fidelity.py).

- partial-reinit, probing, weight-similarity (partial-reinitialization report): its "test set" is GLUE's,
  whose labels are not public, so the runs evaluate on the dev sets and every place a reader looks says so;
- partial-reinit: Algorithm 1 re-draws each "weight" of a chosen layer; the biases keep their values;
- layerwise-reinit (college report): "all pre-trained layers except the embeddings" takes in the pooler.

What a re-initialisation changes is checked twice: on the checkpoints the tiny preset builds (a clean draw,
whose biases are already 0 and LayerNorms 1 and 0), and on a BERT with every tensor moved off those values,
so that a bias or LayerNorm reset would show; every tensor outside the expected set is bit-identical.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from test_fidelity import REPO, WORKFLOWS, chain, quoted, study

from bertology.results import conventions
from bertology.study import StudySpec

PROJECTIONS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
               "intermediate.dense", "output.dense")
LAYER_NORMS = ("attention.output.LayerNorm", "output.LayerNorm")
DEPTH = 4  # the tiny preset's BERT


def header(name: str) -> str:
    """A workflow's header comment, re-flowed."""
    lines = [line.lstrip("# ") for line in (WORKFLOWS / f"{name}.yaml").read_text().splitlines()
             if line.startswith("#")]
    return re.sub(r"\s+", " ", " ".join(lines))


def page(name: str) -> str:
    """A study's docs page as docs/study_pages.py renders it, re-flowed (Markdown's escapes undone)."""
    sys.path.insert(0, str(REPO / "docs"))
    import study_pages

    return " ".join(study_pages.unescape(study_pages.page(WORKFLOWS / f"{name}.yaml")).split())


def built(spec: StudySpec, variant: str, directory: Path) -> tuple[dict[str, torch.Tensor], set[str]]:
    """A variant's checkpoint as the study builds it (run seed 1): its tensors, and the ones its manifest
    says changed."""
    from safetensors.torch import load_file

    from bertology.steps.build_checkpoint import make_checkpoint

    chosen = next(v for v in spec.variants if v.name == variant)
    manifest, _ = make_checkpoint(spec.checkpoint(spec.models[0], chosen, 1), directory)
    return load_file(str(directory / "model.safetensors")), {t["name"] for t in manifest["tensors"] if t["changed"]}


def perturbed_after(spec: StudySpec, variant: str) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The tiny BERT as a checkpoint with its pre-training head loads (BertForPreTraining), every tensor moved
    off its init values, before and after the variant's chain."""
    from test_interventions import perturbed
    from transformers import BertForPreTraining

    from bertology.interventions import apply_chain
    from bertology.models import tiny_config

    torch.manual_seed(0)
    model = perturbed(BertForPreTraining(tiny_config()))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    return before, apply_chain(model, None, chain(spec, variant), seed=3)[0].state_dict()


def assert_changed_exactly(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], changed: set[str]):
    assert before.keys() == after.keys() and changed <= set(before)
    for name, tensor in before.items():  # inside the set: a new value; outside it: the same bytes
        assert torch.equal(tensor, after[name]) == (name not in changed), name


# 1. The partial-reinitialization report's "test set": GLUE's, whose labels are not public

@pytest.mark.parametrize("name", ["partial-reinit", "probing", "weight-similarity"])
def test_the_partial_reinitialization_studies_evaluate_on_glue_dev_and_say_why(name):
    quoted("partial-reinitialization", "We compute these metrics always on a test set which is never seen by the "
                                       "model during training.")
    quoted("partial-reinitialization", "SST-2 67k 1.8k")  # Table 1's Test column: GLUE's test set, not its dev
    from bertology.steps.timing import HUB_EXAMPLES
    from bertology.tasks.registry import get_task

    assert HUB_EXAMPLES["sst2"][1] == 872  # SST-2's dev set; the test set's 1,821 labels are not public
    spec = study(name)
    assert {get_task(c.run.dataset.task).eval_splits for c in spec.cells()} == {("validation",)}
    for text in (header(name), page(name)):  # the workflow's header and its docs page
        assert "Evaluation split, assumed" in text and "GLUE's test labels are not public" in text, name
        assert "GLUE dev set (split validation)" in text, name
    # the study's report says it beside its main table (tests/test_report_conventions.py renders one)
    evaluation = conventions.of_study(name).evaluation
    assert evaluation and "GLUE's test labels are not public" in evaluation
    assert '"always on a test set which is never seen by the model during training"' in evaluation
    others = [s for s, paper in conventions.STUDY_PAPERS.items()
              if paper not in ("partial-reinitialization", "bert-goes-to-college")]
    assert others and all(conventions.of_study(s).evaluation is None for s in others)


@pytest.mark.parametrize("name", ["sequential-finetune", "layerwise-reinit", "head-reinit"])
def test_the_college_studies_evaluate_on_dev_and_say_so(name):
    quoted("bert-goes-to-college", "Number of test examples")  # its EM's denominator (§5.2), no set named
    spec = study(name)
    assert {c.run.dataset.eval_count for c in spec.cells()} == {None}  # every dev example, SQuAD's included
    for text in (header(name), page(name)):
        assert "Evaluation split, assumed" in text and "GLUE's test labels are not public" in text, name
        assert '"Number of test examples"' in text and "GLUE dev set (split validation)" in text, name
    evaluation = conventions.of_study(name).evaluation
    assert evaluation and "Evaluation split, assumed" in evaluation and '"Number of test examples"' in evaluation


def test_squads_ten_percent_sampling_is_of_training_only():
    quoted("bert-goes-to-college", "SQuAD plot generated with 10% dataset sampling")
    (squad,) = {c.run.dataset for c in study("layerwise-reinit").cells() if c.run.dataset.task == "squad2"}
    assert (squad.fraction, squad.eval_count) == (0.1, None)  # a tenth of training, the whole dev set
    assert "SQuAD's 10% sampling is of its training set; its dev set is evaluated whole" in header("layerwise-reinit")


# 2. Partial re-initialisation: Algorithm 1 re-draws each weight matrix; the biases keep theirs

def test_partial_reinit_redraws_the_weights_of_algorithm_1_and_nothing_else(tmp_path):
    quoted("partial-reinitialization", "for $weight$ in $layer$ do")
    quoted("partial-reinitialization", "$weight \\leftarrow trunc\\_norm(\\mu = 0, \\sigma)$")
    quoted("partial-reinitialization", "We re-init all linear projections")
    quoted("partial-reinitialization", "For each selected layer, we re-initialize all six linear projections")
    quoted("partial-reinitialization", "the weight matrices of the linear projections")  # §4.5: weight = matrix
    assert chain(study("partial-reinit"), "reinit from 1") == [{"name": "reinit", "params": {
        "scope": "layers", "layers": "from:0", "biases": False}}]
    spec = study("partial-reinit", preset="tiny")
    redrawn = {f"encoder.layer.{i}.{m}.weight" for i in range(1, DEPTH) for m in PROJECTIONS}  # K = 2: layers 2..4
    # the checkpoint the study builds: the six weight matrices of layers 2..4, drawn at ±2σ; all else kept
    pretrained, _ = built(spec, "pre-trained", tmp_path / "pre-trained")
    reinit, changed = built(spec, "reinit from 2", tmp_path / "reinit")
    assert changed == redrawn
    assert_changed_exactly(pretrained, reinit, redrawn)
    assert torch.cat([reinit[k].flatten() for k in redrawn]).abs().max() <= 0.04  # "Truncates at ±2σ", σ 0.02
    # on a BERT whose biases and LayerNorms are not at their init values: those keep their bytes too
    before, after = perturbed_after(spec, "reinit from 2")
    assert_changed_exactly(before, after, {f"bert.{k}" for k in redrawn})
    text = "the projections' biases keep their pre-trained values (reinit biases: false)"
    assert text in header("partial-reinit") and text in page("partial-reinit")


# 3. Layer-wise re-initialisation: "all pre-trained layers except the embeddings", the pooler among them

def test_layerwise_reinit_reinitialises_the_pooler_with_the_layers(tmp_path):
    quoted("bert-goes-to-college", "We reinitialize all pre-trained layers except the embeddings")
    quoted("bert-goes-to-college", "since some downstream layers have dependencies on upstream layers")
    spec = study("layerwise-reinit")
    for k in range(1, 13):
        assert chain(spec, f"reinit from {k}") == [
            {"name": "reinit", "params": {"scope": "layers", "layers": f"from:{k - 1}", "layer_norms": True}},
            {"name": "reinit", "params": {"scope": "pooler"}}]
    assert chain(spec, "pre-trained") == []
    tiny = study("layerwise-reinit", preset="tiny")
    # the checkpoint the study builds (a clean draw: its biases are 0 and LayerNorms 1 and 0 already)
    pretrained, _ = built(tiny, "pre-trained", tmp_path / "pre-trained")
    reinit, changed = built(tiny, "reinit from 2", tmp_path / "reinit")
    matrices = {f"encoder.layer.{i}.{m}.weight" for i in range(1, DEPTH) for m in PROJECTIONS}
    assert changed == matrices | {"pooler.dense.weight"}
    assert_changed_exactly(pretrained, reinit, changed)
    assert reinit["pooler.dense.weight"].abs().max() <= 0.04
    # on a BERT off its init values: every tensor of layers 2..4 and the pooler's two are reset, nothing else
    before, after = perturbed_after(tiny, "reinit from 2")
    layers = {f"bert.encoder.layer.{i}.{m}.{t}" for i in range(1, DEPTH) for m in PROJECTIONS + LAYER_NORMS
              for t in ("weight", "bias")}
    pooler = {"bert.pooler.dense.weight", "bert.pooler.dense.bias"}
    assert_changed_exactly(before, after, layers | pooler)  # the embeddings, layer 1, the pre-training heads stay
    assert torch.equal(after["bert.pooler.dense.bias"], torch.zeros(32))
    assert after["bert.pooler.dense.weight"].abs().max() <= 0.04
    assert "each `reinit from k` re-initialises the pooler too" in header("layerwise-reinit")
    assert "each `reinit from k` re-initialises the pooler too" in page("layerwise-reinit")


def test_the_report_of_a_study_on_dev_for_a_test_set_says_which_split_it_evaluated_and_why():
    from test_report_conventions import _results, _runs

    from bertology.results.report import build_report, markdown

    variants = [{"name": "pre-trained", "interventions": []}, {"name": "reinit from 1", "interventions": []}]
    rows = [{"variant": v, "task": "sst2", "metric": "accuracy", "primary": True, "seed": 1, "value": value}
            for v, value in (("pre-trained", 0.9), ("reinit from 1", 0.8))]
    for name in ("partial-reinit", "probing", "weight-similarity", "layerwise-reinit", "head-reinit"):
        text = markdown(build_report(_results(name, _runs(rows), variants, seeds=[1])))
        main = text.split("## Main table", 1)[1].split("\n## ", 1)[0]
        assert conventions.of_study(name).evaluation in main and "| sst2 | validation | accuracy |" in main
    for other in ("reversed-layers", "crosslingual-mlm", "someone-elses-study"):
        assert "GLUE's test labels are not public" not in markdown(build_report(
            _results(other, _runs(rows), variants, seeds=[1])))
