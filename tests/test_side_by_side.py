"""K runs trained side by side in one process (bertology.train.side_by_side), on CPU: each run must end bit for
bit as it ends trained alone (curves, loss series, selected point, saved weights), with dropout on, runs of
different seeds, checkpoints, architectures and hyper-parameters, eager or with the CUDA-graph step driven by
a stand-in that records whose turn each replay was in (the interleaving happened, each run in its own
memory pool). And the scheduler itself: round-robin turns, K at a time, a failed run ending alone."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from conftest import Killed, MemorySink, small_sst2_splits, synthetic_sst2
from safetensors.torch import load_file
from transformers import BertConfig, BertForSequenceClassification

from bertology.errors import BadInput, Transient
from bertology.tasks import get_task
from bertology.train import Hyper, engine, finetune, loop
from bertology.train.graphs import GraphedStep
from bertology.train.loop import run_to_end, training
from bertology.train.side_by_side import CpuLanes, Lane, raise_failure, side_by_side

pytestmark = pytest.mark.usefixtures("one_thread")
TASK = get_task("sst2")
BASE = Hyper(lr=2e-3, batch_size=8, epochs=2, warmup_ratio=0.2, max_grad_norm=0.5, log_every=3)
# Three runs: other checkpoints (one of another architecture), seeds and hyper-parameters, so they take other
# numbers of steps (5, 7 and 4 an epoch) and end at other turns.
RUNS = [("a", 0, 3, BASE),
        ("b", 1, 4, dataclasses.replace(BASE, batch_size=6, eval_every=4, selection="last")),
        ("wide", 2, 5, dataclasses.replace(BASE, batch_size=10, lr=1e-3, checkpoint_every=3))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three checkpoints with dropout (two of one architecture, one wider and deeper) and the data."""
    train_ds, val_ds, tokenizer = synthetic_sst2()
    dirs = []
    for init, (hidden, layers) in enumerate([(32, 2), (32, 2), (48, 3)]):
        config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                            num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
        path = tmp_path_factory.mktemp(f"bert-{init}")
        torch.manual_seed(init)
        BertForSequenceClassification(config).save_pretrained(path)
        tokenizer.save_pretrained(path)
        dirs.append(path)
    return (dirs, *small_sst2_splits(train_ds, val_ds, tokenizer))


def quiet(*_):
    pass


def outcome(result, out_dir):
    """What must be equal, bit for bit: every curve and loss row but its wall-clock seconds, the selected
    point and numbers, the saved weights."""
    rows = [{k: v for k, v in row.items() if k != "seconds"} for row in result.curves + result.losses]
    weights = load_file(out_dir / "model.safetensors")
    return rows, (result.best_epoch, result.best_step, result.best_metrics), weights


def assert_same(a, b):
    (rows_a, best_a, weights_a), (rows_b, best_b, weights_b) = a, b
    assert rows_a == rows_b
    assert best_a == best_b
    assert weights_a.keys() == weights_b.keys() and all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


def alone(runs, which: int, out, state=None, log=quiet):
    dirs, train, evals = runs
    _, model, seed, hp = RUNS[which]
    engine.release()
    result = finetune(dirs[model], TASK, train, evals, hp, seed, out, device="cpu", log=log, state=state)
    engine.release()
    return outcome(result, out)


def start(runs, which: int, out, state=None, log=quiet):
    """Run `which` as side_by_side starts it: the loop's generator, in the lane it is given."""
    dirs, train, evals = runs
    _, model, seed, hp = RUNS[which]
    return lambda lane: training([dirs[model]], TASK, train, evals, hp, seed, [out], device="cpu", log=log,
                                 state=state, lane=lane)


class RecordingLanes(CpuLanes):
    """CpuLanes that know whose turn it is and give each lane a pool of its own, as graph_pool_handle does."""

    def __init__(self):
        self.current: str | None = None
        self.turns: list[str] = []

    def lane(self, name: str) -> Lane:
        lane = super().lane(name)
        lane.pool = object()
        return lane

    def enter(self, lane):
        assert self.current is None, "lanes do not nest"
        self.current = lane.name
        self.turns.append(lane.name)
        return super().enter(lane)

    def leave(self, lane, outside):
        super().leave(lane, outside)
        self.current = None


