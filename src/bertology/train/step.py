"""One training step as one function: forward, backward, clipping, AdamW and the running loss sums.

The loop calls the step with a host batch and never reads anything back from it between logging points:
the loss is added on the device into `sums`, three running totals (since the last evaluation point, since
the last console line, since the last point of the loss series) that the loop reads and resets at its own
pace. Everything the step touches lives at fixed addresses (the weights, the optimizer's state, `sums`,
reset with `zero_()` rather than replaced), so the same function can be captured once as a CUDA graph and
replayed (bertology.train.graphs); on CPU it runs eagerly and computes exactly what the loop always has.
"""

from __future__ import annotations

import numpy as np
import torch

from bertology.train.device import autocast, to_device

# The slots of `TrainStep.sums`.
SINCE_EVALUATION, SINCE_CONSOLE_LINE, SINCE_SERIES_POINT = range(3)


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices and embeddings only. Every parameter is in a group: a regime
    freezes by `requires_grad`, and AdamW leaves a parameter without a gradient untouched."""
    no_decay = {id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()}
    decay, plain = [], []
    for name, p in model.named_parameters():
        (plain if name.endswith("bias") or id(p) in no_decay else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


class TrainStep:
    """forward -> backward -> clip the gradient norm -> AdamW -> add the loss to `sums`, eagerly.

    The learning-rate schedule steps outside, on the host: it only writes the optimizer's `lr`. `loss`,
    `backward`, `clip` and `parameters` are what K runs fused into one model (bertology.train.fused)
    change; with `runs` (their number) each slot of `sums` holds one total per run."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, max_grad_norm: float,
                 device: torch.device, runs: int | None = None):
        self.model, self.optimizer, self.max_grad_norm, self.device = model, optimizer, max_grad_norm, device
        self.sums = torch.zeros((3,) if runs is None else (3, runs), device=device)
        self.kind = "eager"
        self.capture_seconds = 0.0  # graphing's one-time cost (bertology.train.graphs); none here

    def __call__(self, batch: dict[str, np.ndarray]) -> None:
        self.run(to_device(batch, self.device))

    def run(self, inputs: dict[str, torch.Tensor]) -> None:
        with autocast(self.device):
            loss = self.loss(inputs)
        self.backward(loss)
        self.clip()
        self.optimizer.step()
        self.optimizer.grad_scale = None  # this step's clipping only (`clip`)
        self.optimizer.zero_grad(set_to_none=True)
        self.sums += loss.detach()

    def loss(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(**inputs).loss

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def clip(self) -> None:
        """Clip the gradients' global norm at `max_grad_norm`, as `clip_grad_norm_` does, but without its
        pass over the gradients: its factor min(1, max_norm / (norm + 1e-6)) goes to the fused AdamW as
        the `grad_scale` the optimizer divides each gradient by as it reads it (the hook torch's GradScaler
        uses), so the gradients are read once for the norm and once by AdamW, not also read and written
        to scale them. On BERT-base that saves 0.87 of the step's 21.75 GB (4%; bench/dispatch_count.py
        --count bytes, docs/measurements.md); the weights differ from clip_grad_norm_'s by float rounding (g / (1/c)
        against g * c). A non-fused AdamW has no such hook and gets `clip_grad_norm_`."""
        if not self.optimizer.defaults.get("fused"):
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            return
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads)
            self.optimizer.grad_scale = torch.clamp((norm + 1e-6) / self.max_grad_norm, min=1.0)

    def parameters(self) -> list[torch.Tensor]:
        """The tensors AdamW steps (which ones train: their `requires_grad`)."""
        return list(self.model.parameters())

    def graph_inputs(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`inputs` as a captured graph feeds them: a mask that needs no host-side check."""
        return graph_inputs(inputs)

    def total(self, slot: int) -> float | list[float]:
        """The running total in `slot` (one per run when fused): a host sync, so only at logging and
        evaluation points."""
        return self.sums[slot].tolist()

    def reset(self, slot: int) -> None:
        self.sums[slot].zero_()


def graph_inputs(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's inputs with the attention mask as [batch, 1, 1, width] booleans (True: attend), which
    transformers hands to SDPA unchecked (a 2-D mask is checked on the host for padding: a sync)."""
    mask = inputs["attention_mask"]
    return {**inputs, "attention_mask": mask[:, None, None, :].bool()}


def current_lr(scheduler) -> float:
    """The learning rate the scheduler set last, as a float (a CUDA-graphed step keeps it in a device
    tensor, which this reads: a host sync, so only at logging and evaluation points)."""
    return float(scheduler.get_last_lr()[0])
