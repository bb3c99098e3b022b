"""How long a study table's statistics take over a whole store: `scan` + `summarize` of 10^6 `runs` rows.

Writes synthetic `runs` rows with the real schema (bertology.results.tables) under a temporary store, hive-
partitioned as `results/runs/study=<name>/<file>.parquet`, then times `summarize(scan(store, "runs"), …)` end
to end: every metric of every run (not only the primary one), grouped by study, model, task, fraction, count,
split and metric, paired against the "pre-trained" variant, 10,000 bootstrap resamples. Each row of the table
is the median of `--repeat` runs after one warm-up (min and max beside it), with the CPU seconds of all
threads: on a shared machine the wall time grows with the load, the CPU time hardly. The budget is 1 s.

The store: 14 studies × 2 models × V variants × 4 training fractions × `--seeds` seeds × the 9 GLUE tasks,
13 rows per (variant, fraction, seed), as MRPC, STS-B and QQP report two metrics and MNLI two splits. The
real layout is one file per run; 10^6 rows are ~700,000 runs, a file count no store of these studies will
reach, so the 10^6 rows are measured in coarser files (one per study, one per study × model × variant), and
one file per run is measured on a realistic store of `--store-runs` runs.

    .venv/bin/python bench/aggregate_scale.py [--rows 1000000] [--store-runs 10000] [--seeds 5] [--repeat 5]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from bertology.results.stats import summarize
from bertology.results.tables import LABELS, SCHEMA_VERSION, TABLES, scan

STUDIES = ["reversed-layers", "removed-layers", "reinit-all", "reinit-embeddings", "reinit-layers",
           "reinit-heads", "shuffled-embeddings", "swapped-embeddings", "permute-within", "match-moments",
           "gradual-unfreeze", "probing", "sequential", "foreign-bert"]
MODELS = ["bert-base-uncased", "bert-base-cased"]
FRACTIONS = [0.01, 0.1, 0.5, 1.0]
# (task, split, metric, primary, typical score) for every row one run of the task writes
EVALS = [("cola", "validation", "matthews_corrcoef", True, 0.55), ("sst2", "validation", "accuracy", True, 0.92),
         ("mrpc", "validation", "f1", True, 0.88), ("mrpc", "validation", "accuracy", False, 0.84),
         ("stsb", "validation", "pearson", True, 0.88), ("stsb", "validation", "spearman", False, 0.87),
         ("qqp", "validation", "accuracy", True, 0.90), ("qqp", "validation", "f1", False, 0.87),
         ("mnli", "validation_matched", "accuracy", True, 0.84),
         ("mnli", "validation_mismatched", "accuracy", True, 0.84),
         ("qnli", "validation", "accuracy", True, 0.91), ("rte", "validation", "accuracy", True, 0.66),
         ("wnli", "validation", "accuracy", True, 0.56)]
BY = ["study", "model", "task", "fraction", "count", "split", "metric"]
BUDGET_S = 1.0


def runs_rows(variants: int, seeds: int) -> pl.DataFrame:
    """Every row of the store in the `runs` schema's columns, ordered by study, model, variant, fraction, seed."""
    names = ["pre-trained", "random-init"] + [f"reinit-L{i // 12}H{i % 12}" for i in range(variants - 2)]
    factors = [pl.DataFrame({"study": STUDIES}), pl.DataFrame({"model": MODELS}),
               pl.DataFrame({"variant": names}), pl.DataFrame({"fraction": FRACTIONS}),
               pl.DataFrame({"seed": range(seeds)}), pl.DataFrame(EVALS, orient="row",
                                                          schema=["task", "split", "metric", "primary", "typical"])]
    rows = factors[0]
    for factor in factors[1:]:
        rows = rows.join(factor, how="cross")
    rng = np.random.default_rng(0)
    effect = np.concatenate([[0.0], rng.normal(-0.05, 0.05, size=variants - 1)])  # the baseline's is 0
    variant = rows["variant"].replace_strict({v: i for i, v in enumerate(names)}).to_numpy()
    value = rows["typical"].to_numpy() + effect[variant] + rng.normal(0, 0.01, size=len(rows))

    def ident(*columns: str) -> pl.Expr:  # a 16-character id per distinct combination, like the spec ids
        return pl.struct(*columns).hash().cast(pl.String).str.slice(0, 16)

    rows = rows.with_columns(
        pl.lit(SCHEMA_VERSION, pl.Int32).alias("schema_version"), pl.lit("glue-dir").alias("source"),
        pl.lit(None, pl.Int64).alias("count"), pl.Series("value", np.clip(value, 0.0, 1.0)),
        ident("study", "model", "variant", "fraction", "seed", "task").alias("run_id"),
        ident("model", "variant").alias("checkpoint_id"), ident("model", "task", "fraction").alias("dataset_id"),
        pl.lit(3, pl.Int64).alias("best_epoch"), pl.lit(3, pl.Int64).alias("epochs"),
        pl.lit(8000, pl.Int64).alias("num_train"), pl.lit(600.0).alias("train_seconds"),
        pl.lit(150.0).alias("throughput"), pl.lit("cuda").alias("device"), pl.lit("bench").alias("code_version"),
    )
    schema = pa.schema(list(LABELS) + list(TABLES["runs"]))  # any other column (a newer label) stays null
    return rows.select(pl.col(n) if n in rows.columns else pl.lit(None).alias(n) for n in schema.names)


