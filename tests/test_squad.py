"""SQuAD 2.0: reading, sliding-window features, mapping logits back to answers, the official evaluation,
and the synthetic generator."""

from __future__ import annotations

import copy
import itertools
import json
import math
import types

import numpy as np
import pyarrow as pa
import pytest

from bertology.errors import BadInput
from bertology.models import ModelRef, load_tokenizer
from bertology.squad_eval import compute_f1, evaluate, normalize_answer
from bertology.tasks import squad
from bertology.tasks.squad import from_hub, postprocess, read_squad_json, tokenize_squad
from bertology.tasks.synthetic import squad as synthetic_squad
from bertology.tasks.synthetic.events import DAYS, ENTITIES


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(ModelRef("tiny", "bert"))


# --- reading ---------------------------------------------------------------------------------------

def _official() -> dict:
    normans = "The Normans were a people in Normandy, a region in France."
    return {"version": "v2.0", "data": [
        {"title": "Normans", "paragraphs": [{"context": normans, "qas": [
            {"id": "q1", "question": "In what country is Normandy located?", "is_impossible": False,
             "answers": [{"text": "France", "answer_start": 51}, {"text": "in France", "answer_start": 48}]},
            {"id": "q2", "question": "Who gave their name to France?", "is_impossible": True, "answers": [],
             "plausible_answers": [{"text": "Normans", "answer_start": 4}]},
        ]}]},
        {"title": "Physics", "paragraphs": [{"context": "Force is mass times acceleration.", "qas": [
            # The text does not match context[0:5] ("Force"): the official data has a few such; kept.
            {"id": "q3", "question": "What is force?", "is_impossible": False,
             "answers": [{"text": "mass times acceleration", "answer_start": 0}]},
        ]}]},
    ]}


def _write(tmp_path, document) -> str:
    path = tmp_path / "squad.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def test_read_squad_json_gives_one_row_per_question(tmp_path):
    columns = read_squad_json(_write(tmp_path, _official()))
    normans = "The Normans were a people in Normandy, a region in France."
    assert columns == {
        "id": ["q1", "q2", "q3"],
        "title": ["Normans", "Normans", "Physics"],
        "question": ["In what country is Normandy located?", "Who gave their name to France?", "What is force?"],
        "context": [normans, normans, "Force is mass times acceleration."],
        "answer_texts": [["France", "in France"], [], ["mass times acceleration"]],
        "answer_starts": [[51, 48], [], [0]],
    }
    assert normans[51:57] == "France" and normans[48:57] == "in France"


def _mutate(path: tuple, value=None, delete: bool = False):
    def apply(document: dict) -> dict:
        document = copy.deepcopy(document)
        target = document
        for key in path[:-1]:
            target = target[key]
        if delete:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return document
    return apply


QA = ("data", 0, "paragraphs", 0, "qas")


@pytest.mark.parametrize("mutation, message", [
    (_mutate(("data",), delete=True), r"squad.json: top level: missing key 'data'$"),
    (_mutate(("data", 1, "title"), delete=True), r"squad.json: data\[1\]: missing key 'title'$"),
    (_mutate(("data", 0, "paragraphs", 0, "context"), delete=True),
     r"data\[0\].paragraphs\[0\]: missing key 'context'$"),
    (_mutate((*QA, 1, "question"), delete=True), r"paragraphs\[0\].qas\[1\] \(id q2\): missing key 'question'$"),
    (_mutate((*QA, 0, "id"), delete=True), r"qas\[0\]: missing key 'id'$"),
    (_mutate((*QA, 1, "id"), "q1"), r"paragraphs\[0\].qas\[1\]: duplicate question id 'q1'"),
    (_mutate((*QA, 0, "answers", 1, "answer_start"), "48"),
     r"qas\[0\] \(id q1\).answers\[1\]: 'answer_start' is str \(expected int\)$"),
    (_mutate((*QA, 0, "answers", 0, "answer_start"), -1), r"answers\[0\]: answer_start -1 is negative"),
    (_mutate((*QA, 0, "answers"), []), r"\(id q1\): 'answers' is empty \(expected at least one answer, or is_"),
    (_mutate((*QA, 1, "answers"), [{"text": "Normans", "answer_start": 4}]),
     r"\(id q2\): is_impossible is true but 'answers' is not empty"),
    (_mutate((*QA, 1, "is_impossible"), "yes"), r"\(id q2\): 'is_impossible' is 'yes' \(expected true or false\)$"),
])
def test_read_squad_json_rejects_malformed_files_naming_the_place(tmp_path, mutation, message):
    with pytest.raises(BadInput, match=message) as error:
        read_squad_json(_write(tmp_path, mutation(_official())))
    assert "\n" not in str(error.value)


