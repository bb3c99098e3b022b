"""The fine-tuning loop and evaluation, on a tiny BERT trained from scratch on synthetic SST-2."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from conftest import Killed, MemorySink
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

from bertology.data import subset_indices, tokenize_split
from bertology.errors import BadInput
from bertology.tasks import get_task, load_split
from bertology.train import Hyper, evaluate, finetune, load_finetuned
from bertology.train.regimes import Schedule
from bertology.train.step import param_groups

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = get_task("sst2")
HP = Hyper(lr=2e-3, batch_size=8, epochs=6, eval_batch_size=64)




@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer, 32-wide BERT whose vocabulary is exactly the synthetic data's words, and its splits."""
    train_ds = load_split(TASK, "synthetic", "train")
    val_ds = load_split(TASK, "synthetic", "validation")
    words = sorted({w for text in [*train_ds["text_a"], *val_ds["text_a"]] for w in text.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    model_dir = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    train = tokenize_split(train_ds.select(subset_indices(train_ds["label"], count=256, seed=0)), TASK,
                           tokenizer, max_length=32)
    val = tokenize_split(val_ds.select(subset_indices(val_ds["label"], count=128, seed=0)), TASK, tokenizer,
                         max_length=32)
    return model_dir, train, val


def run(tiny, out_dir, seed=1, hp=HP, rows=None):
    model_dir, train, val = tiny
    train = train if rows is None else train.slice(0, rows)
    lines = []
    result = finetune(model_dir, TASK, train, {"validation": val, "train": train}, hp, seed, out_dir,
                      device="cpu", log=lines.append)
    return result, lines


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("finetuned")
    result, lines = run(tiny, out_dir)
    return result, lines, out_dir


def test_finetune_learns_and_reports_curves(trained):
    result, lines, _ = trained
    assert [c["epoch"] for c in result.curves] == [1, 2, 3, 4, 5, 6]
    assert [c["step"] for c in result.curves] == [32, 64, 96, 128, 160, 192]
    assert set(result.curves[0]) == {"epoch", "step", "train_loss", "lr", "seconds", "validation/accuracy",
                                     "train/accuracy"}
    assert result.curves[-1]["train_loss"] < result.curves[0]["train_loss"] - 0.2
    assert result.curves[-1]["train/accuracy"] > 0.85  # negations and contrasts are hard for 32 wide
    assert result.curves[-1]["lr"] == 0.0  # the linear schedule ends at zero
    assert 1 <= result.best_epoch <= 6
    best = result.curves[result.best_epoch - 1]
    assert result.best_metrics == {"validation/accuracy": best["validation/accuracy"],
                                   "train/accuracy": best["train/accuracy"]}
    assert best["validation/accuracy"] == max(c["validation/accuracy"] for c in result.curves)
    assert result.num_train == 256 and result.device == "cpu" and result.throughput > 0
    assert 0 < result.train_seconds < result.wall_seconds
    assert any("epoch 6/6 step 192/192 loss" in line and "seq/s" in line for line in lines)


def test_same_seed_same_result_other_seed_differs(tiny, tmp_path):
    short = dataclasses.replace(HP, epochs=2)
    a, b, c = (run(tiny, tmp_path / str(i), seed, short, rows=96)[0] for i, seed in enumerate((7, 7, 8)))

    def without_time(result):
        return [{k: v for k, v in row.items() if k != "seconds"} for row in result.curves]

    assert without_time(a) == without_time(b)
    assert without_time(a) != without_time(c)


def test_saved_model_reloads_with_best_metrics(tiny, trained):
    result, _, out_dir = trained
    _, _, val = tiny
    assert (out_dir / "model.safetensors").is_file() and (out_dir / "tokenizer_config.json").is_file()
    model = load_finetuned(out_dir, TASK, "cpu")
    assert not model.training
    metrics, predictions = evaluate(model, TASK, val, batch_size=64, device="cpu")
    assert metrics == {"accuracy": result.best_metrics["validation/accuracy"]}
    assert predictions.column_names == ["idx", "label", "prediction", "score", "text"]
    assert predictions.column("idx").to_pylist() == list(range(len(val)))
    assert predictions.column("label").to_pylist() == val.column("label").to_pylist()
    scores = predictions.column("score").to_numpy()
    assert np.all((scores >= 0.5) & (scores <= 1.0))
    accuracy = np.mean(predictions.column("prediction").to_numpy() == predictions.column("label").to_numpy())
    assert accuracy == pytest.approx(metrics["accuracy"])


def test_evaluate_maps_batches_back_to_rows(tiny, trained):
    _, _, out_dir = trained
    _, train, _ = tiny
    model = load_finetuned(out_dir, TASK, "cpu")
    model.train()
    _, big = evaluate(model, TASK, train, batch_size=1000, device="cpu")
    _, small = evaluate(model, TASK, train, batch_size=7, device="cpu")
    assert model.training  # evaluate restores the mode it found
    assert big.column("prediction").equals(small.column("prediction"))
    np.testing.assert_allclose(big.column("score").to_numpy(), small.column("score").to_numpy(), atol=1e-5)
    # and each prediction belongs to its own row: row 5 alone gives the same answer
    _, one = evaluate(model, TASK, train.slice(5, 1), batch_size=1, device="cpu")
    assert one.column("prediction")[0].as_py() == big.column("prediction")[5].as_py()
    assert one.column("idx")[0].as_py() == 5


def test_param_groups_exclude_biases_and_layernorm_from_decay_and_hold_every_parameter():
    model = BertForSequenceClassification(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=16))
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    decay, plain = param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    assert all(names[id(p)].endswith("bias") or "LayerNorm" in names[id(p)] for p in plain["params"])
    assert all(not names[id(p)].endswith("bias") and "LayerNorm" not in names[id(p)] for p in decay["params"])
    # frozen parameters are in a group too: a regime may unfreeze them later; without a gradient AdamW skips them
    assert len(decay["params"]) + len(plain["params"]) == len(list(model.parameters()))


@pytest.mark.parametrize("field,value", [("lr", 0.0), ("batch_size", 0), ("epochs", 1.5),
                                         ("warmup_ratio", 1.0), ("lr", math.nan)])
def test_hyper_rejects(field, value):
    with pytest.raises(BadInput, match=f"{field} must be"):
        Hyper(**{field: value})


def _weights(out_dir):
    from safetensors.torch import load_file

    return load_file(out_dir / "model.safetensors")


@pytest.mark.parametrize("every, kill_after", [(5, 3), (6, 2)], ids=["mid-epoch", "epoch-end"])
def test_a_killed_run_resumes_to_the_same_result_bit_for_bit(tiny, tmp_path, every, kill_after):
    """Killed mid-epoch 2 (after epoch 1's best weights exist), or right at the end of epoch 1 (before its
    evaluation): the resumed run's curves, best epoch and best weights equal the uninterrupted run's."""
    model_dir, train, val = tiny
    hp = dataclasses.replace(HP, epochs=3, checkpoint_every=every)  # 12 steps per epoch on 96 rows
    train = train.slice(0, 96)
    evals = {"validation": val}
    whole = finetune(model_dir, TASK, train, evals, hp, 3, tmp_path / "whole", device="cpu", log=lambda _: None)
    sink = MemorySink(kill_after=kill_after)
    with pytest.raises(Killed):
        finetune(model_dir, TASK, train, evals, hp, 3, tmp_path / "killed", device="cpu", log=lambda _: None,
                 state=sink)
    lines = []
    resumed = finetune(model_dir, TASK, train, evals, hp, 3, tmp_path / "resumed", device="cpu",
                       log=lines.append, state=sink)
    step = every * kill_after
    assert f"resuming at step {step}/36 (epoch {(step - 1) // 12 + 1}, batch {(step - 1) % 12 + 1})" in lines

    def without_time(result):
        return [{k: v for k, v in row.items() if k != "seconds"} for row in result.curves]

    assert without_time(resumed) == without_time(whole)
    assert resumed.best_epoch == whole.best_epoch and resumed.best_metrics == whole.best_metrics
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "resumed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("selection", ["best", "last"])
def test_the_selected_points_evaluations_come_with_the_result_but_not_across_a_resume(tiny, tmp_path, selection):
    """The loop hands back what head.evaluate returned at the selected point (the finetune step scores weights
    it does not keep with it instead of evaluating them again): exactly what evaluating the saved weights
    gives. A run resumed after that point has no such evaluations (resume states do not hold them): None."""
    from bertology.train import head_for

    model_dir, train, val = tiny
    hp = dataclasses.replace(HP, epochs=3, checkpoint_every=6, selection=selection)  # 12 steps an epoch
    train, evals = train.slice(0, 96), {"validation": val}
    whole = finetune(model_dir, TASK, train, evals, hp, 3, tmp_path / "whole", device="cpu", log=lambda _: None)
    metrics, predictions = whole.evaluated["validation"]
    again = head_for(TASK).evaluate(load_finetuned(tmp_path / "whole", TASK, "cpu"), val, batch_size=hp.eval_batch_size,
                                    device=torch.device("cpu"))
    assert metrics == again[0] and predictions.equals(again[1])
    assert {f"validation/{k}": v for k, v in metrics.items()} == whole.best_metrics
    sink = MemorySink(kill_after=5)  # killed at step 30, in epoch 3
    with pytest.raises(Killed):
        finetune(model_dir, TASK, train, evals, hp, 3, tmp_path / "killed", device="cpu", log=lambda _: None,
                 state=sink)
    resumed = finetune(model_dir, TASK, train, evals, hp, 3, tmp_path / "resumed", device="cpu",
                       log=lambda _: None, state=sink)
    assert resumed.best_step == whole.best_step
    if selection == "best":  # this run's best point is epoch 1's, evaluated before the resume
        assert resumed.best_step == 12 and resumed.evaluated is None
    else:  # the last point, evaluated after it
        assert resumed.best_step == 36
        assert resumed.evaluated["validation"][0] == metrics and resumed.evaluated["validation"][1].equals(predictions)


def test_a_state_from_another_configuration_is_ignored(tiny, tmp_path):
    model_dir, train, val = tiny
    hp = dataclasses.replace(HP, epochs=1, checkpoint_every=4)
    sink = MemorySink()
    finetune(model_dir, TASK, train.slice(0, 32), {"validation": val}, hp, 3, tmp_path / "a", device="cpu",
             log=lambda _: None, state=sink)
    lines = []
    other = dataclasses.replace(hp, lr=1e-3)
    finetune(model_dir, TASK, train.slice(0, 32), {"validation": val}, other, 3, tmp_path / "b", device="cpu",
             log=lines.append, state=sink)
    assert any("made by another configuration" in line for line in lines)
    assert not any("resuming" in line for line in lines)


@pytest.mark.parametrize("field,value", [("checkpoint_every", -1), ("compile", 1), ("cuda_graph", "yes"),
                                         ("group_by_length", "no")])
def test_hyper_rejects_bad_execution_settings(field, value):
    with pytest.raises(BadInput, match=f"{field} must be"):
        Hyper(**{field: value})


@pytest.mark.parametrize("schedule, moved", [
    (Schedule("freeze", train_layers=(1,)), {"bert.encoder.layer.1.", "bert.pooler.", "classifier."}),
    (Schedule("probe"), {"classifier."}),
    # (the saved weights are the best epoch's, so open every layer in epoch 1; embeddings never train)
    (Schedule("gradual-unfreeze", unfreeze_per_epoch=2), {"bert.encoder.layer.1.", "bert.encoder.layer.0.",
                                                          "bert.pooler.", "classifier."}),
])
def test_a_regime_trains_exactly_its_parameters_through_the_loop(tiny, tmp_path, schedule, moved):
    from safetensors.torch import load_file

    model_dir = tiny[0]
    hp = dataclasses.replace(HP, epochs=2, schedule=schedule)
    run(tiny, tmp_path / "out", hp=hp)
    before = load_file(model_dir / "model.safetensors")
    after = _weights(tmp_path / "out")
    for name, tensor in after.items():
        if name.startswith("classifier.") or name not in before:
            continue  # the head is new (drawn from the training seed)
        changed = not torch.equal(tensor, before[name])
        assert changed == name.startswith(tuple(moved)), name


def test_selection_last_keeps_the_weights_training_ended_with_and_best_the_best_points(tiny, trained, tmp_path):
    """The same run (seed 1, HP) with selection `last`: every epoch is still on the curve, identical to the
    `best` run's; the saved weights and the reported point are the last epoch's, not the best one's."""
    best, _, best_dir = trained
    last, _ = run(tiny, tmp_path, hp=dataclasses.replace(HP, selection="last"))

    def without_time(result):
        return [{k: v for k, v in row.items() if k != "seconds"} for row in result.curves]

    assert without_time(last) == without_time(best)  # both rules record every epoch
    assert (last.best_epoch, last.best_step) == (6, 192)
    assert last.best_metrics == {k: v for k, v in last.curves[-1].items() if "/" in k}
    _, _, val = tiny
    reloaded, _ = evaluate(load_finetuned(tmp_path, TASK, "cpu"), TASK, val, batch_size=64, device="cpu")
    assert reloaded == {"accuracy": last.curves[-1]["validation/accuracy"]}
    assert best.best_epoch < 6  # this seed's best point is earlier, so the two rules saved different weights
    a, b = _weights(best_dir), _weights(tmp_path)
    assert any(not torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(BadInput, match="selection must be one of best, last, got 'first'"):
        Hyper(selection="first")


def test_random_batches_train_on_another_order_and_are_part_of_the_resume_identity(tiny, trained, tmp_path):
    """group_by_length=False (a study's default: run_glue's random batches) trains the same data in another
    batch order, deterministically; a resume state made with the other batching is not resumed."""
    grouped, _, _ = trained
    hp = dataclasses.replace(HP, group_by_length=False)
    random, _ = run(tiny, tmp_path / "a", hp=hp)
    again, _ = run(tiny, tmp_path / "b", hp=hp)

    def without_time(result):
        return [{k: v for k, v in row.items() if k != "seconds"} for row in result.curves]

    assert without_time(random) == without_time(again)
    assert [r["train_loss"] for r in random.curves] != [r["train_loss"] for r in grouped.curves]
    model_dir, train, val = tiny
    sink, lines = MemorySink(), []
    short = dataclasses.replace(HP, epochs=1, checkpoint_every=4)
    finetune(model_dir, TASK, train.slice(0, 32), {"validation": val}, short, 3, tmp_path / "c", device="cpu",
             log=lambda _: None, state=sink)
    random_short = dataclasses.replace(short, group_by_length=False)
    finetune(model_dir, TASK, train.slice(0, 32), {"validation": val}, random_short, 3, tmp_path / "d", device="cpu",
             log=lines.append, state=sink)
    assert any("made by another configuration" in line for line in lines)


def test_each_split_is_reported_at_the_point_it_is_read_at(trained):
    """SST-2 has one dev split: the second eval split here (train) is read at validation's best point, the
    kept weights' point, and says so in selected_points."""
    result, _, _ = trained
    point = result.curves[result.best_epoch - 1]
    assert result.selected_points == {split: {"epoch": point["epoch"], "step": point["step"]}
                                      for split in ("validation", "train")}
    assert result.best_metrics == {k: v for k, v in point.items() if "/" in k}
