"""Nightly regression: compare a study's table with a baseline kept in the store, or promote a new one.

The nightly CronWorkflow (workflows/nightly-regression.yaml) reruns a small fixed study from scratch and
hands its long-form table (`studies/<name>/<id>/tables/main.parquet`, from aggregate) to `regress`:

- `compare` joins the table with the baseline on (model, task, split, metric, variant) and flags every
  row whose mean moved beyond its tolerance, every row on one side only, and every change of n (a run
  that failed or went missing). `Comparison.text` is the readable diff: a fixed-width table.
- The tolerance comes from the spread the nightly measures over its seeds, on both sides (the baseline is
  a study table too, with its own n and sd): a row DRIFTs when its mean moved by more than

      t(1 - ALPHA/2, ν) × sqrt(sd_b²/n_b + sd_c²/n_c) + floor

  that is, when Welch's t-test finds the difference at ALPHA = 0.001 (two-sided, ν by Welch–Satterthwaite)
  and it exceeds the metric's floor (FLOORS: 0.005 for scores in [0, 1], 0.5% for perplexity and loss),
  so identical or near-identical seeds (a deterministic CPU night) do not fail on rounding. With 3 seeds a
  side t is about 8.6 (ν = 4), with many seeds about 3.3. A row with fewer than 2 runs on a side has no
  spread and gets its metric's fixed tolerance (DEFAULT_TOLERANCES), as does every row of a metric the
  `tolerances` parameter sets by hand.
- `promote` makes a table the baseline, `baselines/<study>/<baseline>.parquet`, in one store write (a PUT
  on S3, a rename locally), so readers see the old baseline or the new one, never half of one. The one it
  replaces is first copied to `baselines/<study>/history/<baseline>-<its promotion time>.parquet`.

A baseline is only ever made on purpose (`promote=true`): a first run without one fails and says how.
Exit codes of the step: 0 passed or promoted, 1 drift (EXIT_DRIFT), 2 bad input (no baseline, bad
tolerances), 75 transient (storage).
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
import time
from dataclasses import dataclass

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import stats as scipy_stats

from bertology.errors import BadInput, BertologyError
from bertology.store import Store
from bertology.tasks.registry import TASKS

log = logging.getLogger("bertology")

KEY = ("model", "task", "split", "metric", "variant")
EXIT_DRIFT = 1
METADATA = b"bertology.baseline"  # Parquet key-value metadata: where and when a baseline was promoted
ANY = "*"  # the tolerance of a metric not listed
ALPHA = 0.001  # a row's chance of a DRIFT when nothing changed (Welch's t-test, two-sided)
# The least difference that is a DRIFT, whatever the spread: absolute for scores, relative for perplexity, loss.
FLOORS: dict[str, float | str] = {"perplexity": "0.5%", "loss": "0.5%"}
FLOOR = 0.005
# Fixed tolerances (rows without a spread, and metrics set by hand): absolute differences of the mean over
# seeds for scores in [0, 1] (or [-1, 1]); relative ("N%") for perplexity and loss, whose scale depends on
# the model and corpus.
DEFAULT_TOLERANCES: dict[str, float | str] = {
    "accuracy": 0.02, "f1": 0.02, "exact": 0.02,
    "matthews_corrcoef": 0.03, "pearson": 0.03, "spearman": 0.03,
    "perplexity": "5%", "loss": "5%",
    ANY: 0.02,
}
METRIC_NAMES = sorted({m for task in TASKS.values() for m in task.metrics})
TOLERANCE_EXAMPLE = '{"accuracy": 0.01, "perplexity": "10%"}'
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class Drift(BertologyError):
    """The study's results moved beyond tolerance: the step fails with exit code 1, never retried."""

    exit_code = EXIT_DRIFT


# --- tolerances ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    value: float
    relative: bool  # a fraction of |baseline| rather than an absolute difference

    @classmethod
    def parse(cls, metric: str, raw) -> Tolerance:
        """A number >= 0 (absolute) or "N%" (relative); BadInput names the metric and the bad value."""
        allowed = ('a number >= 0 for an absolute tolerance or "N%" for a relative one, '
                   f"e.g. {TOLERANCE_EXAMPLE}")
        if isinstance(raw, str) and raw.strip().endswith("%"):
            try:
                percent = float(raw.strip()[:-1])
            except ValueError:
                percent = math.nan
            if math.isfinite(percent) and percent >= 0:
                return cls(percent / 100, True)
        elif isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw) and raw >= 0:
            return cls(float(raw), False)
        raise BadInput(f"tolerances: {metric} = {json.dumps(raw)} is not allowed ({allowed})")

    def allowed(self, baseline: float) -> float:
        return self.value * abs(baseline) if self.relative else self.value

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


