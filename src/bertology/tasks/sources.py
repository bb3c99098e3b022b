"""Where a task's examples come from, all mapped to one shape: columns text_a, [text_b], label.

Sources (the TaskSpec's `source` string):
  hub            datasets.load_dataset(*task.hub): the GLUE copy on the Hugging Face hub
  glue-dir:PATH  a local GLUE download: PATH/<task.glue_dir>/{train,dev}.tsv in the original TSV format
                 (MNLI: dev_matched.tsv and dev_mismatched.tsv; CoLA has no header; MRPC starts with a BOM)
  synthetic      the project's own generator (bertology.tasks.synthetic), for tests and the offline demo

Labels are integer ids in the order of `task.label_names` (a float for regression tasks), whatever the
source stores: the hub's ClassLabel ids, GLUE's "entailment" strings or SST-2's "0"/"1".
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import datasets

from bertology.errors import BadInput, Transient
from bertology.tasks import synthetic
from bertology.tasks.registry import Task, get_task

SOURCE_KINDS = ("hub", "glue-dir:PATH", "synthetic")


def parse_source(text: str) -> tuple[str, str]:
    """("hub", ""), ("glue-dir", PATH) or ("synthetic", "")."""
    if text in ("hub", "synthetic"):
        return text, ""
    kind, sep, arg = str(text).partition(":")
    if kind == "glue-dir" and sep and arg:
        return kind, arg
    raise BadInput(f"unknown data source {text!r} (allowed: {', '.join(SOURCE_KINDS)})")


def check_source(task: Task | str, source: str, splits: tuple[str, ...] | None = None) -> None:
    """Fail fast, before any GPU time is spent, when `source` cannot provide `task`'s splits (all of them,
    or only `splits`)."""
    task = get_task(task)
    kind, arg = parse_source(source)
    if kind == "synthetic" and task.name not in synthetic.TASKS:
        raise BadInput(f"no synthetic data for task {task.name!r} "
                       f"(synthetic tasks: {', '.join(synthetic.TASKS)})")
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


def load_split(task: Task | str, source: str, split: str) -> datasets.Dataset:
    """One split of `task` from `source` as a Dataset with columns text_a, [text_b], label."""
    task = get_task(task)
    if split not in task.splits:
        raise BadInput(f"unknown split {split!r} for task {task.name} (allowed: {', '.join(task.splits)})")
    check_source(task, source, (split,))
    kind, arg = parse_source(source)
    if kind == "hub":
        columns = _from_hub(task, split)
    elif kind == "glue-dir":
        columns = _from_tsv(task, Path(arg).expanduser() / task.glue_dir / task.tsv_file(split))
    else:
        columns = synthetic.generate(task.name, split)
    return datasets.Dataset.from_dict(columns, features=_features(task))


def _features(task: Task) -> datasets.Features:
    label = datasets.Value("float32" if task.is_regression else "int64")
    return datasets.Features({**{f: datasets.Value("string") for f in task.text_fields}, "label": label})


def _from_hub(task: Task, split: str) -> dict[str, list]:
    try:
        ds = datasets.load_dataset(*task.hub, split=split)
    except ConnectionError as e:  # the hub is unreachable: worth a retry, not a user error
        raise Transient(f"cannot reach the hub for {task.hub[0]}/{task.hub[1]}: {e}") from e
    missing = [c for c in task.hub_columns if c not in ds.column_names]
    if missing:
        raise BadInput(f"hub dataset {task.hub[0]}/{task.hub[1]} has no column {missing[0]!r} "
                       f"(has: {', '.join(ds.column_names)})")
    table = ds.with_format("arrow")[:]
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
            header = next(rows, None) or []
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
