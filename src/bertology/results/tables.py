"""The results tables: one schema per table, one writer (`publish`) and one reader (`scan`).

Every step stores its outputs under its own run artifact (`runs/<run-id>/<step>/…`), keyed by the run id
alone so that studies share runs. `publish` then copies those rows, with the study's labels added, to
`results/<table>/study=<name>/<run-id>.parquet`: hive-partitioned files that Polars, DuckDB and pandas
read directly. Publishing is idempotent, so a cached step still publishes for a new study.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pyarrow as pa

from bertology.errors import BadInput, unknown
from bertology.results import receipts
from bertology.spec import Cell
from bertology.store import Store, open_store, parquet_bytes

if TYPE_CHECKING:  # the readers import Polars when called: the finetune step writes with pyarrow alone
    import polars as pl

SCHEMA_VERSION = 4  # 2: `intermediate` label, predictions' `text`, activation_distance; 3: model_profile;
# 4: curves' `kind` (the training-loss series beside the evaluation points)

# The label columns every table carries, in this order, before its own columns.
LABELS = pa.schema([
    ("schema_version", pa.int32()), ("study", pa.string()), ("variant", pa.string()), ("model", pa.string()),
    ("task", pa.string()), ("source", pa.string()), ("fraction", pa.float64()), ("count", pa.int64()),
    ("seed", pa.int64()), ("run_id", pa.string()), ("checkpoint_id", pa.string()), ("dataset_id", pa.string()),
    ("intermediate", pa.string()),  # the task a sequential run was fine-tuned on first; null otherwise
])

# The partial-reinitialization report's weight-similarity measure (§4.5): the output sub-layer's linear projection
OUTPUT_PROJECTION = "output.dense.weight"

TABLES: dict[str, pa.Schema] = {
    # one row per run: the final evaluation of the selected epoch (the regime's `selection`: the best on dev,
    # or the last); `best_epoch` is that epoch's number whichever the rule
    "runs": pa.schema([
        ("split", pa.string()), ("metric", pa.string()), ("value", pa.float64()), ("primary", pa.bool_()),
        ("best_epoch", pa.int64()), ("epochs", pa.int64()), ("num_train", pa.int64()),
        ("train_seconds", pa.float64()), ("throughput", pa.float64()), ("device", pa.string()),
        ("code_version", pa.string()),
    ]),
    # one row per (evaluation point, split, metric) during training, kind "eval"; and one row per point of the
    # training-loss series (every `log_every` steps), kind "train": split "train", metric "loss", value =
    # train_loss, the mean loss over the steps since the point before. Rows written before `kind` existed
    # (schema_version < 4) read it as null: evaluation points.
    "curves": pa.schema([
        ("epoch", pa.int64()), ("step", pa.int64()), ("train_loss", pa.float64()), ("lr", pa.float64()),
        ("seconds", pa.float64()), ("split", pa.string()), ("metric", pa.string()), ("value", pa.float64()),
        ("kind", pa.string()),
    ]),
    # one row per evaluation example; span tasks: label 1 = answerable, prediction 1 = answered, score =
    # the no-answer score, text = the answer
    "predictions": pa.schema([
        ("split", pa.string()), ("idx", pa.int64()), ("label", pa.float64()), ("prediction", pa.float64()),
        ("score", pa.float64()), ("text", pa.string()),
    ]),
    # one row per (evaluation point, layer): mean L2 distance of the hidden states to a native model's on a
    # fixed batch of sentences (layer 0: the embeddings' output)
    "activation_distance": pa.schema([
        ("reference", pa.string()), ("epoch", pa.int64()), ("step", pa.int64()), ("layer", pa.int64()),
        ("distance", pa.float64()), ("tokens", pa.int64()),
    ]),
    # one row per module: how far fine-tuning moved the weights from the built checkpoint; and per layer one
    # row for its output dense weight matrix alone (module `layer.N.` + OUTPUT_PROJECTION)
    "weight_distance": pa.schema([
        ("module", pa.string()), ("layer", pa.int64()), ("l2", pa.float64()), ("rel_l2", pa.float64()),
        ("n_params", pa.int64()),
    ]),
    # one row per run: the fine-tuned model's size and measured inference speed (layer-removal, Table 7);
    # intervention_cpu_seconds: what building the checkpoint cost ("cost to make"), null if not recorded
    "model_profile": pa.schema([
        ("n_params", pa.int64()), ("encoder_params", pa.int64()), ("encoder_layers", pa.int64()),
        ("intervention_cpu_seconds", pa.float64()), ("device", pa.string()), ("batch_size", pa.int64()),
        ("seq_len", pa.int64()), ("inference_seconds", pa.float64()), ("examples_per_second", pa.float64()),
    ]),
    # one row per (model, reference, corpus): the report's Table 2 and its English-like contexts
    # (bertology.vocab); the context columns are null when no corpus was measured
    "vocab_overlap": pa.schema([
        ("reference", pa.string()), ("case", pa.string()), ("vocab_size", pa.int64()),
        ("english_like", pa.int64()), ("english_like_share", pa.float64()), ("overlap", pa.int64()),
        ("overlap_share", pa.float64()), ("corpus", pa.string()), ("max_lines", pa.int64()),
        ("stride", pa.int64()), ("pieces", pa.int64()), ("windows", pa.int64()),
        ("english_windows", pa.int64()), ("english_window_share", pa.float64()),
    ]),
}


# What every cell of a study publishes (finetune: runs, curves; analyze: weight_distance): a cell lacking any
# is not finished. plan runs such a cell again, aggregate lists it and fails the study.
CELL_TABLES = ("runs", "curves", "weight_distance")


def results_key(table: str, study: str, run_id: str) -> str:
    return f"results/{table}/study={study}/{run_id}.parquet"


def with_labels(table: str, labels: dict, rows: pa.Table) -> pa.Table:
    """Conform `rows` to the table's schema and prepend the label columns (absent labels are null, and so are
    columns a run's artifact predates, e.g. curves' `kind`)."""
    own = TABLES[table]
    for f in own:
        if f.name not in rows.column_names:
            rows = rows.append_column(f.name, pa.nulls(rows.num_rows, f.type))
    rows = rows.select(own.names).cast(own)
    labels = {"schema_version": SCHEMA_VERSION, **labels}
    cols = [pa.array([labels.get(f.name)] * rows.num_rows, f.type) for f in LABELS]
    return pa.Table.from_arrays(cols + rows.columns, schema=pa.schema(list(LABELS) + list(own)))


def publish(store: Store, table: str, cell: Cell, rows: pa.Table) -> str:
    return publish_rows(store, table, cell.study, cell.run.id, cell.labels(), rows)


def publish_rows(store: Store, table: str, study: str, key: str, labels: dict, rows: pa.Table) -> str:
    """Rows of one unit of work (a run, or an analysis outside any run) into the study's partition."""
    path = results_key(table, study, key)
    receipts.write(store, path, parquet_bytes(with_labels(table, labels, rows)))  # plan checks it by listing
    return path


