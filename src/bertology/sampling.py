"""The random draws every intervention makes: BERT's truncated normal, and uniform permutations.

`trunc_normal_` is exact rejection sampling: draw standard normals, re-draw the ones outside [-2, 2] until
none are left, then scale. Each kept value is a normal conditioned on the interval, which is the definition
of the truncated normal; only 4.6% of draws are rejected, so it costs about one normal draw per value.
`torch.nn.init.trunc_normal_` (inverse-CDF through erfinv) gives the same distribution ~10x slower, which
on a BERT-base re-initialisation is the difference between well under a second and half a minute.

Everything is drawn on the CPU in float32 from the caller's generator, in a fixed order, and then copied to
the tensor's device and dtype: the same seed gives the same bytes on every machine and thread count.
"""

from __future__ import annotations

import torch

CUT = 2.0  # truncation at ±2 std, as BERT's TensorFlow initializer (and every report) does


@torch.no_grad()
def trunc_normal_(tensor: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    """Fill `tensor` (any shape, device, dtype; a view is fine) with N(0, std²) truncated at ±2 std."""
    direct = tensor.dtype == torch.float32 and tensor.device.type == "cpu" and tensor.is_contiguous()
    draw = tensor if direct else torch.empty(tensor.shape, dtype=torch.float32)
    flat = draw.view(-1)
    flat.normal_(generator=generator)
    outside = (flat.abs() > CUT).nonzero().squeeze(1)
    while outside.numel():
        again = torch.empty(outside.numel(), dtype=torch.float32).normal_(generator=generator)
        kept = again.abs() <= CUT
        flat[outside[kept]] = again[kept]
        outside = outside[~kept]
    flat.mul_(std)
    if not direct:
        tensor.copy_(draw)
    return tensor


def truncated_normal(shape: tuple[int, ...], std: float, generator: torch.Generator) -> torch.Tensor:
    """A new float32 CPU tensor of truncated-normal draws (see `trunc_normal_`)."""
    return trunc_normal_(torch.empty(shape, dtype=torch.float32), std, generator)


def permutation(n: int, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random permutation of range(n) (Fisher-Yates in torch.randperm), as index tensor.

    int32 where it fits: the same algorithm, a third faster on a BERT-base's tensors (less memory traffic).
    """
    dtype = torch.int32 if n < 2**31 else torch.int64
    return torch.randperm(n, generator=generator, dtype=dtype)


def child_seeds(count: int, generator: torch.Generator) -> list[int]:
    """Seeds for `count` independent generators, drawn in order from `generator`: work split over threads
    then gives the same bytes whatever order the threads run in."""
    return [int(s) for s in torch.randint(0, 2**62, (count,), generator=generator)]
