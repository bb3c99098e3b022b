"""The GLUE metrics against values computed by hand, and the reports' degenerate rows they reproduce."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from bertology import metrics
from bertology.errors import BadInput
from bertology.tasks import TASKS


def test_accuracy_f1_mcc_balanced():
    # TP 3, FN 1, FP 1, TN 3
    y, p = [1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 1, 0]
    got = metrics.compute(["accuracy", "f1", "matthews_corrcoef"], y, p)
    assert got["accuracy"] == pytest.approx(6 / 8)
    assert got["f1"] == pytest.approx(0.75)  # precision 3/4, recall 3/4
    assert got["matthews_corrcoef"] == pytest.approx((3 * 3 - 1 * 1) / math.sqrt(4 * 4 * 4 * 4))  # 0.5
    assert all(type(v) is float for v in got.values())


def test_f1_and_mcc_imbalanced():
    # TP 5, FN 1, FP 2, TN 2: F1 = 2TP / (2TP + FP + FN); MCC = (TP TN - FP FN) / sqrt(products of margins)
    y, p = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 1, 1, 0, 0]
    got = metrics.compute(["f1", "matthews_corrcoef", "accuracy"], y, p)
    assert got["f1"] == pytest.approx(10 / 13)
    assert got["matthews_corrcoef"] == pytest.approx(8 / math.sqrt(7 * 6 * 4 * 3))  # 0.3563…
    assert got["accuracy"] == pytest.approx(0.7)
    # F1 is of class 1 (GLUE's "equivalent" / "duplicate"), not of class 0
    flipped = metrics.compute(["f1"], 1 - np.array(y), 1 - np.array(p))["f1"]
    assert flipped == pytest.approx(2 * 2 / (2 * 2 + 1 + 2))


def test_pearson_and_spearman_textbook():
    x, y = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 5.0, 4.0, 5.0]
    got = metrics.compute(["pearson", "spearman"], x, y)
    assert got["pearson"] == pytest.approx(6 / math.sqrt(10 * 6))  # 0.7746: Σdxdy = 6, Σdx² = 10, Σdy² = 6
    # ties get mean ranks: y ranks 1, 2.5, 4.5, 2.5, 4.5 -> Pearson of the ranks = 7 / sqrt(10 * 9)
    assert got["spearman"] == pytest.approx(7 / math.sqrt(90))
    # without ties Spearman is 1 - 6 Σd² / (n (n² - 1)): ranks 1 2 3 5 4 -> 1 - 12/120
    assert metrics.compute(["spearman"], x, [5.0, 6.0, 7.0, 8.0, 7.5])["spearman"] == pytest.approx(0.9)
    # a monotone but non-linear relation: Spearman 1, Pearson below
    corr = metrics.compute(["pearson", "spearman"], [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 100.0])
    assert corr["spearman"] == pytest.approx(1.0) and 0.7 < corr["pearson"] < 0.9


def test_three_classes_accuracy():
    got = metrics.compute(["accuracy"], [0, 1, 2, 2, 1, 0], [0, 2, 2, 2, 1, 1])
    assert got["accuracy"] == pytest.approx(4 / 6)


def test_degenerate_predictions_score_zero_not_nan():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's ConstantInputWarning would be an error here
        got = metrics.compute(["pearson", "spearman"], [0.5, 3.0, 4.2, 1.0], [2.5, 2.5, 2.5, 2.5])
        assert got == {"pearson": 0.0, "spearman": 0.0}
        assert metrics.compute(["pearson"], [1.0, 1.0, 1.0], [0.1, 0.7, 0.3]) == {"pearson": 0.0}
        constant = metrics.compute(["matthews_corrcoef", "f1"], [1, 0, 1, 0], [0, 0, 0, 0])
        assert constant == {"matthews_corrcoef": 0.0, "f1": 0.0}


@pytest.mark.parametrize("positives,total,reported", [(279, 408, 0.81), (14885, 40430, 0.54)])
def test_f1_of_always_one_reproduces_the_reports_clean_rows(positives, total, reported):
    """Monolingual report, Table 1, "clean" column: MRPC 0.81 and QQP 0.54 are the F1 of predicting 1
    everywhere on their dev sets (accuracy would be 0.68 and 0.63): the table prints F1 for both."""
    labels = np.array([1] * positives + [0] * (total - positives))
    got = metrics.compute(["f1", "accuracy"], labels, np.ones_like(labels))
    assert round(got["f1"], 2) == reported
    assert round(got["accuracy"], 2) != reported
    assert TASKS["mrpc"].primary_metric == TASKS["qqp"].primary_metric == "f1"


def test_metrics_reject_bad_input():
    with pytest.raises(BadInput, match="unknown metric 'auc'"):
        metrics.compute(["auc"], [0, 1], [0, 1])
    with pytest.raises(BadInput, match="equal-length"):
        metrics.compute(["accuracy"], [0, 1], [0])
    with pytest.raises(BadInput, match="non-empty"):
        metrics.compute(["accuracy"], [], [])
