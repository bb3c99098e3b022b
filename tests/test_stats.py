"""The statistics of study tables against hand computation, scipy, and the exact bootstrap distribution."""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats as scipy_stats

from bertology.errors import BadInput
from bertology.results.stats import (
    best_of_runs,
    bootstrap_intervals,
    paired_p_values,
    resample_counts,
    summarize,
)
from bertology.results.tables import LABELS, TABLES, results_key, scan

BY = ["model", "task", "split", "metric"]


def _runs(variant_seed_value, task="rte", metric="accuracy") -> pl.LazyFrame:
    """A runs-like frame: one row per (variant, seed, value) of one (model, task, split, metric) group."""
    rows = [{"model": "m", "task": task, "split": "validation", "metric": metric, "variant": v, "seed": s,
             "value": x, "run_id": f"{v}-{task}-{s}"} for v, s, x in variant_seed_value]
    return pl.LazyFrame(rows, schema_overrides={"value": pl.Float64})


def _rows(variant, seeds, values):
    return [(variant, s, x) for s, x in zip(seeds, values, strict=True)]


def _row(result: pl.DataFrame, variant: str, task: str = "rte") -> dict:
    (row,) = result.filter((pl.col("variant") == variant) & (pl.col("task") == task)).to_dicts()
    return row


def test_mean_sd_n_by_hand_and_null_sd_and_interval_for_one_seed():
    runs = _runs(_rows("a", [0, 1, 2], [0.5, 0.75, 1.0]) + [("b", 3, 0.25)])
    result = summarize(runs, by=BY, baseline=None)
    assert result.columns == [*BY, "variant", "n", "mean", "sd", "ci_low", "ci_high", "p_value", "n_pairs",
                              "baseline_mean", "delta"]
    a, b = _row(result, "a"), _row(result, "b")
    assert (a["n"], a["mean"], a["sd"]) == (3, pytest.approx(0.75, abs=1e-15), pytest.approx(0.25, abs=1e-15))
    # a resample of three values is all 0.5 (or all 1.0) with probability 1/27 > 2.5%: the interval's ends
    assert (a["ci_low"], a["ci_high"]) == (0.5, 1.0)
    assert (b["n"], b["mean"], b["sd"], b["ci_low"], b["ci_high"]) == (1, 0.25, None, None, None)
    assert [a[k] for k in ("p_value", "n_pairs", "baseline_mean", "delta")] == [None] * 4


def test_null_and_nan_values_are_not_results():
    runs = _runs(_rows("a", [0, 1, 2, 3], [0.5, None, float("nan"), 1.0]))
    a = _row(summarize(runs, by=BY, baseline=None), "a")
    assert (a["n"], a["mean"], a["sd"]) == (2, 0.75, pytest.approx(math.sqrt(0.125), abs=1e-15))


def test_paired_p_value_equals_ttest_rel_and_baseline_rows_get_null():
    base, variant = [0.61, 0.66, 0.58, 0.70, 0.64], [0.71, 0.69, 0.70, 0.74, 0.77]
    runs = _runs(_rows("pre-trained", range(5), base) + _rows("reversed", range(5), variant))
    result = summarize(runs, by=BY, baseline="pre-trained")
    rev, pre = _row(result, "reversed"), _row(result, "pre-trained")
    assert rev["p_value"] == pytest.approx(scipy_stats.ttest_rel(variant, base).pvalue, abs=1e-12, rel=0)
    assert rev["n_pairs"] == 5
    assert rev["baseline_mean"] == pytest.approx(np.mean(base), abs=1e-15)
    assert rev["delta"] == pytest.approx(np.mean(variant) - np.mean(base), abs=1e-15)
    assert pre["p_value"] is None and pre["delta"] == 0.0 and pre["n_pairs"] == 5


def test_missing_seeds_pair_only_the_common_seeds():
    base = dict(zip(range(5), [0.61, 0.66, 0.58, 0.70, 0.64], strict=True))
    variant = {1: 0.71, 2: 0.69, 4: 0.80, 7: 0.75}               # seed 7 has no baseline run
    lonely = {4: 0.9, 8: 0.1}                                     # one common seed: no test
    runs = _runs(_rows("base", base, base.values()) + _rows("v", variant, variant.values())
                 + _rows("lonely", lonely, lonely.values()))
    result = summarize(runs, by=BY, baseline="base")
    v = _row(result, "v")
    common = [1, 2, 4]
    expected = scipy_stats.ttest_rel([variant[s] for s in common], [base[s] for s in common]).pvalue
    assert v["p_value"] == pytest.approx(expected, abs=1e-12, rel=0)
    assert (v["n"], v["n_pairs"]) == (4, 3)
    assert v["baseline_mean"] == pytest.approx(np.mean(list(base.values())), abs=1e-15)  # all its seeds
    lone = _row(result, "lonely")
    assert (lone["n_pairs"], lone["p_value"]) == (1, None)


