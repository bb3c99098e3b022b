"""The report vs this run: the reports' own numbers (paper_numbers.csv) beside ours, and their orderings.

`paper_numbers.csv` (package data, next to this module) is the transcription of every number of every
results table of the four reports (the README lists them by title), a row per printed cell and result it maps
to (a cell standing for several of our results has a row for each), made by parsing the reports' text
(tests/test_paper_numbers.py checks it against that text where a copy is at hand):
- report, table (as the report names it: "Table 1", "Figure 2" where a figure is a table of numbers,
  "§5.6 MRPC table" for the college report's uncaptioned table), row and column (the keys as printed; a
  two-level header as "EN/shuff"), printed (the cell's text), source (section, table and text line), note
  (what we assumed to map it, e.g. the metric of a report that says only "GLUE scores");
- value: the number in our units, = printed × scale (`scale` 1 where the report already prints fractions,
  as all four do for GLUE; 0.01 for a percentage; 1e6 for "# param(M)"); empty where the report prints
  "NA" or "-"; paper_sd where it prints "mean (± sd)";
- our keys: study (the workflow), model (hub id), task, split, metric and variant (our names), intermediate
  ("none" for a direct fine-tune), layer/head (0-based, the report's 1-based "Layer 1" is 0), over/index
  (which head-delta summary row: the college report's Figures 7–10), step (the cross-lingual Table 1's
  "#501" is step 500, assumed), quantity (what the number is, in the report's own terms: "best", the best
  of its runs, each at its selected epoch (the monolingual report's §3–4 tables: "the best epoch of the best
  run", of three; the college report's sequential matrix: "the better score" of two); "single", one run (the
  monolingual report's §5–6, the college report's other tables, the cross-lingual Table 2); "mean" over
  runs; "delta" from the baseline; "curve" at a training step (mean over runs); "value" of a one-off
  measurement such as a vocabulary count; "summary:<stat>" of the head deltas), ordering_group (the cells
  whose order the table implies, ";"-separated where a cell is in two).

Ours is the same quantity (`ours`): the best of our runs for "best", our mean over runs for "mean",
"single", "delta" and "curve" (with one seed, the study's default where the report ran once, that is the
one run; with more, the mean estimates one run), with our mean ± sd, n and the mean's bootstrap 95%
interval beside it (`ours_mean`, `ours_sd`, `n`, `ci_low`, `ci_high`).

Not transcribed: the partial-reinitialization report has no numeric results table (its results are Figures
1–5 only; its Table 1 is task statistics), nor do the college report's Figures 1, 3 and 4 (plots); the
cross-lingual report's Figures 1–3 and A.1–A.4 are plots. Numbers only in running text that restate a table
(e.g. "the baseline accuracy score of 0.777", which its Figure 2 prints as 0.776) are not separate cells;
the text numbers that are in no table are (English BERT's 30,522 and 26,503 word-pieces, the 1.45% and
1.12% English-like contexts, the head-reinit baselines 0.526 and 0.872).

Orderings: a pair of cells of one ordering group whose printed values differ ("A > B", A's above B's; ties
imply nothing). Only the orderings the report asserts count in the verdict: a table printing ES 0.77 beside
EN 0.76 (the monolingual Table 3, MNLI-m) claims no order when three runs of one configuration differ by
about 3 points (its §7), and its text calls the two close. `asserted_orderings.csv` (package data, next to this
module) holds what the reports claim, one row per claim: report and table, the two sides (higher_row,
higher_column, lower_row, lower_column: patterns for paper_numbers.csv's row and column, `;` between
alternatives, `*` for any text: "*/base" > "*/shuff" is every language's pair of Table 4), the report's
`line` and its exact words (`quote`; tests/test_paper_numbers.py finds them there), a `note`, and `kind`:
- "stated": a sentence names the pair ("reversed models always outperform clean models"; WNLI above RTE as
  CoLA's intermediate task): asserted whatever the gap, where the table prints it in that order;
- "ranking": the text ranks the table's columns in general ("slightly worse ... and substantially better"):
  asserted where the printed difference exceeds `spread`, the report's run-to-run spread (`spread_line`
  where it states one: the monolingual report's 3 points, for its §3–4 tables; else `spread_note` says why
  the threshold was assumed: the one-run §5–6 columns, the college report, the cross-lingual Table 2);
- "equal": the report calls the two equal or close ("just as good"): not asserted.
Where claims overlap, a stated one decides, then an "equal" one, then a ranking (`assertion`). Each ordering
of `compare_orderings` says whether it is asserted, by which claim, or why not (`claim`: "stated", "ranked,
above the stated spread"; "called equal", "below the stated spread", "no claim"), and whether it is in the
all-pairs view (`all_pairs`: each cell of a printed value above each cell of the group's next lower
value, asserted or not). The rule for our results, per ordering A > B
(`ordering_status`), judged on the report's quantity (`ours`), shown with our means' intervals:
- "not run": A or B has no result of ours, or both map to the same result (stand-ins merged two models);
- "holds": our A > our B, and the bootstrap 95% intervals of their means are disjoint, or either is a
  number without runs to spread it (a measurement, a count: the values decide);
- "holds, not significant": our A > B but the intervals overlap;
- "holds, untested (n < 3)": our A > B, but a side has fewer than 3 runs, so no interval to test it;
- "tie": our A = B exactly (two runs at the majority class, typically): the report's order is neither
  reproduced nor reversed;
- "violated, not significant": our A < B, intervals overlapping;
- "violated, untested (n < 3)": our A < B, a side with fewer than 3 runs;
- "violated": our A < B, intervals disjoint or absent.
The verdict counts the asserted orderings only, the first two statuses as holding, and names how many of each
other status there are: "12 of 14 asserted orderings hold (3 of them not significant; 1 tie; 1 violated;
4 not run)"; the study report lists the all-pairs view apart, asserted or not.

Each side is judged on its own cell's quantity, as the report printed it. Where the report's table sets
two quantities side by side (the monolingual report's Table 6 sets Table 1's best of three runs beside the
oracle's one run, §7), the ordering is `mixed` (`quantity` is the higher cell's, `quantity_lower` the lower's;
the report shows "best run vs one run") and the verdict counts such orderings: the report's own comparison
is of unlike numbers, and so is ours.

Models: a paper model we ran is itself; one we did not run maps to the one model our results have for the
same variant (a preset's stand-in, or a user's model), and the values are then not comparable: the cells
table shows them without a difference and only the orderings are compared.
"""

