"""Where a task's examples come from, all mapped to one shape per task kind:

  sequence  columns text_a, [text_b], label
  span      columns id, title, question, context, answer_texts, answer_starts (bertology.tasks.squad)
  mlm       column text: one sentence per row (bertology.tasks.corpora)

Sources (the TaskSpec's `source` string):
  hub            datasets.load_dataset: GLUE, SQuAD 2.0 (rajpurkar/squad_v2), Dutch Wikipedia sentences
                 and the 15 XNLI validation languages (facebook/xnli)
  glue-dir:PATH  a local GLUE download: PATH/<task.glue_dir>/{train,dev}.tsv in the original TSV format
                 (MNLI: dev_matched.tsv and dev_mismatched.tsv; CoLA has no header; MRPC starts with a BOM)
  files:SPLIT=PATH,…  local files per split: SQuAD JSON for span tasks; for mlm tasks plain text (one
                 sentence per line) or XNLI TSV for `xnli`, a directory meaning every .txt / .tsv in it,
                 and `corpus=PATH` standing for train, validation and test carved 80/10/10 from one text
  synthetic      the project's own generator (bertology.tasks.synthetic), for tests and the offline demo

Labels are integer ids in the order of `task.label_names` (a float for regression tasks), whatever the
source stores: the hub's ClassLabel ids, GLUE's "entailment" strings or SST-2's "0"/"1".
"""

from __future__ import annotations

import csv
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertology.errors import BadInput, Transient, choices, did_you_mean
from bertology.tasks import synthetic
from bertology.tasks.registry import Task, get_task

if TYPE_CHECKING:  # loading examples imports `datasets`; naming and checking sources does not
    import datasets

SOURCE_KINDS = ("hub", "glue-dir:PATH", "files:SPLIT=PATH,...", "synthetic")
# The 15 languages of XNLI, each a config of facebook/xnli.
XNLI_LANGUAGES = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")
# Sentences taken from the hub's Dutch Wikipedia: the report's 80k/10k/10k train/validation/test.
HUB_CORPUS_LINES = 100_000
CORPUS = "corpus"  # files: key carving train/validation/test from one text


def parse_source(text: str) -> tuple[str, str]:
    """("hub", ""), ("glue-dir", PATH), ("files", "SPLIT=PATH,…") or ("synthetic", "")."""
    if text in ("hub", "synthetic"):
        return text, ""
    kind, sep, arg = str(text).partition(":")
    if kind in ("glue-dir", "files") and sep and arg:
        return kind, arg
    forms = {form.partition(":")[0]: form for form in SOURCE_KINDS}  # the kind, then its argument
    match = did_you_mean(str(text).partition(":")[0], forms)
    hint = f"did you mean {forms[match]!r}?; " if match is not None else ""
    raise BadInput(f"unknown data source {text!r} ({hint}allowed: {', '.join(SOURCE_KINDS)})")


def parse_files(task: Task, arg: str) -> dict[str, Path]:
    """`files:` split -> path, each checked to exist; every split of the task must be covered."""
    allowed = (*task.splits, CORPUS) if task.kind == "mlm" else task.splits
    paths = {}
    for item in arg.split(","):
        split, sep, path = item.partition("=")
        if not sep or not path or split not in allowed:
            raise BadInput(f"files source item {item!r} must be SPLIT=PATH with SPLIT one of {', '.join(allowed)}")
        paths[split] = Path(path).expanduser()
        if not paths[split].exists():
            raise BadInput(f"file {path} for split {split} of task {task.name} does not exist")
    carved = ("train", "validation", "test") if CORPUS in paths else ()
    missing = [s for s in task.splits if s not in paths and s not in carved]
    if missing:
        raise BadInput(f"files source for task {task.name} names no file for split {missing[0]!r} "
                       f"(needs: {', '.join(task.splits)}" + (f", or {CORPUS}= for train/validation/test)"
                                                              if task.kind == "mlm" else ")"))
    return paths


def check_source(task: Task | str, source: str, splits: tuple[str, ...] | None = None) -> None:
    """Fail fast, before any GPU time is spent, when `source` cannot provide `task`'s splits (all of them,
    or only `splits`)."""
    task = get_task(task)
    kind, arg = parse_source(source)
    if kind == "synthetic" and task.kind == "sequence" and task.name not in synthetic.TASKS:
        raise BadInput(f"no synthetic data for task {task.name!r} "
                       f"(synthetic tasks: {', '.join(synthetic.TASKS)})")
    if kind == "files":
        if task.kind == "sequence":
            raise BadInput(f"task {task.name} reads local files with glue-dir:PATH, not files:")
        parse_files(task, arg)
    if kind == "glue-dir" and task.kind != "sequence":
        raise BadInput(f"glue-dir is a source of GLUE tasks only, not of {task.name} "
                       f"(use files:SPLIT=PATH,… or hub)")
    if kind == "glue-dir":
        task_dir = Path(arg).expanduser() / task.glue_dir
        if not task_dir.is_dir():
            raise BadInput(f"GLUE directory {task_dir} does not exist (expected {arg}/{task.glue_dir}/ "
                           f"with {', '.join(task.tsv_file(s) for s in task.splits)})")
        for split in task.splits if splits is None else splits:
            path = task_dir / task.tsv_file(split)
            if not path.is_file():
                raise BadInput(f"GLUE file {path} does not exist "
                               f"(task {task.name} needs it for split {split})")


