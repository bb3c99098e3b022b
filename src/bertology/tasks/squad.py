"""SQuAD 2.0: reading examples, cutting them into model-sized features, and mapping logits back to answers.

Examples are columns (a dict of lists or a pyarrow Table): id, title, question, context, answer_texts and
answer_starts (char offsets into context; an empty list means unanswerable). A context longer than the
model's window becomes several overlapping features (HF's sliding window), so training and evaluation work
on features while SQuAD's metrics are per example: `postprocess` joins them back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bertology.errors import BadInput

COLUMNS = ("id", "title", "question", "context", "answer_texts", "answer_starts")
FEATURE_SCHEMA = pa.schema([
    ("example_idx", pa.int64()),  # the example's row
    ("input_ids", pa.list_(pa.int32())),
    ("token_type_ids", pa.list_(pa.int8())),
    ("start_positions", pa.int32()),
    ("end_positions", pa.int32()),
    ("offset_start", pa.list_(pa.int32())),
    ("offset_end", pa.list_(pa.int32())),
    ("length", pa.int32()),
])
HUB_COLUMNS = ("id", "title", "context", "question", "answers")

_TOKENIZE_CHUNK = 2_000  # examples per tokenizer call: bounds the Python lists a huge split needs at once


def read_squad_json(path: str | Path) -> dict[str, list]:
    """Examples from a file in the official SQuAD layout (v2.0; v1.1 files, without is_impossible, too).

    An answer whose text differs from context[start:start+len(text)] is kept: the official data has a few,
    and the evaluation compares texts, not offsets.
    """
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{path}: file not found (expected a SQuAD JSON file)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: not JSON ({e}) (expected the SQuAD layout "
                       '{"version": ..., "data": [...]})') from None
    columns: dict[str, list] = {name: [] for name in COLUMNS}
    seen: set[str] = set()
    for i, article in enumerate(_field(document, "data", list, path, "top level")):
        title = _field(article, "title", str, path, f"data[{i}]")
        for j, paragraph in enumerate(_field(article, "paragraphs", list, path, f"data[{i}]")):
            where = f"data[{i}].paragraphs[{j}]"
            context = _field(paragraph, "context", str, path, where)
            for k, qa in enumerate(_field(paragraph, "qas", list, path, where)):
                qid = _field(qa, "id", str, path, f"{where}.qas[{k}]")
                if qid in seen:
                    raise BadInput(f"{path}: {where}.qas[{k}]: duplicate question id {qid!r} (ids must be unique)")
                seen.add(qid)
                question = _field(qa, "question", str, path, f"{where}.qas[{k}] (id {qid})")
                texts, starts = _answers(qa, path, f"{where}.qas[{k}] (id {qid})")
                for name, value in zip(COLUMNS, (qid, title, question, context, texts, starts)):
                    columns[name].append(value)
    return columns


def _answers(qa: dict, path: Path, where: str) -> tuple[list[str], list[int]]:
    """A question's answer texts and char offsets; both empty when it is unanswerable (is_impossible)."""
    answers = _field(qa, "answers", list, path, where)
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise BadInput(f"{path}: {where}: 'is_impossible' is {impossible!r} (expected true or false)")
    if impossible and answers:
        raise BadInput(f"{path}: {where}: is_impossible is true but 'answers' is not empty "
                       "(expected [] for an unanswerable question)")
    if not impossible and not answers:
        raise BadInput(f"{path}: {where}: 'answers' is empty (expected at least one answer, "
                       "or is_impossible: true)")
    texts, starts = [], []
    for n, answer in enumerate(answers):
        texts.append(_field(answer, "text", str, path, f"{where}.answers[{n}]"))
        starts.append(_field(answer, "answer_start", int, path, f"{where}.answers[{n}]"))
        if starts[-1] < 0:
            raise BadInput(f"{path}: {where}.answers[{n}]: answer_start {starts[-1]} is negative "
                           "(expected a char offset into the context)")
    return texts, starts


