"""Synthetic RTE (entailment or not) and MNLI (entailment, neutral, contradiction) over one small event.

A premise says who gave what to whom, where. RTE's hypothesis restates part of it (entailment) or swaps a
role, an entity or an attribute (not_entailment). MNLI's hypothesis restates part of it (entailment), adds
something the premise does not settle (neutral: a price, a motive) or states what the premise rules out
(contradiction: another colour, the giver kept it). MNLI's matched split phrases premises as training does;
the mismatched split phrases them differently (another "genre"). Both use held-out names, objects,
colours and cities.
"""

from __future__ import annotations

import random

from bertology.tasks.synthetic.events import event

# Label order matches the task registry: rte 0 = entailment, 1 = not_entailment.
_PREMISES = (
    "{a} {give} {art_colour} {colour} {obj} to {b} in {city} .",
    "in {city} , {a} {give} {b} {art_colour} {colour} {obj} .",
    "last {day} , {a} {give} {art_colour} {colour} {obj} to {b} while visiting {city} .",
    "while they were both in {city} , {a} {give} {art_colour} {colour} {obj} to {b} .",
)
# MNLI's mismatched genre: reported, clefted and relative-clause premises.
_OTHER_PREMISES = (
    "according to witnesses , {a} {give} {art_colour} {colour} {obj} to {b} in {city} .",
    "it was in {city} that {b} {get} {art_colour} {colour} {obj} from {a} .",
    "the {colour} {obj} that {b} {get} from {a} changed hands in {city} .",
)
_ENTAILED = (
    "{a} {give} {art_obj} {obj} to {b} .",
    "{b} {get} {art_obj} {obj} from {a} .",
    "{b} {get} {art_colour} {colour} {obj} .",
    "the {obj} was {colour} .",
    "{a} was in {city} .",
    "{b} was in {city} .",
)
_NOT_ENTAILED = (
    "{b} {give} {art_obj} {obj} to {a} .",  # roles swapped
    "{a} {get} {art_obj} {obj} from {b} .",  # roles swapped, converse verb
    "the {obj} was {colour2} .",  # attribute swapped
    "{a} {give} {art_obj2} {obj2} to {b} .",  # object swapped
    "{c} {get} {art_obj} {obj} from {a} .",  # person swapped
    "{a} was in {city2} .",  # place swapped
)
# Label order matches the task registry: mnli 0 = entailment, 1 = neutral, 2 = contradiction.
_NEUTRAL = (
    "{a} {give} the {obj} to {b} for {price} dollars .",
    "{b} had wanted {art_obj} {obj} for years .",
    "{a} and {b} are old friends .",
    "the {obj} was expensive .",
    "{b} was happy with the {obj} .",
    "{a} had bought the {obj} in {city2} .",
)
_CONTRADICTION = (
    "the {obj} was {colour2} .",
    "{a} kept the {obj} .",
    "{b} never got the {obj} .",
    "{a} has never been to {city} .",
    "{a} {give} nothing to {b} .",
    "{b} {get} nothing from {a} .",
)
_PRICES = ("ten", "twenty", "fifty", "hundred", "five")
_MNLI_HYPOTHESES = (_ENTAILED, _NEUTRAL, _CONTRADICTION)


def make_rte(rng: random.Random, split: str, label: int) -> tuple[tuple[str, ...], int]:
    slots = event(rng, split)
    premise = rng.choice(_PREMISES).format(**slots)
    hypothesis = rng.choice(_NOT_ENTAILED if label else _ENTAILED).format(**slots)
    return (premise, hypothesis), label


def make_mnli(rng: random.Random, split: str, label: int) -> tuple[tuple[str, ...], int]:
    slots = event(rng, split)
    premises = _OTHER_PREMISES if split == "validation_mismatched" else _PREMISES
    premise = rng.choice(premises).format(**slots)
    hypothesis = rng.choice(_MNLI_HYPOTHESES[label]).format(price=rng.choice(_PRICES), **slots)
    return (premise, hypothesis), label
