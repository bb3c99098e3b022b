"""The display text of one table cell: a mean with its spread, an interval and n; a difference with its
p-values; any other number.

Sections compute with numbers (bertology.results.analysis) and turn them into text only here, at the
last step, so every table writes the same quantity the same way and summary.py prints what the report does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl


def mean_sd_n(mean: float | None, sd: float | None, n: int | None, expected_n: int | None = None) -> str:
    """`mean ± sd (n=…)`, flagging a group with fewer runs than the plan expected."""
    return mean_sd_ci_n(mean, sd, None, None, n, expected_n)


def mean_sd_ci_n(mean: float | None, sd: float | None, low: float | None, high: float | None, n: int | None,
                 expected_n: int | None = None) -> str:
    """`mean ± sd [95% interval] (n=…)` (no interval for fewer than two runs), flagging a group with fewer
    runs than the plan expected."""
    if mean is None:
        return "—"
    flag = "" if expected_n is None or n == expected_n else f" of {expected_n}"
    interval = "" if low is None or high is None else f" [{low:.3f}, {high:.3f}]"
    return f"{mean:.3f} ± {'—' if sd is None else f'{sd:.3f}'}{interval} (n={n}{flag})"


def delta_p(delta: float | None, p_value: float | None, p_bh: float | None = None) -> str:
    """`Δ (p=…; BH p=…)`: the raw paired p-value and the one adjusted for the study's many comparisons."""
    if delta is None:
        return "—"
    adjusted = "" if p_bh is None else f"; BH p={p_bh:.3g}"
    return f"{delta:+.3f}" + ("" if p_value is None else f" (p={p_value:.3g}{adjusted})")


def num(value: float | None) -> str:
    """A number as the other tables write one: three decimals (a metric, a perplexity); a whole number of
    1,000 or more (a count: word-pieces, parameters) with thousands separators; a small non-zero value to
    three significant digits, so that it does not read as 0; "—" for none."""
    if value is None or not np.isfinite(value):
        return "—"
    if abs(value) >= 1000 and float(value).is_integer():
        return f"{value:,.0f}"
    if 0 < abs(value) < 0.0005:
        return f"{value:.3g}"
    return f"{value:.3f}"


def signed(value: float | None) -> str:
    """A difference with its sign, "—" for none or not finite."""
    return "—" if value is None or not np.isfinite(value) else f"{value:+.4f}"


def cell_text(fn: Callable[..., str], *columns: str, name: str = "cell", **kwargs) -> pl.Expr:
    """A display column: `fn` of each row's `columns` (display only: one row per group, not per run)."""
    return pl.struct(*columns).map_elements(lambda s: fn(*(s[c] for c in columns), **kwargs),
                                            return_dtype=pl.String).alias(name)