class RecordingReplays:
    """CUDA graphs' stand-in (replay calls the captured function again over the same static buffers) that
    records, for each capture and replay, whose lane's turn it was and which memory pool the graph is in."""

    def __init__(self, lanes: RecordingLanes):
        self.lanes = lanes
        self.captures: list[tuple[str | None, object]] = []
        self.replays: list[str | None] = []

    def warm(self, fn):
        fn()

    def capture(self, fn, pool):
        run = self.lanes.current
        self.captures.append((run, pool))

        def replay():
            self.replays.append(self.lanes.current)
            assert self.lanes.current == run, "a run's graph replays in its own turn only"
            fn()

        return replay, pool

    def get_rng_state(self):
        return torch.get_rng_state()

    def set_rng_state(self, state):
        torch.set_rng_state(state)


def test_three_runs_side_by_side_each_end_bit_for_bit_as_alone(runs, tmp_path):
    """Dropout on, the runs interleaved step by step: every run draws its own masks, as alone."""
    expected = [alone(runs, i, tmp_path / f"alone-{name}") for i, (name, *_) in enumerate(RUNS)]
    lines = []
    before = torch.get_rng_state()
    outcomes = side_by_side([start(runs, i, tmp_path / f"sbs-{name}") for i, (name, *_) in enumerate(RUNS)],
                            CpuLanes(), [name for name, *_ in RUNS], log=lines.append)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's generator is as it was
    assert [o.error for o in outcomes] == [None] * 3
    for i, ((name, *_), o) in enumerate(zip(RUNS, outcomes)):
        (result,) = o.value
        assert_same(outcome(result, tmp_path / f"sbs-{name}"), expected[i])
    assert lines[0] == "side by side (interleaved on CPU): run a started, 1 at once"
    assert lines[2] == "side by side (interleaved on CPU): run wide started, 3 at once"


def test_graphed_runs_side_by_side_replay_in_turn_each_in_its_own_pool(runs, tmp_path, monkeypatch):
    """The loop as it runs on CUDA (graphed, widths in buckets of 32), its replays by calling: the replays
    alternate between the runs, each run's graphs are in its lane's pool, and each run ends as alone."""
    lanes = RecordingLanes()
    backend = RecordingReplays(lanes)
    monkeypatch.setattr(loop, "use_graphs", lambda device, *, cuda_graph: cuda_graph)
    monkeypatch.setattr(engine, "GraphedStep", functools.partial(GraphedStep, backend=backend))
    expected = [alone(runs, i, tmp_path / f"alone-{name}") for i, (name, *_) in enumerate(RUNS)]
    backend.captures.clear()
    backend.replays.clear()
    names = [name for name, *_ in RUNS]
    outcomes = side_by_side([start(runs, i, tmp_path / f"sbs-{name}") for i, name in enumerate(names)], lanes, names)
    for i, (name, o) in enumerate(zip(names, outcomes)):
        (result,) = o.value
        assert result.step_kind == "cuda-graph"
        assert_same(outcome(result, tmp_path / f"sbs-{name}"), expected[i])
    # steps per run: 2 epochs of ceil(40 / batch size) batches
    steps = {"a": 10, "b": 14, "wide": 8}
    assert {name: backend.replays.count(name) for name in names} == steps
    assert backend.replays[:3 * 8] == names * 8  # round-robin while all three train
    assert backend.replays[3 * 8:] == ["a", "b"] * 2 + ["b"] * 4  # then the two left, then the last
    pools = {run: {id(pool) for r, pool in backend.captures if r == run} for run in names}
    assert all(len(p) == 1 for p in pools.values()) and len(set.union(*pools.values())) == 3  # one pool each


