"""How each research report presents its results, so that a study's own report shows them the same way.

The report's layout follows from what a study varies (bertology.results.report); what follows from the
*paper* a study reproduces is here, keyed by the paper and reached from the study's name (the `study`
parameter of each workflows/<study>.yaml). A study under another name gets no paper's conventions (the
`bertology report --best-of-runs` flag still adds that section).

- The monolingual report (§7) gives, beside mean ± sd over three runs, "the best epoch of the best run":
  its six studies' reports carry the Best run section.
- The college report's Figure 2 (the sequential matrix) shows MRPC by accuracy ("MRPC … acc"), not by
  F1, the task's primary metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Conventions:
    paper: str | None = None
    best_of_runs: bool = False  # the Best run section ("best epoch of the best run")
    # task -> the metric the sequential matrix shows instead of the task's primary metric
    sequential_metrics: dict[str, str] = field(default_factory=dict)


PAPERS: dict[str, Conventions] = {
    "monolingual-pretraining-benefits": Conventions("monolingual-pretraining-benefits", best_of_runs=True),
    "bert-goes-to-college": Conventions("bert-goes-to-college", sequential_metrics={"mrpc": "accuracy"}),
    "partial-reinitialization": Conventions("partial-reinitialization"),
    "crosslingual-finetuning-representations": Conventions("crosslingual-finetuning-representations"),
}

# Each study workflow's name -> the paper it reproduces (the file name in the papers' folder).
STUDY_PAPERS: dict[str, str] = {
    **dict.fromkeys(("reversed-layers", "foreign-bert", "shuffled-embeddings", "init-distribution",
                     "english-embeddings", "layer-removal", "vocab-overlap"), "monolingual-pretraining-benefits"),
    **dict.fromkeys(("sequential-finetune", "layerwise-reinit", "head-reinit"), "bert-goes-to-college"),
    **dict.fromkeys(("partial-reinit", "probing", "weight-similarity"), "partial-reinitialization"),
    "crosslingual-mlm": "crosslingual-finetuning-representations",
}


def of_study(name: str) -> Conventions:
    """The conventions of the paper the study `name` reproduces; none for a study of another name."""
    paper = STUDY_PAPERS.get(name)
    return PAPERS[paper] if paper is not None else Conventions()
