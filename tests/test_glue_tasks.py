"""Every GLUE task of the reports: registry entries against the hub's dataset card, each task's original
GLUE TSV layout, the hub mapping, the real files in shared/data (when present), and every task type end to
end on synthetic data (prepare-data -> a 1-epoch fine-tuning of a tiny BERT -> evaluate)."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoConfig, BertConfig, BertModel, BertTokenizerFast

from bertology.data import subset_indices
from bertology.errors import BadInput
from bertology.spec import DatasetSpec
from bertology.steps.prepare_data import prepare
from bertology.store import LocalStore
from bertology.tasks import TASKS, check_source, get_task, load_split, synthetic
from bertology.train import Hyper, evaluate, finetune, load_finetuned

pytestmark = pytest.mark.usefixtures("one_thread")

GLUE = Path("/work/shared/data/glue")

# The hub's `nyu-mll/glue` dataset card (dataset_info): config -> text columns, ClassLabel names in id
# order (None: float32 regression), splits. Transcribed by hand from the card; the registry must agree.
HUB_CARD = {
    "cola": (("sentence",), ("unacceptable", "acceptable"), ("train", "validation")),
    "sst2": (("sentence",), ("negative", "positive"), ("train", "validation")),
    "mrpc": (("sentence1", "sentence2"), ("not_equivalent", "equivalent"), ("train", "validation")),
    "stsb": (("sentence1", "sentence2"), None, ("train", "validation")),
    "qqp": (("question1", "question2"), ("not_duplicate", "duplicate"), ("train", "validation")),
    "mnli": (("premise", "hypothesis"), ("entailment", "neutral", "contradiction"),
             ("train", "validation_matched", "validation_mismatched")),
    "qnli": (("question", "sentence"), ("entailment", "not_entailment"), ("train", "validation")),
    "rte": (("sentence1", "sentence2"), ("entailment", "not_entailment"), ("train", "validation")),
    "wnli": (("sentence1", "sentence2"), ("not_entailment", "entailment"), ("train", "validation")),
}


# --- registry ---------------------------------------------------------------------------------------------

def test_every_glue_task_is_registered_as_on_the_hub():
    assert {name for name, task in TASKS.items() if task.kind == "sequence"} == set(HUB_CARD)
    for name, (columns, labels, splits) in HUB_CARD.items():
        task = get_task(name)
        assert task.hub == ("nyu-mll/glue", name)
        assert task.hub_columns == (*columns, "label")
        assert len(task.text_fields) == len(columns)
        assert task.splits == splits
        if labels is None:
            assert task.is_regression and task.num_labels == 1 and task.label_names == ()
        else:
            assert task.label_names == labels and task.num_labels == len(labels)


def test_metrics_and_primary_metric_as_the_reports_print_them():
    expected = {"cola": "matthews_corrcoef", "sst2": "accuracy", "mrpc": "f1", "stsb": "pearson", "qqp": "f1",
                "mnli": "accuracy", "qnli": "accuracy", "rte": "accuracy", "wnli": "accuracy"}
    expected |= {"squad2": "f1", "mlm-nl": "perplexity"}
    assert {name: task.primary_metric for name, task in TASKS.items()} == expected
    assert TASKS["mlm-nl"].lower_is_better and not any(TASKS[n].lower_is_better for n in expected if n != "mlm-nl")
    assert TASKS["mrpc"].metrics == ("f1", "accuracy") and TASKS["qqp"].metrics == ("f1", "accuracy")
    assert TASKS["stsb"].metrics == ("pearson", "spearman")
    assert TASKS["mnli"].eval_splits == ("validation_matched", "validation_mismatched")


# --- the hub ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(HUB_CARD))
def test_hub_source_maps_every_task(monkeypatch, name):
    columns, labels, splits = HUB_CARD[name]
    label = datasets.Value("float32") if labels is None else datasets.ClassLabel(names=list(labels))
    features = datasets.Features({**{c: datasets.Value("string") for c in columns}, "label": label,
                                  "idx": datasets.Value("int32")})
    values = [4.6, 0.25, 3.0] if labels is None else [len(labels) - 1, 0, 1]
    calls = []

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        rows = {c: [f"{c} {i} of {split}" for i in range(3)] for c in columns}
        return datasets.Dataset.from_dict({**rows, "label": values, "idx": [0, 1, 2]}, features=features)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    task = get_task(name)
    for split in splits:
        ds = load_split(task, "hub", split)
        assert ds.column_names == [*task.text_fields, "label"]
        assert ds["text_a"] == [f"{columns[0]} {i} of {split}" for i in range(3)]
        assert ds["label"] == pytest.approx(values)
        assert ds.features["label"].dtype == ("float32" if task.is_regression else "int64")
    assert calls == [("nyu-mll/glue", name, split) for split in splits]


# --- GLUE directories: each task's original layout ---------------------------------------------------------

def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


MNLI_TRAIN_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                     "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")
MNLI_DEV_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                   "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\t"
                   "label5\tgold_label")
STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"


def _mnli_row(i: int, premise: str, hypothesis: str, gold: str, dev: bool) -> str:
    votes = [gold] * (5 if dev else 1)
    return "\t".join([str(i), "31193", f"31193{gold[0]}", "fiction", "( ( a ) b )", "( c )", "(ROOT (S a))",
                      "(ROOT (S c))", premise, hypothesis, *votes, gold])


@pytest.fixture
def glue_dir(tmp_path) -> Path:
    """One small file per split in each task's original layout (headers, widths, label encodings)."""
    _write(tmp_path / "CoLA" / "train.tsv", [  # no header: source, label, original mark, sentence
        "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.",
        "gj04\t0\t*\tThey drank the pub.",
    ])
    _write(tmp_path / "CoLA" / "dev.tsv", ["cj99\t0\t*\tThe more does Bill smoke, the more Susan hates him."])
    mrpc_header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"  # the GLUE file starts with a BOM
    _write(tmp_path / "MRPC" / "train.tsv", [
        mrpc_header,
        ('1\t702876\t702977\tAmrozi accused his brother, whom he called "the witness".\t'
         'Referring to him as only "the witness", Amrozi accused his brother.'),
        "0\t2108705\t2108831\tYucaipa sold the chain in 1998 .\tYucaipa bought Dominick 's in 1995 .",
    ])
    _write(tmp_path / "MRPC" / "dev.tsv", [
        mrpc_header, '1\t1355540\t1355592\tHe said the pie business does not fit.\t"The pie business does not fit.'])
    _write(tmp_path / "STS-B" / "train.tsv", [
        STSB_HEADER,
        "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000",
        "1\tmain-news\theadlines\t2015\t0002\tnone\tnone\tA man is playing a flute.\tA man plays a guitar.\t0.800",
    ])
    _write(tmp_path / "STS-B" / "dev.tsv", [
        STSB_HEADER, "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man dances.\tA man is dancing.\t3.800"])
    qqp_header = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"
    _write(tmp_path / "QQP" / "train.tsv", [
        qqp_header, "1\t3\t4\tHow do I learn Python?\tWhat is the best way to learn Python?\t1",
        "2\t5\t6\tWhy is the sky blue?\tHow far away is the moon?\t0",
    ])
    _write(tmp_path / "QQP" / "dev.tsv", [qqp_header, "7\t8\t9\tIs chess hard?\tHow hard is chess?\t1"])
    _write(tmp_path / "MNLI" / "train.tsv", [
        MNLI_TRAIN_HEADER,
        _mnli_row(0, "Conceptually cream skimming has two dimensions.", "Product and geography matter.",
                  "neutral", dev=False),
        _mnli_row(1, "you know during the season i guess", "You lose the things.", "entailment", dev=False),
    ])
    _write(tmp_path / "MNLI" / "dev_matched.tsv", [
        MNLI_DEV_HEADER, _mnli_row(0, "The new rights are nice enough", "Everyone likes them.", "neutral", dev=True),
        _mnli_row(1, "This site includes a list.", "The site has no list.", "contradiction", dev=True),
    ])
    _write(tmp_path / "MNLI" / "dev_mismatched.tsv", [
        MNLI_DEV_HEADER, _mnli_row(0, "Your contribution helped.", "It helped.", "entailment", dev=True)])
    _write(tmp_path / "QNLI" / "train.tsv", [
        "index\tquestion\tsentence\tlabel",
        "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it, it was darker.\tnot_entailment",
        "1\tWhat came into force?\tAs of that day, the new constitution came into force.\tentailment",
    ])
    _write(tmp_path / "QNLI" / "dev.tsv", ["index\tquestion\tsentence\tlabel", "0\tWho?\tHe did.\tentailment"])
    _write(tmp_path / "WNLI" / "train.tsv", [
        "index\tsentence1\tsentence2\tlabel",
        "0\tI stuck a pin through a carrot. When I pulled the pin out, it had a hole.\tThe carrot had a hole.\t1",
        "1\tJohn couldn't see the stage with Billy in front of him because he is so short.\tBilly is so short.\t0",
    ])
    _write(tmp_path / "WNLI" / "dev.tsv", [
        "index\tsentence1\tsentence2\tlabel",
        "0\tThe drain is clogged with hair. It has to be cleaned.\tThe hair has to be cleaned.\t0"])
    return tmp_path


