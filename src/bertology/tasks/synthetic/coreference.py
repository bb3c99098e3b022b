"""Synthetic WNLI: Winograd-like pronoun resolution between two objects.

"the trophy did not fit into the suitcase because it was too big ." — "it" is the trophy; with "small" it
is the suitcase. The hypothesis substitutes one of the two objects for the pronoun; it is entailed when
that is the object the adjective picks. Word overlap cannot tell the two apart: only the adjective does.
Evaluation splits use objects held out from training.
"""

from __future__ import annotations

import random

from bertology.tasks.synthetic.events import vocabulary

# Label order matches the task registry: wnli 0 = not_entailment, 1 = entailment.
OBJECTS: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {
        "objects": ("box", "bag", "suitcase", "trophy", "table", "shelf", "bottle", "jar", "basket", "drawer",
                    "crate", "bucket", "cup", "vase", "bowl", "bench"),
    },
    "validation": {
        "objects": ("cabinet", "tray", "trunk", "sack", "barrel", "locker", "closet", "envelope"),
    },
}
# (sentence, hypothesis, (adjective that picks the first object, adjective that picks the second)).
_SCHEMAS = (
    ("the {x} did not fit into the {y} because it was too {adj} .", "the {ref} was too {adj} .",
     ("big", "small")),
    ("the {x} could not hold the {y} because it was too {adj} .", "the {ref} was too {adj} .",
     ("weak", "heavy")),
    ("the {x} was hidden behind the {y} because it was so {adj} .", "the {ref} was so {adj} .",
     ("small", "large")),
    ("the {x} was put under the {y} because it was {adj} .", "the {ref} was {adj} .",
     ("heavier", "lighter")),
)


def make(rng: random.Random, split: str, label: int) -> tuple[tuple[str, ...], int]:
    x, y = rng.sample(OBJECTS[vocabulary(split)]["objects"], 2)
    sentence, hypothesis, adjectives = rng.choice(_SCHEMAS)
    picks = rng.randrange(2)
    referent = (x, y)[picks if label else 1 - picks]
    adj = adjectives[picks]
    return (sentence.format(x=x, y=y, adj=adj), hypothesis.format(ref=referent, adj=adj)), label
