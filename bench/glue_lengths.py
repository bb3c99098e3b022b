"""Record per-task token-length histograms of the GLUE training sets, so bench/gpu.py needs no data.

Each task's training split (from a local GLUE download, `glue-dir:PATH`) is tokenized exactly as the
prepare-data step does (`tokenize_split`: the bert-base-uncased WordPiece vocabulary, i.e. the packaged
MiniLM's tokenizer; pairs truncated longest-first to `--max-length`), and the number of examples of each
length is written to bench/glue_lengths.json with the split's size.

Where the download lacks a training split the histogram comes from a stand-in, named in the file:
QNLI's train.tsv is absent here, so its dev split (5,463 rows) gives the shape and the public training
size (104,743) the count; MNLI and QQP are absent altogether and are **assumed** to have QNLI's length
distribution (a sentence pair, question or premise plus a Wikipedia-style sentence), at their public
training sizes (392,702 and 363,846). These two tasks are 80% of a GLUE sweep's sequences, so the sweep
estimate of bench/gpu.py rests on that assumption; run this script on a full download to replace it.

    python bench/glue_lengths.py --glue-dir /work/shared/data/glue
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bertology.study.cost import TRAIN_SIZES  # public training-set sizes, for the splits not in the download

OUT = Path(__file__).with_name("glue_lengths.json")
STAND_INS = {"mnli": "qnli", "qqp": "qnli"}  # assumed: no MNLI/QQP files here
TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def histogram(task_name: str, source: str, split: str, max_length: int) -> dict[str, int]:
    from bertology import models, tasks
    from bertology.data import tokenize_split

    task = tasks.get_task(task_name)
    tokenizer = models.load_tokenizer(models.parse_model_ref("tiny:bert"))  # bert-base-uncased's vocabulary
    tokenizer.model_max_length = max_length
    lengths = tokenize_split(tasks.load_split(task, source, split), task, tokenizer, max_length)["length"]
    values, counts = np.unique(lengths.to_numpy(), return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(values, counts)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--glue-dir", default="/work/shared/data/glue")
    p.add_argument("--max-length", type=int, default=128)
    a = p.parse_args()
    source = f"glue-dir:{a.glue_dir}"
    out: dict = {"max_length": a.max_length, "tokenizer": "bert-base-uncased WordPiece (packaged MiniLM's)",
                 "tasks": {}}
    for name in TASKS:
        if name in STAND_INS:
            continue
        split = "train"
        try:
            hist = histogram(name, source, split, a.max_length)
        except Exception:  # noqa: BLE001 - a missing split: fall back to dev for its shape
            split = "validation"
            hist = histogram(name, source, split, a.max_length)
        rows = sum(hist.values())
        entry = {"split": split, "rows": rows, "train_size": rows if split == "train" else TRAIN_SIZES[name],
                 "histogram": hist}
        if split != "train":
            entry["note"] = f"no train.tsv: the {split} split's shape, scaled to the public training size"
        out["tasks"][name] = entry
        print(f"{name}: {split} {rows} rows, mean length "
              f"{sum(int(k) * v for k, v in hist.items()) / rows:.1f}", flush=True)
    for name, like in STAND_INS.items():
        out["tasks"][name] = {**out["tasks"][like], "train_size": TRAIN_SIZES[name],
                              "note": f"assumed: no {name.upper()} files here; {like}'s length shape "
                                      "at the public training size"}
    out["tasks"] = {name: out["tasks"][name] for name in TASKS}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