def parse_tolerances(text: str | None) -> dict[str, Tolerance]:
    """The default tolerances, overridden per metric by a JSON object (empty text: the defaults)."""
    overrides = {}
    if text and text.strip():
        try:
            overrides = json.loads(text)
        except json.JSONDecodeError:
            overrides = None
        if not isinstance(overrides, dict):
            raise BadInput(f"tolerances must be a JSON object of metric -> tolerance such as "
                           f"{TOLERANCE_EXAMPLE}, got {text.strip()!r}")
    for metric in overrides:
        if metric not in METRIC_NAMES and metric != ANY:
            raise BadInput(f"tolerances: '{metric}' is not a metric (allowed: {', '.join(METRIC_NAMES)}, "
                           f"or {ANY} for every other metric)")
    merged = {**DEFAULT_TOLERANCES, **overrides}
    return Tolerances({metric: Tolerance.parse(metric, raw) for metric, raw in merged.items()}, set(overrides))


class Tolerances(dict):
    """metric -> its fixed Tolerance; `by_hand`: the metrics the `tolerances` parameter set."""

    def __init__(self, fixed: dict[str, Tolerance], by_hand: set[str]):
        super().__init__(fixed)
        self.by_hand = by_hand

    def fixed_for(self, metric: str) -> bool:
        return metric in self.by_hand or (metric not in DEFAULT_TOLERANCES and ANY in self.by_hand)


def spread_allowed(metric: str, baseline: float, sides: tuple[tuple[int, float | None], tuple[int, float | None]]
                   ) -> tuple[float, str] | None:
    """(allowed difference, how it was made) from both sides' (n, sd), or None when a side has no spread."""
    (n_b, sd_b), (n_c, sd_c) = sides
    if n_b is None or n_c is None or n_b < 2 or n_c < 2 or sd_b is None or sd_c is None \
            or math.isnan(sd_b) or math.isnan(sd_c):
        return None
    var_b, var_c = sd_b ** 2 / n_b, sd_c ** 2 / n_c
    se = math.sqrt(var_b + var_c)
    dof = (var_b + var_c) ** 2 / (var_b ** 2 / (n_b - 1) + var_c ** 2 / (n_c - 1)) if se > 0 else n_b + n_c - 2
    t = float(scipy_stats.t.ppf(1 - ALPHA / 2, dof))
    floor = Tolerance.parse(metric, FLOORS.get(metric, FLOOR)).allowed(baseline)
    return t * se + floor, f"{t:.1f} SE + {floor:.2g}"


def tolerance_for(tolerances: dict[str, Tolerance], metric: str) -> Tolerance:
    """The fixed tolerance of a metric (its own, or that of every other metric: *)."""
    return tolerances[metric] if metric in tolerances else tolerances[ANY]


# --- comparison ------------------------------------------------------------------------------------------

DRIFT, N_CHANGED, MISSING, NEW = "DRIFT", "N CHANGED", "MISSING", "NEW"
STATUS_MEANING = {  # a row without any of these is "ok"
    DRIFT: "the mean moved beyond its tolerance (Welch's t-test at 0.001 and the metric's floor, or a fixed one)",
    N_CHANGED: "a different number of runs (seeds) behind the mean",
    MISSING: "in the baseline, not in this run",
    NEW: "in this run, not in the baseline",
}


