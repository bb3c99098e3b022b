"""`compile: true`: the model torch.compiled inside the graphed step, and what it compiled kept in the store
for the next pods (bertology.train.compile_cache).

Each run is a process of its own (tests/compiled_run.py) with inductor's local cache in a folder of its
own, as each finetune pod starts with an empty one: so a second pod's cache hits can only come from the
store. The loop runs as on CUDA (graphed, widths in buckets of 32) with the stand-in for CUDA graphs that
replays by calling, in fp32 on CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from conftest import synthetic_sst2
from safetensors.torch import load_file
from transformers import BertConfig, BertForSequenceClassification

from bertology.store.local import LocalStore
from bertology.tasks import get_task
from bertology.train import compile_cache
from bertology.train.compile_cache import PREFIX, CompileCache, cache_key
from bertology.train.engine import engine_key

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer BERT without dropout (inductor draws its own random numbers, not eager's), 48 synthetic
    SST-2 rows to train on and 32 to evaluate, in files a process of its own reads."""
    from bertology.data import subset_indices, tokenize_split

    task = get_task("sst2")
    train_ds, val_ds, tokenizer = synthetic_sst2()
    root = tmp_path_factory.mktemp("compiled")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    BertForSequenceClassification(config).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    for name, ds, count in (("train", train_ds, 48), ("validation", val_ds, 32)):
        table = tokenize_split(ds.select(subset_indices(ds["label"], count=count, seed=0)), task, tokenizer,
                               max_length=32)
        (root / "data").mkdir(exist_ok=True)
        pq.write_table(table, root / "data" / f"{name}.parquet")
    return root


def run(tiny: Path, store: Path, out: Path, *, compile: bool) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor-cache"), "PYTHONPATH": "src"}
    subprocess.run([sys.executable, str(HERE / "compiled_run.py"), str(tiny / "model"), str(tiny / "data"),
                    str(store), str(out)] + (["--compile"] if compile else []),
                   check=True, env=env, cwd=HERE.parent, timeout=600)
    result = json.loads((out / "result.json").read_text())
    result["weights"] = load_file(out / "model" / "model.safetensors")
    return result


def blobs(store: Path) -> list[Path]:
    return sorted((store / PREFIX).rglob("*.bin"))


def test_a_compiled_run_trains_as_the_eager_one_and_the_next_pod_compiles_nothing(tiny, tmp_path):
    store = tmp_path / "store"
    eager = run(tiny, store, tmp_path / "eager", compile=False)
    first = run(tiny, store, tmp_path / "first", compile=True)
    assert (eager["step_kind"], first["step_kind"]) == ("cuda-graph", "cuda-graph, compiled")
    # the compiled step trains as the eager one, to float noise (fp32)
    assert first["losses"] == pytest.approx(eager["losses"], rel=1e-4)
    assert all(torch.allclose(first["weights"][k], eager["weights"][k], rtol=1e-4, atol=1e-5) for k in eager["weights"])
    assert eager["compiled_graphs"] == 0 and first["compiled_graphs"] > 0
    assert first["compiled_in_replays"] == 0  # compiled in the warm-ups, never while a captured step replays
    assert first["inductor"].get("fxgraph_cache_miss", 0) > 0 and not first["inductor"].get("fxgraph_cache_hit")
    stored = blobs(store)
    assert len(stored) == 1 and any(line.startswith("compile cache: stored ") for line in first["log"])

    second = run(tiny, store, tmp_path / "second", compile=True)  # a new pod: its local cache is empty
    assert second["inductor"].get("fxgraph_cache_miss", 0) == 0 and second["inductor"]["fxgraph_cache_hit"] > 0
    assert any(line.startswith("compile cache: loaded ") and "from 1 blob under" in line for line in second["log"])
    assert blobs(store) == stored  # it compiled nothing new, so it stored nothing
    assert second["losses"] == first["losses"]
    assert all(torch.equal(second["weights"][k], first["weights"][k]) for k in first["weights"])


def test_a_blob_that_cannot_be_loaded_is_said_and_skipped(tmp_path):
    store = LocalStore(tmp_path)
    store.write_bytes(f"{PREFIX}/k/bad.bin", b"not a cache")
    lines = []
    CompileCache(store, log=lines.append).load("k")
    assert len(lines) == 2 and "bad.bin could not be loaded" in lines[0] and "skipped, compiling" in lines[0]


def test_a_pod_stores_a_blob_only_when_it_compiled_something_new(tmp_path, monkeypatch):
    """Content-addressed blobs: a pod stores what it holds only when an artefact in it is new under the key."""
    from types import SimpleNamespace

    store, lines = LocalStore(tmp_path), []
    cache = CompileCache(store, log=lines.append)
    held = {"inductor": ["a"]}
    monkeypatch.setattr(compile_cache.torch.compiler, "save_cache_artifacts",
                        lambda: (json.dumps(held).encode(), SimpleNamespace(artifacts=held)))
    first = cache.save("k")
    assert first is not None and store.list(f"{PREFIX}/k/") == [first]
    assert cache.save("k") is None  # nothing new
    held["aot_autograd"] = ["b"]
    second = cache.save("k")
    assert second not in (None, first) and store.list(f"{PREFIX}/k/") == sorted([first, second])
    monkeypatch.setattr(compile_cache.torch.compiler, "save_cache_artifacts", lambda: None)
    assert CompileCache(store).save("j") is None and not store.list(f"{PREFIX}/j/")


def test_the_key_follows_the_model_and_the_engine_tells_compiled_from_not():
    torch.manual_seed(0)
    small = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=64))
    wider = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=128))
    renamed = BertForSequenceClassification(small.config)
    renamed.config._name_or_path = "elsewhere"
    cpu = torch.device("cpu")
    assert cache_key(small, cpu) == cache_key(renamed, cpu) != cache_key(wider, cpu)
    keys = [engine_key(small, weight_decay=0.01, max_grad_norm=1.0, device=cpu, graphed=True, compiled=c)
            for c in (False, True)]
    assert keys[0] != keys[1]