def write_store(root: Path, rows: pl.DataFrame, file_keys: list[str]) -> int:
    """Write `rows` as results/runs/study=<name>/<n>.parquet, one file per distinct `file_keys`."""
    schema = pa.schema(list(LABELS) + list(TABLES["runs"]))
    for n, part in enumerate(rows.partition_by(file_keys, maintain_order=True)):
        folder = root / "results" / "runs" / f"study={part['study'][0]}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(part.to_arrow().cast(schema), folder / f"{n:08x}.parquet")
    return n + 1


def read(store: str) -> pl.DataFrame:
    return scan(store, "runs").collect()


def aggregate(store: str) -> pl.DataFrame:
    return summarize(scan(store, "runs"), by=BY, baseline="pre-trained")


def timed(fn, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (all threads) of each of `repeat` calls after a warm-up (imports, file cache)."""
    fn()
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="at least this many rows in the big store")
    parser.add_argument("--store-runs", type=int, default=10_000, help="runs of the one-file-per-run store")
    parser.add_argument("--seeds", type=int, default=5, help="training seeds per variant (the reports: 3 to 5)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    per_variant = len(STUDIES) * len(MODELS) * len(FRACTIONS) * args.seeds
    big = max(2, math.ceil(args.rows / (per_variant * len(EVALS))))
    small = max(2, round(args.store_runs / (per_variant * len({t for t, *_ in EVALS}))))
    layouts = [("one file per study", big, ["study"]),
               ("one file per study × model × variant", big, ["study", "model", "variant"]),
               ("one file per run", small, ["study", "model", "variant", "fraction", "seed", "task"])]
    print(f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}), Polars {pl.__version__} on "
          f"{pl.thread_pool_size()} threads; median of {args.repeat} after a warm-up; "
          f"summarize(scan(...), by={BY}, baseline='pre-trained')\n")
    print("| layout | files | rows | groups | write s | scan s (all columns) | scan + summarize s (min–max) | its CPU s "
          "| within 1 s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, variants, file_keys in layouts:
        rows = runs_rows(variants, args.seeds)
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            files = write_store(Path(tmp), rows, file_keys)
            write_s = time.perf_counter() - start
            scan_s, _ = timed(partial(read, tmp), args.repeat)
            total, cpu = timed(partial(aggregate, tmp), args.repeat)
            groups = len(aggregate(tmp))
        median = statistics.median(total)
        print(f"| {name} | {files:,} | {len(rows):,} | {groups:,} | {write_s:.1f} | "
              f"{statistics.median(scan_s):.2f} | {median:.2f} ({min(total):.2f}–{max(total):.2f}) | "
              f"{statistics.median(cpu):.2f} | {'yes' if median <= BUDGET_S else 'NO'} |")


if __name__ == "__main__":
    main()
