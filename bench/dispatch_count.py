"""How many aten operators one training step dispatches, in which dtypes, moving how many bytes: solo (the
loop's step) against K runs fused.

On a GPU the eager step is bound by the host's kernel launches (docs/measurements.md), and each dispatched
aten operator is about one launch, so the operators a step dispatches per run are a CPU proxy for what
fusing K runs (bertology.train.fused) saves there. Counted with a TorchDispatchMode around one whole step
(forward, backward, clipping, AdamW, the schedule), by phase; host time is the median wall clock of a few
steps, which on a CPU also holds the arithmetic (it grows with K; on a GPU the host's share would not).

The model is BERT-base-shaped (12 layers, 12 heads) but narrow (hidden 96, intermediate 384, vocabulary
1,000), so K = 8 fits a 24 GB 2-core machine; synthetic batches of 32 x 128 tokens, no padding.

On CPU, SDPA without dropout runs `_scaled_dot_product_flash_attention_for_cpu`, which has no vmap batching
rule: vmap warns and loops over the K runs (the `sdpa` column counts its calls). CUDA's flash, efficient and
cuDNN kernels have batching rules. With dropout (the default 0.1) CPU SDPA takes the math path, which vmap
batches.

    .venv/bin/python bench/dispatch_count.py [--count ops|dtypes|bytes] [--ks 1 2 4 8] [--dropout 0.1]
        [--steps 3] [--threads 1] [--json PATH]

Measured (2-core box, torch 2.13 CPU, 1 thread, dropout 0.1; docs/measurements.md): operators per step
are flat in K (solo 2,356; fused 4,084 at K = 1 to 4,097 at K = 8), so per run they fall K-fold (512 at
K = 8, 4.6x fewer than solo); kernel operators 871 solo, 1,423 to 1,438 fused (180 per run at K = 8). A
fused step at K = 1 dispatches 1.7x a solo one: vmap's batching rules split fused kernels (a linear layer
is bmm plus a bias add instead of addmm, LayerNorm's affine a separate mul and add, the expanded weights'
gradients copied to the parameter's layout), so fusing pays from K = 2. Host ms on a CPU is mostly
arithmetic at 32 x 128; at `--batch 2 --width 16`, where dispatch dominates, it was 27 ms a step solo and
42, 29, 23, 18 ms per run fused at K = 1, 2, 4, 8. A later rerun (`--ks 1 8`, with the figures below) gave
solo unchanged and fused 4,038 and 4,051 operators, 1,399 and 1,414 kernel operators at K = 1 and 8, as
bertology.train.fused gave before its autocast casts too (they add none in fp32).

`--count dtypes`: one whole step under bf16 autocast (CPU autocast sits where CUDA's does, below vmap),
with the dtype of every linear layer's output, every matrix product and every operator inside a linear
layer (`Dtypes`), one run's step against K fused runs' with vmap's dtypes and with fused.py's casts
(`AutocastUnderVmap`). Measured (K = 2): one run's 74 linear outputs are bf16; with vmap's dtypes all 74
are fp32 (the bmm is bf16, the bias multiply and add after it fp32: 148 fp32 operators); with the casts
all 74 are bf16, no matrix product or operator in a linear layer is fp32, and LayerNorm, softmax and the
loss are fp32, as for one run.

`--count bytes`: the bytes a whole BERT-base step (12 x 768, 30,522 words) moves at 32 x 128 under bf16
autocast, on fake tensors (FakeTensorMode: shapes and dtypes, no memory, no arithmetic), per run (`Bytes`:
every kernel operator's tensor operands once; one run's attention as a fused kernel, `gpu_attention`).
Measured: one run 21.75 GB a step (4.5 ms at an H200's 4.8 TB/s; the H200 measured 11.9 ms for the
graphed step: bytes at full bandwidth are under half of it); fused, per run, 46.73 GB at K = 1 and 44.65 at K = 8
with vmap's dtypes, 36.69 and 35.26 with the casts (1.62x one run's at K = 8), 7.13 GB of it eager
attention's scores ([..., 128, 128] tensors) at K = 8, which one run's fused attention never writes.
Those were with clipping by `clip_grad_norm_`, which the row "solo, clipping by clip_grad_norm_" keeps;
the loop's step now folds it into AdamW (`TrainStep.clip`): 20.87 GB (clipping 0.44 GB instead of 1.31).
The last column is autocast's casts of the weights to bf16 in the forward pass: 0.51 GB of one run's step.
A bf16 copy of the weights kept beside the fp32 ones would have to be refreshed after every AdamW step
(read fp32, write bf16: the same 0.51 GB), so it saves nothing unless the optimizer's own kernel writes
it, which torch's fused AdamW does not; the loop keeps autocast's casts.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import statistics
import time
import warnings

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

import bertology.train.step as step_module
from bertology.train.fused import FusedStep
from bertology.train.loop import Hyper
from bertology.train.step import TrainStep, param_groups

PHASES = ("forward", "backward", "clip", "optimizer", "scheduler")
# Operators that only make tensor metadata or allocate: no kernel on a GPU, though each costs host time.
NO_KERNEL = {"_unsafe_view", "empty", "empty_like", "empty_strided", "lift_fresh"}
MATMULS = {"mm", "bmm", "addmm", "baddbmm", "linear", "matmul", "addbmm"}
# Operators that write their argument without reading it (a copy's destination, a fill, a random draw).
WRITE_ONLY = {"copy_", "fill_", "zero_", "bernoulli_", "normal_", "uniform_", "random_", "exponential_"}
# What autocast runs in fp32, as the operators it comes to (log-softmax, softmax, LayerNorm, the losses).
FP32 = {"_log_softmax", "_softmax", "native_layer_norm", "nll_loss_forward", "mse_loss",
        "binary_cross_entropy_with_logits"}


class Count(TorchDispatchMode):
    """Counts the aten operators dispatched, by the phase the step is in (set from outside), and those of
    them that run a kernel (not views or allocations)."""

    def __init__(self):
        super().__init__()
        self.phase, self.ops, self.names = "forward", collections.Counter(), collections.Counter()
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.record(func, args, kwargs or {}, out)
        return out

    def record(self, func, args, kwargs, out) -> None:
        name = func.overloadpacket.__name__
        self.ops[self.phase] += 1
        self.names[name] += 1
        self.kernels += kernel(func)

    def mark_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.register_step_pre_hook(lambda *_: setattr(self, "phase", "optimizer"))
        optimizer.register_step_post_hook(lambda *_: setattr(self, "phase", "scheduler"))


def kernel(func) -> bool:
    """Whether an operator runs a kernel: not a view, an allocation, a metadata change or a query (fake
    tensors answer `.device` with the operator `prim::device`)."""
    return not (func.is_view or func.overloadpacket.__name__ in NO_KERNEL or func.namespace == "prim")


def short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Dtypes(Count):
    """Count, and the dtype of what the step's linear layers and matrix products give: every matrix
    product's output (`products`, by phase, operator and dtype), every kernel operator an `nn.Linear` of
    `model` dispatches in its forward (`in_linear`, by operator and dtype) and each such layer's output
    (`linear_outputs`, by dtype). Under vmap a linear layer is a bmm, its bias times 1 and their sum, so
    the product alone can be bf16 while the layer's output is fp32: `linear_outputs` is what the layers
    after it read. The layers are found by forward hooks, which fire under vmap and functional_call too.
    `in_fp32` holds the output dtypes of what autocast runs in fp32 (softmax, log-softmax, LayerNorm, the
    losses), and `losses` the dtype of each loss the step computes."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.products, self.in_linear, self.linear_outputs, self.in_fp32, self.losses = (
            collections.Counter() for _ in range(5))
        self._inside, self._hooks = 0, []

    def __enter__(self):
        for m in self.model.modules():
            if isinstance(m, torch.nn.Linear):
                self._hooks += [m.register_forward_pre_hook(lambda *_: self._enter_layer()),
                                m.register_forward_hook(lambda _m, _i, out: self._leave_layer(out))]
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        return super().__exit__(*exc)

    def _enter_layer(self) -> None:
        self._inside += 1

    def _leave_layer(self, out: torch.Tensor) -> None:
        self._inside -= 1
        self.linear_outputs[short(out.dtype)] += 1

    def record(self, func, args, kwargs, out) -> None:
        super().record(func, args, kwargs, out)
        name = func.overloadpacket.__name__
        if name in MATMULS:
            self.products[self.phase, name, short(out.dtype)] += 1
        if self._inside and kernel(func) and isinstance(out, torch.Tensor):
            self.in_linear[name, short(out.dtype)] += 1
        if name in FP32 and self.phase == "forward":
            self.in_fp32[name, short(pytree.tree_leaves(out)[0].dtype)] += 1

    def fp32(self) -> dict[str, int]:
        """What came out in fp32: linear layers' outputs, matrix products, operators inside linear layers."""
        return {"linear outputs": self.linear_outputs["float32"],
                "matrix products": sum(n for (_, _, d), n in self.products.items() if d == "float32"),
                "operators in linear layers": sum(n for (_, d), n in self.in_linear.items() if d == "float32")}

    def loss(self, loss: torch.Tensor) -> torch.Tensor:
        self.losses[short(loss.dtype)] += 1
        return loss

    def not_fp32(self) -> int:
        """How many of what autocast runs in fp32 came out in another dtype."""
        return sum(n for (_, d), n in self.in_fp32.items() if d != "float32") + sum(
            n for d, n in self.losses.items() if d != "float32")