@pytest.mark.parametrize("name,split,first,labels", [
    ("cola", "train", {"text_a": "Our friends won't buy this analysis, let alone the next one we propose."}, [1, 0]),
    ("cola", "validation", {"text_a": "The more does Bill smoke, the more Susan hates him."}, [0]),
    ("mrpc", "train", {"text_a": 'Amrozi accused his brother, whom he called "the witness".',
                       "text_b": 'Referring to him as only "the witness", Amrozi accused his brother.'}, [1, 0]),
    ("mrpc", "validation", {"text_b": '"The pie business does not fit.'}, [1]),  # quotes are literal
    ("stsb", "train", {"text_a": "A plane is taking off.", "text_b": "An air plane is taking off."}, [5.0, 0.8]),
    ("stsb", "validation", {"text_b": "A man is dancing."}, [3.8]),
    ("qqp", "train", {"text_a": "How do I learn Python?", "text_b": "What is the best way to learn Python?"},
     [1, 0]),
    ("qqp", "validation", {"text_a": "Is chess hard?"}, [1]),
    ("mnli", "train", {"text_a": "Conceptually cream skimming has two dimensions.",
                       "text_b": "Product and geography matter."}, [1, 0]),
    ("mnli", "validation_matched", {"text_b": "Everyone likes them."}, [1, 2]),
    ("mnli", "validation_mismatched", {"text_a": "Your contribution helped."}, [0]),
    ("qnli", "train", {"text_a": "When did the third Digimon series begin?"}, [1, 0]),
    ("qnli", "validation", {"text_b": "He did."}, [0]),
    ("wnli", "train", {"text_b": "The carrot had a hole."}, [1, 0]),
    ("wnli", "validation", {"text_a": "The drain is clogged with hair. It has to be cleaned."}, [0]),
])
def test_glue_dir_reads_each_tasks_layout(glue_dir, name, split, first, labels):
    ds = load_split(name, f"glue-dir:{glue_dir}", split)
    assert ds.column_names == [*get_task(name).text_fields, "label"]
    assert {k: ds[0][k] for k in first} == first
    assert list(ds["label"]) == pytest.approx(labels)


