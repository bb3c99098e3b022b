"""The reports' own numbers (paper_numbers.csv) against the reports' text, and the report-vs-this-run logic."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from bertology.cli import main
from bertology.results import paper_comparison as pc
from bertology.results.report import build_report, html, markdown
from bertology.results.study_results import load_study_results
from bertology.results.tables import publish
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Intervention, RunSpec
from bertology.store import open_store

EN = "google-bert/bert-base-uncased"


def _papers() -> Path | None:
    """../shared/papers beside the checkout (CI clones next to shared/), found by searching upward."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "papers").is_dir():
            return parent / "shared" / "papers"
    return None


PAPERS = _papers()
needs_papers = pytest.mark.skipif(PAPERS is None, reason="the reports' text (../shared/papers) is not beside this checkout")


def _cell(table: str, row: str, column: str, report: str = "monolingual-pretraining-benefits") -> dict:
    rows = pc.paper_numbers().filter((pl.col("report") == report) & (pl.col("table") == table)
                                     & (pl.col("row") == row) & (pl.col("column") == column))
    assert rows.height >= 1, (table, row, column)
    return rows.row(0, named=True)


def test_the_data_file_ships_with_every_report_table_and_unique_cells():
    numbers = pc.paper_numbers()
    tables = set(numbers.select("report", "table").unique().iter_rows())
    for t in ("Table 1", "Table 2", "Table 3", "Table 4", "Table 5", "Table 6", "Table 7", "Table 8"):
        assert ("monolingual-pretraining-benefits", t) in tables
    for t in ("Figure 2", "§5.6 MRPC table", "Figure 5", "Figure 6", "Figure 7", "Figure 8", "Figure 9", "Figure 10"):
        assert ("bert-goes-to-college", t) in tables
    assert {("crosslingual-finetuning-representations", t) for t in ("Table 1", "Table 2")} <= tables
    assert "partial-reinitialization" not in set(numbers["report"])  # figures only
    # 10 GLUE rows x 3 variants (Table 1), x 15 (Tables 4, 5), 12 x 4 head deltas (Figures 5, 6)
    counts = dict(numbers.group_by("report", "table").len().select(pl.concat_str("report", "table", separator=":"), "len").iter_rows())
    assert counts["monolingual-pretraining-benefits:Table 1"] == 30
    assert counts["monolingual-pretraining-benefits:Table 4"] == 150
    assert counts["bert-goes-to-college:Figure 5"] == 48
    # 925 rows for 889 printed cells: a cell standing for several of our results has a row for each, as the
    # docs say (the college MRPC table's "any k" cells: 12 each; Table 7's Remove cells: 2 each)
    cells = numbers.group_by("report", "table", "row", "column").len()
    assert (numbers.height, cells.height) == (925, 889)
    assert sorted(cells.filter(pl.col("len") > 1)["len"].to_list()) == [2, 2, 2, 12, 12, 12]
    reports_page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "reports.md").read_text().split())
    assert "889 printed cells in 925 rows" in reports_page
    # one printed cell never maps to two of our cells twice
    assert numbers.select("study", "quantity", *pc.KEYS).is_duplicated().sum() == 0
    # value = printed x scale where the printed text is a plain number
    plain = numbers.filter(pl.col("printed").str.contains(r"^-?[0-9][0-9,.]*$"))
    assert (plain["printed"].str.replace_all(",", "").cast(pl.Float64) * plain["scale"] - plain["value"]).abs().max() < 1e-9


