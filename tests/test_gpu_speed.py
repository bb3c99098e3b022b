"""GPU speed work that must not change results, checked on CPU: bucketed batch widths (padding is masked
out) and `gpu_concurrency` (a bundle's cells trained K at a time side by side in the step's process, or with
BERTOLOGY_GPU_CONCURRENCY=processes as separate processes, each result exactly the one the cells give run
one by one)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from safetensors.torch import load_file

from bertology.data import Encoded, padded_width
from bertology.errors import EXIT_BAD_INPUT, BadInput, BertologyError, Transient
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec, canonical_json
from bertology.steps import build_checkpoint, finetune, prepare_data, shared_gpu
from bertology.steps.common import dataset_key
from bertology.steps.harness import main
from bertology.store import LocalStore
from bertology.study import StudySpec

REPO = Path(__file__).resolve().parent.parent
DATASET = DatasetSpec("sst2", "synthetic", "tiny:bert", 32, count=96)
SHORT = Regime(lr=1e-3, batch_size=16, epochs=1)
INTERMEDIATE = RunSpec(CheckpointSpec("tiny:bert"), DATASET, SHORT, seed=7)
# A plain run and two sequential runs after one shared intermediate run (trained once, first); every run
# keeps its weights, so that they too are compared.
CELLS = [Cell("conc", "pre-trained", "tiny:bert", RunSpec(INTERMEDIATE.checkpoint, DATASET, SHORT, 1),
              keep_weights=True)] + [
    Cell("conc", "pre-trained", "tiny:bert", RunSpec(INTERMEDIATE.checkpoint, DATASET, SHORT, seed, after=INTERMEDIATE),
         keep_weights=True)
    for seed in (3, 4)]


def test_padded_width_rounds_up_to_the_multiple_but_not_past_the_positions():
    assert [padded_width(n, 8) for n in (1, 8, 9, 13, 16, 17)] == [8, 8, 16, 16, 16, 24]
    assert padded_width(13, 1) == 13
    assert padded_width(61, 8, limit=64) == 64 and padded_width(63, 8, limit=62) == 63  # never below the row
    enc = Encoded(tokens={"input_ids": np.arange(1, 6)}, offsets=np.array([0, 2, 5]), rows={"label": np.array([0, 1])},
                  lengths=np.array([2, 3]))
    batch = enc.batch([0, 1], {"input_ids": 0}, multiple=4)
    assert batch["input_ids"].tolist() == [[1, 2, 0, 0], [3, 4, 5, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]


def test_batches_on_a_gpu_are_padded_to_multiples_of_8_compiled_or_not_and_exact_on_cpu():
    """Measured on an H200 (docs/measurements.md): eager training on SST-2's lengths ran 2.9x faster with
    widths rounded up to multiples of 8 than with each batch's own longest row. A head left at its
    default pads for the device its model is on, so evaluation steps get the same widths as training."""
    from types import SimpleNamespace

    import torch

    from bertology.tasks import get_task
    from bertology.train.device import pad_multiple
    from bertology.train.heads import head_for

    assert (pad_multiple(torch.device("cuda")), pad_multiple(torch.device("cuda:1")),
            pad_multiple(torch.device("cpu"))) == (8, 8, 1)
    enc = Encoded(tokens={"input_ids": np.arange(1, 14)}, offsets=np.array([0, 2, 13]),
                  rows={"label": np.array([0, 1])}, lengths=np.array([2, 11]))
    head = head_for(get_task("sst2"))
    assert head.pad_multiple == 0  # not set: the model's device decides

    def on(device: str):
        return SimpleNamespace(parameters=lambda: iter([SimpleNamespace(device=torch.device(device))]),
                               config=SimpleNamespace(pad_token_id=0, max_position_embeddings=512))

    assert head.batch(enc, [0, 1], on("cuda"))["input_ids"].shape == (2, 16)
    assert head.batch(enc, [0, 1], on("cpu"))["input_ids"].shape == (2, 11)
    head.pad_multiple = 4  # Hyper.pad_multiple, when a run sets it, wins on any device
    assert head.batch(enc, [0, 1], on("cpu"))["input_ids"].shape == (2, 12)


def test_bucketed_padding_leaves_training_and_metrics_unchanged(tmp_path):
    """The GPU's padded widths (multiples of 8) against the CPU's (each batch's longest row): pad
    positions are masked out of attention, so losses and metrics agree up to float noise. Without dropout:
    its masks are drawn over the padded shape, so with dropout the draws (not the maths) differ."""
    import torch

    from bertology import models, tasks
    from bertology.data import tokenize_split
    from bertology.train import Hyper, finetune

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        task = tasks.get_task("sst2")
        model, tokenizer = models.tiny_bert(0)
        model.config.hidden_dropout_prob = model.config.attention_probs_dropout_prob = 0.0
        path = models.save_checkpoint(model, tokenizer, tmp_path / "tiny")
        train = tokenize_split(tasks.load_split(task, "synthetic", "train").select(range(96)), task, tokenizer, 32)
        val = tokenize_split(tasks.load_split(task, "synthetic", "validation").select(range(64)), task, tokenizer, 32)
        hp = Hyper(lr=1e-3, batch_size=16, epochs=2, eval_batch_size=32)
        results = [finetune(path, task, train, {"validation": val}, dataclasses.replace(hp, pad_multiple=m), 1,
                            tmp_path / f"out-{m}", device="cpu", log=lambda _: None) for m in (1, 8)]
    finally:
        torch.set_num_threads(threads)
    plain, bucketed = results
    assert len(set(train.column("length").to_pylist())) > 4  # the widths really differ
    for a, b in zip(plain.curves, bucketed.curves):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["validation/accuracy"] == b["validation/accuracy"]


def test_gpu_concurrency_is_an_operational_parameter_outside_every_id(tmp_path):
    one, _ = StudySpec.from_params("s", {"preset": "tiny"})
    four, _ = StudySpec.from_params("s", {"preset": "tiny", "gpu_concurrency": "4"})
    assert (one.gpu_concurrency, four.gpu_concurrency) == (1, 4)
    assert one.id == four.id and [c.run.id for c in one.cells()] == [c.run.id for c in four.cells()]
    with pytest.raises(BadInput, match="gpu_concurrency"):
        StudySpec.from_params("s", {"gpu_concurrency": "0"})


def test_waves_train_a_shared_intermediate_run_once_before_its_cells():
    first, second = shared_gpu.waves(CELLS)
    assert [c.run.id for c in first] == [INTERMEDIATE.id]
    assert [c.run.id for c in second] == [c.run.id for c in CELLS]
    assert shared_gpu.waves(CELLS[:1]) == [CELLS[:1]]


@pytest.mark.parametrize("codes, kind, exit_code", [
    ({"a": 75, "b": 2}, BadInput, EXIT_BAD_INPUT), ({"a": -9, "b": 1}, BertologyError, 1),
    ({"a": -9}, Transient, 75)])
def test_the_worst_child_exit_decides_the_pods(codes, kind, exit_code):
    with pytest.raises(kind) as info:
        shared_gpu._raise_worst(codes, skipped=1)
    assert type(info.value) is kind and info.value.exit_code == exit_code and "1 runs not started" in str(info.value)


def test_a_bad_gpu_concurrency_is_exit_2_before_anything_runs(tmp_path, capsys):
    argv = ["--store", str(tmp_path), "--spec", canonical_json(CELLS[:2]), "--param", "gpu_concurrency=0"]
    assert main("finetune", finetune.run, argv) == EXIT_BAD_INPUT
    assert "gpu_concurrency must be an integer >= 1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def base_store(tmp_path_factory):
    store = LocalStore(tmp_path_factory.mktemp("base"))
    prepare_data.prepare(store, DATASET)
    build_checkpoint.build(store, INTERMEDIATE.checkpoint)
    assert store.is_done(dataset_key(DATASET.id))
    return store.root


def bundle_in_a_process(store: Path, *extra: str, **environ: str) -> str:
    """The finetune job on the bundle as a real process (its children are processes too), one thread."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **environ)
    argv = [sys.executable, "-m", "jobs.finetune", "--store", str(store), "--spec", canonical_json(CELLS), *extra]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def bundle_here(store: Path, capsys, *extra: str) -> str:
    """The finetune step on the bundle in this process (one thread: the kernels the children run)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main("finetune", finetune.run, ["--store", str(store), "--spec", canonical_json(CELLS), *extra]) == 0
    finally:
        torch.set_num_threads(threads)
    return capsys.readouterr().out


def rows(store: Path) -> dict[str, object]:
    """Every published results row and every run's result, curves and weights, without wall-clock times."""
    out: dict[str, object] = {}
    for path in sorted((store / "results").rglob("*.parquet")):
        table = pq.read_table(path)
        out[str(path.relative_to(store))] = table.drop([c for c in table.column_names if c == "seconds"]).to_pylist()
    for run in sorted((store / "runs").iterdir()):
        finetuned = run / "finetune"
        result = (finetuned / "result.json").read_text()
        out[f"{run.name}/result"] = {k: v for k, v in json.loads(result).items()
                                     if k not in ("wall_seconds", "throughput")}
        out[f"{run.name}/curves"] = pq.read_table(finetuned / "curves.parquet").drop(["seconds"]).to_pylist()
        weights = load_file(finetuned / "model" / "model.safetensors")
        out[f"{run.name}/weights"] = {k: v.numpy().tobytes() for k, v in weights.items()}
    return out


@pytest.fixture(scope="module")
def one_by_one(base_store, tmp_path_factory):
    """The bundle trained one run at a time (the finetune step in this process), and its rows."""
    import torch

    store = tmp_path_factory.mktemp("one-by-one") / "store"
    shutil.copytree(base_store, store)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main("finetune", finetune.run, ["--store", str(store), "--spec", canonical_json(CELLS)]) == 0
    finally:
        torch.set_num_threads(threads)
    return rows(store)


def test_a_bundle_trained_two_at_a_time_side_by_side_gives_exactly_the_results_of_one_at_a_time(
        base_store, one_by_one, tmp_path, capsys):
    """In the step's own process (on a GPU: each run on its own CUDA stream): the shared intermediate run
    first (alone in its wave), then the three cells two at a time, every row and weight as one at a time."""
    store = tmp_path / "k2"
    shutil.copytree(base_store, store)
    out = bundle_here(store, capsys, "--param", "gpu_concurrency=2")
    assert "gpu_concurrency 2: first the intermediate runs, 1 runs, up to 1 side by side in this process" in out
    assert "gpu_concurrency 2: fine-tuning 3 runs, up to 2 side by side in this process" in out
    assert f"side by side (interleaved on CPU): run {CELLS[1].run.id} started, 2 at once" in out
    assert "started in process" not in out
    got = rows(store)
    assert got.keys() == one_by_one.keys() and len([k for k in got if k.endswith("/weights")]) == 4
    for key in one_by_one:
        assert got[key] == one_by_one[key], key
    again = bundle_here(store, capsys, "--param", "gpu_concurrency=2")
    assert again.count("finetune cached") == 3 and "side by side" not in again


def test_gpu_concurrency_takes_compiled_runs():
    """A compiled model has no CUDA graphs of its own: its kernels replay in the step's graph, so compiled
    runs train side by side like any others."""
    for k in ("1", "2"):
        spec, _ = StudySpec.from_params("s", {"preset": "tiny", "gpu_concurrency": k, "compile": "true"})
        assert spec.gpu_concurrency == int(k) and spec.regime.compile


def test_a_bundle_run_two_at_a_time_in_processes_gives_exactly_the_results_of_one_at_a_time(
        base_store, one_by_one, tmp_path, capsys):
    """BERTOLOGY_GPU_CONCURRENCY=processes: each run in its own process sharing the device."""
    side_by_side = tmp_path / "k2"
    shutil.copytree(base_store, side_by_side)
    out = bundle_in_a_process(side_by_side, "--param", "gpu_concurrency=2", BERTOLOGY_GPU_CONCURRENCY="processes")
    assert "gpu_concurrency 2: first the intermediate runs, 1 runs side by side" in out
    assert "gpu_concurrency 2: fine-tuning 3 runs side by side" in out
    assert out.count(f"run {INTERMEDIATE.id}: started in process") == 1
    expected, got = one_by_one, rows(side_by_side)
    assert len([k for k in expected if k.endswith("/weights")]) == 4  # three cells and the intermediate run
    assert any(k.startswith("results/curves/") for k in expected)
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key] == expected[key], key
    # Again: every cell is cached and handled in the pod's own process (no child started).
    again = bundle_here(side_by_side, capsys, "--param", "gpu_concurrency=2")
    assert again.count("finetune cached") == 3 and "started in process" not in again