def test_glue_dir_checks_the_files_each_task_needs(glue_dir):
    for name in HUB_CARD:
        if name not in ("sst2", "rte"):  # those two are in test_tasks.py's fixture
            check_source(name, f"glue-dir:{glue_dir}")
    (glue_dir / "MNLI" / "dev_mismatched.tsv").unlink()
    with pytest.raises(BadInput, match=r"MNLI/dev_mismatched.tsv does not exist \(task mnli needs it for split "
                                       r"validation_mismatched\)"):
        check_source("mnli", f"glue-dir:{glue_dir}")
    # a split whose own file is there still loads (shared/data has QNLI's dev.tsv without train.tsv)
    (glue_dir / "QNLI" / "train.tsv").unlink()
    assert len(load_split("qnli", f"glue-dir:{glue_dir}", "validation")) == 1
    with pytest.raises(BadInput, match="QNLI/train.tsv does not exist"):
        load_split("qnli", f"glue-dir:{glue_dir}", "train")


def test_glue_dir_bad_labels_name_file_line_and_allowed_values(glue_dir):
    _write(glue_dir / "MNLI" / "train.tsv", [MNLI_TRAIN_HEADER, _mnli_row(0, "P.", "H.", "-", dev=False)])
    with pytest.raises(BadInput, match=r"train.tsv:2: bad label '-' for task mnli \(allowed: entailment, "
                                       r"neutral, contradiction or 0..2\)") as e:
        load_split("mnli", f"glue-dir:{glue_dir}", "train")
    assert "\n" not in str(e.value)
    _write(glue_dir / "STS-B" / "dev.tsv", [STSB_HEADER, "0\tg\tf\t2012\t0\tnone\tnone\tA.\tB.\tnan"])
    with pytest.raises(BadInput, match=r"dev.tsv:2: bad label 'nan' for task stsb \(allowed: a finite number\)"):
        load_split("stsb", f"glue-dir:{glue_dir}", "validation")
    _write(glue_dir / "CoLA" / "train.tsv", ["gj04\t1\tno sentence column"])
    with pytest.raises(BadInput, match="train.tsv:1: expected 4 tab-separated fields, found 3"):
        load_split("cola", f"glue-dir:{glue_dir}", "train")
    _write(glue_dir / "WNLI" / "dev.tsv", ["index\tsentence1\tsentence2\tlabel", "0\tA.\tB.\t2"])
    with pytest.raises(BadInput, match=r"bad label '2' for task wnli \(allowed: not_entailment, entailment or 0..1"):
        load_split("wnli", f"glue-dir:{glue_dir}", "validation")


