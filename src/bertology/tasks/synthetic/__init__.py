"""Synthetic GLUE-like data the project owns: every task type, for tests and the offline demo.

One module per kind of task, each a maker `make(rng, split, stratum) -> (texts, label)`:

  sentiment       sst2   single sentence, binary (held-out sentiment words)
  acceptability   cola   single sentence, binary (agreement, word order; held-out nouns and verbs)
  entailment      rte    pair, binary;  mnli  pair, 3 classes, evaluated on matched and mismatched
  paraphrase      mrpc   pair of statements, binary;  qqp  pair of questions, binary
  qa              qnli   question and sentence, binary (does the sentence answer it?)
  coreference     wnli   Winograd-like pronoun resolution, binary
  similarity      stsb   pair, regression: a 0-5 score from the attributes the two sentences share

Evaluation splits draw from vocabularies held out from training (names, objects, topics, words), so
only what a model knows about words in general carries over. Labels are balanced: example i gets stratum
i mod `strata` (the class id, or for regression a level the maker turns into a score), then shuffled.

Generation is deterministic: the same (task, split, size, seed) always gives the same examples, on any
machine (random.Random seeded with a string is stable across processes and PYTHONHASHSEED).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from bertology.errors import BadInput
from bertology.tasks.registry import get_task
from bertology.tasks.synthetic import (
    acceptability,
    coreference,
    entailment,
    paraphrase,
    qa,
    sentiment,
    similarity,
)
from bertology.tasks.synthetic.events import ENTITIES
from bertology.tasks.synthetic.sentiment import SENTIMENT_WORDS

# Every evaluation split (MNLI has two) gets the "validation" size.
SIZES = {"train": 2000, "validation": 400}



def split_size(split: str) -> int:
    """How many examples a synthetic split has by default (every evaluation split the "validation" size)."""
    return SIZES["train" if split == "train" else "validation"]


Maker = Callable[[random.Random, str, int], tuple[tuple[str, ...], "int | float"]]


@dataclass(frozen=True)
class Generator:
    make: Maker
    strata: int  # labels are drawn in turn from range(strata)
    # Words only the training split uses / only evaluation splits use: {"train": …, "validation": …}.
    vocabulary: dict[str, frozenset[str]]


def _words(pools: dict[str, dict[str, tuple[str, ...]]]) -> dict[str, frozenset[str]]:
    return {split: frozenset(w for ws in kinds.values() for w in ws) for split, kinds in pools.items()}


GENERATORS: dict[str, Generator] = {
    "sst2": Generator(sentiment.make, 2, _words(SENTIMENT_WORDS)),
    "cola": Generator(acceptability.make, 2, _words(acceptability.WORDS)),
    "rte": Generator(entailment.make_rte, 2, _words(ENTITIES)),
    "mnli": Generator(entailment.make_mnli, 3, _words(ENTITIES)),
    "mrpc": Generator(paraphrase.make_mrpc, 2, _words(ENTITIES)),
    "qqp": Generator(paraphrase.make_qqp, 2, _words(paraphrase.TOPICS)),
    "qnli": Generator(qa.make, 2, _words(ENTITIES)),
    "wnli": Generator(coreference.make, 2, _words(coreference.OBJECTS)),
    "stsb": Generator(similarity.make, similarity.LEVELS, _words(ENTITIES)),
}
TASKS = tuple(sorted(GENERATORS))

__all__ = ["ENTITIES", "GENERATORS", "SENTIMENT_WORDS", "SIZES", "TASKS", "generate", "split_size"]


def generate(task: str, split: str, *, size: int | None = None, seed: int = 0) -> dict[str, list]:
    """Columns text_a, [text_b], label of `size` distinct examples (default SIZES by split), labels balanced
    (the first strata get the extra examples when `size` is not a multiple) and shuffled."""
    if task not in GENERATORS:
        raise BadInput(f"no synthetic data for task {task!r} (synthetic tasks: {', '.join(TASKS)})")
    fields = get_task(task).text_fields
    splits = get_task(task).splits
    if split not in splits:
        raise BadInput(f"no synthetic split {split!r} for task {task} (synthetic splits: {', '.join(splits)})")
    size = split_size(split) if size is None else size
    if isinstance(size, bool) or not isinstance(size, int) or size < 2:
        raise BadInput(f"synthetic size must be an integer >= 2, got {size!r}")
    gen = GENERATORS[task]
    rng = random.Random(f"bertology-synthetic/{task}/{split}/{seed}")
    strata = [i % gen.strata for i in range(size)]
    rng.shuffle(strata)
    seen: set[tuple[str, ...]] = set()
    rows = []
    for stratum in strata:
        for _ in range(1000):
            texts, label = gen.make(rng, split, stratum)
            if texts not in seen:
                break
        else:
            raise BadInput(f"synthetic {task} {split}: cannot make {size} distinct examples (ask for fewer)")
        seen.add(texts)
        rows.append((*texts, label))
    columns = list(zip(*rows))
    return {**{field: list(col) for field, col in zip(fields, columns)}, "label": list(columns[-1])}