from __future__ import annotations

import fnmatch
import itertools
from functools import cache
from importlib import resources

import polars as pl

from bertology.results import stats

KEYS = ("model", "task", "split", "metric", "variant", "intermediate", "layer", "head", "over", "index", "step")
ORDERED = ("mean", "best", "single", "value", "curve")  # quantities whose cells take part in orderings
HOLDS = ("holds", "holds, not significant", "holds, untested (n < 3)")
VIOLATED = ("violated", "violated, not significant", "violated, untested (n < 3)")
# The statuses of tables stored before the wording above, as they read now
OLD_STATUSES = {"holds (within CI overlap)": HOLDS[1], "violated (within CI overlap)": VIOLATED[1]}
OURS = {"ours": pl.Float64, "ours_mean": pl.Float64, "ours_sd": pl.Float64, "n": pl.Int64, "ci_low": pl.Float64,
        "ci_high": pl.Float64}
# What each quantity is, as the study report's table says it
QUANTITIES = {"best": "best run", "single": "one run", "mean": "mean over runs", "delta": "Δ from the baseline",
              "curve": "mean at the step", "value": "measured"}
PROFILE_METRICS = ("n_params", "speedup", "intervention_cpu_seconds")
VOCAB_METRICS = ("vocab_size", "english_like", "overlap", "english_window_share")
DESCRIBE = ("n", "mean", "std", "min", "25%", "50%", "75%", "max")


