"""What a fine-tuned run whose weights are not kept pays between its last step and its published results,
apart from the evaluation itself: its weights written and read back, or used where they are.

The finetune step scores such a run (every eval split, inference speed) and measures its weight distances
to the built checkpoint in its own pod. It did so from a saved copy: `save_pretrained` of the selected
weights, `load_finetuned` of them onto the device, `weight_distance` between the two folders' safetensors
files, then the copy deleted. It now uses the model in memory, and computes the distances where the model
is. This bench times both on one model (BERT-base by default: `BertConfig()`, random weights, the
bert-base-uncased vocabulary size), the median of `--repeats`, on the GPU when there is one:

- saved and read back: save_pretrained + tokenizer files, load_finetuned, weight_distance(folder, folder),
  the folder removed;
- in memory: weight_distance(folder, model.state_dict()).

It checks that both ways give the same distances (exactly on CPU; to float64 rounding on a GPU, whose sums
are taken in another order) before it prints the times.

    .venv/bin/python bench/run_outputs.py [--layers 12] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from bertology import models, tasks
from bertology.steps.weight_distance import weight_distance
from bertology.train import head_for, load_finetuned
from bertology.train.device import pick_device, sync


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Prints the report; returns each way's median seconds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12, help="encoder layers of the BertConfig() model")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from transformers import BertConfig, BertModel

    device = pick_device(None)
    task = tasks.get_task("rte")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        torch.manual_seed(0)
        tokenizer = models.load_tokenizer(models.parse_model_ref("tiny:bert"))
        checkpoint = models.save_checkpoint(BertModel(BertConfig(num_hidden_layers=args.layers)), tokenizer,
                                            root / "checkpoint")
        model = head_for(task).load(checkpoint, device=device)
        with torch.no_grad():  # "fine-tuned": every weight moved a little
            for p in model.parameters():
                p.add_(torch.randn_like(p), alpha=1e-3)
        params = sum(p.numel() for p in model.parameters())

        def saved_and_read_back():
            out = Path(tempfile.mkdtemp(dir=root)) / "model"  # a new folder each time, as each run has its own
            model.save_pretrained(out)
            tokenizer.save_pretrained(out)
            load_finetuned(out, task, device)
            table = weight_distance(checkpoint, out)
            shutil.rmtree(out.parent)
            return table

        def in_memory():
            return weight_distance(checkpoint, model.state_dict())

        saved, held = saved_and_read_back().to_pylist(), in_memory().to_pylist()
        exact = device.type == "cpu"
        for a, b in zip(saved, held, strict=True):
            same = a == b if exact else all(
                a[k] == b[k] if isinstance(a[k], str | int) else abs(a[k] - b[k]) <= 1e-9 * abs(a[k]) for k in a)
            if not same:
                raise SystemExit(f"the two ways disagree on {a['module']}: {a} against {b}")
        print(f"the same distances both ways ({'exactly' if exact else 'to 1e-9'}) over {len(saved)} modules")

        print(f"{params / 1e6:.1f} M parameters on {device}, {os.cpu_count()} CPUs; median of {args.repeats}")
        medians = {}
        for name, fn in (("saved and read back", saved_and_read_back), ("in memory", in_memory)):
            times = []
            for _ in range(args.repeats):
                sync(device)
                start = time.perf_counter()
                fn()
                sync(device)
                times.append(time.perf_counter() - start)
            medians[name] = statistics.median(times)
            print(f"{name}: {medians[name]:.2f} s (each: {', '.join(f'{t:.2f}' for t in times)})")
    return medians


if __name__ == "__main__":
    main()