# --- the real files in shared/data -------------------------------------------------------------------------

REAL = [  # SOURCES.md's row counts; label counts per id (for STS-B the score range)
    ("cola", "train", 8551, {0: 2528, 1: 6023}), ("cola", "validation", 1043, {0: 322, 1: 721}),
    ("sst2", "train", 67349, {0: 29780, 1: 37569}), ("sst2", "validation", 872, {0: 428, 1: 444}),
    ("mrpc", "train", 3668, {0: 1194, 1: 2474}), ("mrpc", "validation", 408, {0: 129, 1: 279}),
    ("stsb", "train", 5749, (0.0, 5.0)), ("stsb", "validation", 1500, (0.0, 5.0)),
    ("qnli", "validation", 5463, {0: 2702, 1: 2761}),
    ("rte", "train", 2490, {0: 1249, 1: 1241}), ("rte", "validation", 277, {0: 146, 1: 131}),
    ("wnli", "train", 635, {0: 323, 1: 312}), ("wnli", "validation", 71, {0: 40, 1: 31}),
]


def _real(name: str, split: str) -> Path:
    return GLUE / get_task(name).glue_dir / get_task(name).tsv_file(split)


@pytest.mark.parametrize("name,split,rows,labels", REAL)
def test_real_glue_rows_and_labels(name, split, rows, labels):
    if not _real(name, split).is_file():
        pytest.skip(f"{_real(name, split)} not present")
    ds = load_split(name, f"glue-dir:{GLUE}", split)
    assert len(ds) == rows
    if isinstance(labels, tuple):
        assert (min(ds["label"]), max(ds["label"])) == labels
    else:
        assert dict(Counter(ds["label"])) == labels


@pytest.mark.skipif(not GLUE.is_dir(), reason="real GLUE data not present")
def test_real_glue_label_directions():
    """Not only the counts: the ids mean the hub's names. Spot checks whose answer is plain English."""
    source = f"glue-dir:{GLUE}"

    def row(name, split, i=0):
        return load_split(name, source, split)[i]

    assert row("sst2", "validation")["text_a"].startswith("it 's a charming and often affecting journey")
    assert row("sst2", "validation")["label"] == 1  # positive
    mrpc = row("mrpc", "validation")
    assert "foodservice pie business" in mrpc["text_a"] and mrpc["label"] == 1  # a paraphrase: equivalent
    wnli = row("wnli", "validation")  # "it" is the drain, not the hair
    assert wnli["text_b"] == "The hair has to be cleaned." and wnli["label"] == 0  # not_entailment
    rte = row("rte", "validation")  # died of lung cancer; says nothing of an accident
    assert rte["text_b"] == "Christopher Reeve had an accident." and rte["label"] == 1  # not_entailment
    qnli = row("qnli", "validation")  # the sentence says what came into force
    assert qnli["text_a"].startswith("What came into force") and qnli["label"] == 0  # entailment
    stsb = row("stsb", "validation")
    assert stsb["text_b"] == "A man wearing a hard hat is dancing." and stsb["label"] == 5.0
    # CoLA: acceptable (1) exactly where the original judgement mark is blank; unacceptable rows carry
    # "*", "?" or "??" (all but one of 2851)
    for split in ("train", "validation"):
        with open(_real("cola", split), encoding="utf-8", newline="") as f:
            raw = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        labels = load_split("cola", source, split)["label"]
        marks = Counter((label, bool(r[2].strip())) for label, r in zip(labels, raw, strict=True))
        assert marks[(1, True)] == 0 and marks[(0, False)] <= 1