def test_equal_differences_and_groups_without_baseline_get_null_p_value():
    runs = pl.concat([
        _runs(_rows("base", range(3), [0.5, 0.25, 0.75]) + _rows("shifted", range(3), [0.75, 0.5, 1.0])),
        _runs(_rows("shifted", range(3), [0.1, 0.2, 0.4]), task="cola"),   # cola has no baseline run
    ])
    result = summarize(runs, by=BY, baseline="base")
    shifted = _row(result, "shifted")
    assert (shifted["p_value"], shifted["n_pairs"], shifted["delta"]) == (None, 3, 0.25)
    cola = _row(result, "shifted", task="cola")
    assert [cola[k] for k in ("p_value", "n_pairs", "baseline_mean", "delta")] == [None, 0, None, None]


def test_paired_p_values_agree_with_scipy_row_by_row():
    rng = np.random.default_rng(3)
    deltas = rng.normal(0.01, 0.02, size=(40, 6))
    deltas[rng.random(deltas.shape) < 0.2] = np.nan                # unpaired seeds
    deltas[0, :] = [0.1, 0.1, 0.1, np.nan, np.nan, np.nan]         # all equal
    deltas[1, :] = [0.3, np.nan, np.nan, np.nan, np.nan, np.nan]   # one pair
    p = paired_p_values(deltas)
    assert np.isnan(p[:2]).all()
    for row, got in zip(deltas[2:], p[2:], strict=True):
        d = row[~np.isnan(row)]
        if len(d) >= 2:
            assert got == pytest.approx(scipy_stats.ttest_1samp(d, 0.0).pvalue, abs=1e-12, rel=0)
        else:
            assert np.isnan(got)


def _exact_bootstrap_quantile(values: np.ndarray, q: float) -> float:
    """Quantile q of the exact bootstrap distribution of the mean (every resample with its probability)."""
    n = len(values)
    atoms = []
    for picks in itertools.combinations_with_replacement(range(n), n):
        counts = np.bincount(picks, minlength=n)
        probability = math.factorial(n) / math.prod(math.factorial(c) for c in counts) / n ** n
        atoms.append((counts @ values / n, probability))
    atoms.sort()
    cdf = np.cumsum([p for _, p in atoms])
    return atoms[int(np.searchsorted(cdf, q))][0]


def test_bootstrap_interval_agrees_with_scipy_within_monte_carlo_error():
    """Ours and scipy's each take order statistics of B resampled means, so each endpoint lies between
    the exact bootstrap quantiles at q ∓ 4·sqrt(q(1-q)/B) unless its rank strays by more than 4 binomial
    standard deviations (probability < 1e-4; both generators are seeded, so the test is deterministic)."""
    values = np.array([0.812, 0.845, 0.790, 0.881, 0.861])
    n_resamples = 100_000
    runs = _runs(_rows("a", range(5), values))
    ours = _row(summarize(runs, by=BY, baseline=None, n_resamples=n_resamples, seed=7), "a")
    theirs = scipy_stats.bootstrap((values,), np.mean, method="percentile", n_resamples=n_resamples,
                                   confidence_level=0.95, rng=np.random.default_rng(11)).confidence_interval
    for q, got, reference in ((0.025, ours["ci_low"], theirs.low), (0.975, ours["ci_high"], theirs.high)):
        slack = 4 * math.sqrt(q * (1 - q) / n_resamples)
        lo, hi = _exact_bootstrap_quantile(values, q - slack), _exact_bootstrap_quantile(values, q + slack)
        assert lo - 1e-12 <= got <= hi + 1e-12 and lo - 1e-12 <= reference <= hi + 1e-12  # 1e-12: rounding
        assert abs(got - reference) <= hi - lo + 1e-12