def check_data(task: Task | str, source: str) -> None:
    """Read every split of a local source (glue-dir, files) through the loader prepare-data uses, so a
    malformed TSV, a wrong header or an empty file is refused by plan, before any work is stored. Hub and
    synthetic data are not read here (the hub needs the network; synthetic data is the project's own)."""
    task = get_task(task)
    check_source(task, source)
    if parse_source(source)[0] in ("glue-dir", "files"):
        for split in task.splits:
            load_split(task, source, split)


def load_split(task: Task | str, source: str, split: str) -> datasets.Dataset:
    """One split of `task` from `source` as a Dataset with columns text_a, [text_b], label."""
    import datasets

    task = get_task(task)
    if split not in task.splits:
        raise BadInput(f"unknown split {split!r} for task {task.name} ({choices(split, task.splits, 'allowed')})")
    check_source(task, source, (split,))
    kind, arg = parse_source(source)
    if task.kind == "span":
        return datasets.Dataset.from_dict(_span_examples(task, kind, arg, split), features=_span_features())
    if task.kind == "mlm":
        lines = _corpus_lines(task, kind, arg, split)
        if not lines:
            raise BadInput(f"split {split} of task {task.name} from {source} has no sentences")
        return datasets.Dataset.from_dict({"text": lines}, features=datasets.Features({"text": datasets.Value("string")}))
    if kind == "hub":
        columns = _from_hub(task, split)
    elif kind == "glue-dir":
        columns = _from_tsv(task, Path(arg).expanduser() / task.glue_dir / task.tsv_file(split))
    else:
        columns = synthetic.generate(task.name, split)
    return datasets.Dataset.from_dict(columns, features=_features(task))


def _span_features() -> datasets.Features:
    import datasets

    return datasets.Features({
        "id": datasets.Value("string"), "title": datasets.Value("string"), "question": datasets.Value("string"),
        "context": datasets.Value("string"), "answer_texts": datasets.Sequence(datasets.Value("string")),
        "answer_starts": datasets.Sequence(datasets.Value("int64")),
    })


def _span_examples(task: Task, kind: str, arg: str, split: str) -> dict[str, list]:
    from bertology.tasks import squad
    from bertology.tasks.synthetic import squad as synthetic_squad

    if kind == "hub":
        return squad.from_hub(_hub_table(task.hub[0], task.hub[1], split))
    if kind == "files":
        return squad.read_squad_json(parse_files(task, arg)[split])
    return synthetic_squad.generate(split, size=synthetic.split_size(split))


def _corpus_lines(task: Task, kind: str, arg: str, split: str) -> list[str]:
    from bertology.tasks import corpora
    from bertology.tasks.synthetic import corpus as synthetic_corpus

    if kind == "synthetic":
        size = synthetic.split_size(split)
        if split == "xnli":  # the other language: what the forgetting curve watches
            return synthetic_corpus.generate("en", "validation", size)
        return synthetic_corpus.generate("nl", split, size)
    if kind == "hub":
        if split == "xnli":
            return [line for language in XNLI_LANGUAGES
                    for line in corpora.from_hub_xnli(_hub_table("facebook/xnli", language, "validation"))]
        return _carve(_hub_sentences(task), split)
    paths = parse_files(task, arg)
    read = corpora.read_xnli_tsv if split == "xnli" else corpora.read_lines
    suffix = ".tsv" if split == "xnli" else ".txt"
    if split in paths:
        return _read_all(paths[split], read, suffix)
    return _carve(_read_all(paths[CORPUS], corpora.read_lines, ".txt"), split)


def _read_all(path: Path, read, suffix: str) -> list[str]:
    """One file, or every `suffix` file of a directory in name order."""
    if not path.is_dir():
        return read(path)
    files = sorted(path.glob(f"*{suffix}"))
    if not files:
        raise BadInput(f"directory {path} has no {suffix} files")
    return [line for file in files for line in read(file)]


