"""What a study costs on a GPU: its fine-tuning runs, the training sequences they process, and GPU-hours
at the training rates last measured on a GPU.

The work is counted from a study's cells (`StudySpec.cells()`, or the cells of a stored plan), per
distinct run: the training rows its dataset selects times its epochs. A sequential run's intermediate
run is counted once per intermediate run id, as the store shares it; a run with regime `none` trains
nothing (the model as built is evaluated), so it adds no sequences. A run's training rows are its task's
train split from its source, subset as prepare-data subsets it (`fraction`: round(fraction × rows), at
least 1; `count`: that many, at most the split):

  hub        the public training-split sizes (TRAIN_SIZES: GLUE, SQuAD 2.0's questions, the 80% training
             carve of the first 100k sentences of the Dutch Wikipedia), so no hub access is needed
  synthetic  the project's generator's training size (bertology.tasks.synthetic)
  glue-dir, files  the rows of the local train split, read with the loader prepare-data uses

Not counted: evaluation (a forward pass over dev sets of at most 10k examples, small next to 3 epochs of
training), and for a span task the extra windows a long context makes (SQuAD counts its questions). The
rates are BERT-base's, so for a probe (no encoder weights trained), a shortened model or a smaller preset
model the GPU-hours are an upper bound. A run's fixed overhead (process start, loading, saving) is not
included either: it depends on how the runs are packed into pods and was measured for one run size only.

The rates (`measured_rates.json` beside this module) are the last ones measured on a GPU, with the device,
the date and where the measurement is written up, one per way a pod trains its runs, each the sequences of
all its runs per second: `solo_seq_per_s`, one run at a time; `fused_seq_per_s`, several runs trained as one
stacked model (`fuse`); `side_by_side_seq_per_s`, several runs side by side on CUDA streams
(`gpu_concurrency`); `compiled_seq_per_s`, one run with `compile: true`; `compiled_side_by_side_seq_per_s`,
both. All but the solo rate are null until measured. After the next GPU measurement, edit that file.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bertology import tasks
from bertology.errors import BadInput
from bertology.spec import Cell, DatasetSpec, RunSpec
from bertology.tasks import synthetic
from bertology.tasks.sources import HUB_CORPUS_LINES

RATES_FILE = Path(__file__).with_name("measured_rates.json")
# Public training-split sizes of the hub's datasets (bertology.tasks.sources): what a run on `hub` data reads.
TRAIN_SIZES = {
    "cola": 8_551, "sst2": 67_349, "mrpc": 3_668, "stsb": 5_749, "qqp": 363_846, "mnli": 392_702,
    "qnli": 104_743, "rte": 2_490, "wnli": 635, "squad2": 130_319,
    "mlm-nl": HUB_CORPUS_LINES - 2 * (HUB_CORPUS_LINES // 10),  # 80/10/10 carve of the first 100k sentences
}
# The rates of the other ways a pod trains, each null until measured.
OPTIONAL_RATES = ("fused_seq_per_s", "side_by_side_seq_per_s", "compiled_seq_per_s",
                  "compiled_side_by_side_seq_per_s")
RATES_EXPECTED = ("a JSON object with device (text), measured (a date, YYYY-MM-DD), source (text), "
                  "solo_seq_per_s (a number > 0) and fused_seq_per_s, side_by_side_seq_per_s, "
                  "compiled_seq_per_s and compiled_side_by_side_seq_per_s (each a number > 0, or null until "
                  "measured)")


@dataclass(frozen=True)
class Work:
    """A study's training work: distinct runs, those that train nothing (regime none), and the training
    sequences of all of them (train rows × epochs)."""

    runs: int
    untrained: int
    sequences: int


@dataclass(frozen=True)
class Rates:
    """The training rates last measured on a GPU (RATES_FILE)."""

    device: str
    measured: str
    source: str
    solo_seq_per_s: float
    fused_seq_per_s: float | None
    workload: str = ""
    side_by_side_seq_per_s: float | None = None
    compiled_seq_per_s: float | None = None
    compiled_side_by_side_seq_per_s: float | None = None


def subset_rows(rows: int, fraction: float | None, count: int | None) -> int:
    """The training rows prepare-data keeps of a split of `rows` (bertology.data.subset_indices)."""
    if fraction is not None:
        return max(1, round(fraction * rows))
    return rows if count is None else min(count, rows)


def split_rows(task: str, source: str, cache: dict[tuple[str, str], int] | None = None) -> int:
    """The rows of `task`'s train split from `source` (see the module's docstring)."""
    kind, _ = tasks.parse_source(source)
    if kind == "hub":
        if task not in TRAIN_SIZES:
            raise BadInput(f"no training-split size for hub task '{task}' (known: {', '.join(TRAIN_SIZES)})")
        return TRAIN_SIZES[task]
    if kind == "synthetic":
        return synthetic.split_size("train")
    if cache is None:
        cache = {}
    if (task, source) not in cache:
        cache[(task, source)] = len(tasks.load_split(task, source, "train"))
    return cache[(task, source)]


def train_rows(dataset: DatasetSpec, cache: dict[tuple[str, str], int] | None = None) -> int:
    """The training examples a run on `dataset` trains on, per epoch."""
    return subset_rows(split_rows(dataset.task, dataset.source, cache), dataset.fraction, dataset.count)


def run_sequences(run: RunSpec, cache: dict[tuple[str, str], int] | None = None) -> int:
    """The training sequences one run processes (its intermediate run not included): rows × epochs."""
    if run.regime.name == "none":
        return 0
    return train_rows(run.dataset, cache) * run.regime.epochs


def training_work(cells: Iterable[Cell]) -> Work:
    """The runs of `cells` and of their intermediate runs, each distinct run once, and their sequences."""
    runs: dict[str, RunSpec] = {}
    for cell in cells:
        run = cell.run
        while run is not None:
            runs.setdefault(run.id, run)
            run = run.after
    cache: dict[tuple[str, str], int] = {}
    return Work(runs=len(runs), untrained=sum(r.regime.name == "none" for r in runs.values()),
                sequences=sum(run_sequences(r, cache) for r in runs.values()))


def gpu_hours(sequences: int, seq_per_s: float) -> float:
    return sequences / seq_per_s / 3600


def load_rates(path: Path | None = None) -> Rates:
    """The rates file, checked; BadInput (one line naming the file and what it must hold) if it is not."""
    path = RATES_FILE if path is None else Path(path)

    def bad(what: str) -> BadInput:
        return BadInput(f"measured rates file {path}: {what} (expected {RATES_EXPECTED})")

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise bad("not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise bad(f"cannot be read: {e}") from None
    except json.JSONDecodeError as e:
        raise bad(f"not JSON ({e.msg}, line {e.lineno} column {e.colno})") from None
    if not isinstance(doc, dict):
        raise bad(f"a JSON {type(doc).__name__}, not an object")
    for key in ("device", "measured", "source"):
        if not isinstance(doc.get(key), str) or not doc[key].strip():
            raise bad(f"'{key}' is {_shown(doc, key)}")
    try:
        datetime.date.fromisoformat(doc["measured"])
    except ValueError:
        raise bad(f"'measured' is {doc['measured']!r}, not a date") from None
    rates = {}
    for key in ("solo_seq_per_s", *OPTIONAL_RATES):
        value = doc.get(key)
        if value is None and key in OPTIONAL_RATES:
            rates[key] = None
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise bad(f"'{key}' is {_shown(doc, key)}")
        rates[key] = float(value)
    return Rates(device=doc["device"].strip(), measured=doc["measured"], source=doc["source"].strip(),
                 workload=str(doc.get("workload") or "").strip(), **rates)


def _shown(doc: dict, key: str) -> str:
    return "missing" if key not in doc else json.dumps(doc[key])