@pytest.mark.parametrize("size", [2, 3, 5, 8, 10])
def test_bootstrap_interval_is_the_exact_percentile_of_its_own_resamples(size):
    """The vectorised interval (distinct resamples, pruned to those that can hold the quantile) equals
    np.quantile over every resampled mean of the ascending values, with ties and negative values; n = 8
    and 10 have more distinct resamples than the first pruning pass compares against."""
    rng = np.random.default_rng(size)
    values = np.round(rng.normal(0, 1, size=(30, size)), 1)      # rounding makes ties
    counts, weights = resample_counts(size, 3000, seed=5)
    means = np.sort(values, axis=1) @ np.repeat(counts, weights, axis=0).T / size
    for confidence in (0.95, 0.5):
        low, high = bootstrap_intervals(values, confidence, 3000, seed=5)
        alpha = (1 - confidence) / 2
        expected = np.quantile(means, [alpha, 1 - alpha], axis=1)
        np.testing.assert_allclose(low, expected[0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(high, expected[1], rtol=0, atol=1e-12)


def test_bootstrap_is_deterministic_for_a_seed_whatever_the_row_order_and_other_groups():
    values = [0.31, 0.47, 0.52, 0.38, 0.44, 0.29, 0.61, 0.35, 0.50, 0.42]
    rows = _rows("a", range(10), values)
    alone = _row(summarize(_runs(rows), by=BY, baseline=None, n_resamples=2000, seed=1), "a")
    crowd = _runs(rows[::-1] + _rows("b", range(10), np.linspace(0, 1, 10)))
    shuffled = _row(summarize(crowd, by=BY, baseline=None, n_resamples=2000, seed=1), "a")
    other_seed = _row(summarize(_runs(rows), by=BY, baseline=None, n_resamples=2000, seed=2), "a")
    assert (alone["ci_low"], alone["ci_high"]) == (shuffled["ci_low"], shuffled["ci_high"])
    assert (alone["ci_low"], alone["ci_high"]) != (other_seed["ci_low"], other_seed["ci_high"])


def test_best_of_runs_takes_max_or_min_by_metric_and_the_lowest_seed_on_ties():
    runs = pl.concat([
        _runs(_rows("a", [3, 1, 2], [0.7, 0.9, 0.9])),
        _runs(_rows("a", [0, 1], [12.5, 9.25]), task="mlm", metric="perplexity"),
    ])
    result = best_of_runs(runs, BY)
    assert result.columns == [*BY, "variant", "n", "best", "best_seed"]
    acc, ppl = _row(result, "a"), _row(result, "a", task="mlm")
    assert (acc["n"], acc["best"], acc["best_seed"]) == (3, 0.9, 1)
    assert (ppl["n"], ppl["best"], ppl["best_seed"]) == (2, 9.25, 1)


def test_summarize_reads_hive_partitioned_runs_with_the_real_schema(tmp_path):
    """Through `scan`: a null `fraction` (count-based subsets) still pairs with its baseline."""
    schema = pa.schema(list(LABELS) + list(TABLES["runs"]))
    base, variant = [0.60, 0.65, 0.62], [0.50, 0.58, 0.49]
    for name, values in (("pre-trained", base), ("reinit", variant)):
        for seed, value in enumerate(values):
            run_id = f"{name}-{seed}"
            row = {f.name: None for f in schema} | {
                "schema_version": 1, "study": "toy", "variant": name, "model": "m", "task": "rte",
                "source": "synthetic", "fraction": None, "count": 100, "seed": seed, "run_id": run_id,
                "split": "validation", "metric": "accuracy", "value": value, "primary": True}
            path = tmp_path / results_key("runs", "toy", run_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist([row], schema=schema), path)
    result = summarize(scan(str(tmp_path), "runs"), by=["study", "model", "task", "fraction", "count", "split",
                                                         "metric"], baseline="pre-trained")
    assert result["variant"].sort().to_list() == ["pre-trained", "reinit"]
    reinit = result.filter(pl.col("variant") == "reinit").row(0, named=True)
    assert reinit["p_value"] == pytest.approx(scipy_stats.ttest_rel(variant, base).pvalue, abs=1e-12, rel=0)


def test_a_repeated_seed_names_its_group():
    runs = _runs(_rows("a", [0, 0], [0.5, 0.6]))
    with pytest.raises(BadInput, match=r"group \(model='m', task='rte', split='validation', metric='accuracy', "
                                       r"variant='a'\) has 2 rows for 1 seeds; add the column"):
        summarize(runs, by=BY, baseline=None)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"by": ["model", "seed"]}, r"by column 'seed' is not a label column of the runs table \(allowed: model, "),
    ({"by": ["model", "nope"]}, r"by column 'nope' is not a label column"),
    ({"by": "model"}, r"by must be a list of column names, got the string 'model'"),
    ({"by": ["model", "model"]}, r"by \['model', 'model'\] names a column twice"),
    ({"confidence": 1.5}, r"confidence 1.5 is outside \(0, 1\)"),
    ({"n_resamples": 0}, r"n_resamples must be an integer of at least 1 \(e.g. 10000\), got 0$"),
    ({"n_resamples": 1e4}, r"n_resamples must be an integer of at least 1 \(e.g. 10000\), got 10000.0$"),
    ({"baseline": "nope"}, r"baseline variant 'nope' has no results \(variants: a\)"),
])
def test_bad_arguments_are_bad_input(kwargs, message):
    runs = _runs(_rows("a", [0, 1], [0.5, 0.6]))
    with pytest.raises(BadInput, match=message):
        summarize(runs, **({"by": BY, "baseline": None} | kwargs))
