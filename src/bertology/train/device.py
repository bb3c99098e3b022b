"""Where the model runs and in which precision: the GPU when there is one, bf16 autocast on it."""

from __future__ import annotations

import numpy as np
import torch


def pick_device(device: str | torch.device | None) -> torch.device:
    """`device`, or the GPU when there is one."""
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def autocast(device: torch.device):
    """bf16 autocast on CUDA (the loss and softmax stay fp32); plain fp32 on CPU. Without autocast's cache
    of cast weights: a CUDA graph would capture the cache's first casts and never refresh them after an
    optimizer step (each cast runs once per forward pass either way: BERT uses every weight once)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda", cache_enabled=False)


def sync(device: torch.device) -> None:
    """Wait for the GPU's queued work (timings and pauses); nothing to wait for elsewhere."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pad_multiple(device: torch.device) -> int:
    """What a batch's padded width is rounded up to: 8 on CUDA, 1 elsewhere. On an H200 (2026-11-26,
    docs/measurements.md) a batch width's first step cost about 0.47 s once per process (kernel choices),
    and eager training on SST-2's lengths ran at 252 seq/s with exact widths (43 of them, all new to the
    process) against 723 with widths rounded up to multiples of 8, although rounding adds pad tokens
    (SST-2: 23% instead of 5%). At max length 128 a run then meets at most 16 widths (4 when graphed:
    bertology.train.graphs). On CPU every pad token costs compute and no width costs extra, so widths stay exact."""
    return 8 if device.type == "cuda" else 1


def compile_model(model: torch.nn.Module, device: torch.device) -> None:
    """torch.compile `model` in place (its state_dict keys stay the plain model's), with inductor's default
    mode: fused kernels, no CUDA graphs of their own, so that on CUDA the whole training step (the compiled
    forward and backward, clipping, AdamW) is captured as one graph by bertology.train.graphs, and the
    compiled forward evaluates too. Shapes are dynamic from the second width a model meets (PyTorch's
    automatic dynamic shapes), so widths do not each compile; on CPU, where widths are exact, from the
    first. What is compiled is cached in the study's store across pods (bertology.train.compile_cache)."""
    model.compile(dynamic=True if device.type == "cpu" else None)


def host_tensors(batch: dict[str, np.ndarray], *, pin: bool = False) -> dict[str, torch.Tensor]:
    """NumPy batch arrays as host tensors (int64 ids, float32 regression targets), in pinned memory with
    `pin`, so that a copy to the GPU overlaps the kernels still running."""
    tensors = {k: torch.from_numpy(v.astype(np.float32 if v.dtype.kind == "f" else np.int64, copy=False))
               for k, v in batch.items()}
    return {k: v.pin_memory() for k, v in tensors.items()} if pin else tensors


def to_device(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """NumPy batch arrays as tensors on `device`."""
    if device.type == "cuda":
        return {k: v.to(device, non_blocking=True) for k, v in host_tensors(batch, pin=True).items()}
    return {k: v.to(device) for k, v in host_tensors(batch).items()}
