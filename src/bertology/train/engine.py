"""What a run trains with, kept for the next run of the same process: the model on the device, its AdamW and
its training step, with the step's CUDA graphs.

Why: a finetune pod runs a bundle's runs one after another in one process, and most of them share one
architecture. Captured graphs hold the addresses of the weights, gradients and optimizer state they were
captured with; keeping those tensors and copying the next run's weights into them lets the next run replay
the same graphs instead of warming up and capturing its own.

Kept: one engine, keyed by everything the step's arithmetic reads outside its tensors (model class, the
config's computing fields, parameter names and shapes, weight decay, clipping norm, device, graphed or
not, compiled or not). A run with another key frees it and builds its own. A reused engine is as good as new: the weights
are the new run's (copied in place), AdamW's moments and step counts are zeroed in place, which is exactly
the state AdamW creates for a tensor it has never stepped, and the loss sums are zeroed. Resuming copies
the saved optimizer state into the kept tensors for the same reason (`load_optimizer_state`). On CPU the
same path runs eagerly, so the tests pin it bit for bit. Runs trained side by side
(bertology.train.side_by_side) each take an engine of their own, never kept, whose graphs go to their own
memory pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from bertology.train.device import compile_model
from bertology.train.graphs import GraphedStep, use_device_lr
from bertology.train.step import TrainStep, param_groups

# Config fields that name or describe a checkpoint without changing what the model computes.
DESCRIPTIVE = {"_name_or_path", "architectures", "transformers_version", "id2label", "label2id", "dtype",
                "torch_dtype", "_commit_hash", "name_or_path"}


@dataclass
class Engine:
    key: tuple
    model: torch.nn.Module
    optimizer: torch.optim.AdamW
    step: TrainStep | GraphedStep
    runs: int = 0  # runs trained with it so far


_kept: list[Engine] = []  # at most one


def computing_config(model: torch.nn.Module) -> dict:
    """The model's config without the fields that only name or describe it: what changes what it computes."""
    return {k: v for k, v in model.config.to_dict().items() if k not in DESCRIPTIVE}


def engine_key(model: torch.nn.Module, *, weight_decay: float, max_grad_norm: float, device: torch.device,
               graphed: bool, compiled: bool = False) -> tuple:
    return (type(model).__qualname__, repr(sorted(computing_config(model).items())),
            tuple((name, tuple(p.shape), p.dtype) for name, p in model.named_parameters()),
            weight_decay, max_grad_norm, str(device), graphed, compiled)


def take(model: torch.nn.Module, *, lr: float, weight_decay: float, max_grad_norm: float, device: torch.device,
         graphed: bool, reuse: bool, log: Callable[[str], None], pool=None, compiled: bool = False) -> Engine:
    """An engine holding `model`'s weights (a freshly loaded model, on any device): the kept one when it fits
    and `reuse` allows, else a new one (which is kept when `reuse`). `pool`: the graph memory pool a new
    engine's CUDA graphs are captured into (a run side by side with others has its own; default: one the
    first capture makes). `compiled`: a new engine's model is torch.compiled (device.compile_model), so a
    kept one's compiled code serves the next run too."""
    key = engine_key(model, weight_decay=weight_decay, max_grad_norm=max_grad_norm, device=device, graphed=graphed,
                     compiled=compiled)
    engine = _kept[0] if _kept and reuse and _kept[0].key == key else None
    _kept.clear()  # a new engine frees the old one's device memory before it allocates its own
    if engine is not None:
        engine.model.load_state_dict(model.state_dict())  # in place: the graphs' addresses hold
        reset_optimizer_state(engine.optimizer)
        engine.step.sums.zero_()
        engine.step.capture_seconds = 0.0  # this run's captures only: it replays the ones it finds
        graphs = len(getattr(engine.step, "graphs", ()))
        log(f"reusing the previous run's model, optimizer and {graphs} CUDA graphs" if graphed
            else "reusing the previous run's model and optimizer")
    else:
        model = model.to(device)
        if compiled:
            compile_model(model, device)
        optimizer = torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, fused=True)  # one kernel a step on CUDA
        step = TrainStep(model, optimizer, max_grad_norm=max_grad_norm, device=device)
        engine = Engine(key, model, optimizer, GraphedStep(step, log=log, pool=pool) if graphed else step)
    for group in engine.optimizer.param_groups:  # this run's rate: the schedule starts from it
        group["initial_lr"] = lr
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr
    engine.runs += 1
    if reuse:
        _kept.append(engine)
    return engine


def release() -> None:
    """Free the kept engine (its device memory goes back to the allocator's cache)."""
    _kept.clear()


def reset_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Every tensor's AdamW state as AdamW creates it for a tensor never stepped: zeros, step 0; in place."""
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                value.zero_()


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """A resume state's optimizer state, copied into the tensors the optimizer already has (which a kept
    engine's graphs read); tensors without a saved state are reset. The learning rate is the saved one."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not optimizer.state:  # never stepped, so in no graph: the usual load, which replaces its tensors
        graphed = isinstance(optimizer.param_groups[0]["lr"], torch.Tensor)  # GraphedStep made it a tensor
        optimizer.load_state_dict(saved)
        if graphed:  # the rate as this step keeps it
            use_device_lr(optimizer, params[0].device)
        else:
            for group in optimizer.param_groups:
                group["lr"], group["capturable"] = float(group["lr"]), False
        return
    for i, p in enumerate(params):
        values = saved["state"].get(i)
        state = optimizer.state.get(p)
        if values is None:
            for value in (state or {}).values():
                value.zero_()
        elif state is None:
            optimizer.state[p] = {k: v.to(p.device, torch.float32 if k == "step" else p.dtype)
                                  for k, v in values.items()}
        else:
            for k, v in values.items():
                state[k].copy_(v)
    for group, saved_group in zip(optimizer.param_groups, saved["param_groups"]):
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(float(saved_group["lr"]))
        else:
            group["lr"] = float(saved_group["lr"])