def test_report_keys_are_ours():
    numbers = pc.paper_numbers()
    assert set(numbers["quantity"]) <= {"best", "single", "mean", "delta", "curve", "value"} | {
        f"summary:{s}" for s in pc.DESCRIBE}
    glue = numbers.filter(pl.col("task").is_in(["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]))
    assert set(glue["metric"]) <= {"accuracy", "f1", "matthews_corrcoef", "pearson", "accuracy_f1_mean"}
    assert set(glue.filter(pl.col("task") == "mnli")["split"]) == {"validation_matched", "validation_mismatched"}
    assert set(numbers.filter(pl.col("study") == "reversed-layers")["variant"]) == {"pre-trained", "reversed", "clean"}
    # Table 5's EN english is printed NA: no value
    assert _cell("Table 5", "CoLA", "EN/english")["value"] is None


@needs_papers
@pytest.mark.parametrize("report,table,row,column", [
    ("monolingual-pretraining-benefits", "Table 1", "STS-B", "Layers Reversed"),
    ("monolingual-pretraining-benefits", "Table 3", "SST-2", "Foreign language/JP"),
    ("monolingual-pretraining-benefits", "Table 4", "STS-B", "ZH/shuff"),
    ("monolingual-pretraining-benefits", "Table 5", "MNLI-m", "ZH/english"),
    ("monolingual-pretraining-benefits", "Table 6", "MNLI-mm", "Oracle"),
    ("monolingual-pretraining-benefits", "Table 8", "WNLI", "remove/Every 2"),
    ("monolingual-pretraining-benefits", "Table 2", "JP", "English-like"),
    ("bert-goes-to-college", "Figure 2", "RTE", "MRPC"),
    ("bert-goes-to-college", "Figure 5", "Layer 2", "Head 9"),
    ("bert-goes-to-college", "Figure 10", "75%", "Head 1"),
    ("crosslingual-finetuning-representations", "Table 2", "Test Perplexity", "BERT/layer 9-12"),
    ("crosslingual-finetuning-representations", "Table 1", "#501", "Multi-lingual Perplexity"),
])
def test_sampled_cells_are_printed_in_the_reports_text(report, table, row, column):
    """Find the table above its caption in the report's text, the row by its key and the column by its
    header (a two-level header "ZH/shuff": the first "shuff" at or after "ZH")."""
    cell = _cell(table, row, column, report)
    lines = (PAPERS / f"{report}.txt").read_text().splitlines()
    j = next(i for i, line in enumerate(lines) if line.startswith(f"{table}:")) - 1
    while not lines[j].strip():
        j -= 1
    block = []
    while "|" in lines[j] or "\t" in lines[j]:
        block.insert(0, [c.strip() for c in re.split(r"[|\t]", lines[j].strip(" ").strip("|"))])
        j -= 1
    cells = next(r for r in block if r[0] == row)
    *top, leaf = column.split("/")
    at = block[0].index(top[0]) if top else 0
    header = next(r for r in block if leaf in r[at:])
    assert cells[header.index(leaf, at)] == cell["printed"]
    assert cell["value"] == pytest.approx(float(re.match(r"[-0-9.,]+", cell["printed"]).group().replace(",", "")) * cell["scale"])


@needs_papers
def test_every_glue_value_of_table_1_is_on_its_row():
    """Table 1 in full: 'Table 1 compares such reversed model against pre-trained transformer (BERT) and
    non-pre-trained (clean) transformer model.'"""
    text = (PAPERS / "monolingual-pretraining-benefits.txt").read_text()
    for row, group in pc.paper_numbers("reversed-layers").group_by("row", maintain_order=True):
        values = " | ".join(group.sort(pl.col("column").replace_strict(
            ["Pre-trained", "Layers Reversed", "Clean"], [0, 1, 2]))["printed"])
        assert f"| {row[0]} | {values} |" in text


@needs_papers
def test_text_numbers_outside_tables_are_quoted_from_the_text():
    text = (PAPERS / "monolingual-pretraining-benefits.txt").read_text()
    assert "English-like contexts are 1.45% of the ZH pre-training data" in text
    assert _cell("§4.1 text", "ZH", "English-like contexts")["value"] == pytest.approx(0.0145)
    assert "The English BERT has 30,522 word-pieces, and 26,503 word-pieces matching" in text
    college = (PAPERS / "bert-goes-to-college.txt").read_text()
    assert "For CoLA, the base line correlation score is 0.526." in college
    assert _cell("Figure 5 baseline", "baseline", "CoLA", "bert-goes-to-college")["value"] == 0.526


@needs_papers
def test_each_table_is_the_quantity_its_report_printed():
    """Monolingual §7: §3–4 print the best epoch of the best of three runs, §5–6 one run; the college
    report's matrix is the better of two runs; the cross-lingual Table 2 is one session per scheme."""
    mono = (PAPERS / "monolingual-pretraining-benefits.txt").read_text()
    assert ("Each experiment in section 3 and section 4 is performed three times with no fixed random seed and "
            "the best epoch of the best run is reported. Each experiment in section 5 and section 6 is performed "
            "once and the best epoch is reported.") in mono
    college = re.sub(r"\s+", " ", (PAPERS / "bert-goes-to-college.txt").read_text())
    assert "running the experiment twice and taking the better score" in college
    cross = (PAPERS / "crosslingual-finetuning-representations.txt").read_text()
    assert "we run 5 training sessions where a different layer unfreezing scheme is followed" in cross
    numbers = pc.paper_numbers()
    runs = numbers.filter(pl.col("quantity").is_in(["best", "single", "mean"]))
    quantity = dict(runs.filter(~pl.col("table").is_in(["Table 6", "Table 8"])).select(
        pl.concat_str("report", "table", separator=":"), "quantity").unique().iter_rows())
    mono_tables = {f"monolingual-pretraining-benefits:Table {t}": q for t, q in
                   (("1", "best"), ("3", "best"), ("4", "best"), ("5", "best"))}
    assert quantity == {**mono_tables, "bert-goes-to-college:Figure 2": "best",
                        "bert-goes-to-college:§5.6 MRPC table": "single",
                        "bert-goes-to-college:Figure 5 baseline": "single",
                        "bert-goes-to-college:Figure 6 baseline": "single",
                        "crosslingual-finetuning-representations:Table 2": "single"}
    # Tables 6 and 8 (§5–6, one run) set beside their own columns the §3–4 columns they repeat
    mixed = dict(runs.filter(pl.col("table").is_in(["Table 6", "Table 8"])).select(
        pl.concat_str("table", "column", separator=":"), "quantity").unique().iter_rows())
    assert mixed == {"Table 6:Pre-trained": "best", "Table 6:Shuffled": "best", "Table 6:Clean": "best",
                     "Table 6:Oracle": "single", "Table 8:base": "best", "Table 8:clean": "best",
                     "Table 8:distil": "single", "Table 8:remove/Last 6": "single", "Table 8:remove/Every 2": "single"}


def test_the_columns_tables_6_and_8_repeat_are_those_of_tables_1_and_4():
    """Why Table 6's Pre-trained, Shuffled and Clean and Table 8's base and clean are best runs of three:
    cell for cell, they are Table 1's and Table 4's numbers (each repeated cell's note says which)."""
    numbers = pc.paper_numbers().filter(pl.col("report") == "monolingual-pretraining-benefits")
    cell = {(t, r, c): v for t, r, c, v in numbers.select("table", "row", "column", "value").iter_rows()}
    source = {("Table 6", "Pre-trained"): ("Table 1", "Pre-trained"), ("Table 6", "Clean"): ("Table 1", "Clean"),
              ("Table 6", "Shuffled"): ("Table 4", "EN/shuff"), ("Table 8", "base"): ("Table 1", "Pre-trained"),
              ("Table 8", "clean"): ("Table 1", "Clean")}
    rows = sorted({r for t, r, _ in cell if t == "Table 6"})
    assert len(rows) == 10
    for (table, column), (origin, origin_column) in source.items():
        assert [cell[table, r, column] for r in rows] == [cell[origin, r, origin_column] for r in rows]
        repeated = numbers.filter((pl.col("table") == table) & (pl.col("column") == column))
        assert repeated["note"].str.starts_with(f"repeats {origin}'s").all()
    # the one-run columns are no table's repeat: the oracle's CoLA, 0.16, is in no §3–4 table's column
    assert cell["Table 6", "CoLA", "Oracle"] not in {cell[k] for k in cell if k[0] in ("Table 1", "Table 4")
                                                      and k[1] == "CoLA"}


# -- the comparison on hand-made main tables ------------------------------------------------------------

def _summary(rows: list[tuple]) -> pl.DataFrame:
    """Main-table rows (variant, task, split, metric, mean, ci_low, ci_high, n) of bert-base-uncased."""
    return pl.DataFrame(
        [{"model": EN, "variant": v, "task": t, "split": s, "metric": m, "mean": x, "sd": 0.01, "n": n,
          "ci_low": lo, "ci_high": hi, "delta": None} for v, t, s, m, x, lo, hi, n in rows],
        schema_overrides={"delta": pl.Float64})


def _best(summary: pl.DataFrame, best: dict[tuple[str, str], float]) -> pl.DataFrame:
    """all_metrics_best's rows for the summary's groups: (variant, task) -> the best run's value."""
    return summary.select("model", "task", "split", "metric", "variant", "n").with_columns(
        pl.struct("variant", "task").map_elements(lambda r: best[r["variant"], r["task"]],
                                                  return_dtype=pl.Float64).alias("best"),
        pl.lit(1, pl.Int64).alias("best_seed"))


def test_orderings_hold_overlap_violate_or_are_not_run():
    # Table 1 CoLA: 0.60 > 0.14 > 0.00; RTE: 0.62 > 0.55 > 0.53; SST-2 not run. Table 1 prints the best run
    # (monolingual §7), so the best of ours is compared and decides; the means' intervals flag overlap.
    summary = _summary([
        ("pre-trained", "cola", "validation", "matthews_corrcoef", 0.55, 0.50, 0.60, 3),
        ("reversed", "cola", "validation", "matthews_corrcoef", 0.20, 0.15, 0.25, 3),
        ("clean", "cola", "validation", "matthews_corrcoef", 0.02, 0.00, 0.04, 3),
        ("pre-trained", "rte", "validation", "accuracy", 0.60, 0.55, 0.65, 3),
        ("reversed", "rte", "validation", "accuracy", 0.63, 0.58, 0.68, 3),  # its mean is above pre-trained's
        ("clean", "rte", "validation", "accuracy", 0.50, 0.49, 0.51, 3),
    ])
    best = _best(summary, {("pre-trained", "cola"): 0.58, ("reversed", "cola"): 0.24, ("clean", "cola"): 0.03,
                           ("pre-trained", "rte"): 0.64, ("reversed", "rte"): 0.66, ("clean", "rte"): 0.51})
    cells = pc.compare_cells("reversed-layers", pc.our_values(summary, best=best))
    cola = cells.filter((pl.col("row") == "CoLA") & (pl.col("variant") == "reversed")).row(0, named=True)
    assert cola["quantity"] == "best" and cola["paper"] == 0.14
    assert cola["ours"] == 0.24 and cola["difference"] == pytest.approx(0.10)
    assert (cola["ours_mean"], cola["ours_sd"], cola["n"], cola["ci_low"]) == (0.20, 0.01, 3, 0.15)
    assert cola["status"] == "compared"
    # without the best runs, a table that prints the best run is not compared with our mean
    assert set(pc.compare_cells("reversed-layers", pc.our_values(summary))["status"]) == {"not run"}
    assert cells.filter(pl.col("row") == "SST-2")["status"].unique().to_list() == ["not run"]
    orderings = pc.compare_orderings(cells)
    status = {(o["group"], o["ordering"]): o["status"] for o in orderings.iter_rows(named=True)}
    assert status[("Table 1/CoLA", "Pre-trained > Layers Reversed")] == "holds"
    assert status[("Table 1/CoLA", "Layers Reversed > Clean")] == "holds"
    assert status[("Table 1/CoLA", "Pre-trained > Clean")] == "holds"  # asserted, though not adjacent
    assert status[("Table 1/RTE", "Pre-trained > Layers Reversed")] == "violated, not significant"  # 0.64 < 0.66
    assert status[("Table 1/RTE", "Layers Reversed > Clean")] == "holds"
    assert status[("Table 1/SST-2", "Pre-trained > Layers Reversed")] == "not run"
    # WNLI 0.58 > 0.56 = 0.56: two pairs, none between the tied cells, and 2 points is within the report's 3
    wnli = orderings.filter(pl.col("group") == "Table 1/WNLI")
    assert sorted(wnli["ordering"]) == ["Pre-trained > Clean", "Pre-trained > Layers Reversed"]
    assert set(wnli["claim"]) == {"below the stated spread"} and not wnli["asserted"].any()
    asserted = int(orderings["asserted"].sum())
    assert pc.verdict(orderings) == f"5 of 6 asserted orderings hold (1 violated, not significant; {asserted - 6} not run)"
    assert set(orderings["quantity"]) == {"best"}


def test_a_single_run_table_is_compared_with_our_mean_and_judged_on_it():
    """Table 8's own columns ran once (§7): ours is the mean over runs, the estimate of one run; with one seed,
    that run."""
    summary = _summary([("remove last 6", "sst2", "validation", "accuracy", 0.80, 0.78, 0.82, 2),
                        ("remove every 2", "sst2", "validation", "accuracy", 0.75, 0.70, 0.80, 2)])
    best = _best(summary, {("remove last 6", "sst2"): 0.81, ("remove every 2", "sst2"): 0.83})  # not compared
    cells = pc.compare_cells("layer-removal", pc.our_values(summary, best=best)).filter(
        pl.col("status") == "compared")
    assert set(cells["quantity"]) == {"single"}
    assert dict(zip(cells["variant"], cells["ours"])) == {"remove last 6": 0.80, "remove every 2": 0.75}
    # SST-2: remove/Last 6 0.91 = remove/Every 2 0.91 in the report, a tie that implies no ordering; MRPC
    # (0.85 > 0.84) is not run
    orderings = pc.compare_orderings(cells)
    assert orderings.filter(pl.col("group") == "Table 8/SST-2").is_empty()
    summary = summary.with_columns(pl.lit("mrpc").alias("task"), pl.lit("f1").alias("metric"))
    best = best.with_columns(pl.lit("mrpc").alias("task"), pl.lit("f1").alias("metric"))
    mrpc = pc.compare_orderings(pc.compare_cells("layer-removal", pc.our_values(summary, best=best)))
    status = {o["ordering"]: (o["status"], o["mixed"]) for o in mrpc.filter(pl.col("status") != "not run").iter_rows(named=True)}
    assert status == {"remove/Last 6 > remove/Every 2": ("holds, not significant", False)}  # the means decide


def test_an_ordering_between_a_best_run_and_one_run_says_so():
    """Table 6 sets Table 1's best of three (Pre-trained, Clean) and Table 4's (Shuffled) beside the oracle's
    one run: each side is judged on its own quantity, and the ordering and the verdict name the mix."""
    summary = _summary([("pre-trained", "sst2", "validation", "accuracy", 0.90, 0.88, 0.92, 3),
                        ("shuffled", "sst2", "validation", "accuracy", 0.80, 0.78, 0.82, 3),
                        ("oracle", "sst2", "validation", "accuracy", 0.70, None, None, 1),
                        ("clean", "sst2", "validation", "accuracy", 0.50, 0.48, 0.52, 3)])
    best = _best(summary, {("pre-trained", "sst2"): 0.91, ("shuffled", "sst2"): 0.81, ("oracle", "sst2"): 0.70,
                           ("clean", "sst2"): 0.69})
    cells = pc.compare_cells("init-distribution", pc.our_values(summary, best=best))
    ours = {r["variant"]: (r["quantity"], r["ours"]) for r in cells.filter(pl.col("status") == "compared").iter_rows(named=True)}
    assert ours == {"pre-trained": ("best", 0.91), "shuffled": ("best", 0.81), "oracle": ("single", 0.70),
                    "clean": ("best", 0.69)}
    orderings = pc.compare_orderings(cells).filter(pl.col("status") != "not run")
    by = {o["ordering"]: o for o in orderings.iter_rows(named=True)}
    # SST-2 in Table 6: Pre-trained 0.92 > Oracle 0.84 > Shuffled 0.83 > Clean 0.51; the report does not put
    # the oracle above the shuffled embeddings (§5.2: "hit or miss"), so that pair is shown but not counted
    assert {k: (o["quantity"], o["quantity_lower"], o["mixed"], o["status"], o["asserted"]) for k, o in by.items()} == {
        "Pre-trained > Oracle": ("best", "single", True, "holds, untested (n < 3)", True),  # the oracle ran once
        "Pre-trained > Shuffled": ("best", "best", False, "holds", True),
        "Pre-trained > Clean": ("best", "best", False, "holds", True),
        "Oracle > Shuffled": ("single", "best", True, "violated, untested (n < 3)", False),  # 0.70 against the best of 0.81
        "Oracle > Clean": ("single", "best", True, "holds, untested (n < 3)", True),
        "Shuffled > Clean": ("best", "best", False, "holds", True),
    }
    assert pc.quantity_label("best", "single") == "best run vs one run"
    assert pc.quantity_label("best", "best") == "best run"
    assert pc.verdict(orderings) == ("5 of 5 asserted orderings hold (2 of them untested (n < 3); "
                                     "1 mixed: best run vs one run; "
                                     "1 mixed: one run vs best run)")


def test_overlapping_intervals_and_single_seeds():
    a = {"ours": 0.6, "ci_low": 0.5, "ci_high": 0.7, "model": "x", "our_model": "x"}
    assert pc.ordering_status(a, {**a, "ours": 0.55, "ci_low": 0.45, "ci_high": 0.65}) == "holds, not significant"
    assert pc.ordering_status(a, {**a, "ours": 0.8, "ci_low": 0.75, "ci_high": 0.85}) == "violated"
    one = {**a, "ci_low": None, "ci_high": None}  # one seed: the means decide
    assert pc.ordering_status(one, {**one, "ours": 0.59}) == "holds"
    assert pc.ordering_status(one, {**one, "ours": None}) == "not run"
    two = {**one, "n": 2}  # two runs: no interval, so the order is not tested
    assert pc.ordering_status(two, {**two, "ours": 0.59}) == "holds, untested (n < 3)"
    assert pc.ordering_status({**two, "ours": 0.5}, {**two, "ours": 0.59}) == "violated, untested (n < 3)"
    orderings = pl.DataFrame({"status": ["holds", "holds, not significant", "violated"]})
    assert pc.verdict(orderings) == "2 of 3 orderings hold (1 of them not significant; 1 violated)"


def test_a_tie_is_a_tie_and_the_headline_counts_every_status():
    """Two runs at the majority class (0.509 and 0.509) neither reproduce nor reverse the report's order,
    whatever their intervals; the headline's counts add up to every ordering."""
    a = {"ours": 0.509, "ci_low": 0.50, "ci_high": 0.52, "model": "x", "our_model": "x"}
    assert pc.ordering_status(a, dict(a)) == "tie"
    assert pc.ordering_status({**a, "ci_low": None, "ci_high": None}, {**a, "ci_low": None, "ci_high": None}) == "tie"
    statuses = ["holds", "holds, not significant", "holds, not significant", "tie", "tie",
                "violated, not significant", "violated", "not run", "not run", "not run"]
    line = pc.verdict(pl.DataFrame({"status": statuses}))
    assert line == ("3 of 7 orderings hold (2 of them not significant; 2 ties; 1 violated, not significant; "
                    "1 violated; 3 not run)")
    assert pc.verdict(pl.DataFrame({"status": ["tie"]})) == "0 of 1 orderings hold (1 tie)"


def test_stand_in_models_compare_orderings_only():
    """A tiny run's model is not the report's: its values get no difference, its orderings still count;
    two paper models stood in by one are not an ordering of ours."""
    summary = _summary([("pre-trained", "sst2", "validation", "accuracy", 0.9, 0.88, 0.92, 3),
                        ("clean", "sst2", "validation", "accuracy", 0.5, 0.48, 0.52, 3)]).with_columns(
        pl.lit("tiny:bert").alias("model"))
    best = _best(summary, {("pre-trained", "sst2"): 0.91, ("clean", "sst2"): 0.52})
    cells = pc.compare_cells("foreign-bert", pc.our_values(summary, best=best))
    sst2 = cells.filter(pl.col("row") == "SST-2")
    assert set(sst2["status"]) == {"not comparable"} and sst2["difference"].null_count() == sst2.height
    assert set(sst2["our_model"]) == {"tiny:bert"}
    status = {o["ordering"]: o["status"] for o in pc.compare_orderings(cells).filter(
        pl.col("group") == "Table 3/SST-2").iter_rows(named=True)}
    assert status["Foreign language/JP > clean"] == "holds"  # 0.86 > 0.51 in the report
    assert status["EN > Foreign language/ES"] == "not run"  # both are tiny:bert here


# -- the report section ----------------------------------------------------------------------------------

def _study(root) -> None:
    """reversed-layers on CoLA with 3 seeds, bert-base-uncased: pre-trained > reversed > clean."""
    reversed_layers_on_cola(open_store(f"file://{root}"), "00000000000000cc", seeds=(1, 2, 3))


def reversed_layers_on_cola(store, study_id: str, seeds: tuple[int, ...]) -> None:
    """A stored reversed-layers plan on CoLA (bert-base-uncased, glue-dir data) and its runs' rows, one per
    variant and seed: pre-trained 0.58, reversed 0.15, clean 0.01, each plus 0.01 × the seed."""
    chains = {"pre-trained": (), "reversed": (Intervention("reverse-layers"),),
              "clean": (Intervention("reinit", (("scope", "all"),)),)}
    cells = [Cell("reversed-layers", v, EN, RunSpec(CheckpointSpec(EN, chain), DatasetSpec("cola", "glue-dir:x", EN), seed=s))
             for v, chain in chains.items() for s in seeds]
    spec = {"preset": "paper", "models": [EN], "seeds": list(seeds), "source": "glue-dir:x", "max_length": 128,
            "tasks": ["cola"], "regime": {"name": "full", "lr": 2e-5, "batch_size": 32, "epochs": 3},
            "variants": [{"name": v} for v in chains]}
    store.write_json(f"studies/reversed-layers/{study_id}/plan.json", {
        "study": "reversed-layers", "study_id": study_id, "spec": spec, "cells": [c.to_dict() for c in cells]})
    level = {"pre-trained": 0.58, "reversed": 0.15, "clean": 0.01}
    for c in cells:
        publish(store, "runs", c, pa.Table.from_pylist([{
            "split": "validation", "metric": "matthews_corrcoef", "value": level[c.variant] + 0.01 * c.run.seed,
            "primary": True, "best_epoch": 1, "epochs": 3, "num_train": 10, "train_seconds": 1.0, "throughput": 1.0,
            "device": "cpu", "code_version": "t"}]))


def test_the_report_section_renders_and_the_report_command_prints_the_verdict(tmp_path, capsys):
    _study(tmp_path)
    report = build_report(load_study_results(open_store(f"file://{tmp_path}"), "reversed-layers", "00000000000000cc"))
    # the verdict first: the asserted orderings this run tested, before the main table and its figure
    first = report.sections[0]
    assert first.title == "Verdict: the report vs this run" and report.sections[1].title == "Main table"
    assert first.note.startswith("**3 of 3 asserted orderings hold (24 not run).**")
    ((_, verdict_table),) = first.tables
    assert verdict_table.columns == ["group", "ordering", "quantity", "report", "this run", "status"]
    assert verdict_table["status"].to_list() == ["holds"] * 3
    assert verdict_table["this run"][0] == "0.610 vs 0.180 ([0.590, 0.610] vs [0.160, 0.180])"  # 3 runs: the means' intervals
    # the report's printed values on the main figure, beside our means
    assert '<g id="report-0">' in html(report) and "\u25c6" not in html(report)
    section = next(s for s in report.sections if s.title == "The report vs this run: every number and claim")
    assert section.note.startswith("3 of 3 asserted orderings hold (")
    assert "0.03 in Table 1, stated at line 397" in section.note
    (asserted, shown), (pairs, all_pairs) = section.tables[1:]
    assert asserted.startswith("Orderings the report asserts: 3 of 3 asserted orderings hold")
    cola = shown.filter(pl.col("group") == "Table 1/CoLA")
    assert cola["ordering"].to_list() == ["Pre-trained > Layers Reversed", "Pre-trained > Clean", "Layers Reversed > Clean"]
    assert cola["the report's claim"][2] == (
        'stated, line 170: "it is clear that reversed models always outperform clean models"')
    assert cola["the report's claim"][0].endswith("0.46 apart, above the spread 0.03 (line 397)")
    # the all-pairs view, apart: Table 1's adjacent pairs, WNLI's two not asserted (0.58 > 0.56)
    assert pairs.startswith("All pairs, asserted or not (not the verdict's)") and pairs.endswith("2 of 20 not asserted")
    assert "not asserted: 0.02 apart, within the spread 0.03 (line 397) of the ranking at line 174" in " ".join(
        all_pairs["the report's claim"])
    cells = report.tables["paper_cells"].filter(pl.col("status") == "compared")
    # Table 1 prints the best of three runs: ours is seed 3's (level + 0.03), our mean (level + 0.02) beside it
    assert cells.height == 3 and cells["difference"].to_list() == pytest.approx([0.01, 0.04, 0.04])
    assert cells["ours_mean"].to_list() == pytest.approx([0.60, 0.17, 0.03])
    assert "Table 1: the best of the report's runs (each at its selected epoch), against the best of ours" in section.note
    text = markdown(report)
    assert "| report | quantity | this run | our mean ± sd |" in text
    assert "| 0.60 | best run | 0.610 | 0.600 ± 0.010 (n=3) |" in text  # three decimals, as every table
    assert {"paper_cells", "paper_orderings"} <= set(report.tables)
    assert "## The report vs this run" in markdown(report) and "Pre-trained &gt; Layers Reversed" in html(report)
    assert main(["report", "reversed-layers", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "the report vs this run: 3 of 3 asserted orderings hold (" in out
    assert (tmp_path / "studies/reversed-layers/00000000000000cc/tables/paper_orderings.parquet").exists()


def test_the_console_reads_orderings_stored_before_mixed_ones_were_told_apart():
    """An aggregate of an older study has paper_orderings without `quantity_lower`: its orderings are of one
    quantity each, and the console's summary still prints them."""
    from bertology.results.summary import tested_orderings

    old = pl.DataFrame({"group": ["Table 1/CoLA", "Table 1/RTE"], "ordering": ["A > B", "A > C"],
                        "quantity": ["best", "best"], "ours_higher": [0.6, 0.5], "ours_lower": [0.1, 0.55],
                        "status": ["holds", "not run"]})
    assert tested_orderings(old).rows() == [("Table 1/CoLA", "A > B", "0.600 vs 0.100 (best run)", "holds")]


def test_numbers_in_the_comparison_read_as_the_other_tables_do():
    from bertology.results.cells import num

    assert [num(v) for v in (0.07089, 0, 0.5, 30522.0, 109_482_240.0, 0.0001234, None, float("nan"))] == [
        "0.071", "0.000", "0.500", "30,522", "109,482,240", "0.000123", "—", "—"]


# -- the orderings the reports assert (asserted_orderings.csv) ---------------------------------------------

SPREAD = ("For experiment configurations that are repeated for three times, we observed typical difference of 3",
          "points from the highest run to the lowest run.")  # monolingual §7, text lines 397 and 399


def _pairs(report: str, table: str) -> list[tuple[dict, dict]]:
    """Every pair of cells of one ordering group of a table, the higher printed value first."""
    cells = pc.paper_numbers().filter((pl.col("report") == report) & (pl.col("table") == table)
                                      & pl.col("value").is_not_null() & pl.col("ordering_group").is_not_null())
    cells = cells.rename({"value": "paper"}).with_columns(pl.col("ordering_group").str.split(";")).explode("ordering_group")
    return [(a, b) for _, group in cells.group_by("ordering_group") for a in group.iter_rows(named=True)
            for b in group.iter_rows(named=True) if a["paper"] > b["paper"]]


@needs_papers
def test_every_asserted_ordering_quotes_the_line_it_cites():
    claims = pc.asserted_orderings()
    assert set(claims["report"]) == {"monolingual-pretraining-benefits", "bert-goes-to-college",
                                     "crosslingual-finetuning-representations"}  # partial-reinit: figures only
    for claim in claims.iter_rows(named=True):
        lines = (PAPERS / f"{claim['report']}.txt").read_text().splitlines()
        assert claim["quote"] in lines[claim["line"] - 1], (claim["report"], claim["line"], claim["quote"])


@needs_papers
def test_the_monolingual_spread_is_three_points_from_the_highest_run_to_the_lowest():
    """§7: the run-to-run spread a ranking of the monolingual report must exceed, where it is stated."""
    lines = (PAPERS / "monolingual-pretraining-benefits.txt").read_text().splitlines()
    assert lines[396] == SPREAD[0] and lines[398].startswith(SPREAD[1])
    stated = pc.asserted_orderings().filter(pl.col("spread_line").is_not_null())
    assert set(stated["report"]) == {"monolingual-pretraining-benefits"}
    assert set(stated.select("spread", "spread_line").iter_rows()) == {(0.03, 397)}


def test_every_claim_is_well_formed_and_decides_some_pair_of_its_table():
    """Patterns that name no pair, or a claim always overruled, would be dead rows: each decides at least one."""
    claims = pc.asserted_orderings()
    assert set(claims["kind"]) == {"stated", "ranking", "equal"}
    ranking = claims.filter(pl.col("kind") == "ranking")
    assert ranking["spread"].null_count() == 0 and claims.filter(pl.col("kind") != "ranking")["spread"].null_count() == (
        claims.height - ranking.height)
    assert ranking.filter(pl.col("spread_line").is_null())["spread_note"].str.starts_with("assumed: ").all()
    decided = set()
    for report, table in claims.select("report", "table").unique().iter_rows():
        for a, b in _pairs(report, table):
            said = pc.assertion(a, b)
            decided.add((report, table, said["line"], said["quote"]))
    assert set(claims.select("report", "table", "line", "quote").iter_rows()) <= decided


def test_es_above_en_on_mnli_m_is_not_asserted_and_wnli_within_the_spread_neither():
    """Table 3 prints ES 0.77 beside EN 0.76 on MNLI-m: one point, which the report calls "nearly the
    performance", within its 3 points of spread. It stays in the all-pairs view, apart from the verdict."""
    orderings = pc.compare_orderings(pc.compare_cells("foreign-bert", pc.our_values(None)))
    (es,) = orderings.filter((pl.col("group") == "Table 3/MNLI-m")
                             & (pl.col("ordering") == "Foreign language/ES > EN")).iter_rows(named=True)
    assert (es["paper_higher"], es["paper_lower"]) == (0.77, 0.76)
    assert not es["asserted"] and es["all_pairs"] and es["claim"] == "called equal" and es["line"] == 217
    assert pc.claim_text(es).startswith('not asserted: called equal, line 217: "transformers pre-trained on')
    # a ranking's pair within the spread: Table 1's WNLI, 0.58 > 0.56, against the stated 3 points
    reversed_layers = pc.compare_orderings(pc.compare_cells("reversed-layers", pc.our_values(None)))
    (wnli,) = reversed_layers.filter((pl.col("group") == "Table 1/WNLI") & (pl.col("ordering") == "Pre-trained > Clean")
                                     ).iter_rows(named=True)
    assert not wnli["asserted"] and wnli["claim"] == "below the stated spread" and wnli["spread_line"] == 397
    # and what the text states is asserted however close: "reversed models always outperform clean models"
    (mrpc,) = reversed_layers.filter((pl.col("group") == "Table 1/MRPC") & (pl.col("ordering") == "Layers Reversed > Clean")
                                     ).iter_rows(named=True)
    assert (mrpc["paper_higher"], mrpc["paper_lower"], mrpc["asserted"], mrpc["claim"]) == (0.82, 0.81, True, "stated")


def test_the_verdict_counts_only_the_asserted_orderings():
    from bertology.results.summary import tested_orderings

    statuses = [("holds", True), ("holds, not significant", True), ("violated", True), ("not run", True),
                ("violated", False), ("violated", False), ("holds", False), ("tie", False), ("not run", False)]
    orderings = pl.DataFrame({
        "group": [f"g{i}" for i in range(len(statuses))], "ordering": ["A > B"] * len(statuses),
        "quantity": ["best"] * len(statuses), "quantity_lower": ["best"] * len(statuses),
        "mixed": [False] * len(statuses), "ours_higher": [0.6] * len(statuses), "ours_lower": [0.5] * len(statuses),
        "status": [s for s, _ in statuses], "asserted": [a for _, a in statuses]})
    assert pc.verdict(orderings) == "2 of 3 asserted orderings hold (1 of them not significant; 1 violated; 1 not run)"
    assert tested_orderings(orderings)["group"].to_list() == ["g0", "g1", "g2"]
    unasserted = orderings.with_columns(pl.lit(False).alias("asserted"))
    assert pc.verdict(unasserted) == "the report asserts no ordering for this study"
    assert pc.verdict(orderings.filter(pl.col("status") == "not run")) == (
        "no asserted ordering of the report could be tested (1 not run)")