def tensor_bytes(t: torch.Tensor) -> int:
    """The bytes of memory a tensor covers: its element size times its sizes along the dimensions it does
    not broadcast (stride 0: an expanded tensor is read once, from the memory it has)."""
    if t.numel() == 0:
        return 0
    return t.element_size() * math.prod(n for n, stride in zip(t.shape, t.stride(), strict=True) if stride)


class Bytes(Count):
    """Count, and the bytes each kernel operator reads and writes: its tensor arguments (read, unless it
    only writes them: `copy_`'s destination, a fill, a random draw, an `out=`), the arguments it writes in
    place, and its new outputs. By phase (`bytes`) and operator (`by_op`); `scores` holds what operators
    on a [..., width, width] tensor move (attention's scores, with `width` the batch's). Views, allocations
    and metadata move nothing. A proxy for the memory traffic of a step whose kernels are bandwidth-bound:
    it counts every operator's operands once, as if none stayed in cache, and nothing a kernel reads twice.
    """

    def __init__(self, width: int | None = None, params=()):
        super().__init__()
        self.width, self.scores = width, 0
        self.bytes, self.by_op = collections.Counter(), collections.Counter()
        self.params, self.weight_casts = {id(p) for p in params}, 0  # autocast's casts of `params`

    def record(self, func, args, kwargs, out) -> None:
        super().record(func, args, kwargs, out)
        if not kernel(func):
            return
        name, schema = func.overloadpacket.__name__, func._schema
        given = {a.name: v for a, v in zip(schema.arguments, args, strict=False)} | kwargs
        moved, seen = 0, []
        for arg in schema.arguments:
            if arg.name not in given:
                continue
            tensors = [t for t in pytree.tree_leaves(given[arg.name]) if isinstance(t, torch.Tensor)]
            written = arg.alias_info is not None and arg.alias_info.is_write
            read = not (arg.is_out or (written and name in WRITE_ONLY))
            moved += (read + written) * sum(map(tensor_bytes, tensors))
            seen += tensors
        fresh = [o for o, r in zip(out if isinstance(out, tuple | list) else (out,), schema.returns, strict=False)
                 if r.alias_info is None]
        fresh = [t for t in pytree.tree_leaves(fresh) if isinstance(t, torch.Tensor)]
        moved += sum(map(tensor_bytes, fresh))
        self.bytes[self.phase] += moved
        self.by_op[name] += moved
        if name == "_to_copy" and id(args[0]) in self.params:
            self.weight_casts += moved
        if self.width and any(t.dim() >= 2 and tuple(t.shape[-2:]) == (self.width,) * 2 for t in seen + fresh):
            self.scores += moved