def scan(store_uri: str, table: str, study: str | None = None) -> pl.LazyFrame:
    """A lazy Polars frame over one results table, local or on S3 (notebook entry point).

    >>> scan("s3://bucket/store", "runs", study="reversed-layers").collect()
    """
    if table not in TABLES:
        raise unknown("results table", table, TABLES)
    store = open_store(store_uri)  # a bad URI: one line naming it and the schemes allowed
    # Polars would fail later, at collect(), with a bare "no files" error: name what is missing now.
    files = [k for k in store.list(f"results/{table}") if k.endswith(".parquet")]
    if not files:
        raise BadInput(f"no results in table '{table}' of store {store.uri} (none written there yet: run a "
                       f"study with this --store, or give the store a study wrote to)")
    studies = sorted({k.split("/")[2].removeprefix("study=") for k in files if k.count("/") >= 3})
    if study is not None and study not in studies:
        raise BadInput(f"no study '{study}' in table '{table}' of store {store.uri} "
                       f"(studies there: {', '.join(studies)})")
    pattern = store.url(f"results/{table}") + (f"/study={study}/*.parquet" if study else "/**/*.parquet")
    pattern = pattern.removeprefix("file://")
    import polars as pl

    # `study` is a column of every file as well as the partition key, so the files are the source of truth.
    return pl.scan_parquet(pattern, hive_partitioning=False, storage_options=_storage_options(pattern))


def scan_keys(store: Store, keys: list[str]) -> pl.LazyFrame:
    """A lazy Polars frame over exactly these Parquet files of a store, in this order (a study's runs).

    The first file's columns are the frame's: a column another file lacks is null there (older results),
    one only another file has is left out.
    """
    import polars as pl

    paths = [store.url(k).removeprefix("file://") for k in keys]
    return pl.scan_parquet(paths, hive_partitioning=False, storage_options=_storage_options(paths[0]),
                           missing_columns="insert", extra_columns="ignore")


def _storage_options(path: str) -> dict | None:
    """Polars' S3 client takes the endpoint (MinIO, moto) explicitly; credentials come from the environment."""
    if path.startswith("s3://") and os.environ.get("AWS_ENDPOINT_URL"):
        return {"aws_endpoint_url": os.environ["AWS_ENDPOINT_URL"]}
    return None
