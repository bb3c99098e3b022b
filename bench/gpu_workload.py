"""The GPU bench's workload: synthetic prepared-data splits whose token lengths follow GLUE's (the
histograms in bench/glue_lengths.json), fixed-width random batches, the model it trains (BERT-base on CUDA, a tiny BERT on CPU) and the
padding a batching scheme wastes. Apart from bench/gpu.py so the measurements read without the data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from bertology import models, tasks
from bertology.data import length_grouped_batches, padded_width

HERE = Path(__file__).resolve().parent
LENGTHS = json.loads((HERE / "glue_lengths.json").read_text())
GLUE = tuple(LENGTHS["tasks"])
# Public GLUE dev sizes (MNLI: matched + mismatched), for the evaluation part of the sweep estimate.
DEV_SIZES = {"cola": 1043, "sst2": 872, "mrpc": 408, "stsb": 1500, "qqp": 40430, "mnli": 19647, "qnli": 5463,
             "rte": 277, "wnli": 71}


def random_batch(rng: np.random.Generator, vocab: int, rows: int, width: int) -> dict[str, np.ndarray]:
    """A training batch of in-vocabulary tokens, every position attended, random binary labels."""
    return {"input_ids": rng.integers(min(1000, vocab // 2), vocab, (rows, width)),
            "attention_mask": np.ones((rows, width), dtype=np.int64),
            "token_type_ids": np.zeros((rows, width), dtype=np.int64), "labels": rng.integers(0, 2, rows)}


def sample_lengths(task: str, n: int, rng: np.random.Generator) -> np.ndarray:
    hist = LENGTHS["tasks"][task]["histogram"]
    values = np.array([int(k) for k in hist])
    counts = np.array(list(hist.values()), dtype=float)
    return rng.choice(values, size=n, p=counts / counts.sum())


def synthetic_split(task: str, n: int, seed: int, vocab_size: int, length: int | None = None) -> pa.Table:
    """`n` rows in the prepared-data format whose lengths follow `task`'s GLUE histogram (or are all
    `length`): [CLS] random word pieces [SEP] (a pair: two segments), random labels of the task's type
    (float32 scores in [0, 5) for STS-B's regression, as prepare-data stores them)."""
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(task, n, rng) if length is None else np.full(n, length)
    spec = tasks.get_task(task)
    pair = len(spec.text_fields) == 2
    ids, types = [], []
    for width in lengths:
        row = rng.integers(1000, vocab_size, size=width, dtype=np.int32)
        row[0], row[-1] = 101, 102
        seg = np.zeros(width, dtype=np.int8)
        if pair and width > 3:
            seg[width // 2:] = 1
            row[width // 2 - 1] = 102
        ids.append(row)
        types.append(seg)
    if spec.is_regression:
        labels = pa.array(rng.uniform(0, 5, size=n).astype(np.float32))
    else:
        labels = pa.array(rng.integers(0, spec.num_labels, size=n, dtype=np.int64))
    return pa.table({"idx": np.arange(n, dtype=np.int64), "input_ids": pa.array(ids, pa.list_(pa.int32())),
                     "token_type_ids": pa.array(types, pa.list_(pa.int8())),
                     "label": labels, "length": lengths.astype(np.int32)})


def make_model(root: Path, cuda: bool) -> Path:
    """BERT-base with random weights on CUDA; a tiny BERT on CPU. The bert-base-uncased tokenizer."""
    if cuda:
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        model, tokenizer = BertModel(BertConfig()), models.load_tokenizer(models.parse_model_ref("tiny:bert"))
    else:
        model, tokenizer = models.tiny_bert(0)
    return models.save_checkpoint(model, tokenizer, root / "model")


def matmul_params(path: Path) -> int:
    """Parameters that take part in matmuls: everything but the embedding tables."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(path)
    return sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)


def padding_waste(lengths: np.ndarray, batch: int, grouped: bool, multiple: int, limit: int = 128) -> float:
    if grouped:
        batches = length_grouped_batches(lengths, batch, seed=0)
    else:
        order = np.random.default_rng(0).permutation(len(lengths))
        batches = [order[i:i + batch] for i in range(0, len(order), batch)]
    padded = sum(len(rows) * padded_width(int(lengths[rows].max()), multiple, limit) for rows in batches)
    return float(1 - lengths.sum() / padded)