def models(k: int, dropout: float, attention_dropout: float | None = None) -> list[torch.nn.Module]:
    config = BertConfig(vocab_size=1000, hidden_size=96, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=384, max_position_embeddings=128, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout if attention_dropout is None else attention_dropout,
                        attn_implementation="sdpa")
    out = []
    for seed in range(k):
        torch.manual_seed(seed)
        out.append(BertForSequenceClassification(config).train())
    return out


def marked(step: TrainStep, total: int, hp: Hyper, count: Count):
    """`step.run` (what the loop runs eagerly, and what a CUDA graph captures) and the schedule, with each
    part wrapped to mark the phase for the counter; one run's step or K fused runs'."""
    scheduler = get_linear_schedule_with_warmup(step.optimizer, int(hp.warmup_ratio * total), total)
    count.mark_optimizer(step.optimizer)

    def phase(fn, name):
        def wrapper(*args, **kwargs):
            count.phase = name
            return fn(*args, **kwargs)
        return wrapper
    step.loss, step.backward, step.clip = (phase(step.loss, "forward"), phase(step.backward, "backward"),
                                           phase(step.clip, "clip"))

    def one(batch):
        step.run(batch)
        scheduler.step()
    return one


def measure(name: str, k: int, step, count: Count, batch, steps: int) -> dict:
    for _ in range(2):  # AdamW's first step creates its state: count a later one
        step(batch)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
    with warnings.catch_warnings(record=True) as caught, count:
        warnings.simplefilter("always")
        step(batch)
    ms = 1000 * statistics.median(times)
    total = sum(count.ops.values())
    fallbacks = sorted({str(w.message).split("batching rule for ")[1].split(".")[0] for w in caught
                        if "batching rule for" in str(w.message)})
    return {"row": name, "k": k, "ops": total, "ops_per_run": total / k, "kernels": count.kernels,
            "kernels_per_run": count.kernels / k, "ms": ms, "ms_per_run": ms / k,
            **{p: count.ops[p] for p in PHASES},
            "sdpa": sum(n for op, n in count.names.items() if "scaled_dot_product" in op),
            "vmap_fallbacks": fallbacks}


