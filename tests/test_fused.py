"""K runs fused into one stacked model (bertology.train.fused) against K solo runs of the loop's step, on a
tiny BERT and synthetic SST-2 batches."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertTokenizerFast

from bertology.data import Encoded, length_grouped_batches, subset_indices, tokenize_split
from bertology.errors import BadInput
from bertology.tasks import get_task, load_split
from bertology.train import Hyper, evaluate
from bertology.train.device import to_device
from bertology.train.fused import FusedStep
from bertology.train.graphs import GraphedStep
from bertology.train.heads import head_for
from bertology.train.step import SINCE_CONSOLE_LINE, param_groups

# CPU SDPA without dropout has no vmap batching rule: vmap warns and loops over the runs (expected here)
pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")]

TASK = get_task("sst2")
STEPS = 10
# lr high enough that weights move visibly in 10 steps; warmup of 3 steps; a clipping norm between the
# runs' gradient norms (checked below), so some runs' steps are clipped and others' are not
HP = Hyper(lr=2e-3, batch_size=8, warmup_ratio=0.3, weight_decay=0.01, max_grad_norm=0.4)


@pytest.fixture(scope="module")
def data():
    """A tokenizer whose vocabulary is the synthetic data's words, STEPS training batches (the loop's
    length-grouped order, padded per batch) and a validation split."""
    train_ds = load_split(TASK, "synthetic", "train")
    val_ds = load_split(TASK, "synthetic", "validation")
    words = sorted({w for text in [*train_ds["text_a"], *val_ds["text_a"]] for w in text.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    train = tokenize_split(train_ds.select(subset_indices(train_ds["label"], count=STEPS * HP.batch_size,
                                                          seed=0)), TASK, tokenizer, max_length=32)
    val = tokenize_split(val_ds.select(subset_indices(val_ds["label"], count=64, seed=0)), TASK, tokenizer,
                         max_length=32)
    head = head_for(TASK, tokenizer)
    examples = Encoded.from_table(train)
    probe = tiny_models(len(vocab), [0])[0]
    batches = [to_device(head.train_inputs(examples, rows, probe, key=(1, 1, i)), torch.device("cpu"))
               for i, rows in enumerate(length_grouped_batches(examples.lengths, HP.batch_size, seed=(1, 1)))]
    assert len(batches) == STEPS and len({b["input_ids"].shape[1] for b in batches}) > 1  # widths vary
    return len(vocab), batches, val


def tiny_models(vocab_size: int, seeds, dropout: float = 0.0, **config) -> list[torch.nn.Module]:
    """2-layer, 32-wide BERTs, one per initialisation seed, in training mode."""
    config = BertConfig(**{"vocab_size": vocab_size, "hidden_size": 32, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
                           "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout,
                           "attn_implementation": "sdpa", **config})
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(BertForSequenceClassification(config).train())
    return models


def solo(model, batches, hp=HP):
    """The loop's step (bertology.train.loop.finetune) on one model: its losses and gradient norms."""
    from transformers import get_linear_schedule_with_warmup

    optimizer = torch.optim.AdamW(param_groups(model, hp.weight_decay), lr=hp.lr, fused=True)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(hp.warmup_ratio * len(batches)), len(batches))
    losses, norms = [], []
    for batch in batches:
        loss = model(**batch).loss
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), hp.max_grad_norm)))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return torch.tensor(losses), torch.tensor(norms)


def fused_step(models, hp=HP) -> FusedStep:
    return FusedStep(models, lr=hp.lr, weight_decay=hp.weight_decay, max_grad_norm=hp.max_grad_norm)


def fused(models, batches, hp=HP, wrap=lambda step: step):
    """K runs' steps with the loop's schedule; each run's loss per step, [K, steps]."""
    from transformers import get_linear_schedule_with_warmup

    step = wrap(fused_step(models, hp))
    scheduler = get_linear_schedule_with_warmup(step.optimizer if hasattr(step, "optimizer") else step.step.optimizer,
                                                int(hp.warmup_ratio * len(batches)), len(batches))
    losses = []
    for batch in batches:
        if isinstance(step, GraphedStep):
            step({k: v.numpy() for k, v in batch.items()})
        else:
            step.run(batch)
        scheduler.step()
        losses.append(torch.tensor(step.total(SINCE_CONSOLE_LINE)))
        step.reset(SINCE_CONSOLE_LINE)
    return step, torch.stack(losses, dim=1)