@pytest.mark.skipif(not (GLUE / "SST-2" / "train.tsv").is_file(), reason="real GLUE data not present")
def test_real_counts_equalise_sst2_and_qnli_at_670():
    """The partial-reinitialisation report compares SST-2 and QNLI at about 670 training examples."""
    for name, split in (("sst2", "train"), ("qnli", "validation")):
        labels = np.asarray(load_split(name, f"glue-dir:{GLUE}", split)["label"])
        keep = subset_indices(labels, count=670, seed=1)
        assert len(keep) == 670
        assert abs(labels[keep].mean() - labels.mean()) <= 1 / 670  # stratified: class shares kept


# --- every task type end to end on synthetic data -----------------------------------------------------------



@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BERT whose word-level vocabulary covers every synthetic task's words; saved
    without a classifier head, as build-checkpoint saves checkpoints, so each task sizes its own head."""
    words = set()
    for name in synthetic.TASKS:
        for split in get_task(name).splits:
            rows = synthetic.generate(name, split)
            words.update(w for field, texts in rows.items() if field != "label" for t in texts for w in t.split())
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]
    model_dir = tmp_path_factory.mktemp("tiny-glue-bert")
    torch.manual_seed(0)
    BertModel(BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64)).save_pretrained(model_dir)
    BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(model_dir)
    return model_dir


@pytest.mark.parametrize("name", ["cola", "sst2", "mrpc", "qqp", "qnli", "rte", "wnli", "mnli", "stsb"])
def test_every_task_type_end_to_end(tiny_model, tmp_path, name):
    task = get_task(name)
    store = LocalStore(tmp_path / "store")
    spec = DatasetSpec(task=name, source="synthetic", tokenizer=f"dir:{tiny_model}", max_length=64, count=64)
    data_dir = store.local_dir(prepare(store, spec))

    # prepare-data: every split, the training count as asked and stratified, float labels for regression
    meta = json.loads((data_dir / "meta.json").read_text())
    assert list(meta["splits"]) == list(task.splits)
    assert meta["splits"]["train"] == {**meta["splits"]["train"], "rows": 64, "of": synthetic.SIZES["train"]}
    train = pq.read_table(data_dir / "train.parquet")
    evals = {split: pq.read_table(data_dir / f"{split}.parquet") for split in task.eval_splits}
    labels = train.column("label").to_numpy()
    if task.is_regression:
        assert str(train.schema.field("label").type) == "float" and labels.dtype == np.float32
        assert np.histogram(labels, bins=[0, 1.25, 2.5, 3.75, 5.01])[0].min() >= 8  # spread over the range
    else:
        counts = np.bincount(labels, minlength=task.num_labels)
        assert counts.sum() == 64 and counts.max() - counts.min() <= 1

    # finetune: 1 epoch, every eval split evaluated, the first one's primary metric picks the epoch
    lines: list[str] = []
    result = finetune(tiny_model, task, train, evals, Hyper(lr=1e-3, batch_size=16, epochs=1, eval_batch_size=256),
                      seed=1, out_dir=tmp_path / "model", device="cpu", log=lines.append)
    expected = {f"{split}/{m}" for split in task.eval_splits for m in task.metrics}
    assert set(result.best_metrics) == expected and all(math.isfinite(v) for v in result.best_metrics.values())
    config = AutoConfig.from_pretrained(tmp_path / "model")
    assert config.num_labels == task.num_labels
    # HF picks the loss from num_labels and the label dtype: MSE for regression (targets up to 5, so an
    # untrained model's loss is far above cross-entropy's ln 2), cross-entropy otherwise
    assert config.problem_type == ("regression" if task.is_regression else "single_label_classification")
    if task.is_regression:
        assert result.curves[0]["train_loss"] > 2.0

    # evaluate: the saved weights reproduce the epoch's metrics on every split; predictions per row
    model = load_finetuned(tmp_path / "model", task, "cpu")
    for split, table in evals.items():
        got, predictions = evaluate(model, task, table, batch_size=256, device="cpu")
        assert got == pytest.approx({m: result.best_metrics[f"{split}/{m}"] for m in task.metrics}, abs=1e-6)
        assert predictions.num_rows == table.num_rows == synthetic.SIZES["validation"]
        prediction = predictions.column("prediction").to_numpy()
        if task.is_regression:
            assert np.array_equal(prediction, predictions.column("score"))
        else:
            assert set(prediction) <= set(range(task.num_labels))
