"""How big and how fast a fine-tuned model is: layer-removal's Table 7 (parameters, speed) per variant.

Speed is measured, not derived from the depth: forward passes of the encoder in eval mode (autocast as in
training) over a fixed batch of random in-vocabulary tokens with every position attended, two warm-up
passes and then the median of five timed ones, synchronising the GPU around each. Every variant of a
study is measured by the same step on the same kind of device, so their ratios are the report's "speed"
row. The task head is left out: what an intervention changes is the encoder, and a masked-LM head's
vocabulary projection would dwarf it (a tiny BERT's MLM head took 5 s of a 5.2 s measurement on a CPU).
"""

from __future__ import annotations

import statistics
import time

import torch

from bertology.interventions.manifest import parameter_count
from bertology.train.device import autocast, sync

WARMUP, REPEATS = 2, 5


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """All parameters, and those of the encoder (embeddings, layers, pooler: no task head)."""
    return {"n_params": parameter_count(model), "encoder_params": parameter_count(model.base_model)}


@torch.inference_mode()
def inference_speed(model: torch.nn.Module, *, batch_size: int, seq_len: int, device: torch.device) -> dict:
    """Median seconds per batch and examples per second of the encoder's forward pass (`model.base_model`:
    embeddings, layers and pooler)."""
    model.eval()
    encoder = model.base_model
    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    low = 1000 if vocab > 1000 else 0  # past BERT's [unused] rows where there are any; the time is the same
    ids = torch.randint(low, vocab, (batch_size, seq_len), generator=generator).to(device)
    mask = torch.ones_like(ids)
    times = []
    for i in range(WARMUP + REPEATS):
        sync(device)
        start = time.perf_counter()
        with autocast(device):
            encoder(input_ids=ids, attention_mask=mask)
        sync(device)
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {"batch_size": batch_size, "seq_len": seq_len, "inference_seconds": seconds,
            "examples_per_second": batch_size / seconds}