def max_weight_difference(runs: FusedStep, i: int, model) -> float:
    state = runs.unstacked(i)
    assert state.keys() == model.state_dict().keys()
    return max(float((state[k] - v).abs().max()) for k, v in model.state_dict().items())


def test_fused_runs_equal_solo_runs(data):
    vocab_size, batches, val = data
    models = tiny_models(vocab_size, [0, 1, 2])
    runs, losses = fused([copy.deepcopy(m) for m in models], batches)
    assert losses.shape == (3, STEPS) and not losses.requires_grad
    norms = []
    for i, model in enumerate(models):
        solo_losses, solo_norms = solo(model, batches)
        norms.append(solo_norms)
        assert float((losses[i] - solo_losses).abs().max()) < 1e-5
        assert max_weight_difference(runs, i, model) < 1e-5
    # clipping mattered, and per run: on some step one run was clipped and another was not
    clipped = torch.stack(norms) > HP.max_grad_norm  # [K, steps]
    assert clipped.any() and (clipped.any(dim=0) & ~clipped.all(dim=0)).any()
    # run i's weights in one eager model score as the solo model does
    eager = tiny_models(vocab_size, [9])[0]
    eager.load_state_dict(runs.unstacked(2))
    assert evaluate(eager, TASK, val, batch_size=64, device="cpu")[0] == \
        evaluate(models[2], TASK, val, batch_size=64, device="cpu")[0]


def test_one_run_fused_equals_solo(data):
    vocab_size, batches, _ = data
    (model,) = tiny_models(vocab_size, [3])
    runs, losses = fused([copy.deepcopy(model)], batches)
    solo_losses, _ = solo(model, batches)
    assert float((losses[0] - solo_losses).abs().max()) < 1e-5
    assert max_weight_difference(runs, 0, model) < 1e-5


@pytest.mark.parametrize("when", ["in the models", "by set_trainable"])
def test_frozen_parameters_stay_bit_identical(data, when):
    vocab_size, batches, _ = data
    models = tiny_models(vocab_size, [0, 1])
    frozen = {n for n, _ in models[0].named_parameters() if n.startswith(("bert.embeddings.", "bert.encoder.layer.0."))}
    before = [model.state_dict() for model in copy.deepcopy(models)]
    runs = fused_step(models)  # all trainable
    for model in models:  # as a regime does (regimes.apply)
        for name, p in model.named_parameters():
            p.requires_grad_(name not in frozen)
    if when == "in the models":
        runs = fused_step(models)
    else:
        runs.set_trainable(models[0])
    for batch in batches:
        runs.run(batch)
    for i in range(2):
        after = runs.unstacked(i)
        assert all(torch.equal(after[n], before[i][n]) for n in frozen)
        assert not torch.equal(after["bert.encoder.layer.1.output.dense.weight"],
                               before[i]["bert.encoder.layer.1.output.dense.weight"])
    assert all(runs.params[n].grad is None and not runs.optimizer.state[runs.params[n]] for n in frozen)


def test_dropout_masks_are_the_solo_runs_masks(data):
    """With dropout on, vmap's randomness="same" draws one mask per dropout call from the global generator,
    shaped as one run's activations and shared by the K runs: CPU dropout is `empty_like(x).bernoulli_(1 - p)`
    (the same call as in a solo run; SDPA with dropout takes its math path, which vmap batches), so with the
    generator seeded as each solo run's is, the fused runs see exactly their solo runs' masks, step after
    step (a fused step draws what one solo step draws, not K times as much)."""
    vocab_size, batches, _ = data
    models = tiny_models(vocab_size, [0, 1, 2], dropout=0.1)
    torch.manual_seed(7)
    runs, losses = fused([copy.deepcopy(m) for m in models], batches)
    for i, model in enumerate(models):
        torch.manual_seed(7)
        solo_losses, _ = solo(model, batches)
        assert float((losses[i] - solo_losses).abs().max()) < 1e-5
        assert max_weight_difference(runs, i, model) < 1e-5
    # dropout did act: another seed gives other masks, so other losses
    torch.manual_seed(8)
    _, other = fused(tiny_models(vocab_size, [0, 1, 2], dropout=0.1), batches)
    assert float((other - losses).abs().max()) > 1e-3


