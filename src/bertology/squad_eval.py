"""The official SQuAD 2.0 evaluation (the logic of evaluate-v2.0.py), as fractions in [0, 1].

Reimplemented rather than vendored so it takes dicts instead of files; every rule is the official one,
quirks included, so numbers compare with published SQuAD 2.0 results: answers are compared after
normalisation (lower case, no punctuation, no articles, single spaces); a question's score is the best
over its gold answers; gold answers that normalise to "" are dropped, and an unanswerable question's only
gold answer is ""; a prediction counts as "no answer" when its na_score exceeds the threshold.

HasAns/NoAns scores over an empty set of questions are NaN: the keys are always there (one schema for the
metrics table), and 0.0 would read as a score.
"""

from __future__ import annotations

import collections
import re
import string

import numpy as np

from bertology.errors import BadInput

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def compute_exact(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def compute_f1(gold: str, prediction: str) -> float:
    """Token-overlap F1 of the normalised answers; 1 if both are empty, 0 if only one is."""
    gold_tokens, pred_tokens = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if not gold_tokens or not pred_tokens:
        return float(gold_tokens == pred_tokens)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def apply_no_ans_threshold(scores: dict[str, float], na_scores: dict[str, float], has_answer: dict[str, bool],
                           threshold: float) -> dict[str, float]:
    """Scores with "no answer" predicted where na_score > threshold: then 1 for an unanswerable question,
    0 for an answerable one."""
    return {qid: float(not has_answer[qid]) if na_scores[qid] > threshold else score
            for qid, score in scores.items()}


def find_best_thresh(predictions: dict[str, str], scores: dict[str, float], na_scores: dict[str, float],
                     has_answer: dict[str, bool]) -> tuple[float, float]:
    """(best score, its threshold) over thresholds at each question's na_score, as the official script
    finds them: start from "no answer everywhere" (threshold reported as 0.0), then answer questions in
    increasing na_score order, keeping the first threshold that reaches the best total."""
    score = best = sum(not has for has in has_answer.values())
    best_thresh = 0.0
    for qid in sorted(na_scores, key=na_scores.__getitem__):
        if qid not in scores:
            continue
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best:
            best, best_thresh = score, na_scores[qid]
    return best / len(scores), best_thresh


def evaluate(gold: dict[str, list[str]], predictions: dict[str, str], na_scores: dict[str, float],
             threshold: float = 0.0) -> dict[str, float]:
    """exact, f1 (overall, HasAns, NoAns) at `threshold`, and best_exact/best_f1 with their thresholds.

    `gold` maps each question id to its answer texts ([] = unanswerable); `na_scores` are "higher = more
    likely unanswerable" (postprocess's null - best span score). Predictions for ids not in `gold` are ignored.
    """
    if not gold:
        raise BadInput("SQuAD evaluation needs at least one gold question, got none")
    for name, given in (("prediction", predictions), ("na_score", na_scores)):
        missing = [qid for qid in gold if qid not in given]
        if missing:
            raise BadInput(f"no {name} for question id {missing[0]!r} ({len(missing)} of {len(gold)} "
                           f"questions lack one; expected one per gold id)")
    has_answer = {qid: bool(answers) for qid, answers in gold.items()}
    exact, f1 = {}, {}
    for qid, answers in gold.items():
        answers = [a for a in answers if normalize_answer(a)] or [""]
        exact[qid] = max(compute_exact(a, predictions[qid]) for a in answers)
        f1[qid] = max(compute_f1(a, predictions[qid]) for a in answers)
    na = {qid: float(na_scores[qid]) for qid in gold}
    exact_at = apply_no_ans_threshold(exact, na, has_answer, threshold)
    f1_at = apply_no_ans_threshold(f1, na, has_answer, threshold)
    preds = {qid: predictions[qid] for qid in gold}
    best_exact, best_exact_thresh = find_best_thresh(preds, exact, na, has_answer)
    best_f1, best_f1_thresh = find_best_thresh(preds, f1, na, has_answer)
    result = {"exact": _mean(exact_at.values()), "f1": _mean(f1_at.values())}
    for prefix, wanted in (("has_ans", True), ("no_ans", False)):
        ids = [qid for qid, has in has_answer.items() if has == wanted]
        result[f"{prefix}_exact"] = _mean(exact_at[qid] for qid in ids)
        result[f"{prefix}_f1"] = _mean(f1_at[qid] for qid in ids)
    return {**result, "best_exact": best_exact, "best_exact_thresh": best_exact_thresh,
            "best_f1": best_f1, "best_f1_thresh": best_f1_thresh}


def _mean(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else float("nan")
