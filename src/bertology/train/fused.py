"""K fine-tuning runs trained as one stacked model (torch.func): one launch does K runs' arithmetic.

The eager step is bound by kernel launches on a GPU, and the launches of a step do not depend on how much
arithmetic each does. Runs that share an architecture, a task, a seed and hence their batches (the order is
a pure function of (seed, epoch)), such as a study's variants at one seed, are stacked along a leading K
dimension: `vmap` feeds one batch to all K (`in_dims=(0, 0, None)`), one backward fills each run's slice
of the stacked gradients, and one fused AdamW over the stacked leaves acts as K optimizers (it is
elementwise). Clipping is per run. All K runs share the learning rate and its schedule (runs are grouped
by lr), the weight decay and the clipping norm.

Dropout under `randomness="same"` draws one mask per dropout call, shaped as one run's activations, for
all K runs, and attention runs eagerly (not SDPA), so that its dropout is such a call too: under vmap, SDPA's
CUDA kernels draw their attention-dropout masks over all K runs' rows, which would make a run's draws depend
on how many runs share its step and where it stands among them. A fused run's draws therefore depend on its
seed alone, and it ends the same whichever runs it is fused with (up to float noise). They are not a run
alone's draws (a run alone uses SDPA), and fused numbers differ from a run alone's in float noise, so being
fused is part of a run's identity (`Regime.fused`); K, how many train at once, is not. On CPU, with dropout,
each fused run still draws its run-alone's masks (tests/test_fused.py).

Under autocast (bf16 on a GPU), vmap's dispatch sits above autocast's, and vmap decomposes composite
calls before autocast sees them: `F.linear` becomes a batched matrix product plus a bias add (`addmm` and
`baddbmm` alike), `F.cross_entropy` a log-softmax and a gather. Autocast still casts the product's
operands to bf16, but not the fp32 bias, so the add gave fp32: every linear output was fp32, and GELU,
dropout and the residual adds after it ran in fp32, where one run's run in bf16 (more bytes moved, other
float noise). With the bias cast, the loss would in turn be computed in bf16 from bf16 logits, where
autocast computes one run's in fp32. `AutocastUnderVmap` makes autocast's casts for those calls itself, so
a fused step's dtypes are one run's (tests/test_fused.py; bench/dispatch_count.py counts them).
"""

from __future__ import annotations

import contextlib
import copy

import torch
from torch.func import functional_call, stack_module_state, vmap
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map_only

from bertology.errors import BadInput
from bertology.train.engine import DESCRIPTIVE
from bertology.train.step import TrainStep, param_groups


def check_same_architecture(models: list[torch.nn.Module]) -> None:
    """BadInput naming the first difference between models[0] and another model: class, mode, config, or a
    parameter's or buffer's name, shape, dtype or trainability (vmap needs one function of K weight sets)."""
    if len(models) < 1:
        raise BadInput(f"fused training needs K >= 1 models, got K = {len(models)}")

    def signature(m: torch.nn.Module) -> dict[str, str]:
        config = getattr(m, "config", None)
        config = {} if config is None else config.to_dict()
        return {"class": type(m).__name__, "mode": "training" if m.training else "eval",
                **{f"config {k}": repr(v) for k, v in config.items() if k not in DESCRIPTIVE},
                **{f"parameter {n}": f"{list(p.shape)} {p.dtype} {'trained' if p.requires_grad else 'frozen'}"
                   for n, p in m.named_parameters()},
                **{f"buffer {n}": f"{list(b.shape)} {b.dtype}" for n, b in m.named_buffers()}}

    first = signature(models[0])
    for i, m in enumerate(models[1:], start=1):
        other = signature(m)
        for key in [*first, *(k for k in other if k not in first)]:
            if first.get(key) != other.get(key):
                raise BadInput(f"fused runs need one architecture: model {i} has {key} = "
                               f"{other.get(key, 'none')}, model 0 has {first.get(key, 'none')}")