def test_unstacked_and_load_round_trip(data):
    vocab_size, _, _ = data
    models = tiny_models(vocab_size, [0, 1])
    runs = fused_step(models)
    runs.load(0, models[1].state_dict())
    assert all(torch.equal(v, models[1].state_dict()[k]) for k, v in runs.unstacked(0).items())
    with pytest.raises(BadInput, match="run index must be an integer in \\[0, 2\\), got 2"):
        runs.unstacked(2)


@pytest.mark.parametrize(("other", "message"), [
    ({"hidden_size": 64, "intermediate_size": 128}, "model 1 has config hidden_size = 64, model 0 has 32"),
    ({"num_labels": 3}, r"model 1 has parameter classifier.weight = \[3, 32\]"),
    ({"hidden_dropout_prob": 0.1}, "model 1 has config hidden_dropout_prob = 0.1, model 0 has 0.0"),
])
def test_different_architectures_are_refused(data, other, message):
    vocab_size, _, _ = data
    models = tiny_models(vocab_size, [0]) + tiny_models(vocab_size, [1], **other)
    with pytest.raises(BadInput, match=message):
        fused_step(models)


def test_bad_k_classes_and_trainability_are_refused(data):
    vocab_size, _, _ = data
    with pytest.raises(BadInput, match="fused training needs K >= 1 models, got K = 0"):
        fused_step([])
    models = tiny_models(vocab_size, [0, 1])
    mlm = BertForMaskedLM(models[0].config).train()
    with pytest.raises(BadInput, match="model 1 has class = BertForMaskedLM, model 0 has BertForSequence"):
        fused_step([models[0], mlm])
    models[1].classifier.bias.requires_grad_(False)
    with pytest.raises(BadInput, match="model 1 has parameter classifier.bias = .*frozen.*, model 0 has .*trained"):
        fused_step(models)


def test_the_fused_step_replays_as_cuda_graphs_do(data):
    """bertology.train.graphs replays K fused runs' step as it replays one run's: static buffers, one graph per
    shape, state created before capture; driven here by the CPU stand-in for CUDA graphs (conftest)."""
    from conftest import ReplayByCalling

    vocab_size, batches, _ = data
    models = tiny_models(vocab_size, [0, 1, 2])
    eager, eager_losses = fused([copy.deepcopy(m) for m in models], batches)
    backend = ReplayByCalling()
    graphed, losses = fused(models, batches, wrap=lambda step: GraphedStep(step, backend, log=lambda _: None))
    assert float((losses - eager_losses).abs().max()) < 1e-5
    for i in range(3):
        assert max(float((graphed.step.unstacked(i)[k] - v).abs().max()) for k, v in eager.unstacked(i).items()) < 1e-5
    assert backend.captured == len({b["input_ids"].shape for b in batches}) and backend.replays == STEPS