def test_read_squad_json_rejects_non_json(tmp_path):
    with pytest.raises(BadInput, match=r"squad.json: not JSON \(Expecting value: line 1 column 1"):
        read_squad_json(_write(tmp_path, "not json"))
    with pytest.raises(BadInput, match=r"squad.json: top level: is list \(expected an object with key 'data'\)$"):
        read_squad_json(_write(tmp_path, "[]"))
    with pytest.raises(BadInput, match=r"missing.json: file not found"):
        read_squad_json(tmp_path / "missing.json")


def test_from_hub_reads_the_hub_layout():
    answers = pa.array([{"text": ["France", "in France"], "answer_start": [51, 48]},
                        {"text": [], "answer_start": []}],
                       pa.struct([("text", pa.list_(pa.string())), ("answer_start", pa.list_(pa.int32()))]))
    table = pa.table({"id": ["q1", "q2"], "title": ["Normans", "Normans"], "context": ["c1", "c2"],
                      "question": ["w1", "w2"], "answers": answers})
    assert from_hub(table) == {"id": ["q1", "q2"], "title": ["Normans", "Normans"], "question": ["w1", "w2"],
                               "context": ["c1", "c2"], "answer_texts": [["France", "in France"], []],
                               "answer_starts": [[51, 48], []]}
    with pytest.raises(BadInput, match=r"lacks column 'answers' \(expected columns id, title, context"):
        from_hub(table.drop_columns(["answers"]))
    with pytest.raises(BadInput, match=r"column 'answers' has type string \(expected struct<text"):
        from_hub(table.set_column(4, "answers", pa.array(["x", "y"])))


# --- features --------------------------------------------------------------------------------------

LONG = " ".join(f"{name} sold a {obj} to {other} in {city} ." for name, obj, other, city in zip(
    ("john", "mary", "peter", "susan", "paul", "linda", "mark", "karen"),
    ("car", "book", "lamp", "guitar", "bicycle", "painting", "chair", "camera"),
    ("tom", "sarah", "anna", "james", "tom", "sarah", "anna", "james"),
    ("paris", "london", "berlin", "madrid", "rome", "tokyo", "paris", "london")))


def _examples() -> dict[str, list]:
    short = "john sold a red car to mary ."
    return {
        "id": ["short", "none", "long"],
        "title": ["t", "t", "t"],
        "question": ["   who sold the car ?", "who sold the boat ?", "where did mark sell the chair ?"],
        "context": [short, short, LONG],
        "answer_texts": [["john"], [], ["paris"]],
        "answer_starts": [[0], [], [LONG.index("mark sold a chair to anna in paris") + 29]],
    }


def _decode(features: pa.Table, row: int, contexts: list[str]) -> str:
    f = features.slice(row, 1).to_pylist()[0]
    return contexts[f["example_idx"]][f["offset_start"][f["start_positions"]]:f["offset_end"][f["end_positions"]]]


def test_tokenize_squad_single_window_matches_the_tokenizer(tokenizer):
    examples = _examples()
    assert examples["context"][2][examples["answer_starts"][2][0]:][:5] == "paris"
    features = tokenize_squad(examples, tokenizer, max_length=128, doc_stride=32)
    assert features.schema == pa.schema([
        ("example_idx", pa.int64()), ("input_ids", pa.list_(pa.int32())), ("token_type_ids", pa.list_(pa.int8())),
        ("start_positions", pa.int32()), ("end_positions", pa.int32()), ("offset_start", pa.list_(pa.int32())),
        ("offset_end", pa.list_(pa.int32())), ("length", pa.int32())])
    rows = features.to_pylist()
    assert [r["example_idx"] for r in rows] == [0, 1, 2]
    for row, question, context in zip(rows, examples["question"], examples["context"]):
        expected = tokenizer(question.lstrip(), context)
        assert row["input_ids"] == expected["input_ids"]
        assert row["token_type_ids"] == expected["token_type_ids"]
        assert row["length"] == len(expected["input_ids"])
        n_question = expected["token_type_ids"].index(1)  # [CLS] question [SEP]
        assert row["offset_start"][:n_question] == [-1] * n_question
        assert row["offset_start"][-1] == row["offset_end"][-1] == -1  # the final [SEP]
        spans = list(zip(row["offset_start"][n_question:-1], row["offset_end"][n_question:-1]))
        assert [context[s:e] for s, e in spans] == tokenizer.tokenize(context)  # lowercase words, no ##
    # "john" is the first context token, right after "[CLS] who sold the car ? [SEP]".
    assert (rows[0]["start_positions"], rows[0]["end_positions"]) == (7, 7)
    assert (rows[1]["start_positions"], rows[1]["end_positions"]) == (0, 0)  # unanswerable
    assert _decode(features, 0, examples["context"]) == "john"
    assert _decode(features, 2, examples["context"]) == "paris"