def test_a_run_that_fails_side_by_side_ends_alone_and_resumes_bit_for_bit(runs, tmp_path):
    """`wide` is killed at its second resume state: the two others go on and end as alone; `wide` started
    again (side by side with another run) resumes from its state and ends as alone."""
    expected = alone(runs, 2, tmp_path / "alone")
    sink = MemorySink(kill_after=2)
    names = ["a", "b", "wide"]
    outcomes = side_by_side([start(runs, 0, tmp_path / "a"), start(runs, 1, tmp_path / "b"),
                             start(runs, 2, tmp_path / "killed", state=sink)], CpuLanes(), names, log=quiet)
    assert [type(o.error) for o in outcomes] == [type(None), type(None), Killed]
    assert_same(outcome(outcomes[0].value[0], tmp_path / "a"), alone(runs, 0, tmp_path / "a-alone"))
    with pytest.raises(Killed):
        raise_failure(outcomes)
    lines = []
    again = side_by_side([start(runs, 0, tmp_path / "a2"), start(runs, 2, tmp_path / "resumed", state=sink,
                                                                 log=lines.append)], CpuLanes(), ["a", "wide"])
    assert "resuming at step 6/8 (epoch 2, batch 2)" in lines
    assert_same(outcome(again[1].value[0], tmp_path / "resumed"), expected)


def steps(name: str, n: int, turns: list, fail_at: int | None = None):
    """A run of n steps that records each of its turns (and fails at step `fail_at`)."""
    def run(lane):
        for i in range(n):
            if i == fail_at:
                raise BadInput(f"{name} failed")
            turns.append((name, i, lane.name))
            yield
        return name.upper()
    return run


def test_the_scheduler_runs_k_at_a_time_and_a_waiting_run_takes_the_place_of_one_that_ended():
    turns = []
    outcomes = side_by_side([steps("a", 2, turns), steps("b", 3, turns), steps("c", 1, turns)], CpuLanes(),
                            ["a", "b", "c"], at_once=2, log=quiet)
    assert [o.value for o in outcomes] == ["A", "B", "C"]
    assert [(name, i) for name, i, _ in turns] == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("b", 2), ("c", 0)]
    assert all(name == lane for name, _, lane in turns)  # each step in its own lane


def test_after_a_failure_no_waiting_run_starts_the_others_go_on_and_the_worst_is_raised():
    turns, lines = [], []
    outcomes = side_by_side([steps("a", 3, turns, fail_at=1), steps("b", 3, turns), steps("c", 1, turns)],
                            CpuLanes(), ["a", "b", "c"], at_once=2, log=lines.append)
    assert outcomes[1].value == "B" and [name for name, *_ in turns] == ["a", "b", "b", "b"]
    assert isinstance(outcomes[0].error, BadInput) and isinstance(outcomes[2].error, Transient)
    assert any(line.startswith("side by side: run a failed (BadInput: a failed); 1 others go on, 1 not started")
               for line in lines)
    with pytest.raises(BadInput, match="a failed"):
        raise_failure(outcomes)
    with pytest.raises(BadInput, match="runs at once must be an integer >= 1, got 0"):
        side_by_side([steps("a", 1, [])], CpuLanes(), ["a"], at_once=0)


def test_an_interrupt_closes_every_run_in_its_lane():
    closed = []

    def run(name):
        def make(lane):
            try:
                while True:
                    yield
            finally:
                closed.append(name)
        return make

    def interrupt(lane):
        yield
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        side_by_side([run("a"), interrupt, run("b")], CpuLanes(), ["a", "stop", "b"], log=quiet)
    assert closed == ["a", "b"]


def test_runs_side_by_side_are_not_fused(runs, tmp_path):
    dirs, train, evals = runs
    lane = CpuLanes().lane("x")
    with pytest.raises(BadInput, match="runs side by side are not fused"):
        run_to_end(training(dirs[:2], TASK, train, evals, BASE, 1, [tmp_path / "x", tmp_path / "y"],
                            device="cpu", log=quiet, lane=lane, fused=True))
