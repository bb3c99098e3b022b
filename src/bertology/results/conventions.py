"""How each research report presents its results, so that a study's own report shows them the same way.

The report's layout follows from what a study varies (bertology.results.report); what follows from the
*paper* a study reproduces is here, keyed by the paper and reached from the study's name (the `study`
parameter of each workflows/<study>.yaml). A study under another name gets no paper's conventions (the
`bertology report --best-of-runs` flag still adds that section).

- The monolingual report (§7) prints, for §3–4 (Tables 1, 3–5), "the best epoch of the best run" of three
  runs, and for §5–6 (Tables 6–8) one run at its best epoch ("performed once and the best epoch is
  reported"); it gives no mean or sd. Tables 6 and 8 repeat Table 1's and Table 4's columns beside their
  own, so those columns are best runs of three (their studies run them with three seeds, the others once:
  a variant's `runs`). Its studies' reports carry the Best run section, and the comparison with the paper
  uses the report's own quantity, cell by cell (paper_numbers.csv's `quantity`: best, single).
- The college report's Figure 2 (the sequential matrix) shows MRPC by accuracy ("MRPC … acc"), not by
  F1, the task's primary metric, and the better of two runs.
- How each report chose the weights it reports (`selection`: the best epoch on dev, or the last), with its
  words, which a study's report prints beside the rule the study applied (bertology.results.selection).
- Which task head a sequential run's final task starts with (`final_head`: new or carried), where the
  report is silent: the college report's, assumed carried, with its words, printed beside the study's
  setting in the sequential matrix's note.
- Where a report evaluates on a split a study cannot (`evaluation`): the partial-reinitialization report
  computes its metrics on a "test set", and the college report's exact match divides by the "Number of test
  examples"; GLUE's test labels are not public, so their studies evaluate on the dev sets; the main table's
  note says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Conventions:
    paper: str | None = None
    best_of_runs: bool = False  # the Best run section ("best epoch of the best run")
    # task -> the metric the sequential matrix shows instead of the task's primary metric
    sequential_metrics: dict[str, str] = field(default_factory=dict)
    # (the rule, "best" or "last", and how the report says so) for the weights it reports
    selection: tuple[str, str] | None = None
    # where the report evaluated and why the study's split differs (None: the report's split is the study's)
    evaluation: str | None = None
    # (the head a sequential run's final task starts with, "new" or "carried", and why) where the report is silent
    final_head: tuple[str, str] | None = None


PAPERS: dict[str, Conventions] = {
    "monolingual-pretraining-benefits": Conventions(
        "monolingual-pretraining-benefits", best_of_runs=True,
        selection=("best", 'each run at its best epoch ("the best epoch of the best run is reported", §7).')),
    "bert-goes-to-college": Conventions(
        "bert-goes-to-college", sequential_metrics={"mrpc": "accuracy"},
        selection=("last", ('no epoch is selected: "we run for 3 epochs after reinitializing the relevant layers" '
                           "(§5.3.2), 3 epochs on each task of a sequential run (§5.3.1).")),
        final_head=("carried", ('Assumed: the report does not say whether the final task gets a new classifier. '
                                'It says "We then use this resulting model and finetune on the final task (task 2)" '
                                '(§4.1.1) and "For our code, we built off of the Transformers library by '
                                'HuggingFace"; Hugging Face\'s run_glue, given a saved model, loads its classifier '
                                "whenever its shape fits the final task's, as every pair of Figure 2 does (two "
                                "classes each).")),
        evaluation=('Evaluation split, assumed: the report\'s exact match divides by the "Number of test examples" '
                    "(§5.2) without naming the set, and GLUE's test labels are not public, so this study's runs "
                    "are evaluated on each task's dev set (GLUE's split `validation`; SQuAD 2.0's dev set, "
                    "evaluated whole where its training set is sampled to 10%).")),
    "partial-reinitialization": Conventions(
        "partial-reinitialization",
        selection=("last", ("no epoch is selected (\"Epochs: 3\", §5.3, with Hugging Face's script, which "
                           "evaluates after training; the weights compared are the *bert-finetuned* model's).")),
        evaluation=('Evaluation split: the report computes its metrics "always on a test set which is never seen '
                    'by the model during training" (§5.2; its Table 1 lists GLUE\'s test sets, SST-2\'s at 1.8k '
                    "sentences against the dev set's 872). GLUE's test labels are not public, so this study's "
                    "runs are evaluated on each task's GLUE dev set (split `validation`), which no run trains on "
                    "either.")),
    "crosslingual-finetuning-representations": Conventions(
        "crosslingual-finetuning-representations",
        selection=("best", ('"Early stopping is followed based on the best validation accuracy at every 100 '
                           'steps" (§A.3).'))),
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
