"""Labels as the report prints them: layers, heads and variants numbered as the papers do, and a group of
rows named by the keys that vary in it.

The stored tables keep 0-based indices and one column per grouping key; only what a reader sees is
relabelled here, so every section names the same group the same way (`L1H1`, "fraction 0.1 · rte").
"""

from __future__ import annotations

import polars as pl

from bertology.results.analysis import ROWS

SIZE = {"fraction": pl.Float64, "count": pl.Int64}  # the training-data size labels


def one_based(index: int) -> str:
    """A 0-based layer or head index as the papers number it."""
    return str(int(index) + 1)


def variant_labels(variants: list[dict]) -> dict[str, str]:
    """Each variant's name as the report prints it: a head variant named from its 0-based grid values,
    `L{layer}H{head}` (head-reinit's L0H0), is printed 1-based (L1H1); every other name as it is."""
    labels = {}
    for v in variants:
        levels = v.get("levels") or {}
        layer, head = levels.get("layer"), levels.get("head")
        zero_based = isinstance(layer, int) and isinstance(head, int) and v["name"] == f"L{layer}H{head}"
        labels[v["name"]] = f"L{layer + 1}H{head + 1}" if zero_based else v["name"]
    return labels


def weight_layer_names(per_module: pl.DataFrame) -> dict[int, str]:
    """The weight-distance layer axis by name: "embeddings" and "pooler" for the layers holding only that
    module (stored as -1 and L), the encoder layers from 1."""
    modules = per_module.group_by("layer").agg(pl.col("module").unique())
    names = {}
    for layer, held in modules.iter_rows():
        held = set(held)
        names[layer] = next(iter(held)) if held in ({"embeddings"}, {"pooler"}) else one_based(layer)
    return names


def relabelled(frame: pl.DataFrame, labels: dict[str, str]) -> pl.DataFrame:
    """`frame` with its variants as the report prints them (variant_labels)."""
    return frame.with_columns(pl.col("variant").replace(labels)) if "variant" in frame.columns else frame


def own_models(results) -> dict[str, str]:
    """Variants that fine-tune a model of their own (a `model` key) -> that model."""
    return {v["name"]: v["model"] for v in results.spec["variants"] if v.get("model")}


def size_text(fraction: float | None, count: int | None) -> str:
    """A training-data size as text: "fraction 0.1", "count 500" or "all data"."""
    return f"fraction {fraction}" if fraction is not None else f"count {count}" if count is not None else "all data"


def sized(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame as a table shows it: "none" for no intermediate task, and `data`, its groups' training-data
    size as text (as size_text), where it has a size."""
    if "intermediate" in frame.columns:
        frame = frame.with_columns(pl.col("intermediate").fill_null("none"))
    if not any(c in frame.columns for c in SIZE):
        return frame
    frame = frame.with_columns(pl.lit(None, dtype).alias(c) for c, dtype in SIZE.items() if c not in frame.columns)
    return frame.with_columns(pl.when(pl.col("fraction").is_not_null()).then(pl.format("fraction {}", "fraction"))
                              .when(pl.col("count").is_not_null()).then(pl.format("count {}", "count"))
                              .otherwise(pl.lit("all data")).alias("data"))


def row_columns(frame: pl.DataFrame) -> list[str]:
    """The main table's row labels (of a sized frame): model, task, split and metric, and the intermediate
    task and data size where the study varies them."""
    return shown_columns(frame, list(ROWS), always=("model", "task", "split", "metric"))


def shown_columns(frame: pl.DataFrame, keys: list[str], always: tuple[str, ...] = ()) -> list[str]:
    """The group columns worth printing: those that vary in `frame`, and `always`; the size columns as the
    one `data` column of a sized frame."""
    columns = []
    for key in keys:
        name = "data" if key in SIZE else key
        if name in frame.columns and name not in columns and (key in always or frame[name].n_unique() > 1):
            columns.append(name)
    return columns


def group_label(keys: list[str]) -> pl.Expr:
    """A group's label from its `keys` values, e.g. "reversed · rte · fraction 0.1"; a key ending in "="
    is written with its name ("k=3")."""
    if not keys:
        return pl.lit("all")
    parts = [pl.format(f"{k}{{}}", k.removesuffix("=")) if k.endswith("=") else pl.col(k).cast(pl.String)
             for k in keys]
    return pl.concat_str(parts, separator=" · ", ignore_nulls=True)


def group_title(group: pl.DataFrame, keys: list[str]) -> str:
    """The label of a one-group frame."""
    return group.head(1).select(group_label([k for k in keys if k in group.columns])).item()
