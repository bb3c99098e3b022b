"""The whole training step as CUDA graphs: one launch per step instead of ~1,200.

Why: on an H200 the eager BERT-base step kept the GPU busy 40% of the time; the rest was the host
launching kernels one by one (docs/measurements.md). A captured graph replays forward, backward, clipping,
AdamW and the loss sums as one launch.

How (the pattern of PyTorch's "whole-network capture", CUDA semantics notes):
- one graph per (batch shape, trainable set): batch widths are multiples of `WIDTH_BUCKET` (32: at max
  length 128, four widths, plus the odd-sized last batch of an epoch), and a regime that opens layers per
  epoch gets a graph per set of trainable tensors;
- inputs are copied from pinned host memory into static device buffers, then the graph replays;
- the learning rate is a device tensor that the host's schedule fills in place (AdamW `capturable`);
- before the first capture every trainable tensor gets its AdamW state (a step at learning rate 0 over zero
  gradients, which leaves the weights bit for bit as they were; then the step counts are reset to 0),
  since state created during capture would be re-created on every replay;
- each new graph is warmed up (forward and backward, on a side stream, as the notes ask) with the RNG
  state restored afterwards and the gradients dropped, so warming up trains nothing and draws no dropout;
- the attention mask goes in 4-D (`TrainStep.graph_inputs`), which transformers passes to the attention as
  it is: a 2-D mask makes it test on the host whether the batch has padding (`masking_utils`, a sync that
  capture forbids, transformers#36123);
- autocast runs without its weight cache (a cached cast would be captured once and never refreshed);
- a torch.compiled model (`compile: true`) is compiled by the warm-ups of each new shape, outside the
  capture, which then records inductor's kernels as it records eager ones;
- all graphs of one step share one memory pool: nothing a replay allocates outlives it (gradients and
  activations are used and freed within the step; weights, optimizer state, sums and inputs live outside
  the pool), so graphs may replay in any order. The pool is the step's own (`pool`, or the one its first
  capture makes): runs replaying at once on several streams (bertology.train.side_by_side) never share
  one;
- dropout inside a graph draws from the state the device's default generator points at when capture
  begins (PyTorch registers it with the graph; each replay advances it): a run side by side with others
  points the generator at its own state before it captures and replays (bertology.train.side_by_side);
- a step whose work goes to a stream of its own (a run side by side with others) is captured on that
  stream, not on PyTorch's shared capture stream: cuBLAS keeps a workspace per stream, which a graph
  keeps, so runs replaying at once never share one.

Nothing here runs on CPU: the loop uses `TrainStep` there. `Backend` is the seam a CPU test drives with a
stand-in that replays by calling the captured function again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from bertology.train.device import autocast, host_tensors, sync
from bertology.train.step import TrainStep

WIDTH_BUCKET = 32  # batch widths when graphed: 32, 64, 96, 128 at max length 128
WARMUP_STEPS = 2  # forward-backward passes on a new shape before its capture (kernel choices, workspaces)


class CudaBackend:
    """Capture and replay on the current CUDA device."""

    def warm(self, fn: Callable[[], None]) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)

    def capture(self, fn: Callable[[], None], pool) -> tuple[Callable[[], None], object]:
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream()
        # On a stream of its own (a run side by side with others), capture there: cuBLAS keeps a workspace
        # per stream and a graph keeps the one of the stream it was captured on, so graphs captured on
        # PyTorch's one shared capture stream would share it, and race on it when replayed at once.
        own = None if current == torch.cuda.default_stream(current.device) else current
        with torch.cuda.graph(graph, pool=pool, stream=own):
            fn()
        return graph.replay, graph.pool()

    def get_rng_state(self) -> torch.Tensor:
        return torch.cuda.get_rng_state()

    def set_rng_state(self, state: torch.Tensor) -> None:
        torch.cuda.set_rng_state(state)


def use_graphs(device: torch.device, *, cuda_graph: bool) -> bool:
    """Whether a run's step is graphed here: on CUDA, unless turned off. A torch.compiled model's step is
    graphed too: inductor's kernels, without CUDA graphs of their own (device.compile_model), replay inside
    the step's graph with clipping and AdamW."""
    return device.type == "cuda" and cuda_graph


