"""A step's process start, part by part: what a fresh finetune pod pays before its first training step.

Each run is a fresh interpreter started in the repository root (as a pod runs `python -m jobs.finetune` in
/app), which times, one after the other:

- interpreter: from this process's spawn of it to its first line (the interpreter's start and `site`)
- step module: `import jobs.finetune` (all that `--help` pays)
- training imports: what the step's training imports when it starts (torch, transformers' BERT, the loop)
- cuda init: `torch.cuda.init()`, where CUDA exists (0 without)
- model load: the tokenizer and the task head's model onto the device (`Head.load`, as the step loads it)
- first step: one training step (forward, backward, clip, AdamW) on a batch, synchronised

and prints each part's median over `--runs`, the total to the first step, and the machine's load average.
`--no-bytecode` runs the interpreters with PYTHONDONTWRITEBYTECODE=1 and an empty PYTHONPYCACHEPREFIX, so
every module is compiled from its source (an image or kit without bytecode); by default they use the
bytecode caches as they are. `--python` is the command that runs the interpreter, for example the step's
image: `--python "podman run --rm --network none IMAGE python"` (in the image's working directory /app).
The model is the packaged MiniLM (the `demo` extra, in both images and the device kit) unless `--model`
names a directory; `--bert-base` builds a BERT-base of random weights with MiniLM's tokenizer; `--no-model`
times the imports only. `--overlap-cuda-init` starts CUDA's initialisation on a thread right after
`import torch`, so that a GPU run shows whether it overlaps the other imports. Needs no GPU: on CPU, cuda
init is 0 and the model trains on the CPU.

    .venv/bin/python bench/step_start.py [--runs 3] [--no-bytecode] [--bert-base] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PARTS = ("interpreter", "step module", "training imports", "cuda init", "model load", "first step")
MARK = "STEP_START "

# The fresh interpreter's code: argv[1] is the model ("" for none, "package" for the packaged MiniLM, or a
# directory), argv[2] and argv[3] the batch's rows and width, argv[4] "overlap" or "". It prints one line:
# MARK and its times.
CHILD = r"""
import time
marks = {"started": time.time()}
import json, sys
import jobs.finetune
marks["step module"] = time.time()
import torch
overlap = sys.argv[4] == "overlap" and torch.cuda.is_available()
if overlap:  # CUDA's initialisation on a thread while the rest imports
    import threading
    init = threading.Thread(target=torch.cuda.init)
    init.start()
import bertology.tasks, bertology.train, bertology.train.loop, bertology.train.regimes, bertology.train.state
from bertology import tasks
from bertology.train import head_for
marks["training imports"] = time.time()
cuda = torch.cuda.is_available()
if overlap:
    init.join()
elif cuda:
    torch.cuda.init()
marks["cuda init"] = time.time()
model, rows, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if model:
    import numpy as np
    from transformers import AutoTokenizer
    from bertology.models import packaged_model_dir
    from bertology.train.device import pick_device, sync
    from bertology.train.step import TrainStep
    path = packaged_model_dir() if model == "package" else model
    device = pick_device(None)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = head_for(tasks.get_task("rte"), tokenizer).load(path, device=device)
    sync(device)
    marks["model load"] = time.time()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    step = TrainStep(model, optimizer, max_grad_norm=1.0, device=device)
    rng = np.random.default_rng(0)
    step({"input_ids": rng.integers(1000, 20000, (rows, width)), "attention_mask": np.ones((rows, width), np.int64),
          "token_type_ids": np.zeros((rows, width), np.int64), "labels": rng.integers(0, 2, rows)})
    sync(device)
    marks["first step"] = time.time()
marks["cuda"] = cuda and torch.cuda.get_device_name(0)
print("STEP_START " + json.dumps(marks), flush=True)
"""


def one_start(python: list[str], model: str, rows: int, width: int, env: dict, overlap: bool = False) -> dict:
    """One fresh interpreter's parts, in seconds."""
    spawned = time.time()
    done = subprocess.run([*python, "-c", CHILD, model, str(rows), str(width), "overlap" if overlap else ""],
                          check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    ended = time.time()
    line = next((x for x in done.stdout.splitlines() if x.startswith(MARK)), None)
    if done.returncode or line is None:
        raise RuntimeError(f"the step's interpreter failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    marks = json.loads(line[len(MARK):])
    parts, before = {"interpreter": marks["started"] - spawned}, marks["started"]
    for part in PARTS[1:]:
        if part in marks:
            parts[part], before = marks[part] - before, marks[part]
    parts["to first step" if "first step" in marks else "to cuda init"] = before - spawned
    parts["exit"] = ended - before
    parts["device"] = marks["cuda"] or "cpu"
    return parts


def bert_base(directory: Path) -> Path:
    """A BERT-base (random weights) with the packaged MiniLM's tokenizer (the same uncased vocabulary)."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from bertology.models import packaged_model_dir

    BertForSequenceClassification(BertConfig(num_labels=2)).save_pretrained(directory)
    AutoTokenizer.from_pretrained(packaged_model_dir()).save_pretrained(directory)
    return directory


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-bytecode", action="store_true", help="compile every module from source")
    parser.add_argument("--python", default=shlex.quote(sys.executable), help="the command that runs the interpreter")
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--model", default="package", help="a model directory (default: the packaged MiniLM)")
    model.add_argument("--bert-base", action="store_true", help="a BERT-base of random weights")
    model.add_argument("--no-model", action="store_true", help="time the imports and cuda init only")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--overlap-cuda-init", action="store_true",
                        help="start torch.cuda.init() on a thread right after `import torch`; cuda init is then "
                             "the wait for it after the other imports")
    parser.add_argument("--json", type=Path, help="also write the runs and medians here")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"),
                                                                        os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as tmp:
        if args.no_bytecode:
            (Path(tmp) / "pycache").mkdir()
            env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"))
        chosen = "" if args.no_model else str(bert_base(Path(tmp) / "bert-base")) if args.bert_base else args.model
        runs = [one_start(shlex.split(args.python), chosen, args.rows, args.width, env,
                          args.overlap_cuda_init) for _ in range(args.runs)]
    load = os.getloadavg()
    names = [name for name in runs[0] if name != "device"]
    medians = {name: statistics.median(run[name] for run in runs) for name in names}
    print(f"A step's process start: median of {args.runs} fresh interpreters, "
          f"{'no bytecode' if args.no_bytecode else 'bytecode as cached'}"
          f"{', cuda init overlapped' if args.overlap_cuda_init else ''}, device {runs[0]['device']}, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for name in names:
        spread = ", ".join(f"{run[name]:.2f}" for run in runs)
        print(f"  {name:<17} {medians[name]:6.2f} s   ({spread})")
    result = {"runs": runs, "median": medians, "load_average": load, "no_bytecode": args.no_bytecode,
              "overlap_cuda_init": args.overlap_cuda_init,
              "python": args.python, "model": chosen or None}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