def meta_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` with every parameter and buffer on the meta device: no weights are copied (ties
    are kept), so it costs no memory and works on fake tensors (bench/dispatch_count.py)."""
    memo = {id(t): torch.empty_like(t, device="meta") for t in [*model.parameters(), *model.buffers()]}
    memo.update({id(p): torch.nn.Parameter(memo[id(p)], requires_grad=p.requires_grad) for p in model.parameters()})
    return copy.deepcopy(model, memo)


F = torch.nn.functional
# What autocast casts (to its dtype; to fp32) among the calls of a BERT-family forward and its heads'
# losses that vmap decomposes before autocast sees them (module docstring).
TO_AUTOCAST_DTYPE = {F.linear}
TO_FP32 = {F.softmax, F.log_softmax, F.layer_norm, F.cross_entropy, F.nll_loss, F.mse_loss,
           F.binary_cross_entropy_with_logits}


class AutocastUnderVmap(TorchFunctionMode):
    """Autocast's casts for the calls vmap hides from it: the floating-point tensors of a `TO_AUTOCAST_DTYPE`
    call to autocast's dtype, of a `TO_FP32` call to fp32, as autocast casts them for one run."""

    def __init__(self, device_type: str):
        super().__init__()
        self.dtype = torch.get_autocast_dtype(device_type)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        dtype = self.dtype if func in TO_AUTOCAST_DTYPE else torch.float32 if func in TO_FP32 else None
        if dtype is not None:
            args, kwargs = tree_map_only(torch.Tensor, lambda t: t.to(dtype) if t.is_floating_point() else t,
                                         (args, kwargs))
        return func(*args, **kwargs)


class FusedStep(TrainStep):
    """The training step of K runs of one architecture on one batch: stacked weights, one fused AdamW
    (`lr`, `weight_decay`: all K share them) and per-run clipping at `max_grad_norm`. The models are copied
    (the caller may drop them); parameters frozen in them stay frozen: they get no gradient, and AdamW skips
    a parameter without one (`set_trainable` follows a regime's epochs). `sums` holds one total per run. The
    schedule steps outside, as for one run; bertology.train.graphs replays this step as it replays one run's.
    """

    def __init__(self, models: list[torch.nn.Module], *, lr: float, weight_decay: float, max_grad_norm: float):
        check_same_architecture(models)
        self.params, self.buffers = stack_module_state(models)  # leaves with a leading K dimension
        self._stacked = {**self.params, **self.buffers}
        base = meta_copy(models[0]).train()  # the stateless function of the weights
        base.set_attn_implementation("eager")  # attention dropout as one mask for all K (module docstring)
        # state_dict key -> stacked name: tied weights appear under each of their names, as in state_dict
        stacked = {id(t): n for n, t in [*models[0].named_parameters(), *models[0].named_buffers()]}
        self._keys = {key: stacked[id(t)] for key, t in models[0].state_dict(keep_vars=True).items()}
        # param_groups' split (no decay on biases and LayerNorm), mapped to the stacked leaves by name
        groups = [{**g, "params": [self.params[stacked[id(p)]] for p in g["params"]]}
                  for g in param_groups(models[0], weight_decay)]
        optimizer = torch.optim.AdamW(groups, lr=lr, fused=True)
        super().__init__(base, optimizer, max_grad_norm=max_grad_norm,
                         device=next(iter(self.params.values())).device, runs=len(models))
        self.k = len(models)
        self._losses = vmap(self._loss, in_dims=(0, 0, None), randomness="same")

    def _loss(self, params: dict, buffers: dict, batch: dict) -> torch.Tensor:
        return functional_call(self.model, (params, buffers), kwargs=batch).loss

    def loss(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Each run's loss on the one batch, [K]."""
        if inputs["attention_mask"].dim() == 2:
            inputs = self.graph_inputs(inputs)
        with self.autocast_casts():
            return self._losses(self.params, self.buffers, inputs)

    def autocast_casts(self):
        """Under autocast, the casts it makes for one run that vmap keeps it from making (`AutocastUnderVmap`);
        nothing without autocast, where fused maths is one run's."""
        device = self.device.type
        return AutocastUnderVmap(device) if torch.is_autocast_enabled(device) else contextlib.nullcontext()

    def graph_inputs(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The mask as eager attention adds it, [batch, 1, 1, width] (0 where attended, the float minimum at
        padding): one tensor for all K, never checked on the host."""
        mask = inputs["attention_mask"][:, None, None, :]
        return {**inputs, "attention_mask": (1.0 - mask.float()) * torch.finfo(torch.float32).min}

    def backward(self, loss: torch.Tensor) -> None:
        """`.sum().backward()` rather than `vmap(grad)`: SDPA has no backward under vmap, and the runs' losses
        are independent, so the sum's gradient is each run's own."""
        loss.sum().backward()

    def parameters(self) -> list[torch.Tensor]:
        return list(self.params.values())

    @torch.no_grad()
    def clip(self) -> None:
        """clip_grad_norm_'s formula per run: clip_grad_norm_ on the stacked tensors would take one norm over
        all K runs, so one run's large gradient would shrink the others' steps. Its foreach kernels over
        each run's gradient slices (views) keep the launches to a few plus K, not two per parameter."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        if not grads:
            return
        slices = [g.unbind(0) for g in grads]  # [n][K] views
        norms = torch.stack(torch._foreach_norm([s for run in slices for s in run])).view(len(grads), self.k)
        coef = (self.max_grad_norm / (torch.linalg.vector_norm(norms, dim=0) + 1e-6)).clamp(max=1.0)  # [K]
        for i, c in enumerate(coef.unbind(0)):
            torch._foreach_mul_([run[i] for run in slices], c)

    def set_trainable(self, model: torch.nn.Module) -> None:
        """Take `requires_grad` from an eager model of the same architecture (after `regimes.apply`)."""
        for name, p in model.named_parameters():
            self.params[name].requires_grad_(p.requires_grad)

    def _run(self, i: int) -> int:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.k:
            raise BadInput(f"run index must be an integer in [0, {self.k}), got {i!r}")
        return i

    def unstacked(self, i: int) -> dict[str, torch.Tensor]:
        """Run i's state dict (copies, keys as the model's `state_dict()`), for `load_state_dict` into one
        eager model that `head.evaluate` scores or `save_pretrained` writes."""
        i = self._run(i)
        return {key: self._stacked[name][i].detach().clone() for key, name in self._keys.items()}

    def stacked(self) -> dict[str, torch.Tensor]:
        """Every run's weights at once, by stacked name (a resume state's)."""
        return dict(self._stacked)

    @torch.no_grad()
    def load_stacked(self, state: dict[str, torch.Tensor]) -> None:
        """What `stacked` returned, copied into the stacked tensors in place (a captured graph reads them)."""
        for name, tensor in self._stacked.items():
            tensor.copy_(state[name])

    @torch.no_grad()
    def load(self, i: int, state: dict[str, torch.Tensor]) -> None:
        """Put a state dict (as `unstacked` returns) into run i's weights; the optimizer state is kept."""
        i = self._run(i)
        missing = sorted(set(self._keys) - set(state))
        if missing:
            raise BadInput(f"state for run {i} lacks {missing[0]} ({len(missing)} keys missing)")
        for key, name in self._keys.items():
            self._stacked[name][i].copy_(state[key])
