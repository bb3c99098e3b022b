"""A checkpoint whose tokenizer an intervention replaced trains on data that tokenizer made.

The monolingual report's English word embeddings (Table 5): "The tokenizer and word-piece embeddings from the
non-English pre-trained model are replaced with the ones from the English pre-trained model." Here on two
real, different vocabularies: a foreign BERT built for the test with its own word-pieces (ids its English
donor gives to other words), and the tiny BERT over bert-base-uncased's vocabulary (the packaged MiniLM's
tokenizer), which the tiny preset stands in for English BERT. The whole study runs through `bertology run`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from transformers import BertModel, BertTokenizerFast

from bertology import models
from bertology.errors import BadInput
from bertology.results import scan
from bertology.spec import CheckpointSpec, DatasetSpec, Intervention, RunSpec
from bertology.steps.finetune import check_tokenizer
from bertology.tasks import load_split

REPO = Path(__file__).resolve().parents[1]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def foreign_bert(tmp_path_factory) -> Path:
    """A 4-layer BERT as wide as the tiny one, over a vocabulary of its own: the synthetic SST-2 words in
    reverse order after the special tokens (so "[CLS]" is 2, not bert-base-uncased's 101)."""
    words = sorted({w for text in load_split("sst2", "synthetic", "train")["text_a"] for w in text.lower().split()},
                   reverse=True)
    directory = tmp_path_factory.mktemp("foreign-bert")
    (directory / "vocab.txt").write_text("\n".join([*SPECIAL, *words]) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=True)  # vocab=: see transformers 5
    config = models.tiny_config("bert")
    config.vocab_size, config.pad_token_id = len(tokenizer), tokenizer.pad_token_id
    BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _train_ids(store: Path, dataset_id: str) -> list[list[int]]:
    return pq.read_table(store / "data" / dataset_id / "train.parquet").column("input_ids").to_pylist()


def test_the_english_runs_train_on_the_english_tokenizers_ids(foreign_bert, tmp_path, subprocess_env):
    store, foreign = tmp_path / "store", f"dir:{foreign_bert}"
    done = subprocess.run(
        [sys.executable, "-m", "bertology.cli", "run", "workflows/english-embeddings.yaml", "-p", "preset=tiny",
         "-p", f"models={json.dumps([foreign])}", "-p", 'tasks=["sst2"]', "-p", "seeds=[1]", "--store", str(store)],
        cwd=REPO, env=subprocess_env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    (plan_file,) = (store / "studies" / "english-embeddings").glob("*/plan.json")
    cells = {c["variant"]: c["run"] for c in json.loads(plan_file.read_text())["cells"]}
    assert cells["english"]["dataset"]["tokenizer"] == "tiny:bert"  # the donor English BERT's stand-in
    assert cells["base"]["dataset"]["tokenizer"] == cells["clean"]["dataset"]["tokenizer"] == foreign
    english, base = cells["english"]["dataset"], cells["base"]["dataset"]
    english_id, base_id = (DatasetSpec.from_dict(d).id for d in (english, base))
    assert english_id != base_id  # one language's base and english runs read different data

    donor, own = models.load_tokenizer(models.parse_model_ref("tiny:bert")), BertTokenizerFast.from_pretrained(foreign_bert)
    english_ids, base_ids = _train_ids(store, english_id), _train_ids(store, base_id)
    assert len(english_ids) == len(base_ids) == 128  # the same examples, two tokenizations
    for ids in english_ids:  # [CLS] ... [SEP] of bert-base-uncased, and its ids for the words
        assert ids[0] == donor.cls_token_id == 101 and donor.sep_token_id in ids
    for ids in base_ids:
        assert ids[0] == own.cls_token_id == 2 and max(ids) < len(own)
    assert max(max(ids) for ids in english_ids) >= len(own)  # ids the foreign table has no row for
    for ours, theirs in zip(english_ids, base_ids):  # row for row, the donor's tokenization of the same text
        assert ours == donor(own.decode(theirs, skip_special_tokens=True))["input_ids"]

    runs = scan(str(store), "runs", study="english-embeddings").collect().filter(pl.col("primary"))
    assert dict(runs.select("variant", "dataset_id").rows()) == {"base": base_id, "clean": base_id,
                                                                  "english": english_id}


def test_finetune_refuses_data_another_tokenizer_made():
    swapped = CheckpointSpec("dir:/models/german", (Intervention("swap-embeddings", (("donor", "tiny:bert"),)),))
    assert swapped.tokenizer == "tiny:bert"
    check_tokenizer(RunSpec(swapped, DatasetSpec("sst2", tokenizer="tiny:bert")))
    with pytest.raises(BadInput, match=r"tokenized with dir:/models/german's tokenizer, but its checkpoint reads "
                                       r"tiny:bert's word-pieces; allowed: data tokenized with tiny:bert's tokenizer"):
        check_tokenizer(RunSpec(swapped, DatasetSpec("sst2", tokenizer="dir:/models/german")))
