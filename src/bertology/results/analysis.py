"""Analysis tables: the numbers behind the reports' tables and figures, computed from results frames.

Pure functions: frames of the results tables (bertology.results.tables) in, one DataFrame out; no I/O and
no formatting (bertology.results.report renders them). A group is a set of runs that differ only in their
training seed, as in bertology.results.stats: mean, sample sd (ddof 1, null for one run) and n over the
seeds that have a number. Groups keep every label that can tell runs apart (model, variant, task,
intermediate task, training-data size) whether or not a study varies it, so no two sizes or intermediate
tasks ever pool; label columns a frame lacks (older results, hand-built frames) are not grouped by. Groups
come in the order they first appear (a study's frames follow its plan's cell order), and curves with their
points along the step or level axis ascending.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from bertology.results import stats
from bertology.results.tables import OUTPUT_PROJECTION

# The labels that tell a study's groups of runs apart, besides the seed.
FACTORS = ("model", "variant", "task", "intermediate", "fraction", "count")
# What a row of the main table is: everything but the variant, which is its columns.
ROWS = ("model", "task", "intermediate", "fraction", "count", "split", "metric")
HEAD_AXES = ("layer", "head")
PERPLEXITY = "perplexity"
EVAL, TRAIN = "eval", "train"  # the curves table's kinds of row: evaluation points, training-loss series


def primary_summary(runs: pl.LazyFrame | pl.DataFrame, baseline: str | None) -> pl.DataFrame:
    """Every report's main table and its Δ (p) table (e.g. monolingual report, Tables 1 and 3–6): per
    (row, variant) of the primary metric, n, mean, sd, the bootstrap 95% interval, and against `baseline`
    the difference and the paired t-test's p-value (bertology.results.stats.summarize), and `p_bh`: that
    p-value adjusted for the study's many comparisons (Benjamini–Hochberg over every p-value of the table)."""
    runs = runs.lazy()
    summary = stats.summarize(runs.filter(pl.col("primary")), by=_present(runs, ROWS), baseline=baseline)
    adjusted = stats.adjusted_p_values(summary["p_value"].cast(pl.Float64).fill_null(np.nan).to_numpy())
    return summary.with_columns(pl.Series("p_bh", adjusted).fill_nan(None))


def beside_study_model(runs: pl.LazyFrame | pl.DataFrame, own_models: dict[str, str],
                       models: list[str]) -> pl.LazyFrame:
    """Runs of variants with a model of their own (layer-removal's DistilBERT) labelled with the study's
    model when the study has one, so that they sit in its rows beside the other variants and get a
    difference from the baseline paired on training seeds (the same seeds give both runs the same data
    order and subset); the real model stays in `own_model`. Unchanged for a study of several models."""
    runs = runs.lazy()
    if len(models) != 1 or not own_models:
        return runs
    own = pl.col("variant").is_in(list(own_models))
    return runs.with_columns(pl.when(own).then(pl.col("model")).otherwise(None).alias("own_model"),
                             pl.when(own).then(pl.lit(models[0])).otherwise(pl.col("model")).alias("model"))