@cache
def _all_numbers() -> pl.DataFrame:
    text = resources.files("bertology.results").joinpath("paper_numbers.csv").read_bytes()
    strings = {c: pl.String for c in ("report", "table", "row", "column", "printed", "quantity", "study",
                                      "ordering_group", "source", "note", *KEYS)}
    return pl.read_csv(text, schema_overrides={**strings, "value": pl.Float64, "scale": pl.Float64,
                                               "paper_sd": pl.Float64})


@cache
def _all_claims() -> pl.DataFrame:
    text = resources.files("bertology.results").joinpath("asserted_orderings.csv").read_bytes()
    strings = {c: pl.String for c in ("report", "table", "kind", "higher_row", "higher_column", "lower_row",
                                      "lower_column", "spread_note", "quote", "note")}
    return pl.read_csv(text, schema_overrides={**strings, "spread": pl.Float64, "spread_line": pl.Int64,
                                               "line": pl.Int64})


def paper_numbers(study: str | None = None) -> pl.DataFrame:
    """The transcribed cells, of one study (workflow name) or all."""
    numbers = _all_numbers()
    return numbers if study is None else numbers.filter(pl.col("study") == study)


def our_values(summary: pl.DataFrame | None = None, *, best: pl.DataFrame | None = None,
               head_summary: pl.DataFrame | None = None, forgetting: pl.DataFrame | None = None,
               vocabulary: pl.DataFrame | None = None, profile: pl.DataFrame | None = None) -> pl.DataFrame:
    """Our numbers in one long frame, keyed as paper_numbers: KEYS (String, null where a frame has no such
    label), quantity, and ours (the value of that quantity), ours_mean, ours_sd, n, ci_low, ci_high.

    - summary: rows of bertology.results.stats.summarize (the main table's columns: model, task, split,
      metric, variant, intermediate, n, mean, sd, ci_low, ci_high, delta): quantities "mean" and "single"
      (the mean: one run's expected value), and "delta" where it has a delta;
    - best: rows of `all_metrics_best` (the summary's keys, best): quantity "best", beside the summary's
      mean, sd, n and interval of the same group;
    - head_summary: analysis.head_delta_summary: quantity "summary:<stat>" per over/index;
    - forgetting: analysis.forgetting_curve: quantity "curve" per step (perplexity);
    - vocabulary: analysis.vocabulary_table; profile: analysis.model_profile_summary: quantity "value".
    """
    parts = []
    if summary is not None and not summary.is_empty():
        for quantity in ("mean", "single"):
            parts.append(_long(summary, quantity, mean="mean", sd="sd", n="n", ci_low="ci_low", ci_high="ci_high"))
        if best is not None and not best.is_empty():
            keys = [k for k in summary.columns if k in best.columns and k not in ("n", "best", "best_seed")]
            both = best.select(*keys, "best").join(summary, on=keys, how="inner", nulls_equal=True,
                                                   maintain_order="left")
            parts.append(_long(both, "best", mean="best", ours_mean="mean", sd="sd", n="n", ci_low="ci_low",
                               ci_high="ci_high"))
        if "delta" in summary.columns:
            parts.append(_long(summary.filter(pl.col("delta").is_not_null()), "delta", mean="delta"))
    if head_summary is not None and not head_summary.is_empty():
        heads = head_summary.filter(pl.col("over") != "all")
        for stat in DESCRIBE:
            parts.append(_long(heads, f"summary:{stat}", mean=stat))
    if forgetting is not None and not forgetting.is_empty():
        parts.append(_long(forgetting.with_columns(pl.lit("perplexity").alias("metric")), "curve",
                           mean="mean", sd="sd", n="n"))
    if vocabulary is not None and not vocabulary.is_empty():
        for metric in (m for m in VOCAB_METRICS if m in vocabulary.columns):
            parts.append(_long(vocabulary.with_columns(pl.lit(metric).alias("metric")), "value", mean=metric))
    if profile is not None and not profile.is_empty():
        for metric in (m for m in PROFILE_METRICS if m in profile.columns):
            parts.append(_long(profile.with_columns(pl.lit(metric).alias("metric")), "value", mean=metric))
    if not parts:
        return pl.DataFrame(schema={**{k: pl.String for k in KEYS}, "quantity": pl.String, **OURS})
    return pl.concat(parts, how="vertical")