def test_tokenize_squad_slides_overlapping_windows(tokenizer):
    examples = _examples()
    stride = 8
    features = tokenize_squad(examples, tokenizer, max_length=32, doc_stride=stride)
    rows = [r for r in features.to_pylist() if r["example_idx"] == 2]
    assert len(rows) > 3
    assert max(r["length"] for r in features.to_pylist()) == 32
    context_ids = [[t for t, s in zip(r["input_ids"], r["offset_start"]) if s >= 0] for r in rows]
    for before, after in itertools.pairwise(context_ids):
        assert before[-stride:] == after[:stride]  # consecutive windows share exactly doc_stride tokens
    new = context_ids[0] + [t for ids in context_ids[1:] for t in ids[stride:]]
    assert new == tokenizer(LONG, add_special_tokens=False)["input_ids"]  # together: the whole context once

    answer_start = examples["answer_starts"][2][0]
    containing = 0
    for i, row in enumerate(features.to_pylist()):
        if row["example_idx"] != 2:
            continue
        starts = [s for s in row["offset_start"] if s >= 0]
        ends = [e for e in row["offset_end"] if e >= 0]
        if starts[0] <= answer_start and answer_start + len("paris") <= ends[-1]:
            containing += 1
            assert _decode(features, i, examples["context"]) == "paris"
        else:
            assert (row["start_positions"], row["end_positions"]) == (0, 0)
    assert containing >= 1


def test_tokenize_squad_every_answer_span_decodes_exactly(tokenizer):
    examples = synthetic_squad.generate("train", 60, seed=1)
    features = tokenize_squad(examples, tokenizer, max_length=64, doc_stride=16)
    assert features.num_rows > 60  # some contexts need several windows
    answered = set()
    for i, row in enumerate(features.to_pylist()):
        texts = examples["answer_texts"][row["example_idx"]]
        if row["start_positions"] == 0:
            assert row["end_positions"] == 0
            continue
        assert _decode(features, i, examples["context"]) == texts[0]
        answered.add(row["example_idx"])
    assert answered == {i for i, texts in enumerate(examples["answer_texts"]) if texts}


def test_tokenize_squad_truncates_questions_and_reads_tables_in_chunks(tokenizer, monkeypatch):
    examples = _examples()
    examples["question"][0] = "who " + "really " * 40 + "sold the car ?"
    features = tokenize_squad(examples, tokenizer, max_length=64, doc_stride=8, max_query_length=10)
    assert features.column("input_ids")[0].as_py()[:11] == tokenizer(examples["question"][0])["input_ids"][:11]
    assert features.column("token_type_ids")[0].as_py().index(1) == 10 + 2  # [CLS], 10 tokens, [SEP]
    assert _decode(features, 0, examples["context"]) == "john"

    monkeypatch.setattr(squad, "_TOKENIZE_CHUNK", 2)
    chunked = tokenize_squad(pa.Table.from_pydict(examples), tokenizer, max_length=64, doc_stride=8,
                             max_query_length=10)
    assert chunked.equals(features)