@contextlib.contextmanager
def bf16_autocast():
    """The step's forward under bf16 autocast on CPU, as it runs on CUDA (bertology.train.device.autocast
    keeps CPU in fp32). CPU autocast sits where CUDA's does, below vmap, so a fused step's dtypes on CPU
    are those it has on a GPU."""
    saved = step_module.autocast
    step_module.autocast = lambda device: torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    try:
        yield
    finally:
        step_module.autocast = saved


def vmap_dtypes(step: FusedStep) -> FusedStep:
    """The fused step without `AutocastUnderVmap`, with the dtypes vmap leaves under autocast (every linear
    output fp32): as fused runs were before it, for the rows that show what it changes."""
    step.autocast_casts = contextlib.nullcontext
    return step


def synthetic_batch(rows: int, width: int, vocab: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(5, vocab, (rows, width), generator=g),
            "attention_mask": torch.ones(rows, width, dtype=torch.long),
            "token_type_ids": torch.zeros(rows, width, dtype=torch.long),
            "labels": torch.randint(0, 2, (rows,), generator=g)}


def solo_step(model: torch.nn.Module, hp: Hyper) -> TrainStep:
    return TrainStep(model, torch.optim.AdamW(param_groups(model, hp.weight_decay), lr=hp.lr, fused=True),
                     max_grad_norm=hp.max_grad_norm, device=torch.device("cpu"))


def clip_grad_norm(step: TrainStep) -> TrainStep:
    """`step` clipping as `clip_grad_norm_` does (a pass over the gradients to scale them), not folded into
    AdamW (`TrainStep.clip`): what folding saves."""
    step.clip = lambda: torch.nn.utils.clip_grad_norm_(step.model.parameters(), step.max_grad_norm)
    return step


def fused_step(ms: list[torch.nn.Module], hp: Hyper) -> FusedStep:
    return FusedStep(ms, lr=hp.lr, weight_decay=hp.weight_decay, max_grad_norm=hp.max_grad_norm)


def counted(step: TrainStep, count: Count, batch: dict[str, torch.Tensor], hp: Hyper, total: int = 1000) -> Count:
    """One whole step (forward, backward, clipping, AdamW, the schedule) under `count`, after the two steps
    that create AdamW's state; the batch as a captured graph takes it (`graph_inputs`: no host check)."""
    one = marked(step, total, hp, count)
    inputs = step.graph_inputs(batch)
    for _ in range(2):
        one(inputs)
    if isinstance(count, Dtypes):
        loss = step.loss
        step.loss = lambda inputs: count.loss(loss(inputs))
    count.phase = "forward"
    with warnings.catch_warnings(), count:
        warnings.filterwarnings("ignore", message="There is a performance drop")
        one(inputs)
    return count


def gpu_attention():
    """One run's attention as CPU's flash kernel, standing in for a GPU's fused attention kernel: CPU SDPA
    with dropout takes its math path instead, which materialises the scores in fp32. That kernel has no
    dropout on CPU, so one run's models here have attention dropout off (a GPU's kernel draws it inside,
    moving the same bytes). Fused runs use eager attention with dropout, as on a GPU."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.FLASH_ATTENTION)


def bert(k: int, dropout: float, *, attention_dropout: float | None = None, base: bool = False) -> list[torch.nn.Module]:
    """K models in training mode, seeds 0..K-1: BERT-base with `base` (12 x 768, intermediate 3,072,
    30,522 words), else `models`' narrow one."""
    if not base:
        return models(k, dropout, attention_dropout)
    config = BertConfig(hidden_dropout_prob=dropout, attn_implementation="sdpa",
                        attention_probs_dropout_prob=dropout if attention_dropout is None else attention_dropout)
    out = []
    for seed in range(k):
        torch.manual_seed(seed)
        out.append(BertForSequenceClassification(config).train())
    return out