@dataclass
class Comparison:
    rows: list[dict]  # per key: the key, n and mean on both sides, delta, tolerance, allowed, flags

    @property
    def failures(self) -> list[dict]:
        return [r for r in self.rows if r["flags"]]

    def summary(self) -> str:
        if not self.failures:
            rows = f"all {len(self.rows)} rows" if len(self.rows) > 1 else f"{len(self.rows)} row"
            return f"{rows} within tolerance of the baseline"
        counts = {s: sum(s in r["flags"] for r in self.rows) for s in STATUS_MEANING}
        found = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return f"{len(self.failures)} of {len(self.rows)} rows differ from the baseline ({found})"

    def worst(self, most: int = 3) -> str:
        """The first failing rows in a few words each: `rte accuracy reversed 0.5500 -> 0.6000 (±0.0241)`."""
        def one(r: dict) -> str:
            what = f"{r['task']} {r['metric']} {r['variant']}"
            if DRIFT in r["flags"] and r["delta"] is not None:
                return f"{what} {r['baseline']:.4f} -> {r['current']:.4f} (allowed ±{r['allowed']:.4f})"
            return f"{what} {', '.join(r['flags'])}"
        shown = "; ".join(one(r) for r in self.failures[:most])
        return shown + (f"; … {len(self.failures) - most} more" if len(self.failures) > most else "")

    def text(self) -> str:
        """The fixed-width diff: one line per row, failing rows marked in the status column."""
        def number(v, fmt="{:.4f}"):
            return "—" if v is None else fmt.format(v)

        header = (*KEY, "n", "baseline", "current", "delta", "tolerance", "status")
        lines = [header]
        for r in self.rows:
            n = number(r["n_baseline"], "{}") if r["n_baseline"] == r["n_current"] else \
                f"{number(r['n_baseline'], '{}')} -> {number(r['n_current'], '{}')}"
            tolerance = "—" if r["allowed"] is None else (
                f"±{r['tolerance']}" + (f" (±{r['allowed']:.4g})" if r["tolerance"].endswith("%") else "")
                if "SE" not in r["tolerance"] else f"±{r['allowed']:.4f} ({r['tolerance']})")
            lines.append((*(str(r[k]) for k in KEY), n, number(r["baseline"]), number(r["current"]),
                          number(r["delta"], "{:+.4f}"), tolerance, ", ".join(r["flags"]) or "ok"))
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines]
        out.insert(1, "  ".join("-" * w for w in widths))
        legend = [f"{s}: {meaning}" for s, meaning in STATUS_MEANING.items()
                  if any(s in r["flags"] for r in self.rows)]
        return "\n".join(out + ([""] + legend if legend else []))


def _by_key(table: pl.DataFrame, side: str) -> dict[tuple, dict]:
    missing = [c for c in (*KEY, "n", "mean") if c not in table.columns]
    if missing:
        raise BadInput(f"the {side} table has no column {missing[0]!r} (a study table from aggregate has "
                       f"{', '.join((*KEY, 'n', 'mean'))})")
    rows: dict[tuple, dict] = {}
    spread = "sd" in table.columns  # a baseline promoted before it carried its spread has none
    for row in table.select(*KEY, "n", "mean", *(["sd"] if spread else [])).iter_rows(named=True):
        key = tuple(row[k] for k in KEY)
        if key in rows:
            raise BadInput(f"the {side} table has two rows for {dict(zip(KEY, key))}")
        mean = row["mean"]
        rows[key] = {"n": row["n"], "mean": None if mean is None or math.isnan(mean) else float(mean),
                     "sd": row.get("sd")}
    return rows


def compare(current: pl.DataFrame, baseline: pl.DataFrame, tolerances: dict[str, Tolerance]) -> Comparison:
    """Join on KEY (baseline order first, then rows only this run has) and flag what differs."""
    now, base = _by_key(current, "current"), _by_key(baseline, "baseline")
    rows = []
    for key in [*base, *(k for k in now if k not in base)]:
        b, c = base.get(key), now.get(key)
        row = {**dict(zip(KEY, key)), "n_baseline": b and b["n"], "n_current": c and c["n"],
               "baseline": b and b["mean"], "current": c and c["mean"], "delta": None,
               "tolerance": "", "allowed": None, "flags": []}
        rows.append(row)
        if b is None or c is None:
            row["flags"].append(NEW if b is None else MISSING)
            continue
        metric = key[KEY.index("metric")]
        tolerance = tolerance_for(tolerances, metric)
        if b["mean"] is not None and c["mean"] is not None:
            row["delta"] = c["mean"] - b["mean"]
            by_spread = None
            if not (isinstance(tolerances, Tolerances) and tolerances.fixed_for(metric)):
                by_spread = spread_allowed(metric, b["mean"], ((b["n"], b["sd"]), (c["n"], c["sd"])))
            if by_spread is not None:
                row["allowed"], row["tolerance"] = by_spread
            else:
                row["tolerance"], row["allowed"] = str(tolerance), tolerance.allowed(b["mean"])
            if abs(row["delta"]) > row["allowed"] + 1e-12:  # equal floats pass a zero tolerance
                row["flags"].append(DRIFT)
        elif (b["mean"] is None) != (c["mean"] is None):
            row["flags"].append(DRIFT)  # a number on one side only
        if b["n"] != c["n"]:
            row["flags"].append(N_CHANGED)
    return Comparison(rows)


