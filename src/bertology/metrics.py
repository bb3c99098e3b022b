"""The evaluation metrics the GLUE tasks report, by the names the task registry uses.

All are "higher is better". F1 is binary F1 of class 1, the GLUE convention for MRPC and QQP; Pearson and
Spearman are STS-B's (regression) correlations. Degenerate predictions score 0.0, never NaN: sklearn's MCC
already does so for a constant classifier, and the correlations follow (a model that predicts one value
for every pair, as a collapsed "clean" model does, shows no correlation), so a best epoch can always be
picked and a table's mean stays defined.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from bertology.errors import BadInput
from bertology.errors import unknown as unknown_name

# scikit-learn and SciPy are imported where a metric is computed, not where the task registry names one.


def _accuracy(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import accuracy_score

    return accuracy_score(y, p)


def _f1(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    return f1_score(y, p, average="binary", pos_label=1, zero_division=0.0)


def _matthews(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import matthews_corrcoef

    return matthews_corrcoef(y, p)


def _pearson(y: np.ndarray, p: np.ndarray) -> float:
    from scipy.stats import pearsonr

    return _correlation(pearsonr, y, p)


def _spearman(y: np.ndarray, p: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return _correlation(spearmanr, y, p)


METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": _accuracy, "f1": _f1, "matthews_corrcoef": _matthews, "pearson": _pearson, "spearman": _spearman,
}


def _correlation(statistic, y: np.ndarray, p: np.ndarray) -> float:
    """0.0 where either side is constant (scipy would warn and return NaN)."""
    if np.ptp(y) == 0 or np.ptp(p) == 0:
        return 0.0
    return statistic(y, p).statistic


def compute(metric_names: Sequence[str], labels, predictions) -> dict[str, float]:
    """{name: value} for each metric in `metric_names`, as plain Python floats."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape or labels.ndim != 1 or len(labels) == 0:
        raise BadInput(f"labels and predictions must be equal-length non-empty vectors, "
                       f"got shapes {labels.shape} and {predictions.shape}")
    unknown = [m for m in metric_names if m not in METRICS]
    if unknown:
        raise unknown_name("metric", unknown[0], sorted(METRICS))
    return {name: float(METRICS[name](labels, predictions)) for name in metric_names}
