"""The fine-tuning loop over K fused runs (bertology.train.loop.finetune_runs with `fused`) against the same runs
trained alone, on CPU: a tiny BERT per run (different initial weights, one architecture) and synthetic SST-2."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from conftest import Killed, MemorySink, ReplayByCalling, small_sst2_splits, synthetic_sst2
from safetensors.torch import load_file
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

from bertology.errors import BadInput
from bertology.tasks import get_task
from bertology.train import Hyper, engine, finetune, loop
from bertology.train.graphs import GraphedStep
from bertology.train.loop import finetune_runs

pytestmark = pytest.mark.usefixtures("one_thread")
TASK = get_task("sst2")
HP = Hyper(lr=2e-3, batch_size=8, epochs=2, warmup_ratio=0.2, max_grad_norm=0.5, log_every=3, eval_every=4)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three checkpoints of one architecture, without and with dropout, and the data."""
    train_ds, val_ds, tokenizer = synthetic_sst2()
    dirs = {}
    for dropout in (0.0, 0.1):
        config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=dropout,
                            attention_probs_dropout_prob=dropout)
        dirs[dropout] = []
        for init in range(3):
            path = tmp_path_factory.mktemp(f"bert-{dropout}-{init}")
            torch.manual_seed(init)
            BertForSequenceClassification(config).save_pretrained(path)
            tokenizer.save_pretrained(path)
            dirs[dropout].append(path)
    return (dirs, *small_sst2_splits(train_ds, val_ds, tokenizer))


def quiet(*_):
    pass


def alone(runs, dropout, i, out, hp=HP):
    dirs, train, evals = runs
    engine.release()
    return finetune(dirs[dropout][i], TASK, train, evals, hp, 5, out, device="cpu", log=quiet)


def together(runs, dropout, which, outs, hp=HP, **kw):
    dirs, train, evals = runs
    return finetune_runs([dirs[dropout][i] for i in which], TASK, train, evals, hp, 5, outs, device="cpu",
                         log=kw.pop("log", quiet), fused=True, names=[f"run{i}" for i in which], **kw)


def close(a, b, tol=1e-5) -> None:
    """Curves and loss series within `tol`, the same points; weights within `tol`."""
    for x, y in zip(a.curves + a.losses, b.curves + b.losses, strict=True):
        assert (x["epoch"], x["step"]) == (y["epoch"], y["step"])
        for key in x:
            if key != "seconds" and x[key] is not None and not isinstance(x[key], str):
                assert x[key] == pytest.approx(y[key], abs=tol), key


def max_weight_difference(dir_a, dir_b) -> float:
    a, b = load_file(dir_a / "model.safetensors"), load_file(dir_b / "model.safetensors")
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_fused_runs_through_the_loop_end_as_each_run_alone(runs, tmp_path):
    """Without dropout, three fused runs' curves, loss series, selected points and saved weights equal the
    three runs trained alone within 1e-5 (float noise: eager attention under vmap against SDPA)."""
    outs = [tmp_path / f"fused{i}" for i in range(3)]
    lines = []
    fused = together(runs, 0.0, [0, 1, 2], outs, log=lines.append)
    assert any(line.startswith("fused: 3 runs trained as one model (run0, run1, run2)") for line in lines)
    assert any(line.startswith("run run2: epoch 2 step 10:") for line in lines)
    for i, result in enumerate(fused):
        solo = alone(runs, 0.0, i, tmp_path / f"alone{i}")
        close(result, solo)
        assert (result.best_epoch, result.best_step) == (solo.best_epoch, solo.best_step)
        assert max_weight_difference(outs[i], tmp_path / f"alone{i}") < 1e-5
        assert result.step_kind == "eager, fused x3"
    assert fused[0].curves != fused[1].curves  # three different runs, not one run three times


