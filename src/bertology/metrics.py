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
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertology.errors import BadInput

METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": lambda y, p: accuracy_score(y, p),
    "f1": lambda y, p: f1_score(y, p, average="binary", pos_label=1, zero_division=0.0),
    "matthews_corrcoef": lambda y, p: matthews_corrcoef(y, p),
    "pearson": lambda y, p: _correlation(pearsonr, y, p),
    "spearman": lambda y, p: _correlation(spearmanr, y, p),
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
        raise BadInput(f"unknown metric {unknown[0]!r} (known: {', '.join(sorted(METRICS))})")
    return {name: float(METRICS[name](labels, predictions)) for name in metric_names}
