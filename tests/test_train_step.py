"""The training step as one function (bertology.train.step) and its CUDA-graph replay (bertology.train.graphs),
checked on CPU.

The eager step must compute exactly what the loop always computed. The graphed step is driven here by a
stand-in for CUDA graphs: "capture" keeps the function and "replay" calls it again over the same static
buffers, which is what a replay does on a GPU. That checks everything but the CUDA calls themselves:
the static buffers, one graph per shape and trainable set, a warm-up that trains nothing and draws no
dropout, optimizer state created outside the graph, the learning rate as a tensor the schedule fills, and
the 4-D attention mask.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from conftest import Killed, MemorySink, ReplayByCalling, synthetic_sst2
from safetensors.torch import load_file
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    get_linear_schedule_with_warmup,
)

from bertology.data import Encoded
from bertology.tasks import get_task
from bertology.train import Hyper, engine, finetune, loop
from bertology.train.graphs import (
    GraphedStep,
    create_optimizer_state,
    use_device_lr,
    use_graphs,
)
from bertology.train.heads import SequenceHead
from bertology.train.step import (
    SINCE_CONSOLE_LINE,
    SINCE_EVALUATION,
    SINCE_SERIES_POINT,
    TrainStep,
    graph_inputs,
    param_groups,
)

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIG = {"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 64, "max_position_embeddings": 128}


def model_and_optimizer(dropout: float = 0.0, lr: float = 1e-3):
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**CONFIG, hidden_dropout_prob=dropout,
                                                     attention_probs_dropout_prob=dropout, num_labels=2))
    model.train()
    optimizer = torch.optim.AdamW(param_groups(model, 0.01), lr=lr, fused=True)
    scheduler = get_linear_schedule_with_warmup(optimizer, 2, 20)
    return model, optimizer, scheduler


def batches(widths, rows: int = 4, seed: int = 0):
    """Host batches as the heads make them: padded rows (the last column of each is padding), labels."""
    rng = np.random.default_rng(seed)
    for width in widths:
        ids = rng.integers(5, CONFIG["vocab_size"], (rows, width))
        mask = np.ones((rows, width), dtype=np.int64)
        mask[:, -1] = 0
        yield {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": np.zeros_like(ids),
               "labels": rng.integers(0, 2, rows)}


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("max_grad_norm", [1e6, 0.3])
def test_the_eager_step_computes_what_the_loop_always_did(max_grad_norm):
    """The loop's step before it became a function: forward, backward, clip_grad_norm_, AdamW, schedule,
    zero_grad, and three running loss sums, each its own scalar. Clipping is folded into AdamW (it divides
    by the factor's reciprocal): bit for bit where no gradient is clipped, within float rounding where every
    step clips."""
    (model, optimizer, scheduler), (ref, ref_opt, ref_sched) = model_and_optimizer(0.1), model_and_optimizer(0.1)
    step = TrainStep(model, optimizer, max_grad_norm=max_grad_norm, device=torch.device("cpu"))
    sums, norms = [torch.zeros(()) for _ in range(3)], []
    for batch in batches([7, 7, 5, 9, 3, 7]):
        torch.manual_seed(len(batch["input_ids"][0]))  # the same dropout draws on both sides
        step(batch)
        scheduler.step()
        torch.manual_seed(len(batch["input_ids"][0]))
        loss = ref(**{k: torch.from_numpy(v) for k, v in batch.items()}).loss
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(ref.parameters(), max_grad_norm).item())
        ref_opt.step()
        ref_sched.step()
        ref_opt.zero_grad(set_to_none=True)
        for s in sums:
            s += loss.detach()
    ours, theirs = weights(model), weights(ref)
    if max_grad_norm > max(norms):  # never clipped
        assert all(torch.equal(ours[k], theirs[k]) for k in ours)
        assert [step.total(slot) for slot in (SINCE_EVALUATION, SINCE_CONSOLE_LINE, SINCE_SERIES_POINT)] == \
            [s.item() for s in sums]
    else:
        assert min(norms) > max_grad_norm  # every step clipped
        assert not all(torch.equal(ours[k], theirs[k]) for k in ours)  # rounded differently...
        assert all(torch.allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-7) for k in ours)  # ...and no more
        assert step.total(SINCE_EVALUATION) == pytest.approx(sums[0].item(), rel=1e-6)
        assert optimizer.grad_scale is None  # no step's clipping outlives it
        return
    step.reset(SINCE_CONSOLE_LINE)
    assert step.total(SINCE_CONSOLE_LINE) == 0.0 and step.total(SINCE_EVALUATION) == sums[0].item()


def test_graphs_are_used_on_cuda_only_unless_turned_off():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert use_graphs(cuda, cuda_graph=True)
    assert not use_graphs(cpu, cuda_graph=True)
    assert not use_graphs(cuda, cuda_graph=False)


def test_creating_the_optimizer_state_changes_no_weight_and_counts_no_step():
    model, optimizer, _ = model_and_optimizer()
    for group in optimizer.param_groups:  # as the schedule leaves it after one step of warm-up
        group["lr"] = 5e-4
    use_device_lr(optimizer, torch.device("cpu"))
    before, rates = weights(model), [g["lr"].item() for g in optimizer.param_groups]
    params = [p for p in model.parameters() if p.requires_grad]
    create_optimizer_state(optimizer, params)
    after = weights(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    for p in params:
        state = optimizer.state[p]
        assert state["step"].item() == 0 and not state["exp_avg"].any() and not state["exp_avg_sq"].any()
        assert p.grad is None
    assert [g["lr"].item() for g in optimizer.param_groups] == rates and rates[0] == pytest.approx(5e-4)


@pytest.mark.parametrize("dropout", [0.0, 0.1], ids=["no-dropout", "dropout"])
def test_the_graphed_step_trains_as_the_eager_step(dropout):
    """Same batches, same result (to float noise: the learning rate is a float32 tensor when graphed). With
    dropout, the replays draw the eager step's masks: warming up a new graph restores the RNG."""
    (model, optimizer, scheduler), (ref, ref_opt, ref_sched) = model_and_optimizer(dropout), model_and_optimizer(dropout)
    backend = ReplayByCalling()
    graphed = GraphedStep(TrainStep(model, optimizer, max_grad_norm=0.5, device=torch.device("cpu")), backend,
                          log=lambda _: None)
    eager = TrainStep(ref, ref_opt, max_grad_norm=0.5, device=torch.device("cpu"))
    widths = [32, 32, 64, 32, 64, 64, 32, 96]
    for i, batch in enumerate(batches(widths)):
        torch.manual_seed(i)
        graphed(batch)
        scheduler.step()
        torch.manual_seed(i)
        eager(batch)
        ref_sched.step()
    a, b = weights(model), weights(ref)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    assert graphed.total(SINCE_EVALUATION) == pytest.approx(eager.total(SINCE_EVALUATION), rel=1e-6)
    assert (backend.captured, backend.warmed, backend.replays) == (3, 3, len(widths))  # one graph per width
    assert isinstance(optimizer.param_groups[0]["lr"], torch.Tensor)
    assert optimizer.param_groups[0]["lr"].item() == pytest.approx(ref_opt.param_groups[0]["lr"], rel=1e-6)


def test_warming_up_a_new_graph_trains_nothing_and_draws_nothing():
    model, optimizer, _ = model_and_optimizer(dropout=0.1)
    graphed = GraphedStep(TrainStep(model, optimizer, max_grad_norm=1.0, device=torch.device("cpu")),
                          ReplayByCalling(), log=lambda _: None)
    use = next(batches([32]))
    before, rng = weights(model), torch.get_rng_state()
    graph = graphed._record({k: torch.from_numpy(v) for k, v in use.items()},
                            [p for p in model.parameters() if p.requires_grad])
    assert torch.equal(torch.get_rng_state(), rng)
    after = weights(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())
    assert graphed.total(SINCE_EVALUATION) == 0.0
    assert set(graph.inputs) == set(use) and torch.equal(graph.inputs["input_ids"], torch.from_numpy(use["input_ids"]))


def test_a_graph_per_batch_shape_and_trainable_set_and_new_data_in_the_same_buffers():
    model, optimizer, _ = model_and_optimizer()
    backend, lines = ReplayByCalling(), []
    graphed = GraphedStep(TrainStep(model, optimizer, max_grad_norm=1.0, device=torch.device("cpu")), backend,
                          log=lines.append)
    first, second = batches([32, 32], seed=1)
    graphed(first)
    buffers = graphed.graphs[next(iter(graphed.graphs))].inputs
    graphed(second)
    assert backend.captured == 1 and torch.equal(buffers["input_ids"], torch.from_numpy(second["input_ids"]))
    for p in model.bert.embeddings.parameters():  # a regime freezes the embeddings: a new trainable set
        p.requires_grad_(False)
    frozen = weights(model)
    graphed(next(batches([32], seed=2)))
    graphed(next(batches([32], rows=3, seed=3)))  # an epoch's odd-sized last batch
    assert backend.captured == 3 and len(graphed.graphs) == 3
    assert all(torch.equal(frozen[k], v) for k, v in weights(model).items() if "embeddings" in k)
    assert lines[0].startswith("cuda graph 1: batch 4x32") and lines[-1].startswith("cuda graph 3: batch 3x32")


@pytest.mark.parametrize("model_class", [BertForSequenceClassification, BertForQuestionAnswering, BertForMaskedLM])
def test_the_4d_boolean_mask_gives_the_2d_masks_outputs(model_class):
    """transformers passes a 4-D mask to SDPA unchecked; it must mean what the 2-D padding mask means."""
    torch.manual_seed(0)
    model = model_class(BertConfig(**CONFIG)).eval()
    batch = {k: torch.from_numpy(v) for k, v in next(batches([12], rows=3)).items() if k != "labels"}
    batch["attention_mask"][1, 6:] = 0
    with torch.inference_mode():
        plain = model(**batch)
        four_d = model(**graph_inputs(batch))
    assert graph_inputs(batch)["attention_mask"].shape == (3, 1, 1, 12)
    for name in ("logits", "start_logits", "end_logits"):
        if getattr(plain, name, None) is not None:
            assert torch.allclose(getattr(plain, name), getattr(four_d, name), atol=1e-6), name


TASK = get_task("sst2")


@pytest.fixture
def graphed_on_cpu(monkeypatch):
    """The loop as it runs on CUDA (graphed, widths in buckets of 32), with replays by calling."""
    backend = ReplayByCalling()
    monkeypatch.setattr(loop, "use_graphs", lambda device, *, cuda_graph: cuda_graph)
    monkeypatch.setattr(engine, "GraphedStep", functools.partial(GraphedStep, backend=backend))
    engine.release()
    yield backend
    engine.release()


def test_the_loop_runs_graphed_and_a_killed_graphed_run_resumes_bit_for_bit(tiny_sst2, graphed_on_cpu, tmp_path):
    model_dir, train, val = tiny_sst2
    hp = Hyper(lr=2e-3, batch_size=8, epochs=2, checkpoint_every=5, log_every=4)
    evals = {"validation": val}
    lines = []
    whole = finetune(model_dir, TASK, train, evals, hp, 3, tmp_path / "whole", device="cpu", log=lines.append)
    assert whole.step_kind == "cuda-graph"
    assert any(line.startswith("cuda graph 1: batch 8x32,") for line in lines)  # widths in buckets of 32
    assert graphed_on_cpu.replays == 2 * 6  # 48 rows: 6 steps an epoch, each a replay
    # eager at the same widths (dropout draws a mask per padded width): the same training, to float noise
    eager = finetune(model_dir, TASK, train, evals, dataclasses.replace(hp, cuda_graph=False, pad_multiple=32), 3,
                     tmp_path / "eager", device="cpu", log=lambda _: None)
    assert eager.step_kind == "eager"
    for a, b in zip(whole.curves + whole.losses, eager.curves + eager.losses, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)

    sink = MemorySink(kill_after=1)
    with pytest.raises(Killed):
        finetune(model_dir, TASK, train, evals, hp, 3, tmp_path / "killed", device="cpu", log=lambda _: None,
                 state=sink)
    resumed = finetune(model_dir, TASK, train, evals, hp, 3, tmp_path / "resumed", device="cpu",
                       log=lambda _: None, state=sink)

    def without_time(result):
        return [{k: v for k, v in row.items() if k != "seconds"} for row in result.curves + result.losses]

    assert without_time(resumed) == without_time(whole)
    a, b = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "resumed" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def tiny_sst2(tmp_path_factory):
    """A 2-layer BERT with a word-level vocabulary and 48 synthetic SST-2 rows."""
    from bertology.data import subset_indices, tokenize_split

    train_ds, val_ds, tokenizer = synthetic_sst2()
    model_dir = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(**{**CONFIG, "vocab_size": len(tokenizer)})).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    train = tokenize_split(train_ds.select(subset_indices(train_ds["label"], count=48, seed=0)), TASK, tokenizer,
                           max_length=32)
    val = tokenize_split(val_ds.select(subset_indices(val_ds["label"], count=32, seed=0)), TASK, tokenizer,
                         max_length=32)
    assert Encoded.from_table(train).lengths.max() <= 32
    return model_dir, train, val