def bench():
    """bench/dispatch_count.py (bench/ is not a package: imported from its folder)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import dispatch_count

    return dispatch_count


def test_under_bf16_autocast_a_fused_step_has_one_runs_dtypes(data):
    """Under vmap, autocast never sees `F.linear` (vmap makes it a bmm plus a bias add) nor the loss: with
    vmap's dtypes every linear output of a fused step is fp32 (a bf16 product plus an fp32 bias), where one
    run's are bf16. With fused.py's casts, no linear output, matrix product or operator inside a linear
    layer is fp32, and what autocast runs in fp32 (LayerNorm, softmax, the loss) is fp32, as for one run.
    CPU autocast sits where CUDA's does, so these are the dtypes a GPU step has."""
    dc = bench()
    vocab_size, batches, _ = data
    found = {}
    with dc.bf16_autocast():
        for name, make in [("one run", lambda: dc.solo_step(tiny_models(vocab_size, [0])[0], HP)),
                           ("vmap's dtypes", lambda: dc.vmap_dtypes(fused_step(tiny_models(vocab_size, [0, 1])))),
                           ("fused", lambda: fused_step(tiny_models(vocab_size, [0, 1])))]:
            step = make()
            found[name] = dc.counted(step, dc.Dtypes(step.model), batches[0], HP)
    layers = sum(found["one run"].linear_outputs.values())
    assert layers == 2 * 6 + 2  # per layer: query, key, value, attention output, intermediate, output; pooler, classifier
    assert found["one run"].linear_outputs == {"bfloat16": layers}
    assert found["vmap's dtypes"].linear_outputs == {"float32": layers}  # the leak the casts undo
    fused = found["fused"]
    assert fused.linear_outputs == {"bfloat16": layers}
    assert fused.fp32() == {"linear outputs": 0, "matrix products": 0, "operators in linear layers": 0}
    assert {op for op, _ in fused.in_linear} >= {"bmm", "add"} and sum(fused.products.values()) > 0
    assert fused.not_fp32() == 0 and fused.losses == {"float32": 1}
    assert {op for op, _ in fused.in_fp32} >= {"native_layer_norm", "_log_softmax"}


def test_under_bf16_autocast_fused_runs_follow_one_runs_bf16(data):
    """K runs fused under bf16 autocast against each run alone under bf16 autocast: their losses stay within
    a tenth of what bf16 itself changes (one run in bf16 against fp32). Measured on CPU: 3.8e-4 against
    8.1e-3 (with vmap's dtypes, 6.8e-4)."""
    from transformers import get_linear_schedule_with_warmup

    dc = bench()
    vocab_size, batches, _ = data
    models = tiny_models(vocab_size, [0, 1, 2])
    with dc.bf16_autocast():
        _, losses = fused([copy.deepcopy(m) for m in models], batches)
        alone = []
        for model in copy.deepcopy(models):
            step = dc.solo_step(model, HP)
            scheduler = get_linear_schedule_with_warmup(step.optimizer, int(HP.warmup_ratio * STEPS), STEPS)
            per_step = []
            for batch in batches:
                step.run(batch)
                scheduler.step()
                per_step.append(step.total(SINCE_CONSOLE_LINE))
                step.reset(SINCE_CONSOLE_LINE)
            alone.append(torch.tensor(per_step))
    alone = torch.stack(alone)
    in_fp32 = torch.stack([solo(m, batches)[0] for m in models])
    bf16_noise = float((alone - in_fp32).abs().max())
    assert bf16_noise > 4e-3  # bf16 acted
    assert float((losses - alone).abs().max()) < bf16_noise / 10


def test_the_byte_count_and_what_the_casts_save():
    """bench/dispatch_count.py's Bytes: what an operator reads and writes, on fake tensors (no memory); and
    per run, a fused step under bf16 autocast moves fewer bytes with fused.py's casts than with vmap's
    dtypes (its fp32 activations), still more than one run's step."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    dc = bench()
    with FakeTensorMode():
        a, b = torch.ones(1000), torch.ones(1000, dtype=torch.bfloat16)
        with dc.Bytes() as count:
            c = a + b  # reads 4,000 + 2,000 bytes, writes 4,000
            c.copy_(a)  # reads 4,000, writes 4,000
            c.add_(a[None].expand(5, 1000).sum(0))  # sum reads the 4,000 bytes it has, writes 4,000; add_ 12,000
            c.view(10, 100).t()  # views move nothing
        assert count.bytes["forward"] == 10_000 + 8_000 + 8_000 + 12_000
        gb = {}
        with dc.bf16_autocast():
            batch = dc.synthetic_batch(4, 16, 100)
            for name, make in [("one run", lambda: dc.solo_step(tiny_models(100, [0])[0], HP)),
                               ("vmap's dtypes", lambda: dc.vmap_dtypes(fused_step(tiny_models(100, [0, 1])))),
                               ("fused", lambda: fused_step(tiny_models(100, [0, 1])))]:
                gb[name] = sum(dc.counted(make(), dc.Bytes(16), batch, HP).bytes.values()) / (1 if name == "one run" else 2)
    assert gb["one run"] < gb["fused"] < gb["vmap's dtypes"]
