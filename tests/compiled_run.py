"""One fine-tuning run in a process of its own, as a finetune pod runs it, for tests/test_compiled_step.py:
the loop as on CUDA (graphed, widths in buckets of 32) with conftest's stand-in for CUDA graphs, compiled
or not, with the store's compile cache. Writes OUT/result.json: the training losses, the metrics, the
step kind, inductor's and AOTAutograd's cache counters, and how many graphs dynamo compiled while a
captured step replayed (none may be: each shape compiles in its warm-ups, outside the capture).

    python tests/compiled_run.py MODEL_DIR DATA_DIR STORE OUT [--compile]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).parent))
from conftest import ReplayByCalling

from bertology.store.uri import open_store
from bertology.tasks import get_task
from bertology.train import Hyper, engine, finetune, loop
from bertology.train.compile_cache import CompileCache
from bertology.train.graphs import GraphedStep


def compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


class CountingReplay(ReplayByCalling):
    """The stand-in, counting the graphs dynamo compiles while a captured step replays."""

    compiled_in_replays = 0

    def capture(self, fn, pool):
        def counted():
            before = compiled_graphs()
            fn()
            CountingReplay.compiled_in_replays += compiled_graphs() - before

        return super().capture(counted, pool)


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("model_dir", "data_dir", "store", "out"):
        p.add_argument(name)
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    loop.use_graphs = lambda device, *, cuda_graph: cuda_graph
    engine.GraphedStep = functools.partial(GraphedStep, backend=CountingReplay())
    data = Path(a.data_dir)
    lines = []
    result = finetune(a.model_dir, get_task("sst2"), pq.read_table(data / "train.parquet"),
                      {"validation": pq.read_table(data / "validation.parquet")},
                      Hyper(lr=2e-3, batch_size=8, epochs=2, log_every=3, compile=a.compile), 3, Path(a.out) / "model",
                      device="cpu", log=lines.append, compile_cache=CompileCache(open_store(a.store), log=lines.append))
    from torch._dynamo.utils import counters

    (Path(a.out) / "result.json").write_text(json.dumps({
        "losses": [row["train_loss"] for row in result.losses], "metrics": result.best_metrics,
        "step_kind": result.step_kind, "log": lines, "inductor": dict(counters["inductor"]),
        "wall_seconds": result.wall_seconds, "train_seconds": result.train_seconds,
        "aot_autograd": dict(counters["aot_autograd"]), "compiled_graphs": compiled_graphs(),
        "compiled_in_replays": CountingReplay.compiled_in_replays}, indent=1))


if __name__ == "__main__":
    main()