def best_of_runs(runs: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """The monolingual report's "best epoch of the best run": per (row, variant) the best primary value
    over seeds and the seed that got it (bertology.results.stats.best_of_runs)."""
    runs = runs.lazy()
    return stats.best_of_runs(runs.filter(pl.col("primary")), by=_present(runs, ROWS))


def failed_runs(runs: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """The run ids whose primary metric has no number (null or NaN): published, but not a result."""
    return (runs.lazy().filter(pl.col("primary")).group_by("run_id", maintain_order=True)
            .agg(pl.col("value").is_finite().fill_null(False).any().alias("ok"))
            .filter(~pl.col("ok")).select("run_id").collect())


def variant_levels(variants: list[dict]) -> pl.DataFrame:
    """One row per variant and one column per level axis, in the grid's axis order: the grid value each
    variant was expanded from (null where it has none, e.g. the unmodified baseline)."""
    rows = [{"variant": v["name"], **{a: v["levels"][a] for a in v.get("axes") or v.get("levels") or {}}}
            for v in variants]
    return pl.from_dicts(rows, infer_schema_length=None) if rows else pl.DataFrame(schema={"variant": pl.String})


def level_axes(levels: pl.DataFrame) -> dict[str, list[str]]:
    """The level axes worth a curve each, in order, with the axes that only rename them (one to one with
    them, e.g. partial-reinit's `from` and K = from + 1), which get no curve of their own."""
    kept: dict[str, list[str]] = {}
    for axis in (c for c in levels.columns if c != "variant"):
        grid = levels.filter(pl.col(axis).is_not_null())
        same = next((k for k in kept if _determines(grid, k, axis) and _determines(grid, axis, k)), None)
        if same is None:
            kept[axis] = []
        else:
            kept[same].append(axis)
    return kept


def head_deltas(summary: pl.DataFrame, levels: pl.DataFrame) -> pl.DataFrame:
    """College report, Figures 5–6: per task, each head variant's (levels layer and head) mean primary
    metric minus the baseline variant's mean (`summary` from `primary_summary` with that baseline), with
    its paired p-value and the adjusted one (`p_bh`), where `summary` has them."""
    heads = levels.select("variant", *HEAD_AXES).drop_nulls()
    return (summary.join(heads, on="variant", maintain_order="left")
            .select(*_present(summary, ROWS), *HEAD_AXES, "variant", "n", "mean", "baseline_mean", "delta",
                    *_present(summary, ("p_value", "p_bh"))))


def head_delta_summary(deltas: pl.DataFrame) -> pl.DataFrame:
    """College report, Figures 7–10: the head deltas described as pandas' `describe` does (n for its count,
    mean, std with ddof 1, min, the quartiles by linear interpolation, max), per layer (`over` = "layer", Figures
    7–8), per head index (`over` = "head", Figures 9–10) and over all heads (`over` = "all"), per task."""
    keys = _present(deltas, ROWS)
    d = pl.col("delta")
    describe = [d.count().alias("n"), d.mean().alias("mean"), d.std().alias("std"), d.min().alias("min"),
                *(d.quantile(q, "linear").alias(f"{q:.0%}") for q in (0.25, 0.5, 0.75)), d.max().alias("max")]
    deltas = deltas.drop_nulls("delta").sort(*keys, *HEAD_AXES, nulls_last=True)
    scopes = [deltas.with_columns(pl.lit(over).alias("over"), pl.col(over).cast(pl.Int64).alias("index"))
              for over in HEAD_AXES]
    scopes.append(deltas.with_columns(pl.lit("all").alias("over"), pl.lit(None, pl.Int64).alias("index")))
    described = pl.concat(scopes).group_by(*keys, "over", "index", maintain_order=True).agg(describe)
    return described.sort(*keys, nulls_last=True, maintain_order=True) if keys else described


def level_curves(runs: pl.LazyFrame | pl.DataFrame, levels: pl.DataFrame, axis: str) -> pl.DataFrame:
    """The primary metric along one level axis, per training-data size: partial-reinitialization report Figures 1, 2
    and 5 (by the number K of layers re-initialised or probed, one curve per data fraction) and the college
    report's Figure 3 (by the layer re-initialisation starts from). Mean, sd and n over seeds per point;
    the variant's other level axes that this one does not fix, if any, are part of the group."""
    runs = runs.lazy()
    grid = levels.filter(pl.col(axis).is_not_null())
    others = [c for c in grid.columns if c not in ("variant", axis) and grid[c].null_count() < grid.height
              and not _determines(grid, axis, c)]
    keys = [*_present(runs, ROWS), *others]
    return (runs.filter(pl.col("primary"))
            .join(grid.select("variant", *others, axis).lazy(), on="variant", maintain_order="left")
            .group_by(*keys, axis, maintain_order=True).agg(*_over_seeds("value"))
            .sort(axis, maintain_order=True).collect())


def sequential_matrix(runs: pl.LazyFrame | pl.DataFrame, metrics: dict[str, str] | None = None) -> pl.DataFrame:
    """College report, Figure 2: the final task's primary metric (or, for a task in `metrics`, that metric:
    the report shows MRPC by accuracy) after fine-tuning on an intermediate task first (`intermediate`;
    "none" = fine-tuned directly), mean, sd and n over seeds; for each model, variant and data size that
    has sequential runs."""
    runs = runs.lazy()
    keys = _present(runs, ("model", "variant", "fraction", "count"))
    sequential = pl.col("intermediate").is_not_null().any()
    shown = pl.col("primary")
    if metrics:
        shown = (pl.when(pl.col("task").is_in(list(metrics)))
                 .then(pl.col("metric") == pl.col("task").replace_strict(metrics, default=None))
                 .otherwise(pl.col("primary")))
    return (runs.filter(shown & (sequential.over(keys) if keys else sequential))
            .with_columns(pl.col("intermediate").fill_null("none"))
            .group_by(*keys, "intermediate", "task", "split", "metric", maintain_order=True)
            .agg(*_over_seeds("value")).collect())


def forgetting_curve(curves: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Cross-lingual report, Figure 2 and Table 1: masked-LM perplexity on every eval split (the target
    language and the multilingual XNLI sentences) at every evaluation step, mean, sd and n over seeds."""
    curves = _evaluation_points(curves.lazy())
    return (curves.filter(pl.col("metric") == PERPLEXITY)
            .group_by(*_present(curves, FACTORS), "split", "step", maintain_order=True).agg(*_over_seeds("value"))
            .sort("step", maintain_order=True).collect())


def training_loss_curve(curves: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """College report, Figures 1 and 4 ("Loss as a function of number of iterations"): the training-loss
    series (curves rows of kind "train", one point every `log_every` steps) per group and step, mean, sd
    and n over seeds, with the mean learning rate; empty when no run recorded one."""
    curves = curves.lazy()
    if "kind" not in curves.collect_schema().names():
        return pl.DataFrame()
    return (curves.filter(pl.col("kind") == TRAIN)
            .group_by(*_present(curves, FACTORS), "step", maintain_order=True)
            .agg(*_over_seeds("value"), pl.col("lr").mean())
            .sort("step", maintain_order=True).collect())


def freezing_perplexity(runs: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Cross-lingual report, Table 2: each variant's (freezing scheme's) perplexity at its best evaluation
    point on every eval split, mean, sd and n over seeds."""
    runs = runs.lazy()
    return (runs.filter(pl.col("metric") == PERPLEXITY)
            .group_by(*_present(runs, FACTORS), "split", maintain_order=True).agg(*_over_seeds("value")).collect())


def activation_distance_curves(distances: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Cross-lingual report, Figures 1, 3 and A.1–A.4: per layer (0 = the embeddings) and evaluation step,
    the mean L2 distance between the fine-tuned model's hidden states and the native reference model's,
    mean, sd and n over seeds."""
    distances = distances.lazy()
    return (distances.group_by(*_present(distances, FACTORS), "reference", "layer", "step", maintain_order=True)
            .agg(*_over_seeds("distance")).sort("step", maintain_order=True).collect())


def weight_distance_by_size(distances: pl.LazyFrame | pl.DataFrame, per: str = "module") -> pl.DataFrame:
    """The L2 distance between the built and the fine-tuned weights, for each training-data size: mean, sd
    and n over seeds, with the mean distance relative to the starting norm (per module and per output
    projection). `per`: "module" (every row the analysis stored), "layer" (over all of a layer's sub-layer
    modules: the root of their squares' sum) or "output-projection" (each layer's output dense weight matrix
    alone: the partial-reinitialization report's Figure 3, bertology.steps.analyze)."""
    distances = distances.lazy()
    keys = _present(distances, FACTORS)
    projection = pl.col("module").str.ends_with(OUTPUT_PROJECTION)
    if per == "layer":  # the sub-layers, without the projection rows they already hold
        distances = (distances.filter(~projection).group_by(*keys, "seed", "layer", maintain_order=True)
                     .agg(pl.col("l2").pow(2).sum().sqrt(), pl.lit(None, pl.Float64).alias("rel_l2")))
    elif per == "output-projection":
        distances = distances.filter(projection)
    elif per != "module":
        raise ValueError(f"per must be 'module', 'layer' or 'output-projection', got {per!r}")
    where = ["layer", "module"] if per == "module" else ["layer"]
    return (distances.group_by(*keys, *where, maintain_order=True)
            .agg(*_over_seeds("l2"), pl.col("rel_l2").mean()).collect())


def runs_without_projection(distances: pl.LazyFrame | pl.DataFrame) -> int:
    """How many runs with BERT sub-layers have no output-projection row (analysed before it existed)."""
    per_run = distances.lazy().group_by("run_id").agg(
        pl.col("module").str.contains(r"^layer\.\d+\.output$").any().alias("sublayers"),
        pl.col("module").str.ends_with(OUTPUT_PROJECTION).any().alias("projection"))
    return per_run.filter(pl.col("sublayers") & ~pl.col("projection")).select(pl.len()).collect().item()


def model_profile_summary(profile: pl.LazyFrame | pl.DataFrame, baseline: str | None) -> pl.DataFrame:
    """Monolingual report, Table 7: each variant's parameter counts, encoder depth, the intervention's CPU
    seconds ("cost to make", mean) and inference speed (examples per second: mean, sd and n over its runs),
    and that speed relative to the baseline variant's on the same model, device, batch size and sequence
    length (`speedup`); a variant with a model of its own is compared with the study's baseline when the
    study has one model (Table 7's DistilBERT next to BERT)."""
    profile = profile.lazy()
    keys = _present(profile, ("model", "variant", "device", "batch_size", "seq_len"))
    same = [k for k in keys if k != "variant"]
    sizes = [pl.col(c).max() for c in _present(profile, ("n_params", "encoder_params", "encoder_layers"))]
    means = [pl.col(c).mean() for c in _present(profile, ("intervention_cpu_seconds", "inference_seconds"))]
    summary = (profile.group_by(*keys, maintain_order=True)
               .agg(*sizes, *means, *_over_seeds("examples_per_second")).collect())
    if baseline is None:
        return summary.with_columns(pl.lit(None, pl.Float64).alias("speedup"))
    reference = summary.filter(pl.col("variant") == baseline).select(*same, pl.col("mean").alias("_base"))
    out = summary.join(reference, on=same, how="left", nulls_equal=True, maintain_order="left")
    if "model" in same and reference["model"].n_unique() == 1:
        # a variant with a model of its own (DistilBERT in layer-removal) against the study's one baseline
        loose = [k for k in same if k != "model"]
        other = reference.drop("model").rename({"_base": "_other"})
        out = (out.join(other, on=loose, how="left", nulls_equal=True, maintain_order="left")
               .with_columns(pl.coalesce("_base", "_other").alias("_base")).drop("_other"))
    return out.with_columns((pl.col("mean") / pl.col("_base")).alias("speedup")).drop("_base")


def vocabulary_table(vocab: pl.DataFrame) -> pl.DataFrame:
    """Monolingual report, Table 2: per model, its vocabulary size, its English-like word-pieces and how many
    it shares with the reference (English) vocabulary, with the share of English-like contexts in each
    measured corpus (null without one)."""
    columns = ("model", "reference", "case", "vocab_size", "english_like", "english_like_share", "overlap",
               "overlap_share", "corpus", "windows", "english_window_share")
    return vocab.select(_present(vocab, columns)).unique(maintain_order=True)


def _evaluation_points(curves: pl.LazyFrame) -> pl.LazyFrame:
    """The curves rows of evaluation points (kind "eval", or null: rows written before `kind` existed)."""
    if "kind" not in curves.collect_schema().names():
        return curves
    return curves.filter(pl.col("kind").fill_null(EVAL) == EVAL)


def _determines(grid: pl.DataFrame, a: str, b: str) -> bool:
    """Whether each value of level axis `a` comes with one value of `b` only."""
    return grid.is_empty() or grid.group_by(a).agg(pl.col(b).n_unique())[b].max() == 1


def _over_seeds(column: str) -> list[pl.Expr]:
    """mean, sd and n of a column's finite values (a run without a number is not a result)."""
    x = pl.col(column).filter(pl.col(column).is_finite())
    return [x.mean().alias("mean"), x.std().alias("sd"), x.count().alias("n")]


def _present(frame: pl.LazyFrame | pl.DataFrame, names: tuple[str, ...]) -> list[str]:
    columns = set(frame.collect_schema().names())
    return [n for n in names if n in columns]