def compare_cells(study: str, ours: pl.DataFrame, *, comparable: bool = True) -> pl.DataFrame:
    """Per transcribed cell of the study: the paper's value, ours (the same quantity; our mean, sd, n and
    interval beside it), and ours - paper (`difference`, null where the values are not comparable: stand-in models, or `comparable`
    False). `status`: "compared", "not comparable" or "not run"; `our_model` is the model matched."""
    paper = paper_numbers(study).with_row_index("_cell")
    mapped, stood_in = _map_models(paper, ours)
    comparable = comparable and not stood_in
    matched = _match(mapped, ours)
    out = mapped.join(matched, on="_cell", how="left", maintain_order="left")
    fair = pl.lit(comparable) & (pl.col("our_model") == pl.col("model"))
    return out.with_columns(
        pl.when(fair).then(pl.col("ours") - pl.col("value")).alias("difference"),
        pl.when(pl.col("ours").is_null()).then(pl.lit("not run"))
        .when(fair).then(pl.lit("compared")).otherwise(pl.lit("not comparable")).alias("status"),
    ).rename({"value": "paper"}).select(
        "_cell", "report", "table", "row", "column", "printed", "scale", "quantity", *KEYS, "ordering_group",
        "paper", "paper_sd", "our_model", *OURS, "difference", "status", "source", "note")


def compare_orderings(cells: pl.DataFrame) -> pl.DataFrame:
    """The report's orderings (module docstring), from `compare_cells`' output, with whether each holds in our
    results (`status`, the rule of the module docstring): every ordering the report asserts (`asserted`), and
    every pair of adjacent printed values of a group (`all_pairs`, the all-pairs view), asserted or not; `claim`,
    `line` and `quote` say why (`assertion`)."""
    usable = (cells.filter(pl.col("quantity").is_in(ORDERED) & pl.col("paper").is_not_null()
                           & pl.col("ordering_group").is_not_null())
              .with_columns(pl.col("ordering_group").str.split(";").alias("group")).explode("group"))
    claims = asserted_orderings().to_dicts()
    rows = []
    for (group,), members in usable.partition_by("group", maintain_order=True, as_dict=True).items():
        by = "column" if members["column"].n_unique() > 1 else "row"
        levels = sorted(set(members["paper"].to_list()), reverse=True)
        adjacent = set(itertools.pairwise(levels))
        for high, low in itertools.combinations(levels, 2):
            for a in members.filter(pl.col("paper") == high).iter_rows(named=True):
                for b in members.filter(pl.col("paper") == low).iter_rows(named=True):
                    said = assertion(a, b, claims)
                    if not (said["asserted"] or (high, low) in adjacent):
                        continue
                    rows.append({"report": a["report"], "table": a["table"], "group": group,
                                 "quantity": a["quantity"], "quantity_lower": b["quantity"],
                                 "mixed": a["quantity"] != b["quantity"],
                                 "ordering": f"{a[by]} > {b[by]}", "higher": a[by], "lower": b[by],
                                 "paper_higher": a["paper"], "paper_lower": b["paper"],
                                 "ours_higher": a["ours"], "ours_lower": b["ours"],
                                 "ci_higher": _interval(a), "ci_lower": _interval(b),
                                 "status": ordering_status(a, b), **said, "all_pairs": (high, low) in adjacent})
    schema = {"report": pl.String, "table": pl.String, "group": pl.String, "quantity": pl.String,
              "quantity_lower": pl.String, "mixed": pl.Boolean, "ordering": pl.String,
              "higher": pl.String, "lower": pl.String, "paper_higher": pl.Float64, "paper_lower": pl.Float64,
              "ours_higher": pl.Float64, "ours_lower": pl.Float64, "ci_higher": pl.String, "ci_lower": pl.String,
              "status": pl.String, "asserted": pl.Boolean, "claim": pl.String, "line": pl.Int64,
              "quote": pl.String, "spread": pl.Float64, "spread_line": pl.Int64, "all_pairs": pl.Boolean}
    return pl.DataFrame(rows, schema=schema)