@dataclass
class _Graph:
    replay: Callable[[], None]
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # the static buffers it reads


def use_device_lr(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Each group's learning rate as a device tensor (the schedule fills it in place), AdamW capturable."""
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        group["capturable"] = True


def create_optimizer_state(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> None:
    """AdamW's state for every tensor of `params` that has none yet, created outside any graph: one step at
    learning rate 0 over zero gradients (moments stay 0; the weights change by lr * ... = 0 exactly), then
    the step counts back to 0, as if the tensor had never been stepped."""
    missing = [p for p in params if p not in optimizer.state]
    if not missing:
        return
    rates = [group["lr"].clone() for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"].zero_()
    for p in missing:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for p in missing:
        optimizer.state[p]["step"].zero_()
        p.grad = None
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"].copy_(rate)


class GraphedStep:
    """`TrainStep` replayed from CUDA graphs (see the module docstring); the same `sums`, `total`, `reset`."""

    def __init__(self, step: TrainStep, backend=None, log: Callable[[str], None] = print, pool=None):
        """`step`: one run's, or K fused runs' (bertology.train.fused), eager step. `pool`: the memory pool
        its graphs are captured into (`torch.cuda.graph_pool_handle()`); None: the one its first capture
        makes, private to this step all the same."""
        self.step, self.backend, self.log = step, backend or CudaBackend(), log
        self.sums, self.total, self.reset = step.sums, step.total, step.reset
        self.graphs: dict[tuple, _Graph] = {}
        self.pool = pool
        self.kind = "cuda-graph"
        self.capture_seconds = 0.0  # warm-ups and captures, synchronised: each new shape's one-time cost
        use_device_lr(step.optimizer, step.device)

    def __call__(self, batch: dict[str, np.ndarray]) -> None:
        inputs = host_tensors(batch, pin=self.step.device.type == "cuda")
        params = self.step.parameters()
        key = (tuple((name, tuple(t.shape), t.dtype) for name, t in sorted(inputs.items())),
               tuple(p.requires_grad for p in params))
        graph = self.graphs.get(key)
        if graph is None:
            sync(self.step.device)
            started = time.perf_counter()
            graph = self.graphs[key] = self._record(inputs, [p for p in params if p.requires_grad])
            sync(self.step.device)
            self.capture_seconds += time.perf_counter() - started
        for name, buffer in graph.inputs.items():
            buffer.copy_(inputs[name], non_blocking=True)
        graph.replay()

    def _record(self, inputs: dict[str, torch.Tensor], trainable: list[torch.nn.Parameter]) -> _Graph:
        """Static buffers for this shape, the optimizer state, a warm-up that changes nothing, the capture."""
        step = self.step
        static = {name: torch.zeros_like(t, device=step.device) for name, t in inputs.items()}
        for name, buffer in static.items():
            buffer.copy_(inputs[name])
        create_optimizer_state(step.optimizer, trainable)
        rng = self.backend.get_rng_state()

        def forward_backward() -> None:
            for _ in range(WARMUP_STEPS):
                with autocast(step.device):
                    loss = step.loss(step.graph_inputs(static))
                step.backward(loss)
                step.optimizer.zero_grad(set_to_none=True)

        self.backend.warm(forward_backward)
        self.backend.set_rng_state(rng)
        step.optimizer.zero_grad(set_to_none=True)
        replay, self.pool = self.backend.capture(lambda: step.run(step.graph_inputs(static)), self.pool)
        shape = "x".join(map(str, static["input_ids"].shape))
        self.log(f"cuda graph {len(self.graphs) + 1}: batch {shape}, {len(trainable)} trainable tensors")
        return _Graph(replay, static)
