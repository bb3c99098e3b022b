"""The task registry: one small declarative entry per task, in the style of lm-evaluation-harness.

An entry says everything the rest of the code needs to know about a task and nothing about how to run
it: its kind, which text fields an example has, how many labels, which metrics (`primary_metric` picks the
best evaluation point: on the first eval split, and on each split in `own_best_splits`), and where its
examples live in each source (the hub dataset and its column names, the original GLUE directory and its TSV
layout). Adding a GLUE task is adding an entry.

Kinds (each has its model head, batches and evaluation in bertology.train.heads):
  sequence  classification or regression over one sentence or a pair (the GLUE tasks)
  span      extractive question answering with unanswerable questions (SQuAD 2.0)
  mlm       masked-LM perplexity on text corpora (the cross-lingual report's Dutch and XNLI sentences)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bertology.errors import BadInput, choices
from bertology.metrics import METRICS

KINDS = ("sequence", "span", "mlm")
# each kind as a task list names it (every sequence task is a GLUE task)
KIND_NAMES = {"sequence": "GLUE", "span": "question answering", "mlm": "masked LM"}
# The metrics of the kinds whose evaluation is not a function of (labels, predictions).
SPAN_METRICS = ("f1", "exact", "has_ans_f1", "has_ans_exact", "no_ans_f1", "no_ans_exact", "best_f1",
                "best_f1_thresh", "best_exact", "best_exact_thresh")
MLM_METRICS = ("perplexity", "loss", "masked_tokens")
LOWER_IS_BETTER = ("perplexity", "loss")


@dataclass(frozen=True)
class Task:
    name: str
    # Our column names, in order: ("text_a",) for single sentences, ("text_a", "text_b") for pairs.
    # Not used by the span and mlm kinds, whose example columns are fixed by their readers.
    text_fields: tuple[str, ...]
    # 1 means regression (STS-B): the label is a float and the model has one output. 0 for span and mlm.
    num_labels: int
    # Label id -> name; a source that stores names (RTE's "entailment") is mapped through this. Empty for
    # regression.
    label_names: tuple[str, ...]
    metrics: tuple[str, ...]
    primary_metric: str
    # (dataset path, config name) for datasets.load_dataset.
    hub: tuple[str, str]
    # The hub dataset's columns for each text field, then its label column (sequence tasks).
    hub_columns: tuple[str, ...] = ()
    # The task's directory inside a GLUE download ("SST-2"); sequence tasks only.
    glue_dir: str = ""
    # The TSV's columns for each text field, then the label: header names, or positions (int) when the
    # file has no header (CoLA).
    tsv_columns: tuple[str | int, ...] = ()
    tsv_header: bool = True
    # Evaluation splits, named as on the hub (MNLI: "validation_matched", "validation_mismatched"); an mlm
    # task's eval splits may be other corpora (the forgetting curve's "xnli").
    eval_splits: tuple[str, ...] = ("validation",)
    # Eval splits besides the first that are read at their own best evaluation point under selection `best`:
    # a second development set that a report prints at its own best epoch (MNLI-mm beside MNLI-m). Every
    # other split (a test set, a corpus the forgetting curve watches) is read at the first split's best
    # point, which is also the one whose weights a run keeps (bertology.train.loop).
    own_best_splits: tuple[str, ...] = ()
    # Split -> file name in the GLUE directory.
    tsv_files: tuple[tuple[str, str], ...] = (("train", "train.tsv"), ("validation", "dev.tsv"))
    kind: str = "sequence"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"task {self.name}: kind must be one of {KINDS}")
        allowed = {"sequence": METRICS, "span": SPAN_METRICS, "mlm": MLM_METRICS}[self.kind]
        unknown = [m for m in self.metrics if m not in allowed]
        if unknown or self.primary_metric not in self.metrics:
            raise ValueError(f"task {self.name}: bad metrics {self.metrics} / primary {self.primary_metric}")
        if not set(self.own_best_splits) <= set(self.eval_splits[1:]):
            raise ValueError(f"task {self.name}: own_best_splits {self.own_best_splits} must be eval splits "
                             f"after the first, {self.eval_splits[1:]}")
        if self.kind != "sequence":
            if self.num_labels or self.label_names:
                raise ValueError(f"task {self.name}: a {self.kind} task has no labels")
            return
        if self.text_fields not in (("text_a",), ("text_a", "text_b")):
            raise ValueError(f"task {self.name}: text_fields must be ('text_a',) or ('text_a', 'text_b')")
        for columns in (self.hub_columns, self.tsv_columns):
            if len(columns) != len(self.text_fields) + 1:
                raise ValueError(f"task {self.name}: need one column per text field plus the label")
        if self.num_labels < 1 or len(self.label_names) != (0 if self.num_labels == 1 else self.num_labels):
            raise ValueError(f"task {self.name}: {self.num_labels} labels but names {self.label_names}")
        if not self.tsv_header and not all(isinstance(c, int) for c in self.tsv_columns):
            raise ValueError(f"task {self.name}: a TSV without a header needs column positions (ints)")
        if set(dict(self.tsv_files)) != set(self.splits):
            raise ValueError(f"task {self.name}: tsv_files must name exactly the splits {self.splits}")

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", *self.eval_splits)

    def better(self, value: float, top: float | None) -> bool:
        """Whether an evaluation point's primary metric beats the best so far (None: none yet): strictly, so
        the earliest of equal points stays the best; lower is better for perplexity."""
        return top is None or (value < top if self.lower_is_better else value > top)

    @property
    def is_regression(self) -> bool:
        return self.kind == "sequence" and self.num_labels == 1

    @property
    def lower_is_better(self) -> bool:
        """Whether a smaller primary metric is the better model (perplexity)."""
        return self.primary_metric in LOWER_IS_BETTER

    def tsv_file(self, split: str) -> str:
        return dict(self.tsv_files)[split]


# Label names and their order are the hub's ClassLabel names (the `nyu-mll/glue` card and its builder
# script): a GLUE TSV's 0/1 or label strings map to the same ids. The primary metrics are the ones the
# reports' tables print (monolingual report, Table 1: MRPC and QQP are F1, the degenerate "clean" rows
# 0.81 and 0.54 are exactly the F1 of always answering 1 on their dev sets; STS-B is Pearson).
TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            name="cola",
            text_fields=("text_a",),
            num_labels=2,
            label_names=("unacceptable", "acceptable"),
            metrics=("matthews_corrcoef", "accuracy"),
            primary_metric="matthews_corrcoef",
            hub=("nyu-mll/glue", "cola"),
            hub_columns=("sentence", "label"),
            glue_dir="CoLA",
            # No header: source, label, original mark, sentence.
            tsv_columns=(3, 1),
            tsv_header=False,
        ),
        Task(
            name="sst2",
            text_fields=("text_a",),
            num_labels=2,
            label_names=("negative", "positive"),
            metrics=("accuracy",),
            primary_metric="accuracy",
            hub=("nyu-mll/glue", "sst2"),
            hub_columns=("sentence", "label"),
            glue_dir="SST-2",
            tsv_columns=("sentence", "label"),
        ),
        Task(
            name="mrpc",
            text_fields=("text_a", "text_b"),
            num_labels=2,
            label_names=("not_equivalent", "equivalent"),
            metrics=("f1", "accuracy"),
            primary_metric="f1",
            hub=("nyu-mll/glue", "mrpc"),
            hub_columns=("sentence1", "sentence2", "label"),
            glue_dir="MRPC",
            tsv_columns=("#1 String", "#2 String", "Quality"),
        ),
        Task(
            name="stsb",
            text_fields=("text_a", "text_b"),
            num_labels=1,
            label_names=(),
            metrics=("pearson", "spearman"),
            primary_metric="pearson",
            hub=("nyu-mll/glue", "stsb"),
            hub_columns=("sentence1", "sentence2", "label"),
            glue_dir="STS-B",
            tsv_columns=("sentence1", "sentence2", "score"),
        ),
        Task(
            name="qqp",
            text_fields=("text_a", "text_b"),
            num_labels=2,
            label_names=("not_duplicate", "duplicate"),
            metrics=("f1", "accuracy"),
            primary_metric="f1",
            hub=("nyu-mll/glue", "qqp"),
            hub_columns=("question1", "question2", "label"),
            glue_dir="QQP",
            tsv_columns=("question1", "question2", "is_duplicate"),
        ),
        Task(
            name="mnli",
            text_fields=("text_a", "text_b"),
            num_labels=3,
            label_names=("entailment", "neutral", "contradiction"),
            metrics=("accuracy",),
            primary_metric="accuracy",
            hub=("nyu-mll/glue", "mnli"),
            hub_columns=("premise", "hypothesis", "label"),
            glue_dir="MNLI",
            tsv_columns=("sentence1", "sentence2", "gold_label"),
            # One fine-tuning, evaluated on both. Each is read at its own best epoch, as the monolingual
            # report prints them ("the best epoch of the best run is reported", §7, for MNLI-m and MNLI-mm
            # alike); the weights a run keeps are matched's best (the first split).
            eval_splits=("validation_matched", "validation_mismatched"),
            own_best_splits=("validation_mismatched",),
            tsv_files=(("train", "train.tsv"), ("validation_matched", "dev_matched.tsv"),
                       ("validation_mismatched", "dev_mismatched.tsv")),
        ),
        Task(
            name="qnli",
            text_fields=("text_a", "text_b"),
            num_labels=2,
            label_names=("entailment", "not_entailment"),
            metrics=("accuracy",),
            primary_metric="accuracy",
            hub=("nyu-mll/glue", "qnli"),
            hub_columns=("question", "sentence", "label"),
            glue_dir="QNLI",
            tsv_columns=("question", "sentence", "label"),
        ),
        Task(
            name="rte",
            text_fields=("text_a", "text_b"),
            num_labels=2,
            label_names=("entailment", "not_entailment"),
            metrics=("accuracy",),
            primary_metric="accuracy",
            hub=("nyu-mll/glue", "rte"),
            hub_columns=("sentence1", "sentence2", "label"),
            glue_dir="RTE",
            tsv_columns=("sentence1", "sentence2", "label"),
        ),
        Task(
            name="wnli",
            text_fields=("text_a", "text_b"),
            num_labels=2,
            label_names=("not_entailment", "entailment"),
            metrics=("accuracy",),
            primary_metric="accuracy",
            hub=("nyu-mll/glue", "wnli"),
            hub_columns=("sentence1", "sentence2", "label"),
            glue_dir="WNLI",
            tsv_columns=("sentence1", "sentence2", "label"),
        ),
        # The college report's question answering: F1 and EM with unanswerable questions (fractions, not
        # percent), from the official evaluation's logic (bertology.squad_eval).
        Task(
            name="squad2",
            kind="span",
            text_fields=("question", "context"),
            num_labels=0,
            label_names=(),
            metrics=SPAN_METRICS,
            primary_metric="f1",
            hub=("rajpurkar/squad_v2", "squad_v2"),
        ),
        # The cross-lingual report: MLM fine-tuning on Dutch sentences (train, validation, test), with
        # XNLI validation sentences (15 languages) as the corpus whose perplexity shows the forgetting.
        # The hub source is Dutch Wikipedia, as in the report; `files:` and `synthetic` stand in offline.
        Task(
            name="mlm-nl",
            kind="mlm",
            text_fields=("text",),
            num_labels=0,
            label_names=(),
            metrics=MLM_METRICS,
            primary_metric="perplexity",
            hub=("wikimedia/wikipedia", "20231101.nl"),
            eval_splits=("validation", "test", "xnli"),
        ),
    )
}


def get_task(name: str | Task) -> Task:
    """The registry entry for `name` (a Task passes through, so callers may hold either)."""
    if isinstance(name, Task):
        return name
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise unknown_task(name) from None


def task_list(first: Iterable[str] = ()) -> str:
    """Every task by kind, the kinds in `first` first: `cola, …, wnli (GLUE), squad2 (question answering), …`."""
    order = [*dict.fromkeys(k for k in first if k in KINDS), *(k for k in KINDS if k not in first)]
    return ", ".join(f"{', '.join(sorted(t.name for t in TASKS.values() if t.kind == kind))} ({KIND_NAMES[kind]})"
                     for kind in order if any(t.kind == kind for t in TASKS.values()))


def unknown_task(name: object, kinds: Iterable[str] = ()) -> BadInput:
    """`unknown task 'sst3' (did you mean 'sst2'?; known: cola, … (GLUE), squad2 (question answering), …)`:
    every task, those of the kinds in `kinds` (a study's other tasks') first."""
    return BadInput(f"unknown task {name!r} ({choices(name, TASKS, listed=task_list(kinds))})")