def test_the_finetune_step_reads_gpu_concurrency_from_the_plan(tmp_path):
    """The study parameter reaches the pod through the stored plan (Argo passes only --plan and --ids)."""
    import argparse

    from bertology.steps import planned
    from bertology.steps.plan import plan_study

    store = LocalStore(tmp_path)
    spec, _ = StudySpec.from_params("conc", {"preset": "tiny", "gpu_concurrency": "3"})
    ref = plan_study(store, spec)["study"]
    assert ref == planned.plan_ref("conc", spec.id)
    assert shared_gpu.concurrency(store, argparse.Namespace(param=[], plan=ref)) == 3
    assert shared_gpu.concurrency(store, argparse.Namespace(param=["gpu_concurrency=2"], plan=ref)) == 2
    assert shared_gpu.concurrency(store, argparse.Namespace(param=[], plan=None)) == 1
    with pytest.raises(BadInput, match="gpu_concurrency=K and fuse=K only"):
        shared_gpu.concurrency(store, argparse.Namespace(param=["bundle=2"], plan=ref))


def test_per_token_outputs_of_bucketed_batches_are_those_of_unbucketed_ones():
    """A span head's logits per token: a batch padded to a multiple of 8 gives the same matrix."""
    from types import SimpleNamespace

    import torch

    from bertology.tasks import get_task
    from bertology.train.heads import SpanHead

    class Echo(torch.nn.Module):  # start logits = the input ids, a pure function of each position
        config = SimpleNamespace(pad_token_id=0, max_position_embeddings=64)

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids, attention_mask, token_type_ids):
            return SimpleNamespace(start_logits=input_ids.float() * attention_mask)

    lengths = np.array([3, 11, 5, 9, 2])
    enc = Encoded(tokens={"input_ids": np.arange(1, lengths.sum() + 1),
                          "token_type_ids": np.zeros(lengths.sum(), dtype=np.int64)},
                  offsets=np.concatenate([[0], np.cumsum(lengths)]), rows={}, lengths=lengths)
    outputs = [SpanHead(get_task("squad2"), pad_multiple=m)._outputs(Echo(), enc, 2, torch.device("cpu"),
                                                                      ("start_logits",), per_token=True)[0]
               for m in (1, 8)]
    assert outputs[0].shape == (5, 11)
    assert np.array_equal(outputs[0], outputs[1])


