"""The study report: which tables and plots a study gets (build_report), and their Markdown and HTML
renderings (markdown, html).

The page opens with the study's title and what it reproduces (its workflow's header), its name and id
small, and the verdict: the orderings the study's paper asserts, holding or violated here. The layout
that follows comes from what the study varies, never from its name:
- always: the main table (mean ± sd [95% interval] (n), the interval from 3 runs on, the runs themselves
  below that; variants as columns; with more than MAX_VARIANT_COLUMNS variants a long form, one row per
  variant) and its figure (each variant's mean with its interval, the unmodified model dashed, the
  paper's printed values as markers labelled "report"), where the best epoch was chosen on the reported split, each
  variant's difference from the unmodified model with its paired p-value and the Benjamini–Hochberg
  adjusted one, and the runs that are missing or failed (never dropped silently);
- variants with `layer` and `head` levels: the head deltas as layer × head matrices and heat maps, and
  their summary per layer, per head and over all heads;
- any other numeric level axis (e.g. K, the layers re-initialised): the primary metric along it per data
  size, with the unmodified model dashed;
- intermediate tasks: the sequential matrix (intermediate × final task);
- a training-loss series (`log_every`): the loss against the training step, one line per variant;
- perplexity curves (a masked-LM task): the forgetting curve (a panel per eval split, the variants its
  lines), and the best-point perplexity per eval split;
- activation distances: their curves per layer; weight distances with more than one data size: the
  distance per layer and size; a model profile whose variants differ in size: parameters and inference
  speed (otherwise the speeds differ by noise alone); vocabulary analyses of the study's models: the
  vocabulary table; shuffled word embeddings: the rows each model's shuffle moved and kept, from the
  checkpoints' manifests; on request, the best run of each group.

What follows from the paper a study reproduces (bertology.results.conventions): the best run of each group
for the monolingual report's studies, MRPC by accuracy in the college report's sequential matrix. As the
papers do, layers and heads are numbered from 1 in every rendered label (`L1H1`, "layer 1"; embeddings and
pooler by name); the weight names and every stored table keep the 0-based indices.

`build_report` computes the analysis tables (bertology.results.analysis, written as Parquet beside the
report) and the sections. Its modules, none of which imports this one:
- main_table, sections, coverage, paper: the section builders (SECTIONS lists them in order);
- document: Section and Report, what the builders produce and the renderers read;
- render: Markdown, and HTML from a Jinja2 template (templates/, package data).
The display text of a cell and labels as the papers write them (bertology.results.cells, .labels) sit
outside the package, since the console's summary prints them too without loading the report's plotting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Literal

import polars as pl

from bertology.results import analysis, conventions
from bertology.results.labels import own_models
from bertology.results.report import coverage, main_table, paper, sections
from bertology.results.report.document import Report, Section, settings, workflow_heading
from bertology.results.report.render import html, markdown
from bertology.results.study_results import StudyResults

__all__ = ["SECTIONS", "Report", "Section", "build_report", "html", "markdown"]

Builder = Callable[[StudyResults, "pl.DataFrame | None", pl.DataFrame],
                   tuple[list[Section], dict[str, pl.DataFrame]]]

# Every section builder, in the report's order, and what it needs: "runs", the runs table (a plan without
# runs, the vocab-overlap study, has only its vocabulary and what is missing); "best of runs", that too,
# and the study's paper or the caller asking for it. The order is the design (the verdict on the report's
# orderings first, what a reader came for; then the main result with the report's numbers on its figure, what
# the study varies, what is missing or stood in, and every number and claim of the paper last), so it is
# listed here rather than registered by the builders.
SECTIONS: tuple[tuple[Builder, Literal["always", "runs", "best of runs"]], ...] = (
    (paper.verdict, "always"),
    (main_table.main, "runs"),
    (main_table.best_of_runs, "best of runs"),
    (sections.heads, "runs"),
    (sections.level_curves, "runs"),
    (sections.sequential, "runs"),
    (sections.training_loss, "runs"),
    (sections.perplexity, "runs"),
    (sections.activations, "runs"),
    (sections.weights, "runs"),
    (sections.profile, "runs"),
    (sections.vocabulary, "always"),
    (sections.embedding_rows, "always"),
    (coverage.missing, "always"),
    (coverage.preset, "always"),
    (paper.comparison, "always"),
)


def build_report(results: StudyResults, *, best_of_runs: bool = False) -> Report:
    """Every section that applies to the study, in SECTIONS' order, and the analysis tables behind them."""
    # the tables several sections read, read once (one row per run and metric or module: small)
    results = replace(results, tables={**results.tables, **{t: results.tables[t].collect().lazy() for t in (
        "runs", "weight_distance") if t in results.tables}})
    if "runs" in results.tables:  # a variant with its own model (DistilBERT) in the study model's rows
        results.tables["runs"] = analysis.beside_study_model(results.tables["runs"], own_models(results),
                                                             results.spec.get("models", []))
    runs = "runs" in results.tables
    wanted = {"always": True, "runs": runs,
              "best of runs": runs and (best_of_runs or conventions.of_study(results.name).best_of_runs)}
    summary, tables = None, {}
    if runs:
        summary = analysis.primary_summary(results.tables["runs"], results.baseline)
        tables["main"] = summary
    levels = analysis.variant_levels(results.spec["variants"])
    built = []
    for builder, needs in SECTIONS:
        if wanted[needs]:
            more_sections, more_tables = builder(results, summary, levels)
            built += more_sections
            tables |= more_tables
    title, question = workflow_heading(results.name)
    return Report(results.name, results.study_id, settings(results.spec), tuple(built), tables, title, question)