def asserted_orderings(report: str | None = None) -> pl.DataFrame:
    """The reports' claims of order (asserted_orderings.csv, module docstring), of one report or all."""
    claims = _all_claims()
    return claims if report is None else claims.filter(pl.col("report") == report)


def assertion(a: dict, b: dict, claims: list[dict] | None = None) -> dict:
    """Whether the report asserts the ordering A > B of two cells of one group (dicts with report, table, row,
    column, paper; A's printed value above B's): `asserted`, `claim` (why, or why not), the report's `line` and
    `quote`, and the `spread` (with its `spread_line` where the report states it) of a ranking. Of the claims
    that cover the pair, a stated one decides first, then one calling the two equal, then a ranking."""
    claims = asserted_orderings().to_dicts() if claims is None else claims
    found = []
    for c in claims:
        if (c["report"], c["table"]) != (a["report"], a["table"]):
            continue
        forward = _covers(c, "higher", a) and _covers(c, "lower", b)
        if c["kind"] == "equal" and (forward or (_covers(c, "higher", b) and _covers(c, "lower", a))):
            found.append((1, "called equal", c))
        elif c["kind"] == "stated" and forward:
            found.append((0, "stated", c))
        elif c["kind"] == "ranking" and forward:
            basis = "stated" if c["spread_line"] is not None else "assumed"
            above = round(a["paper"] - b["paper"], 9) > c["spread"]
            found.append((2, f"ranked, above the {basis} spread", c) if above else
                         (3, f"below the {basis} spread", c))
    if not found:
        return {"asserted": False, "claim": "no claim", "line": None, "quote": None, "spread": None,
                "spread_line": None}
    rank, claim, c = min(found, key=lambda f: f[0])
    return {"asserted": rank in (0, 2), "claim": claim, "line": c["line"], "quote": c["quote"],
            "spread": c["spread"], "spread_line": c["spread_line"]}


def claim_text(ordering: dict) -> str:
    """An ordering's claim (a row of `compare_orderings`) as the study report shows it: where the report says
    so, or why it is not asserted."""
    if ordering["claim"] == "no claim":
        return "not asserted: no sentence or ranking of the report covers it"
    said = f'line {ordering["line"]}: "{ordering["quote"]}"'
    if ordering["claim"] == "stated":
        return f"stated, {said}"
    if ordering["claim"] == "called equal":
        return f"not asserted: called equal, {said}"
    gap = round(ordering["paper_higher"] - ordering["paper_lower"], 9)
    stated = ordering["spread_line"] is not None
    spread = f"{ordering['spread']:g} " + (f"(line {ordering['spread_line']})" if stated else "(assumed)")
    if ordering["asserted"]:
        return f"ranked, {said}; {gap:g} apart, above the spread {spread}"
    return f"not asserted: {gap:g} apart, within the spread {spread} of the ranking at {said}"


def quantity_label(higher: str, lower: str) -> str:
    """What an ordering compares, in the report's terms: "best run", or "best run vs one run" where the
    report's table sets two quantities side by side."""
    if higher == lower:
        return QUANTITIES.get(higher, higher)
    return f"{QUANTITIES.get(higher, higher)} vs {QUANTITIES.get(lower, lower)}"


