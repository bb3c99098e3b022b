"""The shared world of the pair tasks: who gave what to whom, where and when.

RTE, MNLI, MRPC, QNLI and STS-B all talk about one small event ("john sold a red car to mary in paris").
Evaluation splits use names, objects, colours and cities held out from training. Every word below is a
single word-piece in the bert-base-uncased vocabulary.
"""

from __future__ import annotations

import random

ENTITIES: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {
        "names": ("john", "mary", "peter", "susan", "paul", "linda", "mark", "karen", "james", "anna",
                  "tom", "sarah"),
        "objects": ("car", "book", "lamp", "guitar", "bicycle", "painting", "chair", "camera"),
        "colours": ("red", "blue", "green", "black"),
        "cities": ("paris", "london", "berlin", "madrid", "rome", "tokyo"),
    },
    "validation": {
        "names": ("george", "helen", "victor", "laura", "simon", "rachel"),
        "objects": ("boat", "piano", "clock", "tent", "radio", "watch"),
        "colours": ("white", "yellow", "brown", "grey"),
        "cities": ("boston", "vienna", "dublin", "cairo", "moscow", "sydney"),
    },
}
# (giver's verb, receiver's verb, giver's base form): "a sold x to b" <=> "b bought x from a".
TRANSFERS = (("sold", "bought", "sell"), ("gave", "got", "give"), ("lent", "borrowed", "lend"),
             ("sent", "received", "send"))
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def vocabulary(split: str) -> str:
    """Which vocabulary a split draws from: training's, or the held-out one for every evaluation split."""
    return "train" if split == "train" else "validation"


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def event(rng: random.Random, split: str) -> dict[str, str]:
    """Template slots of one event: people a, b (and a bystander c), object, colour, city, day, verbs;
    obj2, colour2 and city2 are distinct alternatives for hypotheses that change a detail."""
    pool = ENTITIES[vocabulary(split)]
    a, b, c = rng.sample(pool["names"], 3)
    obj, obj2 = rng.sample(pool["objects"], 2)
    colour, colour2 = rng.sample(pool["colours"], 2)
    city, city2 = rng.sample(pool["cities"], 2)
    give, get, give_base = rng.choice(TRANSFERS)
    return {"a": a, "b": b, "c": c, "obj": obj, "obj2": obj2, "colour": colour, "colour2": colour2,
            "city": city, "city2": city2, "give": give, "get": get, "give_base": give_base,
            "day": rng.choice(DAYS), "art_colour": article(colour), "art_obj": article(obj),
            "art_obj2": article(obj2)}