def test_compile_asks_for_no_cuda_graphs_of_its_own_and_dynamic_shapes_on_cpu():
    """The whole step is captured as CUDA graphs around the compiled model (bertology.train.graphs), so
    `compile: true` asks for inductor's default mode (no graphs of its own, which cannot be captured inside
    another); widths on CPU are exact, so its shapes are dynamic from the first."""
    import torch

    from bertology.train.device import compile_model

    class Recorder(torch.nn.Module):
        def compile(self, **kwargs):
            self.asked = kwargs

    on_gpu, on_cpu = Recorder(), Recorder()
    compile_model(on_gpu, torch.device("cuda"))
    compile_model(on_cpu, torch.device("cpu"))
    assert (on_gpu.asked, on_cpu.asked) == ({"dynamic": None}, {"dynamic": True})


def test_evaluation_keeps_copies_of_outputs_a_cuda_graph_would_overwrite():
    """A CUDA graph's replay writes its outputs into the same memory every time. The stand-in model below
    does the same (one fp32 buffer, refilled per batch): each batch's logits must survive the next batch."""
    from types import SimpleNamespace

    import torch

    from bertology.tasks import get_task
    from bertology.train.heads import SpanHead

    class OneBuffer(torch.nn.Module):
        config = SimpleNamespace(pad_token_id=0, max_position_embeddings=64)

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.out = torch.zeros(64, 64)

        def forward(self, input_ids, attention_mask, token_type_ids):
            rows, width = input_ids.shape
            view = self.out[:rows, :width]
            view.copy_(input_ids.float() * attention_mask)  # in place, as a replay would
            return SimpleNamespace(start_logits=view)

    lengths = np.array([3, 11, 5, 9, 2])
    enc = Encoded(tokens={"input_ids": np.arange(1, lengths.sum() + 1),
                          "token_type_ids": np.zeros(lengths.sum(), dtype=np.int64)},
                  offsets=np.concatenate([[0], np.cumsum(lengths)]), rows={}, lengths=lengths)
    (logits,) = SpanHead(get_task("squad2"), pad_multiple=1)._outputs(
        OneBuffer(), enc, 2, torch.device("cpu"), ("start_logits",), per_token=True)
    for row, (start, n) in enumerate(zip(enc.offsets[:-1], lengths)):
        assert logits[row, :n].tolist() == list(range(start + 1, start + n + 1)), row
