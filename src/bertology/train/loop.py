"""Full fine-tuning of a sequence classifier: the whole loop, readable in one sitting.

AdamW (no weight decay on biases and LayerNorm weights) with a linear schedule and warmup, gradient
clipping, bf16 autocast on CUDA, length-grouped batches padded per batch. The training seed decides the
classifier head's initialisation, dropout and the data order. After every epoch each eval split is
evaluated; the best epoch (by the task's primary metric on the first eval split) is kept on the CPU and
saved at the end, with the tokenizer, as an HF directory.

The loop never waits for the GPU between steps: the loss is summed on the device and read only at
logging points, so the host queues the next batch while the GPU works.

Resume: every `checkpoint_every` steps the whole training state (weights, optimizer, scheduler, position
in the epoch, loss so far, curves, best epoch, RNG states) goes to a `StateSink`, and a run that finds a
state there continues from it. A resumed run ends bit for bit where an uninterrupted one does, because
an epoch's batch order is a pure function of (seed, epoch) and dropout draws from the restored RNG.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

from bertology.data import Encoded, collate, length_grouped_batches
from bertology.errors import BadInput
from bertology.tasks import Task
from bertology.train import regimes
from bertology.train.evaluate import autocast, evaluate, pad_id, pick_device, to_device
from bertology.train.state import StateSink, rng_state, set_rng_state, snapshot


@dataclass(frozen=True)
class Hyper:
    lr: float = 2e-5
    batch_size: int = 32
    epochs: int = 3
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    eval_batch_size: int = 128
    checkpoint_every: int = 1000  # steps between resume states (when a StateSink is given); 0: none
    compile: bool = False  # torch.compile(dynamic=True): fewer kernel launches on a GPU, slow to start
    schedule: regimes.Schedule = field(default_factory=regimes.Schedule)  # which parameters train when

    EXECUTION = ("checkpoint_every", "compile")  # how the loop runs, not what it computes

    def __post_init__(self):
        for name, low in (("batch_size", 1), ("epochs", 1), ("eval_batch_size", 1), ("checkpoint_every", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise BadInput(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.compile, bool):
            raise BadInput(f"compile must be true or false, got {self.compile!r}")
        for name, ok, allowed in (("lr", self.lr > 0, "> 0"),
                                  ("warmup_ratio", 0 <= self.warmup_ratio < 1, "in [0, 1)"),
                                  ("weight_decay", self.weight_decay >= 0, ">= 0"),
                                  ("max_grad_norm", self.max_grad_norm > 0, "> 0")):
            if not (math.isfinite(getattr(self, name)) and ok):
                raise BadInput(f"{name} must be {allowed}, got {getattr(self, name)!r}")


@dataclass
class FinetuneResult:
    best_epoch: int  # 1-based
    best_metrics: dict[str, float]  # "<split>/<metric>" at the best epoch
    curves: list[dict] = field(default_factory=list)  # one row per epoch
    wall_seconds: float = 0.0
    train_seconds: float = 0.0  # optimisation steps only, without evaluation
    eval_seconds: float = 0.0  # the evaluations after each epoch
    device: str = "cpu"
    num_train: int = 0
    throughput: float = 0.0  # training sequences per second


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices and embeddings only. Every parameter is in a group: a regime
    freezes by `requires_grad`, and AdamW leaves a parameter without a gradient untouched."""
    no_decay = {id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()}
    decay, plain = [], []
    for name, p in model.named_parameters():
        (plain if name.endswith("bias") or id(p) in no_decay else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


def finetune(model_dir: str | Path, task: Task, train: pa.Table, evals: dict[str, pa.Table], hp: Hyper,
             seed: int, out_dir: str | Path, *, device: str | torch.device | None = None,
             log: Callable[[str], None] = print, state: StateSink | None = None) -> FinetuneResult:
    """Fine-tune the model in `model_dir` on `train`, evaluate `evals` after every epoch, save the best
    epoch's model and tokenizer to `out_dir`. With `state`, resume from its newest state and save one
    every `hp.checkpoint_every` steps."""
    started = time.perf_counter()
    device = pick_device(device)
    if not evals:
        raise BadInput("finetune needs at least one eval split (got none)")
    if len(train) == 0:
        raise BadInput(f"the {task.name} training set is empty (0 rows)")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(seed)  # the classifier head's initialisation, then dropout
    # fp32 master weights whatever the checkpoint's dtype (transformers 5 defaults to dtype="auto");
    # bf16 is only the autocast compute type.
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=task.num_labels, attn_implementation="sdpa", dtype=torch.float32,
        trust_remote_code=False).to(device)
    hp.schedule.check(model.config.num_hidden_layers)
    # Fused AdamW: one kernel per step on CUDA, and faster than the per-tensor loop on CPU too.
    optimizer = torch.optim.AdamW(param_groups(model, hp.weight_decay), lr=hp.lr, fused=True)
    examples = Encoded.from_table(train)
    steps_per_epoch = math.ceil(len(examples) / hp.batch_size)
    total_steps = steps_per_epoch * hp.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, int(hp.warmup_ratio * total_steps), total_steps)
    log_every = max(1, steps_per_epoch // 4)
    primary = f"{next(iter(evals))}/{task.primary_metric}"
    log(f"finetune {task.name}: {len(examples)} examples, {hp.epochs} epochs x {steps_per_epoch} steps "
        f"on {device}")

    # What a resume state must have been made by: everything that decides the result.
    identity = {**{k: v for k, v in dataclasses.asdict(hp).items() if k not in Hyper.EXECUTION},
                "seed": seed, "num_train": len(examples), "num_labels": task.num_labels}
    step, train_seconds, eval_seconds = 0, 0.0, 0.0
    curves, best_state, best_epoch = [], None, 0
    start_epoch, start_batch, epoch_loss = 1, 0, torch.zeros((), device=device)
    saved = state.load() if state is not None else None
    if saved is not None and saved.get("identity") != identity:
        log(f"resume state was made by another configuration ({saved.get('identity')}); ignored")
        saved = None
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        step, train_seconds, eval_seconds = saved["step"], saved["train_seconds"], saved["eval_seconds"]
        curves, best_state, best_epoch = saved["curves"], saved["best_state"], saved["best_epoch"]
        start_epoch, start_batch, epoch_loss = saved["epoch"], saved["batch"], saved["epoch_loss"].to(device)
        started -= saved["elapsed"]
        set_rng_state(saved["rng"])
        log(f"resuming at step {step}/{total_steps} (epoch {start_epoch}, batch {start_batch})")
    if hp.compile:
        model.compile(dynamic=True)  # in place: state_dict keys stay those of the plain model

    for epoch in range(start_epoch, hp.epochs + 1):
        model.train()
        trainable = regimes.apply(model, hp.schedule, epoch)
        if hp.schedule.name != "full":
            log(f"epoch {epoch}: regime {hp.schedule.name} trains "
                + ", ".join(f"{k} {v:,}" for k, v in trainable.items()) + " parameters")
        epoch_start = time.perf_counter()
        first = start_batch if epoch == start_epoch else 0
        if first == 0:
            epoch_loss = torch.zeros((), device=device)
        window_loss, window_steps, window_start, window_seqs = torch.zeros((), device=device), 0, epoch_start, 0
        batches = length_grouped_batches(examples.lengths, hp.batch_size, seed=(seed, epoch))
        for i, batch_rows in enumerate(batches[first:], start=first):
            batch = to_device(collate(examples.rows(batch_rows), pad_id(model)), device)
            with autocast(device):
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), hp.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            epoch_loss += loss.detach()
            window_loss += loss.detach()
            window_steps, window_seqs, step = window_steps + 1, window_seqs + len(batch_rows), step + 1
            if (i + 1) % log_every == 0 or i + 1 == steps_per_epoch:
                mean_loss = window_loss.item() / window_steps  # .item() is the host sync
                now = time.perf_counter()
                log(f"epoch {epoch}/{hp.epochs} step {step}/{total_steps} loss {mean_loss:.4f} "
                    f"lr {scheduler.get_last_lr()[0]:.2e} {window_seqs / (now - window_start):.1f} seq/s")
                window_loss.zero_()
                window_steps, window_start, window_seqs = 0, now, 0
            if state is not None and hp.checkpoint_every and step % hp.checkpoint_every == 0:
                now = time.perf_counter()
                state.save({  # best_state is a CPU copy already, never modified in place
                    **snapshot({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "scheduler": scheduler.state_dict(), "epoch_loss": epoch_loss, "rng": rng_state(),
                                "curves": curves}),
                    "identity": identity, "step": step, "epoch": epoch, "batch": i + 1,
                    "best_epoch": best_epoch, "best_state": best_state,
                    "train_seconds": train_seconds + now - epoch_start, "eval_seconds": eval_seconds,
                    "elapsed": now - started})
        if device.type == "cuda":
            torch.cuda.synchronize()
        train_seconds += time.perf_counter() - epoch_start

        eval_start = time.perf_counter()
        row = {"epoch": epoch, "step": step, "train_loss": epoch_loss.item() / steps_per_epoch,
               "lr": scheduler.get_last_lr()[0]}
        for split, table in evals.items():
            split_metrics, _ = evaluate(model, task, table, batch_size=hp.eval_batch_size, device=device)
            row.update({f"{split}/{name}": value for name, value in split_metrics.items()})
        eval_seconds += time.perf_counter() - eval_start
        row["seconds"] = time.perf_counter() - started
        curves.append(row)
        improved = best_state is None or row[primary] > curves[best_epoch - 1][primary]
        if improved:
            best_epoch = epoch
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        log(f"epoch {epoch}: train_loss {row['train_loss']:.4f} "
            + " ".join(f"{k} {v:.4f}" for k, v in row.items() if "/" in k) + (" (best)" if improved else ""))

    model.load_state_dict(best_state)
    model.save_pretrained(out_dir)  # safetensors (the default since transformers 4.35, the only format in 5)
    tokenizer.save_pretrained(out_dir)
    best = curves[best_epoch - 1]
    return FinetuneResult(
        best_epoch=best_epoch,
        best_metrics={k: v for k, v in best.items() if "/" in k},
        curves=curves,
        wall_seconds=time.perf_counter() - started,
        train_seconds=train_seconds,
        eval_seconds=eval_seconds,
        device=str(device),
        num_train=len(examples),
        throughput=len(examples) * hp.epochs / train_seconds,
    )
