"""Synthetic STS-B: how similar are two event descriptions, on GLUE's 0-5 scale (regression).

Each sentence describes an event by five attributes: who, did what, to which object, of which colour,
where. The second sentence keeps a random subset of the first's attributes and changes the rest, and may
phrase it differently. The score is the weight of the shared attributes (who and the action 1.25 each, the
object 1.0, colour and place 0.75 each: 5.0 when all agree), so it is many-valued, not a few classes.
Evaluation splits use held-out names, objects, colours and cities.
"""

from __future__ import annotations

import random

from bertology.tasks.synthetic.events import ENTITIES, article, vocabulary

# Strata: the number of attributes the two sentences share, 0..5.
LEVELS = 6
_VERBS = ("painted", "cleaned", "repaired", "bought", "sold", "carried", "found", "lost", "washed", "borrowed")
# Attribute -> (entity pool, weight in the score).
_ATTRIBUTES = {"name": ("names", 1.25), "verb": (None, 1.25), "obj": ("objects", 1.0),
               "colour": ("colours", 0.75), "city": ("cities", 0.75)}
_SENTENCES = (
    "{name} {verb} {art} {colour} {obj} in {city} .",
    "in {city} , {name} {verb} {art} {colour} {obj} .",
    "{name} {verb} the {colour} {obj} while in {city} .",
)


def make(rng: random.Random, split: str, level: int) -> tuple[tuple[str, ...], float]:
    pool = ENTITIES[vocabulary(split)]
    choices = {attr: _VERBS if kind is None else pool[kind] for attr, (kind, _) in _ATTRIBUTES.items()}
    pairs = {attr: rng.sample(values, 2) for attr, values in choices.items()}
    kept = set(rng.sample(list(_ATTRIBUTES), level))
    first = {attr: pair[0] for attr, pair in pairs.items()}
    second = {attr: pair[0] if attr in kept else pair[1] for attr, pair in pairs.items()}
    texts = tuple(rng.choice(_SENTENCES).format(art=article(s["colour"]), **s) for s in (first, second))
    return texts, float(sum(_ATTRIBUTES[attr][1] for attr in kept))