def _carve(lines: list[str], split: str) -> list[str]:
    """A fixed 80/10/10 train/validation/test partition of one corpus (seed 0: the partition is part of
    the data, not of a run), each part in corpus order."""
    order = np.random.default_rng(0).permutation(len(lines))
    n_eval = max(1, len(lines) // 10)
    part = {"validation": order[:n_eval], "test": order[n_eval:2 * n_eval], "train": order[2 * n_eval:]}[split]
    return [lines[i] for i in np.sort(part)]


def _hub_sentences(task: Task) -> list[str]:
    """The first HUB_CORPUS_LINES sentences (5 to 64 words) of the hub corpus's articles, in order."""
    import datasets

    try:
        articles = datasets.load_dataset(*task.hub, split="train", streaming=True)
        lines = []
        for article in articles:
            for paragraph in article["text"].split("\n"):
                lines += [s for s in re.split(r"(?<=[.!?])\s+", paragraph.strip()) if 5 <= len(s.split()) <= 64]
            if len(lines) >= HUB_CORPUS_LINES:
                return lines[:HUB_CORPUS_LINES]
    except ConnectionError as e:
        raise Transient(f"cannot reach the hub for {task.hub[0]}/{task.hub[1]}: {e}") from e
    return lines


def _hub_table(path: str, config: str, split: str):
    import datasets

    try:
        return datasets.load_dataset(path, config, split=split).with_format("arrow")[:]
    except ConnectionError as e:  # the hub is unreachable: worth a retry, not a user error
        raise Transient(f"cannot reach the hub for {path}/{config}: {e}") from e


def _features(task: Task) -> datasets.Features:
    import datasets

    label = datasets.Value("float32" if task.is_regression else "int64")
    return datasets.Features({**{f: datasets.Value("string") for f in task.text_fields}, "label": label})


def _from_hub(task: Task, split: str) -> dict[str, list]:
    table = _hub_table(task.hub[0], task.hub[1], split)
    missing = [c for c in task.hub_columns if c not in table.column_names]
    if missing:
        raise BadInput(f"hub dataset {task.hub[0]}/{task.hub[1]} has no column {missing[0]!r} "
                       f"(has: {', '.join(table.column_names)})")
    *text_columns, label_column = task.hub_columns
    columns = {field: table.column(col).to_pylist() for field, col in zip(task.text_fields, text_columns)}
    where = f"hub {task.hub[0]}/{task.hub[1]} {split} row"
    labels = table.column(label_column).to_pylist()
    columns["label"] = [_label(task, v, where, i) for i, v in enumerate(labels)]
    return columns


def _from_tsv(task: Task, path: Path) -> dict[str, list]:
    """Read an original GLUE TSV. Quotes are literal text in GLUE (QUOTE_NONE), MRPC starts with a BOM."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if task.tsv_header:
            header = next(rows, None)
            if header is None:
                raise BadInput(f"{path}: empty file (expected a GLUE TSV: a header with "
                               f"{', '.join(task.tsv_columns)}, then rows of {task.name} examples)")
            missing = [c for c in task.tsv_columns if c not in header]
            if missing:
                raise BadInput(f"{path}:1: header has no column {missing[0]!r} (header: {', '.join(header)})")
            positions, width = [header.index(c) for c in task.tsv_columns], len(header)
        else:
            positions = [int(c) for c in task.tsv_columns]
            width = None
        *text_positions, label_position = positions
        columns: dict[str, list] = {field: [] for field in (*task.text_fields, "label")}
        for row in rows:
            line = rows.line_num
            if not row:
                continue
            if width is not None and len(row) != width or len(row) <= max(positions):
                raise BadInput(f"{path}:{line}: expected {width or max(positions) + 1} tab-separated fields, "
                               f"found {len(row)}")
            for field, pos in zip(task.text_fields, text_positions):
                columns[field].append(row[pos])
            columns["label"].append(_label(task, row[label_position], os.fspath(path), line))
    if not columns["label"]:
        raise BadInput(f"{path}: no examples (expected a GLUE TSV with rows of {task.name} examples)")
    return columns


def _label(task: Task, value, where: str, line: int) -> int | float:
    """A label id (or float for regression) from a name, an id, or the id written as text."""
    try:
        if task.is_regression:
            if math.isfinite(score := float(value)):
                return score
        elif value in task.label_names:
            return task.label_names.index(value)
        elif 0 <= (label := int(value)) < task.num_labels:
            return label
    except (TypeError, ValueError):
        pass
    names = ", ".join(task.label_names)
    allowed = "a finite number" if task.is_regression else f"{names} or 0..{task.num_labels - 1}"
    raise BadInput(f"{where}:{line}: bad label {value!r} for task {task.name} (allowed: {allowed})")