def test_tokenize_squad_rejects_bad_parameters(tokenizer):
    examples = _examples()
    with pytest.raises(BadInput, match=r"tokenizer SimpleNamespace is not a fast tokenizer"):
        tokenize_squad(examples, types.SimpleNamespace(is_fast=False), 64, 16)
    with pytest.raises(BadInput, match=r"doc_stride must be an integer >= 0, got -1$"):
        tokenize_squad(examples, tokenizer, 64, -1)
    with pytest.raises(BadInput, match=r"max_length must be an integer >= 1, got 6.5$"):
        tokenize_squad(examples, tokenizer, 6.5, 1)
    with pytest.raises(BadInput, match=r"doc_stride 61 leaves no new context tokens in a window of max_length 64"):
        tokenize_squad(examples, tokenizer, 64, 61)
    # "where did mark sell the chair ?" is 7 tokens; 3 special tokens + 7 + stride 6 leaves none of 16.
    with pytest.raises(BadInput, match=r"question of example row 2 has 7 tokens .* with max_length 16 and "
                                       r"doc_stride 6 it must be < 7$"):
        tokenize_squad(examples, tokenizer, 16, 6)
    with pytest.raises(BadInput, match=r"lack column 'answer_starts'"):
        tokenize_squad({k: v for k, v in examples.items() if k != "answer_starts"}, tokenizer, 64, 8)
    with pytest.raises(BadInput, match=r"columns differ in length"):
        tokenize_squad({**examples, "context": examples["context"][:2]}, tokenizer, 64, 8)


# --- postprocessing --------------------------------------------------------------------------------