def ordering_status(a: dict, b: dict) -> str:
    """Whether the paper's A > B holds for our results of A and B (dicts with ours, ci_low, ci_high,
    our_model and the cell keys); the rule of the module docstring."""
    if a["ours"] is None or b["ours"] is None or _same_result(a, b):
        return "not run"
    overlap = (None not in (a["ci_low"], a["ci_high"], b["ci_low"], b["ci_high"])
               and a["ci_low"] <= b["ci_high"] and b["ci_low"] <= a["ci_high"])
    untested = any(c.get("n") is not None and c["n"] < stats.MIN_INTERVAL_RUNS
                   and None in (c.get("ci_low"), c.get("ci_high")) for c in (a, b))
    if a["ours"] > b["ours"]:
        return HOLDS[2] if untested else HOLDS[1] if overlap else HOLDS[0]
    if a["ours"] == b["ours"]:
        return "tie"
    return VIOLATED[2] if untested else VIOLATED[1] if overlap else VIOLATED[0]


def verdict(orderings: pl.DataFrame) -> str:
    """One line on the orderings the report asserts (all, for a table stored before they were told apart):
    "12 of 14 asserted orderings hold", then every other count, so that they add up: how many of those hold
    without significance (our intervals overlap), how many tie, how many are violated (significantly or not), how many of the
    tested ones compare two quantities (the report's best run against its one run), and how many the run
    could not test. Pairs the report does not assert are not counted: they are shown apart."""
    told = "asserted" in orderings.columns
    if told:
        orderings = orderings.filter(pl.col("asserted"))
    noun = "asserted orderings" if told else "orderings"
    status = (orderings["status"].replace(OLD_STATUSES) if "status" in orderings.columns
              else pl.Series([], dtype=pl.String))
    tested = int((status != "not run").sum())
    held = int(status.is_in(HOLDS).sum())
    not_run = int((status == "not run").sum())
    if tested == 0:
        return (f"no {noun.removesuffix('s')} of the report could be tested ({not_run} not run)" if not_run
                else f"the report {'asserts' if told else 'states'} no ordering for this study")
    counts = {label: int((status == s).sum()) for s, label in (
        (HOLDS[1], "of them not significant"), (HOLDS[2], "of them untested (n < 3)"), ("tie", "tie"),
        (VIOLATED[1], "violated, not significant"), (VIOLATED[2], "violated, untested (n < 3)"),
        ("violated", "violated"))}
    details = [f"{n} {label}{'s' if label == 'tie' and n > 1 else ''}" for label, n in counts.items() if n]
    if "mixed" in orderings.columns:
        mixed = orderings.filter(pl.col("mixed") & (pl.col("status") != "not run"))
        for (higher, lower), group in mixed.partition_by("quantity", "quantity_lower", maintain_order=True,
                                                         as_dict=True).items():
            details.append(f"{group.height} mixed: {quantity_label(higher, lower)}")
    details += [f"{not_run} not run"] if not_run else []
    return f"{held} of {tested} {noun} hold" + (f" ({'; '.join(details)})" if details else "")


