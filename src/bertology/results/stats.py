"""The numbers a study table prints for each group of runs that differ only in their training seed.

A group is one (`by` columns…, variant) combination of the `runs` table, e.g. (model, task, split, metric,
variant); it holds one value per seed. `summarize` gives mean, sample sd and n, a percentile bootstrap
interval of the mean, and a paired t-test of each variant against the unmodified model (`baseline`) on the
seeds both ran; `best_of_runs` gives the monolingual report's "best epoch of the best run".

Everything is vectorised over all groups at once, because a store holds every study's runs: 10^6 rows of
5 seeds per group take about 0.6 CPU seconds, under 1 s on two cores (bench/aggregate_scale.py). One Polars
pass groups the rows and lays each group's values out by seed (a groups × seeds matrix, NaN where a seed is
missing), so pairing with the baseline is aligning two rows of that matrix. The bootstrap never loops over
groups either: a resample of n values is a vector of multinomial counts, and all groups of the same n share
the same `n_resamples` count vectors (common random numbers: each group's interval is still an exact Monte
Carlo percentile interval, only the Monte Carlo errors of different groups are correlated). Count vectors
repeat, so each is evaluated once, weighted by how often it was drawn, and only if it can hold the
interval's order statistic for some sample (`_could_be_order_statistic`): per group and interval end that
is 1 vector for n = 3, about 15 for n = 5, 600 for n = 8 and 1,500 for n = 10 of 10,000 resamples, which
is what the cost grows with.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy import special

from bertology.errors import BadInput, choices
from bertology.tasks.registry import LOWER_IS_BETTER

# The fewest runs a bootstrap interval is given for: the percentile interval of two runs' mean is the two
# runs themselves, which reads as a confidence interval and is none.
MIN_INTERVAL_RUNS = 3
# Columns a group is made of besides `by`; they cannot be grouping columns themselves.
OWN = ("variant", "seed", "value")


def summarize(runs: pl.LazyFrame, *, by: Sequence[str], baseline: str | None, confidence: float = 0.95,
              n_resamples: int = 10_000, seed: int = 0) -> pl.DataFrame:
    """One row per (*by, variant): n, mean, sd, ci_low, ci_high, p_value, n_pairs, baseline_mean, delta.

    - n, mean and sd (ddof 1, null for n = 1) of `value` over the group's seeds; a row without a number
      (null or NaN) is not a result, so a failed run shows as a smaller n, never as a NaN mean.
    - ci_low, ci_high: the `confidence` percentile bootstrap interval of the mean from `n_resamples`
      resamples (as scipy.stats.bootstrap(method="percentile")), reproducible for a `seed`; null for n <
      MIN_INTERVAL_RUNS (3): of two runs, the percentile interval is the two runs themselves.
    - p_value: two-sided paired t-test (scipy.stats.ttest_rel) of the variant against the `baseline`
      variant of the same `by` group, pairing runs by seed, on the n_pairs seeds both have (0 without a
      baseline group). Null for the baseline itself, for fewer than 2 pairs, and when all paired
      differences are equal: the test's standard error is then 0 and t is 0/0 or ±inf, which says nothing
      about a difference.
    - baseline_mean: the baseline's mean in the same `by` group (all its seeds, as its own row shows);
      delta = mean - baseline_mean. Both null where the group has no baseline, all four without one.
    Rows come in the order their groups first appear in `runs`. Each seed must appear once per group:
    BadInput names a group where it does not (a `by` column is missing, e.g. study or metric).
    """
    if not 0 < confidence < 1:
        raise BadInput(f"confidence {confidence!r} is outside (0, 1) (e.g. 0.95)")
    if not isinstance(n_resamples, int) or n_resamples < 1:
        raise BadInput(f"n_resamples must be an integer of at least 1 (e.g. 10000), got {n_resamples!r}")
    groups, _, values = _groups(runs, by, pl.col("value").mean().alias("mean"), pl.col("value").std().alias("sd"))
    low, high = bootstrap_intervals(values, confidence, n_resamples, seed)
    few = np.sum(~np.isnan(values), axis=1) < MIN_INTERVAL_RUNS
    low[few], high[few] = np.nan, np.nan
    stats = groups.select(*by, "variant", "n", "mean", "sd").with_columns(
        pl.Series("ci_low", low).fill_nan(None), pl.Series("ci_high", high).fill_nan(None))
    return stats.with_columns(_versus_baseline(stats, values, list(by), baseline))


def best_of_runs(runs: pl.LazyFrame, by: Sequence[str]) -> pl.DataFrame:
    """One row per (*by, variant): n, the best value over seeds and the seed that got it.

    Best is the largest value, or the smallest for metrics where lower is better (perplexity, loss); ties go
    to the lowest seed. Each row's value is already its run's best epoch, so this is the monolingual report's
    "best epoch of the best run".
    """
    groups, seeds, values = _groups(runs, by, pl.col("metric").is_in(LOWER_IS_BETTER).any().alias("lower"),
                                    needs=("metric",))
    lower = groups["lower"].to_numpy()[:, None]
    score = np.where(np.isnan(values), -np.inf, np.where(lower, -values, values))
    best = score.argmax(axis=1) if len(values) else np.zeros(0, dtype=int)  # ties: the first, the lowest seed
    rows = np.arange(len(values))
    return groups.select(*by, "variant", "n").with_columns(
        pl.Series("best", values[rows, best], pl.Float64), pl.Series("best_seed", np.asarray(seeds)[best], pl.Int64))


def paired_p_values(deltas: np.ndarray) -> np.ndarray:
    """Two-sided paired t-test p-value per row of differences (NaN where unpaired), as scipy's ttest_rel.

    NaN where a row has fewer than 2 differences or all of them are equal (see `summarize`).
    """
    pairs = np.sum(~np.isnan(deltas), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nansum(deltas, axis=1) / pairs
        sd = np.sqrt(np.nansum((deltas - mean[:, None]) ** 2, axis=1) / (pairs - 1))
        p = 2 * special.stdtr(pairs - 1, -np.abs(mean / (sd / np.sqrt(pairs))))
    constant = np.fmax.reduce(deltas, axis=1) == np.fmin.reduce(deltas, axis=1)  # fmax/fmin skip NaN
    return np.where((pairs >= 2) & ~constant, p, np.nan)


def adjusted_p_values(p_values: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (scipy.stats.false_discovery_control) of one family of tests,
    NaN where a test has no p-value: with many comparisons (head-reinit: a p-value per head and task), the
    false discovery rate, not each raw p, says which differences are more than noise. Never below the raw p.
    """
    from scipy import stats as scipy_stats  # here: scipy.stats costs the console's summary 0.8 s to import

    p_values = np.asarray(p_values, dtype=float)
    out = np.full(p_values.shape, np.nan)
    tested = ~np.isnan(p_values)
    if tested.any():
        out[tested] = np.maximum(scipy_stats.false_discovery_control(p_values[tested], method="bh"),
                                 p_values[tested])
    return out