def _peaked_logits(features: pa.Table, pad: int = 3, garbage: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
    """Logits with a peak on each feature's gold start/end (the CLS token when it has none), and large
    values in the padding that must be ignored."""
    lengths = features.column("length").to_numpy()
    width = int(lengths.max()) + pad
    start = np.where(np.arange(width) < lengths[:, None], 0.0, garbage)
    end = start.copy()
    rows = np.arange(features.num_rows)
    start[rows, features.column("start_positions").to_numpy()] = 6.0
    end[rows, features.column("end_positions").to_numpy()] = 4.0
    return start, end


def test_postprocess_recovers_gold_answers_from_peaked_logits(tokenizer):
    examples = synthetic_squad.generate("validation", 45, seed=2)
    features = tokenize_squad(examples, tokenizer, max_length=64, doc_stride=16)
    start, end = _peaked_logits(features)
    predictions, na_scores = postprocess(examples, features, start, end)
    assert list(predictions) == sorted(predictions, key=examples["id"].index)
    for qid, texts in zip(examples["id"], examples["answer_texts"]):
        if texts:
            # Some window holds the answer (peak 6 + 4) and CLS scores 0 there: null 0 - best 10.
            assert predictions[qid] == texts[0]
            assert na_scores[qid] == -10.0
        else:
            # Every window peaks on CLS (null 10); the best span of zeros scores 0.
            assert na_scores[qid] == 10.0
    gold = dict(zip(examples["id"], examples["answer_texts"]))
    assert evaluate(gold, predictions, na_scores)["exact"] == 1.0  # unanswerable ones become ""


def test_postprocess_takes_the_best_window_and_the_smallest_null_score(tokenizer):
    examples = _examples()
    features = tokenize_squad(examples, tokenizer, max_length=32, doc_stride=8)
    start, end = _peaked_logits(features)
    example_idx = features.column("example_idx").to_numpy()
    long_rows = np.flatnonzero(example_idx == 2)
    start[long_rows, 0] = np.arange(len(long_rows)) + 3.0  # CLS scores 3, 4, 5, ... (end logit 0 there)
    start[long_rows, 0] += np.where(features.column("start_positions").to_numpy()[long_rows] == 0, 4.0, 0.0)
    predictions, na_scores = postprocess(examples, features, start, end)
    nulls = start[long_rows, 0] + end[long_rows, 0]
    assert predictions["long"] == "paris"
    assert na_scores["long"] == nulls.min() - 10.0


def test_postprocess_respects_span_limits():
    examples = {"id": ["q"], "context": ["ab cd ef"]}
    features = pa.table({"example_idx": pa.array([0], pa.int64()),
                         "offset_start": pa.array([[-1, 0, 3, 6, -1]], pa.list_(pa.int32())),
                         "offset_end": pa.array([[-1, 2, 5, 8, -1]], pa.list_(pa.int32())),
                         "length": pa.array([5], pa.int32())})
    start = np.array([[0.0, 5.0, 2.0, 0.0, 9.0]])  # the [SEP] at 4 is not a context token
    end = np.array([[0.0, 1.0, 5.0, 0.5, 9.0]])
    # Spans: (1,1) 6, (1,2) 10, (2,2) 7; with at most one token (2,2) wins.
    assert postprocess(examples, features, start, end) == ({"q": "ab cd"}, {"q": -10.0})
    assert postprocess(examples, features, start, end, max_answer_length=1) == ({"q": "cd"}, {"q": -7.0})
    # The best start (3) is after the best end (1): no span from the top 1 x top 1; the top 2 x top 2
    # (starts 3, 2; ends 1, 3) give (3, 3) = 6 and (2, 3) = 2.
    start_late = np.array([[0.0, 0.0, 1.0, 5.0, 0.0]])
    end_first = np.array([[0.0, 5.0, 0.0, 1.0, 0.0]])
    assert postprocess(examples, features, start_late, end_first, n_best=1) == ({"q": ""}, {"q": math.inf})
    assert postprocess(examples, features, start_late, end_first, n_best=2) == ({"q": "ef"}, {"q": -6.0})


def test_postprocess_rejects_misaligned_inputs():
    examples = {"id": ["q", "r"], "context": ["ab", "cd"]}
    features = pa.table({"example_idx": pa.array([0], pa.int64()),
                         "offset_start": pa.array([[-1, 0]], pa.list_(pa.int32())),
                         "offset_end": pa.array([[-1, 2]], pa.list_(pa.int32())),
                         "length": pa.array([2], pa.int32())})
    with pytest.raises(BadInput, match=r"start_logits has shape \(2, 2\) \(expected \(1, >= 2\)"):
        postprocess(examples, features, np.zeros((2, 2)), np.zeros((1, 2)))
    with pytest.raises(BadInput, match=r"example 'r' has no features"):
        postprocess(examples, features, np.zeros((1, 2)), np.zeros((1, 2)))
    with pytest.raises(BadInput, match=r"n_best must be an integer >= 1, got 0$"):
        postprocess(examples, features, np.zeros((1, 2)), np.zeros((1, 2)), n_best=0)


# --- evaluation ------------------------------------------------------------------------------------

def test_normalisation_and_f1_by_hand():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    # gold "cat sat on mat" (4 tokens), prediction "cat on mat" (3): overlap 3, P = 1, R = 3/4,
    # F1 = 2 * 1 * 3/4 / (1 + 3/4) = 6/7.
    assert compute_f1("the cat sat on the mat", "cat on mat") == pytest.approx(6 / 7)
    # gold "x y x" vs prediction "y y": Counter overlap 1 ("y" once), P = 1/2, R = 1/3, F1 = 2/5.
    assert compute_f1("x y x", "y y") == pytest.approx(2 / 5)
    assert compute_f1("", "") == 1.0 and compute_f1("the", "cat") == 0.0


GOLD = {"q1": ["Denver Broncos", "Broncos"], "q2": ["the cat sat on the mat"], "q3": [], "q4": []}
PREDICTIONS = {"q1": "denver broncos!", "q2": "cat on mat", "q3": "something", "q4": "nothing here"}
NA = {"q1": -3.0, "q2": -1.0, "q3": 2.0, "q4": -0.5}


def test_evaluate_by_hand():
    # Threshold 0: q3 (na 2) is "no answer" and right; q4 (na -0.5) keeps its text and is wrong.
    # exact: q1 1, q2 0, q3 1, q4 0 -> 2/4.  f1: 1, 6/7, 1, 0 -> (20/7)/4 = 5/7.
    # Best threshold (questions by na: q1 -3, q2 -1, q4 -0.5, q3 2; start 2 = both unanswerable right):
    #   exact: +1 (q1) = 3 at -3, +0 (q2), -1 (q4), -1 (q3) -> best 3/4 at -3.
    #   f1: +1 = 3 at -3, +6/7 = 27/7 at -1, -1, -1 -> best (27/7)/4 = 27/28 at -1.
    assert evaluate(GOLD, PREDICTIONS, NA) == pytest.approx({
        "exact": 0.5, "f1": 5 / 7, "has_ans_exact": 0.5, "has_ans_f1": (1 + 6 / 7) / 2,
        "no_ans_exact": 0.5, "no_ans_f1": 0.5, "best_exact": 0.75, "best_exact_thresh": -3.0,
        "best_f1": 27 / 28, "best_f1_thresh": -1.0})


@pytest.mark.parametrize("threshold, exact, no_ans_exact", [
    (-0.75, 0.75, 1.0),  # q4 flips to "no answer": right
    (-0.5, 0.5, 0.5),    # an na_score equal to the threshold keeps its answer (q4 stays wrong)
    (-2.0, 0.75, 1.0),   # q2 flips too: it was wrong (exact 0) and stays wrong
    (5.0, 0.25, 0.0),    # nobody is "no answer": q3 and q4 wrong
])
def test_evaluate_threshold_flips_predictions_to_no_answer(threshold, exact, no_ans_exact):
    result = evaluate(GOLD, PREDICTIONS, NA, threshold=threshold)
    assert (result["exact"], result["no_ans_exact"]) == (exact, no_ans_exact)
    assert result["best_exact"] == 0.75  # the best-threshold search does not depend on the threshold


def test_evaluate_official_edge_cases():
    # A gold answer that normalises to "" is dropped, leaving [""]: the empty prediction is then exact,
    # though the question still counts as answerable.
    result = evaluate({"q": ["The"]}, {"q": ""}, {"q": -1.0})
    assert (result["exact"], result["has_ans_exact"]) == (1.0, 1.0)
    assert math.isnan(result["no_ans_exact"]) and math.isnan(result["no_ans_f1"])  # no such questions
    # Only unanswerable questions, all given text: answering none is best, reported at threshold 0.0.
    result = evaluate({"a": [], "b": []}, {"a": "x", "b": "y"}, {"a": -1.0, "b": -2.0})
    assert (result["exact"], result["best_exact"], result["best_exact_thresh"]) == (0.0, 1.0, 0.0)
    assert math.isnan(result["has_ans_f1"])


def test_evaluate_rejects_missing_predictions():
    with pytest.raises(BadInput, match=r"no prediction for question id 'q4' \(1 of 4 questions lack one"):
        evaluate(GOLD, {k: v for k, v in PREDICTIONS.items() if k != "q4"}, NA)
    with pytest.raises(BadInput, match=r"no na_score for question id 'q1'"):
        evaluate(GOLD, PREDICTIONS, {k: v for k, v in NA.items() if k != "q1"})
    with pytest.raises(BadInput, match=r"at least one gold question"):
        evaluate({}, {}, {})


# --- synthetic data --------------------------------------------------------------------------------

def _pool(split: str) -> set[str]:
    return {w for words in ENTITIES[split].values() for w in words}


def test_synthetic_squad_is_deterministic_and_distinct():
    train = synthetic_squad.generate("train", 150, seed=0)
    assert train == synthetic_squad.generate("train", 150, seed=0)
    assert train["context"] != synthetic_squad.generate("train", 150, seed=1)["context"]
    assert len(set(zip(train["question"], train["context"]))) == 150
    assert len(set(train["id"])) == 150
    with pytest.raises(BadInput, match=r"size must be an integer >= 1, got 0$"):
        synthetic_squad.generate("train", 0)


@pytest.mark.parametrize("split", ["train", "validation"])
def test_synthetic_squad_answers_are_exact_and_a_third_unanswerable(split):
    data = synthetic_squad.generate(split, 300, seed=3)
    assert sum(not texts for texts in data["answer_texts"]) == 100
    objects = set(ENTITIES[split]["objects"])
    for question, context, texts, starts in zip(data["question"], data["context"], data["answer_texts"],
                                                data["answer_starts"]):
        assert len(texts) == len(starts) <= 1
        asked = [w for w in question.split() if w in objects]
        sentences = [s.split() for s in context.split(" .")]
        if texts:
            assert context[starts[0]:starts[0] + len(texts[0])] == texts[0]
            assert texts[0] in _pool(split) | set(DAYS)
            continue
        if question.startswith("who") and len(asked) == 1:  # about an object no sentence mentions
            assert asked[0] not in context.split()
            continue
        # A detail the sentence about the asked object leaves out.
        (sentence,) = [s for s in sentences if asked[0] in s]
        detail = (set(ENTITIES[split]["colours"]) if "colour" in question else
                  set(ENTITIES[split]["cities"]) if question.startswith(("where", "in which")) else set(DAYS))
        assert question.startswith(("what colour", "which colour", "where", "in which", "when", "on which"))
        assert not detail & set(sentence)


def test_synthetic_squad_holds_out_evaluation_vocabulary(tokenizer):
    train, validation = (synthetic_squad.generate(s, 200, seed=0) for s in ("train", "validation"))
    words = {split: {w for text in data["question"] + data["context"] for w in text.split()}
             for split, data in (("train", train), ("validation", validation))}
    assert not words["validation"] & _pool("train")
    assert not words["train"] & _pool("validation")
    features = tokenize_squad(validation, tokenizer, max_length=64, doc_stride=16)
    assert features.num_rows > 240  # over a fifth of the contexts need several windows at max_length 64
