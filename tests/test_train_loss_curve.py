"""The training-loss series (`log_every`): the college report's loss curves, recorded by the loop, stored in
`curves` as rows of kind "train", kept out of run ids, and plotted per task in the study report.

The report: "Figure 1: Loss values plotted against number of iterations during different finetuning tasks
on different loaded weights" and "Figure 4: Loss as a function of number of iterations"."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import torch
from conftest import Killed, MemorySink
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

from bertology.data import subset_indices, tokenize_split
from bertology.errors import BadInput
from bertology.results import analysis
from bertology.results.report import build_report, markdown
from bertology.results.study_results import StudyResults, with_defaults
from bertology.results.tables import with_labels
from bertology.spec import CheckpointSpec, DatasetSpec, Regime, RunSpec
from bertology.steps.finetune import curves_table
from bertology.study import StudySpec
from bertology.tasks import get_task, load_split
from bertology.train import Hyper, finetune

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = get_task("sst2")
# 48 rows / batch 8 = 6 steps an epoch, 2 epochs: 12 steps; no evaluation besides each epoch's end
HP = Hyper(lr=2e-3, batch_size=8, epochs=2, eval_batch_size=64, warmup_ratio=0.0, weight_decay=0.0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    train_ds = load_split(TASK, "synthetic", "train")
    words = sorted({w for text in train_ds["text_a"] for w in text.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    model_dir = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = tokenize_split(train_ds.select(subset_indices(train_ds["label"], count=64, seed=0)), TASK, tokenizer,
                          max_length=24)
    return model_dir, rows.slice(0, 48), rows.slice(48, 16)


def _train(tiny, tmp_path, log_every, state=None):
    model_dir, train, val = tiny
    return finetune(model_dir, TASK, train, {"validation": val}, dataclasses.replace(HP, log_every=log_every), 1,
                    tmp_path / f"out-{log_every}", device="cpu", log=lambda _: None, state=state)


def test_each_point_is_the_mean_loss_of_its_steps_and_changes_nothing_else(tiny, tmp_path):
    every_step = _train(tiny, tmp_path, 1)
    per_step = [p["train_loss"] for p in every_step.losses]
    assert [p["step"] for p in every_step.losses] == list(range(1, 13))
    fives = _train(tiny, tmp_path, 5)
    # points every 5 steps and one at the last step (its window is the 2 steps left)
    assert [p["step"] for p in fives.losses] == [5, 10, 12]
    assert [p["epoch"] for p in fives.losses] == [1, 2, 2]
    expected = [np.mean(per_step[0:5]), np.mean(per_step[5:10]), np.mean(per_step[10:12])]
    assert [p["train_loss"] for p in fives.losses] == pytest.approx(expected, rel=1e-5)
    # the learning rate after the point's step: the linear schedule without warmup, 0 at the end
    assert [p["lr"] for p in fives.losses] == pytest.approx([HP.lr * (1 - s / 12) for s in (5, 10, 12)])
    # recording is monitoring only: the same training, the same result
    assert fives.best_metrics == every_step.best_metrics
    off = _train(tiny, tmp_path, 0)
    assert off.losses == [] and off.best_metrics == every_step.best_metrics


def test_a_resumed_run_records_the_same_series(tiny, tmp_path):
    whole = _train(tiny, tmp_path, 5)
    hp = dataclasses.replace(HP, log_every=5, checkpoint_every=7)  # killed mid-window (step 7 of 5..10)
    model_dir, train, val = tiny
    sink = MemorySink(kill_after=1)
    with pytest.raises(Killed):
        finetune(model_dir, TASK, train, {"validation": val}, hp, 1, tmp_path / "killed", device="cpu",
                 log=lambda _: None, state=sink)
    sink.kill_after = None
    resumed = finetune(model_dir, TASK, train, {"validation": val}, hp, 1, tmp_path / "resumed", device="cpu",
                       log=lambda _: None, state=sink)
    assert [(p["step"], p["train_loss"]) for p in resumed.losses] == [
        (p["step"], pytest.approx(p["train_loss"], rel=1e-6)) for p in whole.losses]


def test_log_every_is_an_execution_setting_outside_run_ids():
    """Like checkpoint_every it changes what is recorded, not what is computed (assumed default 50)."""
    run = RunSpec(CheckpointSpec("m"), DatasetSpec("rte", tokenizer="m"))
    logged = dataclasses.replace(run, regime=Regime.from_dict({"log_every": 10}))
    assert logged.id == run.id
    assert Regime().log_every == 50 and "log_every" not in Regime().to_dict()
    assert logged.regime.to_dict()["log_every"] == 10  # what the plan hands the finetune step
    spec, _ = StudySpec.from_params("s", {"log_every": "7"})
    assert spec.regime.log_every == 7
    with pytest.raises(BadInput, match="log_every"):
        StudySpec.from_params("s", {"log_every": "-1"})
    with pytest.raises(BadInput, match="log_every"):
        Hyper(log_every=-1)
    assert "log_every" in Hyper.EXECUTION  # a resume state made with another value still resumes


def _curve_rows(variant: str, seed: int, losses: list[float], task: str = "rte") -> pl.DataFrame:
    table = curves_table([{"epoch": 1, "step": 4, "train_loss": 0.5, "lr": 1e-3, "seconds": 1.0,
                           "validation/perplexity": 9.0}],
                         [{"epoch": 1, "step": 2 * (i + 1), "train_loss": v, "lr": 1e-3, "seconds": 1.0}
                          for i, v in enumerate(losses)])
    labels = {"study": "s", "variant": variant, "model": "m", "task": task, "seed": seed, "run_id": f"{variant}{seed}"}
    return pl.from_arrow(with_labels("curves", labels, table))


def test_curves_hold_both_kinds_and_older_rows_read_as_evaluation_points():
    rows = _curve_rows("a", 1, [0.7, 0.6])
    assert rows.select("kind", "split", "metric", "step", "value").rows() == [
        ("eval", "validation", "perplexity", 4, 9.0), ("train", "train", "loss", 2, 0.7),
        ("train", "train", "loss", 4, 0.6)]
    # an artifact written before `kind` existed publishes with kind null: an evaluation point
    old = pa.table({"epoch": [1], "step": [4], "train_loss": [0.5], "lr": [1e-3], "seconds": [1.0],
                    "split": ["validation"], "metric": ["perplexity"], "value": [8.0]})
    older = pl.from_arrow(with_labels("curves", {"variant": "a", "seed": 2, "model": "m", "task": "rte"}, old))
    assert older["kind"].to_list() == [None]
    both = pl.concat([rows, older])
    forgetting = analysis.forgetting_curve(both)
    assert forgetting.select("step", "n").rows() == [(4, 2)]  # the train rows are not perplexity points


def test_the_report_plots_loss_per_task_one_line_per_variant_over_seeds():
    curves = pl.concat([_curve_rows("pre-trained", 1, [0.7, 0.5]), _curve_rows("pre-trained", 2, [0.9, 0.7]),
                        _curve_rows("clean", 1, [1.0, 0.9]), _curve_rows("pre-trained", 1, [0.4, 0.3], "mrpc")])
    loss = analysis.training_loss_curve(curves)
    pre = loss.filter(pl.col("variant") == "pre-trained", pl.col("task") == "rte")
    assert pre["step"].to_list() == [2, 4] and pre["mean"].to_list() == pytest.approx([0.8, 0.6])
    assert pre["n"].to_list() == [2, 2]
    runs = pl.from_dicts([{"variant": v, "model": "m", "task": t, "split": "validation", "metric": "accuracy",
                           "value": 0.5, "primary": True, "seed": s, "run_id": f"{v}{t}{s}"}
                          for v in ("pre-trained", "clean") for t in ("rte", "mrpc") for s in (1, 2)])
    runs = runs.with_columns(pl.lit(None, pl.String).alias("intermediate"))
    spec = {"preset": "tiny", "models": ["m"], "seeds": [1, 2], "variants": [
        {"name": "pre-trained", "interventions": []}, {"name": "clean", "interventions": [{"name": "reinit"}]}]}
    results = StudyResults("s", "id", with_defaults(spec), [], [], {"runs": runs.lazy(), "curves": curves.lazy()}, [])
    report = build_report(results)
    text = markdown(report)
    assert "## Training loss" in text
    assert "| task | variant | step 2 | step 4 |" in text
    assert "| rte | pre-trained | 0.800 (± 0.141) | 0.600 (± 0.141) |" in text
    assert report.tables["training_loss"].height == loss.height
    section = next(s for s in report.sections if s.title == "Training loss")
    assert len(section.figures) == 1 and section.figures[0].count("training step") >= 1
    assert "one line per variant" in section.note


def test_a_loss_logged_at_one_step_draws_no_plot_and_says_so():
    """Runs that logged their loss once (a tiny run shorter than log_every twice) have no curve: the section
    keeps its table and says there is no plot, instead of promising lines it does not draw."""
    curves = pl.concat([_curve_rows("pre-trained", 1, [0.7]), _curve_rows("clean", 1, [1.0])])
    runs = pl.from_dicts([{"variant": v, "model": "m", "task": "rte", "split": "validation", "metric": "accuracy",
                           "value": 0.5, "primary": True, "seed": 1, "run_id": f"{v}rte1"}
                          for v in ("pre-trained", "clean")]).with_columns(pl.lit(None, pl.String).alias("intermediate"))
    spec = {"preset": "tiny", "models": ["m"], "seeds": [1], "variants": [
        {"name": "pre-trained", "interventions": []}, {"name": "clean", "interventions": [{"name": "reinit"}]}]}
    results = StudyResults("s", "id", with_defaults(spec), [], [], {"runs": runs.lazy(), "curves": curves.lazy()}, [])
    section = next(s for s in build_report(results).sections if s.title == "Training loss")
    assert section.figures == ()
    assert "no plot: each run logged its loss at one step only" in section.note
    assert "one line per variant" not in section.note
    assert "| rte | pre-trained | 0.700 (± —) |" in markdown(build_report(results))