def compared(ks: list[int], dropout: float, hp: Hyper, base: bool) -> list[tuple]:
    """(row, K, a function making its step): one run's step, and per K fused runs' with vmap's dtypes and
    with fused.py's casts."""
    rows = [("solo (the loop's step)", 1, lambda: solo_step(bert(1, dropout, attention_dropout=0.0, base=base)[0], hp))]
    for k in ks:
        rows += [(f"fused K={k}, vmap's dtypes", k, lambda k=k: vmap_dtypes(fused_step(bert(k, dropout, base=base), hp))),
                 (f"fused K={k}", k, lambda k=k: fused_step(bert(k, dropout, base=base), hp))]
    return rows


def dtypes(ks: list[int], batch: dict[str, torch.Tensor], dropout: float, hp: Hyper) -> list[dict]:
    """Under bf16 autocast: what one run's step and K fused runs' (with vmap's dtypes, and with fused.py's
    casts) give in fp32 among linear-layer outputs, matrix products and operators in linear layers, and
    in bf16 among what autocast runs in fp32 (softmax, log-softmax, LayerNorm, the loss)."""
    rows = []
    with bf16_autocast():
        for name, k, make in compared(ks, dropout, hp, base=False):
            step = make()
            with gpu_attention() if not isinstance(step, FusedStep) else contextlib.nullcontext():
                count = counted(step, Dtypes(step.model), batch, hp)
            rows.append({"row": name, "k": k, "linear_outputs": dict(count.linear_outputs),
                         "products": {" ".join(key): n for key, n in sorted(count.products.items())},
                         "in_linear": {" ".join(key): n for key, n in sorted(count.in_linear.items())},
                         "in_fp32": {" ".join(key): n for key, n in sorted(count.in_fp32.items())},
                         "losses": dict(count.losses), "fp32": count.fp32(), "not_fp32": count.not_fp32()})
    return rows


HBM = 4.8e12  # bytes/s: an H200's memory bandwidth