def test_the_head_pads_graphed_batches_to_the_bucket(tiny_sst2):
    model_dir, train, _ = tiny_sst2
    head = SequenceHead(TASK, pad_multiple=32)
    model = head.load(model_dir, device="cpu")
    examples = Encoded.from_table(train)
    assert head.train_inputs(examples, [0, 1, 2], model, key=(0,))["input_ids"].shape[1] == 32


def outcome(result, out_dir):
    rows = [{k: v for k, v in row.items() if k != "seconds"} for row in result.curves + result.losses]
    return rows, load_file(out_dir / "model.safetensors")


def assert_same(a, b):
    (rows_a, weights_a), (rows_b, weights_b) = a, b
    assert rows_a == rows_b
    assert weights_a.keys() == weights_b.keys() and all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


@pytest.mark.parametrize("graphed", [False, True], ids=["eager", "graphed"])
def test_a_run_on_the_previous_runs_engine_ends_as_it_does_alone(tiny_sst2, tmp_path, graphed, request):
    """A bundle's runs in one process share the model, optimizer and step (and the step's graphs): run B after
    run A, or B resumed into the engine that A used after B was killed, ends bit for bit as B alone."""
    backend = request.getfixturevalue("graphed_on_cpu") if graphed else None
    model_dir, train, val = tiny_sst2
    evals = {"validation": val}
    a = Hyper(lr=2e-3, batch_size=8, epochs=2, log_every=4)
    b = dataclasses.replace(a, lr=1e-3, checkpoint_every=5)

    def run(hp, seed, name, **kw):
        lines = []
        result = finetune(model_dir, TASK, train, evals, hp, seed, tmp_path / name, device="cpu", log=lines.append, **kw)
        return result, lines

    engine.release()
    alone = outcome(run(b, 4, "alone")[0], tmp_path / "alone")
    engine.release()
    run(a, 3, "a")
    captured = backend.captured if graphed else 0
    after_a, lines = run(b, 4, "after-a")
    assert any(line.startswith("reusing the previous run's model") for line in lines)
    assert_same(outcome(after_a, tmp_path / "after-a"), alone)
    if graphed:
        assert backend.captured == captured  # B replayed A's graphs: same shapes, same trainable set
        assert after_a.capture_seconds == 0.0  # and spent nothing capturing

    engine.release()
    sink = MemorySink(kill_after=1)
    with pytest.raises(Killed):
        run(b, 4, "killed", state=sink)
    run(a, 3, "a-again")  # the kept engine now holds A's state
    resumed, lines = run(b, 4, "resumed", state=sink)
    assert any(line.startswith("resuming at step 5/12") for line in lines)
    assert any(line.startswith("reusing the previous run's model") for line in lines)
    assert_same(outcome(resumed, tmp_path / "resumed"), alone)
    engine.release()


def test_an_engine_is_reused_only_by_a_run_it_fits(tiny_sst2, tmp_path):
    """Another clipping norm or weight decay (read by the step outside its tensors), or a compiled model, gets
    an engine of its own."""
    model_dir, train, val = tiny_sst2
    base = Hyper(lr=2e-3, batch_size=8, epochs=1)
    engine.release()
    reused = []
    for i, hp in enumerate([base, dataclasses.replace(base, max_grad_norm=0.5),
                            dataclasses.replace(base, max_grad_norm=0.5, weight_decay=0.0),
                            dataclasses.replace(base, max_grad_norm=0.5, weight_decay=0.0, lr=1e-3)]):
        lines = []
        finetune(model_dir, TASK, train, {"validation": val}, hp, 1, tmp_path / str(i), device="cpu", log=lines.append)
        reused.append(any(line.startswith("reusing") for line in lines))
    assert reused == [False, False, False, True]  # a new learning rate is only a new schedule
    engine.release()