def _field(obj, key: str, kind: type, path: Path, where: str):
    """obj[key], checked to be of `kind`; BadInput naming the key and where it is missing or wrong."""
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: {where}: is {type(obj).__name__} (expected an object with key {key!r})")
    if key not in obj:
        raise BadInput(f"{path}: {where}: missing key {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadInput(f"{path}: {where}: {key!r} is {type(value).__name__} (expected {kind.__name__})")
    return value


def from_hub(table: pa.Table) -> dict[str, list]:
    """Examples from rows of the hub dataset rajpurkar/squad_v2 (answers = {text: [...], answer_start: [...]})."""
    missing = [name for name in HUB_COLUMNS if name not in table.column_names]
    if missing:
        raise BadInput(f"SQuAD hub table lacks column {missing[0]!r} (expected columns {', '.join(HUB_COLUMNS)})")
    answers = table.column("answers")
    if not pa.types.is_struct(answers.type) or not {"text", "answer_start"} <= set(answers.type.names):
        raise BadInput(f"SQuAD hub column 'answers' has type {answers.type} "
                       "(expected struct<text: list<string>, answer_start: list<int>>)")
    return {
        **{name: table.column(name).to_pylist() for name in ("id", "title", "question", "context")},
        "answer_texts": pc.struct_field(answers, "text").to_pylist(),
        "answer_starts": pc.struct_field(answers, "answer_start").cast(pa.list_(pa.int64())).to_pylist(),
    }


def tokenize_squad(examples: Mapping[str, list] | pa.Table, tokenizer, max_length: int, doc_stride: int,
                   max_query_length: int = 64) -> pa.Table:
    """One row per feature (a window of one example's context), in example order; see FEATURE_SCHEMA.

    Questions are left-stripped (some SQuAD questions start with many spaces, which would waste the window)
    and cut to `max_query_length` tokens; each window must still have room for `doc_stride` + 1 context
    tokens (else BadInput naming the example; checked per question, so short questions fit small windows
    whatever max_query_length is). Consecutive windows of one context overlap by `doc_stride` tokens.
    start/end_positions are the token span of the first answer, or 0 and 0 (the CLS token, "no answer")
    when there is none or it is not wholly inside the window. offset_start/offset_end are each context token's char span in the context,
    -1 for question and special tokens, so a predicted span maps back to text without re-tokenizing.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise BadInput(f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer (SQuAD features need "
                       "offset mappings, which only a Rust-backed PreTrainedTokenizerFast gives)")
    for name, value in (("max_length", max_length), ("doc_stride", doc_stride),
                        ("max_query_length", max_query_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "doc_stride" else 1):
            raise BadInput(f"{name} must be an integer >= {0 if name == 'doc_stride' else 1}, got {value!r}")
    room = max_length - doc_stride - tokenizer.num_special_tokens_to_add(pair=True)  # question + new context
    if room < 1:
        raise BadInput(f"doc_stride {doc_stride} leaves no new context tokens in a window of max_length "
                       f"{max_length}: it must be < max_length - special tokens - question tokens")
    batches = [_tokenize_chunk(chunk, offset, tokenizer, max_length, doc_stride, max_query_length, room)
               for offset, chunk in _chunks(examples, ("question", "context", "answer_texts", "answer_starts"))]
    if not batches:
        return FEATURE_SCHEMA.empty_table()
    return pa.Table.from_batches(batches)


def _chunks(examples: Mapping[str, list] | pa.Table, needed: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """(row offset, columns as lists) of at most _TOKENIZE_CHUNK examples at a time."""
    names = examples.column_names if isinstance(examples, pa.Table) else list(examples)
    missing = [name for name in needed if name not in names]
    if missing:
        raise BadInput(f"SQuAD examples lack column {missing[0]!r} (expected columns {', '.join(COLUMNS)})")
    n = _num_examples(examples, needed)
    for start in range(0, n, _TOKENIZE_CHUNK):
        if isinstance(examples, pa.Table):
            yield start, examples.select(list(needed)).slice(start, _TOKENIZE_CHUNK).to_pydict()
        else:
            yield start, {name: list(examples[name][start:start + _TOKENIZE_CHUNK]) for name in needed}


def _num_examples(examples: Mapping[str, list] | pa.Table, needed: tuple[str, ...]) -> int:
    if isinstance(examples, pa.Table):
        return examples.num_rows
    sizes = {name: len(examples[name]) for name in needed}
    if len(set(sizes.values())) > 1:
        raise BadInput(f"SQuAD example columns differ in length: {sizes} (expected one value per example)")
    return next(iter(sizes.values()))


def _tokenize_chunk(chunk: dict[str, list], offset: int, tokenizer, max_length: int, doc_stride: int,
                    max_query_length: int, room: int) -> pa.RecordBatch:
    questions, question_lengths = _truncate_questions([q.lstrip() for q in chunk["question"]], tokenizer,
                                                      max_query_length)
    too_long = np.flatnonzero(question_lengths >= room)
    if len(too_long):
        i = int(too_long[0])
        raise BadInput(f"question of example row {offset + i} has {question_lengths[i]} tokens (after "
                       f"truncation to max_query_length {max_query_length}), which leaves no new context tokens "
                       f"per window: with max_length {max_length} and doc_stride {doc_stride} it must be < {room}")
    enc = tokenizer(questions, chunk["context"], truncation="only_second", max_length=max_length,
                    stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True,
                    return_token_type_ids=True, return_attention_mask=False, padding=False)
    lengths = np.array([len(ids) for ids in enc["input_ids"]], dtype=np.int32)
    n_features, n_tokens = len(lengths), int(lengths.sum())
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    feature = np.repeat(np.arange(n_features), lengths)  # each token's feature
    is_context = np.fromiter((s == 1 for e in enc.encodings for s in e.sequence_ids), bool, n_tokens)
    spans = np.array([span for spans in enc["offset_mapping"] for span in spans], np.int32).reshape(-1, 2)
    starts, ends = np.where(is_context, spans[:, 0], -1), np.where(is_context, spans[:, 1], -1)

    example = np.asarray(enc["overflow_to_sample_mapping"], dtype=np.int64)
    start_positions, end_positions = _answer_positions(chunk, example, feature, bounds, is_context, starts, ends)

    def lists(values: np.ndarray, kind: pa.DataType) -> pa.ListArray:
        return pa.ListArray.from_arrays(pa.array(bounds), pa.array(values, type=kind))

    ids = np.fromiter((t for ids in enc["input_ids"] for t in ids), np.int32, n_tokens)
    types = np.fromiter((t for types in enc["token_type_ids"] for t in types), np.int8, n_tokens)
    return pa.RecordBatch.from_arrays([
        pa.array(example + offset), lists(ids, pa.int32()), lists(types, pa.int8()),
        pa.array(start_positions, pa.int32()), pa.array(end_positions, pa.int32()),
        lists(starts, pa.int32()), lists(ends, pa.int32()), pa.array(lengths),
    ], schema=FEATURE_SCHEMA)


def _truncate_questions(questions: list[str], tokenizer, max_query_length: int) -> tuple[list[str], np.ndarray]:
    """Each question cut after its `max_query_length`-th token, and its token count (wordpiece re-tokenizes
    a prefix that ends at a token boundary into the same tokens, so the cut question has exactly that many)."""
    enc = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True,
                    return_attention_mask=False, return_token_type_ids=False)
    cut = [q if len(spans) <= max_query_length else q[:spans[max_query_length - 1][1]]
           for q, spans in zip(questions, enc["offset_mapping"])]
    return cut, np.array([min(len(spans), max_query_length) for spans in enc["offset_mapping"]], np.int64)


def _answer_positions(chunk: dict[str, list], example: np.ndarray, feature: np.ndarray, bounds: np.ndarray,
                      is_context: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
    """Token span of each feature's first answer, (0, 0) where it is absent or not wholly in the window.

    A window's context tokens are one contiguous run with increasing offsets, so the answer's first token
    is the last context token starting at or before the answer's first char, and its last token the first
    context token ending at or after the answer's end: both are counts of context tokens, per feature.
    """
    n_features = len(example)
    has_answer = np.array([len(texts) > 0 for texts in chunk["answer_texts"]])[example]
    char_start = np.array([s[0] if s else 0 for s in chunk["answer_starts"]], np.int64)[example]
    char_end = char_start + np.array([len(t[0]) if t else 0 for t in chunk["answer_texts"]], np.int64)[example]

    def count(mask: np.ndarray) -> np.ndarray:  # per feature, how many of its tokens are in `mask`
        return np.bincount(feature[mask], minlength=n_features)

    n_context = count(is_context)
    n_starting_before = count(is_context & (starts <= char_start[feature]))
    n_ending_before = count(is_context & (ends < char_end[feature]))
    run_starts = np.flatnonzero(is_context & ~np.concatenate([[False], is_context[:-1]]))
    first_context = np.zeros(n_features, np.int64)
    first_context[feature[run_starts]] = run_starts - bounds[feature[run_starts]]
    start = first_context + n_starting_before - 1
    end = first_context + n_ending_before
    inside = has_answer & (n_starting_before > 0) & (n_ending_before < n_context) & (start <= end)
    return np.where(inside, start, 0), np.where(inside, end, 0)


def postprocess(examples: Mapping[str, list] | pa.Table, features: pa.Table, start_logits: np.ndarray,
                end_logits: np.ndarray, *, n_best: int = 20,
                max_answer_length: int = 30) -> tuple[dict[str, str], dict[str, float]]:
    """(predictions, na_scores) by example id, from per-feature logits aligned with `features` rows.

    The best non-null span of an example is the highest start+end logit over all its features, among the
    `n_best` best start and `n_best` best end tokens of each feature that are context tokens (start <= end,
    at most `max_answer_length` tokens). Restricting to context tokens before taking the top n_best (HF
    takes them over all positions, then drops the invalid) can only find a better valid span. The null
    score is the smallest CLS score (start[0] + end[0]) over the example's features, as in the official
    BERT code; na_score = null score - best span score, +inf when no feature has a context token.
    """
    for name, value in (("n_best", n_best), ("max_answer_length", max_answer_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadInput(f"{name} must be an integer >= 1, got {value!r}")
    missing = [name for name in ("example_idx", "offset_start", "offset_end", "length")
               if name not in features.column_names]
    if missing:
        raise BadInput(f"SQuAD features lack column {missing[0]!r} (expected the columns tokenize_squad writes)")
    n_features = features.num_rows
    lengths = features.column("length").to_numpy()
    width = int(lengths.max()) if n_features else 0
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    for name, logits in (("start_logits", start_logits), ("end_logits", end_logits)):
        if logits.ndim != 2 or logits.shape[0] != n_features or logits.shape[1] < width:
            raise BadInput(f"{name} has shape {logits.shape} (expected ({n_features}, >= {width}): one row "
                           "per feature, at least as wide as the longest feature)")
    columns = _columns(examples, ("id", "context"))
    example_idx = features.column("example_idx").to_numpy()
    if n_features and (example_idx.min() < 0 or example_idx.max() >= len(columns["id"])):
        raise BadInput(f"features refer to example row {int(example_idx.max())} but there are "
                       f"{len(columns['id'])} examples (expected the examples the features were made from)")
    without = sorted(set(range(len(columns["id"]))) - set(example_idx.tolist()))
    if without:
        raise BadInput(f"example {columns['id'][without[0]]!r} has no features (expected features for every "
                       "example)")
    if not n_features:
        return {}, {}

    width = start_logits.shape[1]
    span_starts = _padded(features.column("offset_start"), width)
    span_ends = _padded(features.column("offset_end"), width)
    valid = span_starts >= 0
    best_score, best_start, best_end = _best_spans(np.where(valid, start_logits, -np.inf),
                                                   np.where(valid, end_logits, -np.inf), n_best,
                                                   max_answer_length)
    null_score = start_logits[:, 0] + end_logits[:, 0]

    # Per example: the feature with the best span (ties: the first), and the smallest null score.
    order = np.lexsort((-best_score, example_idx))
    first = np.flatnonzero(np.r_[True, np.diff(example_idx[order]) != 0])
    best_feature = order[first]
    by_example = np.argsort(example_idx, kind="stable")
    null_by_example = np.minimum.reduceat(null_score[by_example], first)

    predictions: dict[str, str] = {}
    na_scores: dict[str, float] = {}
    for f, null in zip(best_feature.tolist(), null_by_example.tolist()):
        e = int(example_idx[f])
        qid, context, score = columns["id"][e], columns["context"][e], float(best_score[f])
        if np.isfinite(score):
            predictions[qid] = context[span_starts[f, best_start[f]]:span_ends[f, best_end[f]]]
            na_scores[qid] = null - score
        else:
            predictions[qid], na_scores[qid] = "", float("inf")
    return predictions, na_scores


def _columns(examples: Mapping[str, list] | pa.Table, needed: tuple[str, ...]) -> dict[str, list]:
    return {name: [value for _, chunk in _chunks(examples, needed) for value in chunk[name]] for name in needed}


def _padded(column: pa.ChunkedArray, width: int) -> np.ndarray:
    """A list<int> column as a (rows, width) array, -1 past each row's end."""
    column = column.combine_chunks()
    out = np.full((len(column), width), -1, np.int64)
    rows = pc.list_parent_indices(column).to_numpy()
    bounds = column.offsets.to_numpy()
    out[rows, np.arange(len(rows)) - (bounds[rows] - bounds[0])] = column.flatten().to_numpy()
    return out


def _best_spans(start: np.ndarray, end: np.ndarray, n_best: int,
                max_answer_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: (score, start token, end token) of the best span among the top n_best starts x ends;
    score -inf where there is none (masked positions hold -inf)."""
    k = min(n_best, start.shape[1])
    rows = np.arange(len(start))
    top_starts = np.argpartition(-start, k - 1, axis=1)[:, :k]
    top_ends = np.argpartition(-end, k - 1, axis=1)[:, :k]
    scores = start[rows[:, None], top_starts][:, :, None] + end[rows[:, None], top_ends][:, None, :]
    span = top_ends[:, None, :] - top_starts[:, :, None]
    scores = np.where((span >= 0) & (span < max_answer_length), scores, -np.inf).reshape(len(start), -1)
    best = scores.argmax(axis=1)
    return scores[rows, best], top_starts[rows, best // k], top_ends[rows, best % k]
