"""Where a BERT-base training step's time goes on a GPU: the host (Python and kernel launches) or the device.

bench/gpu.py found ours and the HF Trainer both at about 20 steps/s on an H200 whatever the batch's width
(651 seq/s at 32 x 128, 754 on SST-2's lengths): a host-bound signature. This times the bare step (bf16
autocast, SDPA, fused AdamW, gradient clipping: what bertology.train.loop does) in variants that separate
the costs: the profiler's device-busy time against the wall time, the step without clipping, a 4x larger
batch, torch.compile (default, and "reduce-overhead": CUDA graphs), and inputs as the loop makes them
(NumPy batches through bertology.train.device.to_device: pinned, non-blocking), at a fixed width and on
SST-2's lengths with exact widths and widths to multiples of 8. bench/gpu.py's `profile` part runs it;
alone it needs only torch and transformers (and src/ with bench/glue_lengths.json for the `loop-`
variants). Every figure is written to OUT/profile.json as soon as it is measured.

    python bench/gpu_profile.py --out DIR [--steps 30] [--variants eager,eager-no-clip,...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForSequenceClassification

# name: (batch size, clip gradients, torch.compile mode or None for eager, inputs, width multiple, SDPA's
# cuDNN backend allowed); inputs "device": one batch made on the device once; "loop": NumPy batches through
# to_device every step, all 128 wide ("loop-fixed") or drawn from SST-2's length histogram in
# length-grouped batches (SST-2's or RTE's). The first H200 run (2026-11-26) suggested that a batch width's
# first step costs about 0.47 s: the warm-up pass (every distinct batch once) against the timed pass measures
# that cost per width not seen before in this process (`new_widths`; hence multiples of 8 first, then the
# exact widths, then RTE's longer ones without cuDNN attention: whether SDPA's cuDNN plans are that cost).
SEEN_WIDTHS: set[int] = set()  # batch widths this process has trained on: their kernels are chosen already

VARIANTS = {
    "eager": (32, True, None, "device", 1, True),
    "eager-no-clip": (32, False, None, "device", 1, True),
    "eager-batch-128": (128, True, None, "device", 1, True),
    "loop-fixed": (32, True, None, "loop-fixed", 1, True),
    "loop-sst2-multiple-8": (32, True, None, "loop-sst2", 8, True),
    "loop-sst2-exact": (32, True, None, "loop-sst2", 1, True),
    "loop-rte-exact-no-cudnn-attention": (32, True, None, "loop-rte", 1, False),
    "compile": (32, True, "default", "device", 1, True),
    "compile-reduce-overhead": (32, True, "reduce-overhead", "device", 1, True),
}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def build(device: torch.device, tiny: bool) -> torch.nn.Module:
    config = (BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
              if tiny else BertConfig())
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return BertForSequenceClassification(config).to(device)


def batches(inputs: str, batch_size: int, length: int, multiple: int, steps: int, device: torch.device):
    """What each step feeds the model (a function of the step's number returning the model's inputs on
    `device`), and the (rows, width) of each batch it cycles through."""
    if inputs == "device":
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(1000, 30000, (batch_size, length), generator=gen)
        fixed = {k: v.to(device) for k, v in {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                               "labels": torch.randint(0, 2, (batch_size,), generator=gen)}.items()}
        return (lambda i: fixed), [(batch_size, length)]
    import numpy as np

    from bertology.data import length_grouped_batches, padded_width
    from bertology.train.device import to_device

    rng = np.random.default_rng(0)
    if inputs == "loop-fixed":
        lengths = np.full(batch_size * steps, length)
    else:
        from gpu_workload import sample_lengths

        lengths = np.minimum(sample_lengths(inputs.removeprefix("loop-"), batch_size * steps, rng), length)
    made = []
    for rows in length_grouped_batches(lengths, batch_size, seed=0):
        width = padded_width(int(lengths[rows].max()), multiple, length)
        mask = (np.arange(width)[None, :] < lengths[rows][:, None]).astype(np.int64)
        made.append({"input_ids": rng.integers(1000, 30000, (len(rows), width)) * mask, "attention_mask": mask,
                     "labels": rng.integers(0, 2, len(rows))})
    return (lambda i: to_device(made[i % len(made)], device)), [b["input_ids"].shape for b in made]


def measure(variant: str, device: torch.device, steps: int, tiny: bool, length: int) -> dict:
    """One variant's steady-state step: wall and host CPU time per step, and on CUDA the profiler's device
    busy time and kernel launches over 10 more steps."""
    batch_size, clip, mode, inputs, multiple, cudnn_attention = VARIANTS[variant]
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(cudnn_attention)
    model = build(device, tiny)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=device.type == "cuda")
    forward = model if mode is None else torch.compile(model, mode=None if mode == "default" else mode)
    feed, shapes = batches(inputs, batch_size, length, multiple, steps, device)
    widths = {width for _, width in shapes}
    new_widths = len(widths - SEEN_WIDTHS)
    SEEN_WIDTHS.update(widths)
    first = max(3, len(shapes))  # the warm-up: every distinct batch once, at least 3 steps
    counter = iter(range(10**9))

    def step():
        batch = feed(next(counter))
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = forward(**batch).loss
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    # Warm-up: every distinct batch once (a new width's first step chooses its kernels; compile compiles),
    # so the timed pass measures the steady state; the first pass's time is reported apart.
    start = time.perf_counter()
    for _ in range(first):
        step()
    sync()
    warmup_s = time.perf_counter() - start
    cpu0, start = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    wall = time.perf_counter() - start
    host_cpu = time.process_time() - cpu0
    seqs = sum(shapes[i % len(shapes)][0] for i in range(first, first + steps))
    out = {"batch_size": batch_size, "inputs": inputs, "multiple": multiple, "compile": mode,
           "length": length, "distinct_widths": len(widths), "new_widths": new_widths, "cudnn_attention": cudnn_attention,
           "steps": steps, "warmup_steps": first, "warmup_s": warmup_s,
           "ms_per_step": 1000 * wall / steps, "seq_s": seqs / wall,
           "process_cpu_ms_per_step": 1000 * host_cpu / steps}
    if device.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        n = min(10, steps)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            sync()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        busy_us = sum(e.device_time_total for e in kernels)  # kernels' own durations
        launches = sum(1 for e in prof.events() if e.name in ("cudaLaunchKernel", "cudaLaunchKernelExC",
                                                                 "cuLaunchKernel", "cuLaunchKernelEx"))
        out.update({"device_busy_ms_per_step": busy_us / 1000 / n, "kernels_per_step": len(kernels) / n,
                    "launch_calls_per_step": launches / n,
                    "device_busy_share": (busy_us / 1000 / n) / out["ms_per_step"]})
        top = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
        out["top_host_ops"] = top
        torch.backends.cuda.enable_cudnn_sdp(True)
    # The warm-up pass ran every batch once: its excess over a steady pass is the first steps' one-time cost
    # (kernel choices per new width, compilation), spread over the distinct widths.
    out["first_pass_extra_s"] = warmup_s - first * out["ms_per_step"] / 1000
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--variants", default=",".join(VARIANTS))
    a = p.parse_args(argv)
    variants = a.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"--variants: unknown {unknown[0]!r} (allowed: {', '.join(VARIANTS)})")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tiny = device.type != "cuda"
    record = {"meta": {"device": torch.cuda.get_device_name(0) if tiny is False else "cpu",
                       "cpu": cpu_name(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                       "torch": torch.__version__, "model": "tiny" if tiny else "BERT-base (BertConfig())",
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, "variants": {}}
    a.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(record["meta"]), flush=True)
    for variant in variants:
        try:
            figures = measure(variant, device, a.steps if not tiny else 3, tiny, a.length if not tiny else 16)
        except Exception as e:  # noqa: BLE001 -- one variant's failure (a compile error) must not lose the rest
            figures = {"error": f"{type(e).__name__}: {e}"[:2000]}
        record["variants"][variant] = figures
        print(variant, json.dumps({k: v for k, v in figures.items() if k != "top_host_ops"}), flush=True)
        (a.out / "profile.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