def traffic(ks: list[int], rows: int, width: int, dropout: float, hp: Hyper, top: int = 8) -> list[dict]:
    """Bytes a whole BERT-base step moves (`Bytes`), per run, under bf16 autocast and FakeTensorMode (shapes
    and dtypes, no memory, no arithmetic): one run's step, and K fused runs' with vmap's dtypes and with
    fused.py's casts; one run's attention as a GPU's fused kernel (`gpu_attention`). Its kernel operators
    are not `--count ops`' (on fake tensors one run's clipping takes clip_grad_norm_'s per-tensor path)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    out = []
    with FakeTensorMode(), bf16_autocast():
        batch = synthetic_batch(rows, width, 30522)
        unfolded = ("solo, clipping by clip_grad_norm_", 1,
                    lambda: clip_grad_norm(solo_step(bert(1, dropout, attention_dropout=0.0, base=True)[0], hp)))
        made = compared(ks, dropout, hp, base=True)
        for name, k, make in made[:1] + [unfolded] + made[1:]:
            step = make()
            with gpu_attention() if not isinstance(step, FusedStep) else contextlib.nullcontext():
                count = counted(step, Bytes(width, step.parameters()), batch, hp)
            total = sum(count.bytes.values())
            out.append({"row": name, "k": k, "gb": total / 1e9, "gb_per_run": total / k / 1e9,
                        "ms_per_run": 1000 * total / k / HBM, "kernels_per_run": count.kernels / k,
                        "gb_scores_per_run": count.scores / k / 1e9,
                        "gb_weight_casts_per_run": count.weight_casts / k / 1e9,
                        **{f"gb_{p}": count.bytes[p] / k / 1e9 for p in PHASES},
                        "top": {op: b / k / 1e9 for op, b in count.by_op.most_common(top)}})
    return out


def print_ops(rows: list[dict], args) -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch} x {args.width}, "
          f"dropout {args.dropout}\n")
    print("| row | ops/step | ops/run | kernel ops/step | kernel ops/run | " + " | ".join(PHASES)
          + " | sdpa calls | host ms/step | host ms/run |")
    print("|---" * (8 + len(PHASES)) + "|")
    for r in rows:
        print(f"| {r['row']} | {r['ops']} | {r['ops_per_run']:.0f} | {r['kernels']} | {r['kernels_per_run']:.0f} | "
              + " | ".join(str(r[p]) for p in PHASES) + f" | {r['sdpa']} | {r['ms']:.0f} | {r['ms_per_run']:.0f} |")
    fallbacks = sorted({op for r in rows for op in r["vmap_fallbacks"]})
    print(f"\nvmap fell back to a per-run loop for: {', '.join(fallbacks) or 'nothing'}")


def print_dtypes(rows: list[dict], args) -> None:
    print(f"torch {torch.__version__}, bf16 autocast (CPU), batch {args.batch} x {args.width}, "
          f"dropout {args.dropout}, one whole step\n")
    print("| row | linear-layer outputs | fp32 linear outputs | fp32 matrix products | fp32 operators in linear "
          "layers | loss | not fp32 where autocast runs fp32 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        outputs = ", ".join(f"{n} {d}" for d, n in sorted(r["linear_outputs"].items()))
        f = r["fp32"]
        print(f"| {r['row']} | {outputs} | {f['linear outputs']} | {f['matrix products']} | "
              f"{f['operators in linear layers']} | {', '.join(r['losses'])} | {r['not_fp32']} |")
    for r in rows:
        print(f"\n{r['row']}: operators in linear layers {r['in_linear']}; matrix products {r['products']}; "
              f"what autocast runs in fp32 {r['in_fp32']}")


def print_traffic(rows: list[dict], args) -> None:
    print(f"torch {torch.__version__}, BERT-base under FakeTensorMode, bf16 autocast (CPU), batch "
          f"{args.batch} x {args.width}, dropout {args.dropout}, one whole step; ms at {HBM / 1e12:.1f} TB/s\n")
    print("| row | GB/step | GB/run | x one run | ms/run at HBM speed | kernel ops/run | "
          + " | ".join(f"GB/run {p}" for p in PHASES[:-1]) + " | GB/run on attention scores | GB/run casting weights to bf16 |")
    print("|---" * (7 + len(PHASES)) + "|")
    for r in rows:
        print(f"| {r['row']} | {r['gb']:.1f} | {r['gb_per_run']:.2f} | {r['gb_per_run'] / rows[0]['gb_per_run']:.2f} | "
              f"{r['ms_per_run']:.1f} | "
              f"{r['kernels_per_run']:.0f} | " + " | ".join(f"{r[f'gb_{p}']:.2f}" for p in PHASES[:-1])
              + f" | {r['gb_scores_per_run']:.2f} | {r['gb_weight_casts_per_run']:.2f} |")
    for r in rows:
        print(f"\n{r['row']}, GB per run by operator: "
              + ", ".join(f"{op} {gb:.2f}" for op, gb in r["top"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", choices=("ops", "dtypes", "bytes"), default="ops",
                        help="operators and host time (default); dtypes of linear outputs; bytes moved (BERT-base)")
    parser.add_argument("--ks", type=int, nargs="+", help="fused K (default 1 2 4 8; --count dtypes: 2; bytes: 1 8)")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per row (median)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (1: steadier on a shared box)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hp = Hyper(lr=1e-4, warmup_ratio=0.1)
    ks = args.ks or {"ops": [1, 2, 4, 8], "dtypes": [2], "bytes": [1, 8]}[args.count]
    if args.count == "dtypes":
        rows = dtypes(ks, synthetic_batch(args.batch, args.width, 1000), args.dropout, hp)
        print_dtypes(rows, args)
    elif args.count == "bytes":
        rows = traffic(ks, args.batch, args.width, args.dropout, hp)
        print_traffic(rows, args)
    else:
        rows = operators(ks, synthetic_batch(args.batch, args.width, 1000), args, hp)
        print_ops(rows, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def operators(ks: list[int], batch: dict[str, torch.Tensor], args, hp: Hyper, total: int = 1000) -> list[dict]:
    count = Count()
    (model,) = models(1, args.dropout)
    rows = [measure("solo (the loop's step)", 1, marked(solo_step(model, hp), total, hp, count), count, batch,
                    args.steps)]
    for k in ks:
        count = Count()
        fused = fused_step(models(k, args.dropout), hp)
        rows.append(measure(f"fused K={k}", k, marked(fused, total, hp, count), count, batch, args.steps))
        del fused
    return rows

if __name__ == "__main__":
    main()