def bootstrap_intervals(values: np.ndarray, confidence: float, n_resamples: int,
                        seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean of each row's non-NaN values; NaN where fewer than 2.

    Rows of the same size share their resamples, drawn from a generator seeded by (seed, size) alone, so a
    group's interval depends only on its own values, not on their order or on the other groups.
    """
    sizes = np.sum(~np.isnan(values), axis=1)
    samples = np.sort(values, axis=1)  # ascending with NaN last: the order the pruning relies on
    low, high = np.full(len(values), np.nan), np.full(len(values), np.nan)
    alpha = (1 - confidence) / 2
    for size in np.unique(sizes[sizes >= 2]):
        rows = np.flatnonzero(sizes == size)
        counts, weights = resample_counts(int(size), n_resamples, seed)
        low[rows] = _percentile_of_means(samples[rows, :size], counts, weights, alpha)
        high[rows] = _percentile_of_means(samples[rows, :size], counts, weights, 1 - alpha)
    return low, high


def resample_counts(n: int, n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n_resamples` bootstrap resamples of n values as distinct count vectors and how often each was drawn."""
    rng = np.random.default_rng([seed, n])
    draws = rng.multinomial(n, np.full(n, 1 / n), size=n_resamples)
    return np.unique(draws, axis=0, return_counts=True)


def _percentile_of_means(samples: np.ndarray, counts: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """The q-quantile (linear interpolation, as numpy and scipy) of each ascending row's resampled means."""
    total = int(weights.sum())
    position = (total - 1) * q
    below = int(np.floor(position))
    ranks = (below, min(below + 1, total - 1))
    lower = q < 0.5
    keep = _could_be_order_statistic(counts, weights, ranks, lower)
    counts, weights = counts[keep] / samples.shape[1], weights[keep]
    if not lower:  # everything dropped lies below what is kept
        ranks = tuple(r - (total - int(weights.sum())) for r in ranks)
    out = np.empty(len(samples))
    step = max(1, (1 << 16) // len(weights))  # blocks that stay in cache
    for start in range(0, len(samples), step):
        block = samples[start:start + step]
        means = block[:, :1] * counts[:, 0]  # elementwise, not BLAS: a row's result never depends on the block
        for i in range(1, block.shape[1]):
            means += block[:, i:i + 1] * counts[:, i]
        order = np.argsort(means, axis=1)
        means = np.take_along_axis(means, order, axis=1)
        cumulative = np.cumsum(weights[order], axis=1)
        rows = np.arange(len(means))
        a, b = (means[rows, (cumulative <= r).sum(axis=1)] for r in ranks)
        out[start:start + step] = a + (position - below) * (b - a)
    return out


def _could_be_order_statistic(counts: np.ndarray, weights: np.ndarray, ranks: tuple[int, int],
                              lower: bool) -> np.ndarray:
    """Which distinct resamples can hold the order statistics `ranks` (from the bottom) for an ascending sample.

    A count vector whose running sums are all >= another's puts more weight on smaller values, so for every
    ascending sample its mean is never larger: it lies below the other. For low ranks, a resample with more
    than max(ranks) draws of other resamples below it cannot hold them, nor can anything above it; the kept
    set is closed downwards, so each rank up to max(ranks) has the same value within it as among all draws.
    For high ranks the mirror image holds, and everything dropped lies below (the caller shifts the ranks).
    Counting only the draws of some pivots keeps a superset, still closed: a first pass counts the 1024 most
    drawn resamples, a second all the survivors (up to 8192), which are all that can lie below a survivor.
    """
    running = np.cumsum(counts, axis=1)[:, :-1].T  # (n - 1) × resamples: one row per running sum
    if not lower:
        running = -running
    limit = max(ranks) if lower else int(weights.sum()) - 1 - min(ranks)
    candidates = np.arange(len(counts))
    for cap in (1024, 8192):
        pivots = candidates[np.argsort(-weights[candidates], kind="stable")[:cap]]
        beyond = np.empty(len(candidates))
        for start in range(0, len(candidates), 1024):
            block = candidates[start:start + 1024]
            dominated = pivots[None, :] != block[:, None]  # not itself
            for sums in running:
                dominated &= sums[pivots][None, :] >= sums[block][:, None]
            beyond[start:start + 1024] = dominated @ weights[pivots]
        candidates = candidates[beyond <= limit]
    keep = np.zeros(len(counts), dtype=bool)
    keep[candidates] = True
    return keep


def _groups(runs: pl.LazyFrame, by: Sequence[str], *aggs: pl.Expr,
            needs: Sequence[str] = ()) -> tuple[pl.DataFrame, list[int], np.ndarray]:
    """One row per (*by, variant) with n and `aggs`; every seed in `runs`, ascending; the values by seed.

    The values are a groups × seeds matrix, NaN where a group has no run with that seed. Refuses groups
    in which a seed repeats.
    """
    if isinstance(by, str):
        raise BadInput(f"by must be a list of column names, got the string {by!r}")
    by = list(by)
    runs = runs.lazy()  # a DataFrame will do too
    columns = runs.collect_schema().names()
    for name in by:
        if name in OWN or name not in columns:
            allowed = [c for c in columns if c not in OWN]
            raise BadInput(f"by column {name!r} is not a label column of the runs table "
                           f"({choices(name, allowed, 'allowed')})")
    missing = [c for c in (*OWN, *needs) if c not in columns]
    if missing:
        raise BadInput(f"runs has no column {missing[0]!r} (columns: {', '.join(columns)})")
    if len(set(by)) != len(by):
        raise BadInput(f"by {by!r} names a column twice")
    # One read of the files (a store holds a file per run; a filter pushed down to them costs a check per
    # file), then one column per seed in the same pass.
    results = (runs.select(*dict.fromkeys([*by, *OWN, *needs])).collect()
               .filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan()))
    seeds = results["seed"].unique().sort().to_list()
    by_seed = [pl.when(pl.col("seed") == s).then(pl.col("value")).max().alias(f"seed={s}") for s in seeds]
    groups = (results.lazy().group_by(*by, "variant", maintain_order=True)
              .agg(pl.len().alias("n"), *aggs, *by_seed).collect())
    values = groups.select(f"seed={s}" for s in seeds).to_numpy().reshape(len(groups), len(seeds))
    present = np.sum(~np.isnan(values), axis=1)
    repeated = np.flatnonzero(present < groups["n"].to_numpy())
    if len(repeated):
        group = groups.row(int(repeated[0]), named=True)
        where = ", ".join(f"{k}={group[k]!r}" for k in (*by, "variant"))
        raise BadInput(f"group ({where}) has {group['n']} rows for {present[repeated[0]]} seeds; add the column "
                       f"that tells them apart to by (e.g. study, fraction, split, metric)")
    return groups, seeds, values


def _versus_baseline(stats: pl.DataFrame, values: np.ndarray, by: list[str],
                     baseline: str | None) -> list[pl.Series]:
    """p_value, n_pairs, baseline_mean and delta of every group against the baseline group of its `by`."""
    if baseline is None:
        return [pl.Series(name, [None] * len(stats), dtype) for name, dtype in (("p_value", pl.Float64),
                ("n_pairs", pl.UInt32), ("baseline_mean", pl.Float64), ("delta", pl.Float64))]
    own = (stats["variant"] == baseline).to_numpy()
    if not own.any():
        variants = stats["variant"].unique().sort().to_list()
        raise BadInput(f"baseline variant {baseline!r} has no results (variants: {', '.join(map(str, variants))})")
    one = pl.lit(0).alias("_one")  # a join needs a key even when `by` is empty
    reference = (stats.with_row_index("baseline_row").filter(own)
                 .select(*by, one, "baseline_row", pl.col("mean").alias("baseline_mean")))
    joined = stats.select(*by, "variant", one).join(reference, on=[*by, "_one"], how="left",
                                                    nulls_equal=True, maintain_order="left")
    has = joined["baseline_row"].is_not_null().to_numpy()
    base = np.full_like(values, np.nan)
    base[has] = values[joined["baseline_row"].drop_nulls().to_numpy()]
    deltas = values - base
    return [pl.Series("p_value", np.where(own, np.nan, paired_p_values(deltas))).fill_nan(None),
            pl.Series("n_pairs", np.sum(~np.isnan(deltas), axis=1), pl.UInt32),
            joined["baseline_mean"], (stats["mean"] - joined["baseline_mean"]).alias("delta")]