# --- the baseline in the store ---------------------------------------------------------------------------


def baseline_key(study: str, name: str) -> str:
    return f"baselines/{study}/{name}.parquet"


def history_key(study: str, name: str, promoted_at: str) -> str:
    stamp = re.sub(r"[^0-9TZ]", "", promoted_at)  # 2025-01-31T02:00:00Z -> 20250131T020000Z
    return f"baselines/{study}/history/{name}-{stamp}.parquet"


def read_baseline(store: Store, key: str) -> tuple[pl.DataFrame, dict] | None:
    """The baseline table and what its promotion recorded, or None when there is none."""
    if not store.exists(key):
        return None
    table = store.read_parquet(key)
    info = json.loads((table.schema.metadata or {}).get(METADATA, b"{}"))
    return pl.from_arrow(table), info


def promote(store: Store, study: str, name: str, table: pa.Table, info: dict) -> str | None:
    """Make `table` the study's baseline `name` in one write; returns where the replaced one was kept.

    The previous baseline is copied to history first, so a promotion that fails half-way leaves the old
    baseline in place (and at most one extra history copy of it).
    """
    key, kept = baseline_key(study, name), None
    if store.exists(key):
        old = store.read_bytes(key)
        old_info = json.loads((pq.read_schema(io.BytesIO(old)).metadata or {}).get(METADATA, b"{}"))
        kept = history_key(study, name, old_info.get("promoted_at") or _utc_now())
        store.write_bytes(kept, old)
    metadata = {**(table.schema.metadata or {}), METADATA: json.dumps(info, sort_keys=True).encode()}
    store.write_parquet(key, table.replace_schema_metadata(metadata))  # one PUT / one rename: atomic
    return kept


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


HOW_TO_PROMOTE = ("argo submit --from cronwf/bertology-nightly-regression -p promote=true "
                  "(locally: bertology run workflows/nightly-regression.yaml -p promote=true)")


def regress(store: Store, study: str, study_id: str, *, baseline_store: Store, baseline: str,
            promote_it: bool, tolerances: dict[str, Tolerance]) -> Comparison | None:
    """Compare the study's table with the baseline, then promote it when asked, else raise Drift on any
    difference. Returns the comparison (None when there was no baseline to compare with)."""
    base = f"studies/{study}/{study_id}"
    table_key, diff_key = f"{base}/tables/main.parquet", f"{base}/regression.md"
    if not store.exists(table_key):
        raise BadInput(f"no table at {store.url(table_key)} (aggregate writes it; run the study first)")
    table = store.read_parquet(table_key)
    key = baseline_key(study, baseline)
    found = read_baseline(baseline_store, key)
    if found is None and not promote_it:
        raise BadInput(f"no baseline '{baseline}' for study '{study}' at {baseline_store.url(key)}; check "
                       f"this run's table ({store.url(table_key)}) and make it the baseline on purpose: "
                       f"{HOW_TO_PROMOTE}")
    comparison = None
    if found is not None:
        old, info = found
        comparison = compare(pl.from_arrow(table), old, tolerances)
        origin = f"promoted {info.get('promoted_at', '?')} from study id {info.get('study_id', '?')}"
        verdict = ("FAILED: " if comparison.failures else "PASSED: ") + comparison.summary()
        report = (f"regression check of study {study} ({study_id}) against {baseline_store.url(key)} "
                  f"({origin})\n\n{comparison.text()}\n\n{verdict}")
        print(report, flush=True)
        store.write_bytes(diff_key, f"# Regression check: {study}\n\n```\n{report}\n```\n".encode())
        log.info("diff: %s", store.url(diff_key))
    if promote_it:
        kept = promote(baseline_store, study, baseline, table, {
            "study": study, "study_id": study_id, "promoted_at": _utc_now(), "table": store.url(table_key)})
        log.info("promoted %s as baseline %s%s", store.url(table_key), baseline_store.url(key),
                 f" (the previous one is kept at {baseline_store.url(kept)})" if kept else "")
    elif comparison.failures:
        raise Drift(f"results drifted from baseline '{baseline}': {comparison.summary()}: {comparison.worst()} "
                    f"(the diff: {store.url(diff_key)}; if the change is intended: {HOW_TO_PROMOTE})")
    return comparison