def section_note(cells: pl.DataFrame, verdict: str) -> str:
    """The study report's note on the comparison: the verdict, which quantity each of the report's tables
    is and what of ours stands beside it, and the ordering rule."""
    shown = cells.filter(pl.col("quantity").is_in(list(QUANTITIES)))
    tables = (shown.group_by("quantity", maintain_order=True).agg(pl.col("table").unique(maintain_order=True))
              .iter_rows())
    said = {"best": "the best of the report's runs (each at its selected epoch), against the best of ours",
            "single": "one run of the report's, against our mean over runs (our one run with one seed)",
            "mean": "the report's mean over runs, against ours",
            "delta": "a difference from the baseline, against our mean difference",
            "curve": "the report's mean at a training step, against ours",
            "value": "a measurement, against ours"}
    kinds = "; ".join(f"{', '.join(t)}: {said[q]}" for q, t in tables)
    return (f"{verdict}. The report's own numbers (paper_numbers.csv, transcribed from its tables) beside the same "
            f"quantity of this run ({kinds}), with our mean ± sd over seeds beside it; difference = ours - the "
            "report's. An ordering A > B counts when the report asserts it (asserted_orderings.csv): a sentence "
            "of its text states it (the line is cited), or a table the text ranks prints A more than the report's "
            f"run-to-run spread above B ({_spreads(cells)}). Pairs the report calls equal, pairs within the spread "
            "and pairs no sentence covers are not asserted: they are in the all-pairs table, apart, and not in the "
            "verdict. An ordering is judged on the report's quantity and holds when our A is above our B; \"not "
            "significant\" when the bootstrap 95% intervals of our two means overlap, so the order could be noise; "
            "\"untested (n < 3)\" when a side has fewer than 3 runs, so no interval (rule: "
            "bertology.results.paper_comparison).")


def _spreads(cells: pl.DataFrame) -> str:
    """The run-to-run spreads the rankings of the cells' tables use, where each comes from."""
    tables = cells.select("report", "table").unique()
    claims = asserted_orderings().join(tables, on=["report", "table"], maintain_order="left")
    ranked = (claims.filter(pl.col("kind") == "ranking")
              .group_by("spread", "spread_line", "spread_note", maintain_order=True)
              .agg(pl.col("table").unique(maintain_order=True)))
    if ranked.is_empty():
        return "this report's tables rank nothing beyond what its text states"
    return "; ".join(f"{spread:g} in {', '.join(tables)}, " + (f"stated at line {line}" if line is not None else note)
                     for spread, line, note, tables in ranked.iter_rows())


# -- helpers ----------------------------------------------------------------------------------------------

def _long(frame: pl.DataFrame, quantity: str, *, mean: str, ours_mean: str | None = None, sd: str | None = None,
          n: str | None = None, ci_low: str | None = None, ci_high: str | None = None) -> pl.DataFrame:
    def col(name: str | None, dtype) -> pl.Expr:
        return pl.col(name).cast(dtype) if name and name in frame.columns else pl.lit(None, dtype)

    keys = [(pl.col(k).cast(pl.String) if k in frame.columns else pl.lit(None, pl.String)).alias(k) for k in KEYS]
    out = frame.select(*keys, pl.lit(quantity).alias("quantity"), col(mean, pl.Float64).alias("ours"),
                       col(ours_mean or (mean if sd else None), pl.Float64).alias("ours_mean"),
                       col(sd, pl.Float64).alias("ours_sd"), col(n, pl.Int64).alias("n"),
                       col(ci_low, pl.Float64).alias("ci_low"), col(ci_high, pl.Float64).alias("ci_high"))
    return out.with_columns(pl.col("intermediate").fill_null("none"))


def _map_models(paper: pl.DataFrame, ours: pl.DataFrame) -> tuple[pl.DataFrame, bool]:
    """The paper's models as ours: itself when we ran it, else the one model our results have for the cell's
    variant (any variant for a cell without one); whether any was stood in."""
    ran = set(ours["model"].drop_nulls())
    by_variant = {v: set(g["model"].drop_nulls()) for (v,), g in ours.partition_by("variant", as_dict=True).items()}
    mapping, stood_in = [], False
    for model, variant in paper.select("model", "variant").iter_rows():
        if model in ran or model is None:
            mapping.append(model)
            continue
        candidates = by_variant.get(variant, set()) if variant is not None else ran
        mapping.append(next(iter(candidates)) if len(candidates) == 1 else None)
        stood_in |= len(candidates) == 1
    return paper.with_columns(pl.Series("_ours_model", mapping, pl.String)), stood_in