def test_a_fused_runs_result_does_not_depend_on_its_group(runs, tmp_path):
    """With dropout, a fused run draws one mask per dropout call, the same for every run of its step: run 1
    fused with runs 0 and 2 ends as run 1 fused alone (K = 1)."""
    group = together(runs, 0.1, [0, 1, 2], [tmp_path / f"g{i}" for i in range(3)])
    (single,) = together(runs, 0.1, [1], [tmp_path / "single"])
    close(group[1], single, tol=1e-6)
    assert max_weight_difference(tmp_path / "g1", tmp_path / "single") < 1e-6


def test_a_killed_fused_group_resumes_bit_for_bit(runs, tmp_path):
    hp = dataclasses.replace(HP, checkpoint_every=3)
    whole = together(runs, 0.1, [0, 2], [tmp_path / "w0", tmp_path / "w2"], hp=hp)
    sink = MemorySink(kill_after=2)
    with pytest.raises(Killed):
        together(runs, 0.1, [0, 2], [tmp_path / "k0", tmp_path / "k2"], hp=hp, state=sink)
    lines = []
    resumed = together(runs, 0.1, [0, 2], [tmp_path / "r0", tmp_path / "r2"], hp=hp, state=sink, log=lines.append)
    assert "resuming at step 6/10 (epoch 2, batch 1)" in lines
    for a, b, name in zip(whole, resumed, ("0", "2")):
        assert [{k: v for k, v in r.items() if k != "seconds"} for r in a.curves + a.losses] == \
            [{k: v for k, v in r.items() if k != "seconds"} for r in b.curves + b.losses]
        assert max_weight_difference(tmp_path / f"w{name}", tmp_path / f"r{name}") == 0.0
    # another group (or order) is another configuration: its state is not resumed
    lines = []
    together(runs, 0.1, [2, 0], [tmp_path / "o2", tmp_path / "o0"], hp=hp, state=sink, log=lines.append)
    assert any("made by another configuration" in line for line in lines)


def test_fused_runs_replay_as_cuda_graphs_and_train_as_eager(runs, tmp_path, monkeypatch):
    backend = ReplayByCalling()
    monkeypatch.setattr(loop, "use_graphs", lambda device, *, cuda_graph: cuda_graph)
    monkeypatch.setattr(loop, "GraphedStep", functools.partial(GraphedStep, backend=backend))
    graphed = together(runs, 0.0, [0, 1], [tmp_path / "g0", tmp_path / "g1"])
    eager = together(runs, 0.0, [0, 1], [tmp_path / "e0", tmp_path / "e1"],
                     hp=dataclasses.replace(HP, cuda_graph=False, pad_multiple=32))
    assert graphed[0].step_kind == "cuda-graph, fused x2" and backend.captured >= 1
    for a, b in zip(graphed, eager):
        close(a, b)


def test_fused_training_refuses_what_it_cannot_do(runs, tmp_path):
    dirs, train, evals = runs
    with pytest.raises(BadInput, match="no activation monitor"):
        together(runs, 0.0, [0], [tmp_path / "m"], monitor=lambda model: [])
    with pytest.raises(BadInput, match="got 2 models, 1 folders"):
        together(runs, 0.0, [0, 1], [tmp_path / "m"])
    with pytest.raises(BadInput, match="one run, or K >= 1 fused runs"):
        finetune_runs(dirs[0.0][:2], TASK, train, evals, HP, 5, [tmp_path / "a", tmp_path / "b"], device="cpu",
                      log=quiet)
    with pytest.raises(BadInput, match="fused runs need one architecture"):
        wide = tmp_path / "wide"
        BertForSequenceClassification(BertConfig(vocab_size=60, hidden_size=48, num_hidden_layers=2,
                                                 num_attention_heads=2, intermediate_size=64,
                                                 max_position_embeddings=64)).save_pretrained(wide)
        BertTokenizerFast.from_pretrained(dirs[0.0][0]).save_pretrained(wide)
        finetune_runs([dirs[0.0][0], wide], TASK, train, evals, HP, 5, [tmp_path / "a", tmp_path / "b"],
                      device="cpu", log=quiet, fused=True)