def _match(paper: pl.DataFrame, ours: pl.DataFrame) -> pl.DataFrame:
    """Per paper cell, the first of our rows with its quantity and mapped model whose every other key
    equals the cell's or is null on either side (a label the report or our table does not have)."""
    if ours.is_empty():
        return pl.DataFrame(schema={"_cell": pl.UInt32, "our_model": pl.String, **OURS})
    right = ours.with_row_index("_ours").rename({k: f"{k}_o" for k in KEYS})
    pairs = paper.select("_cell", "_ours_model", "quantity", *(k for k in KEYS if k != "model")).join(
        right, left_on=["_ours_model", "quantity"], right_on=["model_o", "quantity"], how="inner")
    fits = [pl.col(k).is_null() | pl.col(f"{k}_o").is_null() | (pl.col(k) == pl.col(f"{k}_o"))
            for k in KEYS if k != "model"]
    return (pairs.filter(*fits).sort("_cell", "_ours").unique("_cell", keep="first", maintain_order=True)
            .select("_cell", pl.col("_ours_model").alias("our_model"), *OURS))


def _same_result(a: dict, b: dict) -> bool:
    """Whether two paper cells matched the same row of ours (two paper models stood in by one)."""
    keys = ("our_model", *(k for k in KEYS if k != "model"), "quantity")
    return all(a.get(k) == b.get(k) for k in keys) and a.get("model") != b.get("model")


def _covers(claim: dict, side: str, cell: dict) -> bool:
    """Whether a claim's side (`higher` or `lower`: a row and a column pattern, `;`-separated alternatives,
    `*` for any text) names the cell."""
    return all(any(fnmatch.fnmatchcase(cell[key], p) for p in claim[f"{side}_{key}"].split(";"))
               for key in ("row", "column"))


def _interval(cell: dict) -> str | None:
    if cell["ci_low"] is None or cell["ci_high"] is None:
        return None
    return f"[{cell['ci_low']:.3f}, {cell['ci_high']:.3f}]"


def all_metrics_summary(runs: pl.LazyFrame | pl.DataFrame, baseline: str | None) -> pl.DataFrame:
    """The main table's statistics (bertology.results.stats.summarize) for every metric, not only the
    primary one (the reports print MRPC accuracy, the test split's perplexity), plus "accuracy_f1_mean",
    the mean of accuracy and F1 per run and split (the college report's MRPC "Accuracy & F1", HF run_glue's
    combined score)."""
    combined, by = _every_metric(runs)
    return stats.summarize(combined, by=by, baseline=baseline)


def all_metrics_best(runs: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """The best run of each group (bertology.results.stats.best_of_runs: the largest value, the smallest for
    perplexity) for every metric of `all_metrics_summary`, each on its own: the report's "best" cells."""
    combined, by = _every_metric(runs)
    return stats.best_of_runs(combined, by=by)


def _every_metric(runs: pl.LazyFrame | pl.DataFrame) -> tuple[pl.LazyFrame, list[str]]:
    """Every metric's rows, with "accuracy_f1_mean" added, and the keys that group them besides the variant."""
    runs = runs.lazy()
    columns = runs.collect_schema().names()
    labels = [c for c in columns if c not in ("run_id", "split", "metric", "value", "primary")]
    both = (runs.filter(pl.col("metric").is_in(["accuracy", "f1"]))
            .group_by("run_id", "split", maintain_order=True)
            .agg(pl.col("value").mean(), pl.col("metric").n_unique().alias("_metrics"), *(pl.col(c).first() for c in labels))
            .filter(pl.col("_metrics") == 2).drop("_metrics")
            .with_columns(pl.lit("accuracy_f1_mean").alias("metric"), pl.lit(False).alias("primary")))
    combined = pl.concat([runs, both.select(columns)], how="vertical")
    by = [c for c in ("model", "task", "intermediate", "fraction", "count", "split", "metric") if c in columns]
    return combined, by
