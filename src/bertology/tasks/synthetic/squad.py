"""Synthetic SQuAD 2.0: short stories of who gave what to whom, and questions about one detail.

A context is three to five event sentences ("john sold a red car to mary in paris on monday ."), each with
its own giver and object, and a random subset of the details (colour, city, day; the day sometimes
fronted), mixed with up to two distractor sentences ("anna stayed in rome on friday ."). A question names one sentence by its giver and object (or its object and receiver) and asks one
detail; the answer is the word in that slot, so a model can learn it by matching the pattern. About one
third are unanswerable, SQuAD 2.0 style: they look like the others but ask a detail the sentence leaves
out, or about an object no sentence mentions. Contexts reach 80 word pieces, so with max_length 64 many
examples become several features. Evaluation splits use the held-out names, objects, colours and cities
of the event world (events.ENTITIES).
"""

from __future__ import annotations

import random

from bertology.errors import BadInput
from bertology.tasks.synthetic.events import DAYS, ENTITIES, TRANSFERS, article, vocabulary

COLUMNS = ("id", "title", "question", "context", "answer_texts", "answer_starts")
MAX_SENTENCES = 5  # at most as many sentences as the held-out pool has objects, less one for "no such object"

# Asked detail -> question templates; {giver}/{verb}/{base}/{obj}/{receiver} are the sentence's slots.
QUESTIONS = {
    "giver": ("who {verb} the {obj} to {receiver} ?", "who {verb} the {obj} ?"),
    "receiver": ("to whom did {giver} {base} the {obj} ?", "who did {giver} {base} the {obj} to ?"),
    "obj": ("what did {giver} {base} to {receiver} ?",),
    "colour": ("what colour was the {obj} that {giver} {verb} ?", "which colour was the {obj} {giver} {verb} ?"),
    "city": ("where did {giver} {base} the {obj} ?", "in which city did {giver} {base} the {obj} ?"),
    "day": ("when did {giver} {base} the {obj} ?", "on which day did {giver} {base} the {obj} ?"),
}
OPTIONAL = ("colour", "city", "day")  # details a sentence may leave out


def generate(split: str, size: int, seed: int = 0) -> dict[str, list]:
    """`size` distinct examples as SQuAD columns (answer_starts exact char offsets), size // 3 of them
    unanswerable at shuffled positions; the same (split, size, seed) always gives the same examples."""
    if not isinstance(split, str) or not split:
        raise BadInput(f"synthetic SQuAD split must be a non-empty name like 'train' or 'validation', got {split!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise BadInput(f"synthetic SQuAD size must be an integer >= 1, got {size!r}")
    rng = random.Random(f"bertology-synthetic/squad2/{split}/{seed}")
    answerable = [i % 3 != 2 for i in range(size)]
    rng.shuffle(answerable)
    columns: dict[str, list] = {name: [] for name in COLUMNS}
    seen: set[tuple[str, str]] = set()
    for i, has_answer in enumerate(answerable):
        for _ in range(1000):
            question, context, answer, start = _example(rng, split, has_answer)
            if (question, context) not in seen:
                break
        else:
            raise BadInput(f"synthetic SQuAD {split}: cannot make {size} distinct examples (ask for fewer)")
        seen.add((question, context))
        row = (f"synthetic-squad2-{split}-{seed}-{i}", f"story {i}", question, context,
               [answer] if has_answer else [], [start] if has_answer else [])
        for name, value in zip(COLUMNS, row):
            columns[name].append(value)
    return columns


def _example(rng: random.Random, split: str, has_answer: bool) -> tuple[str, str, str, int]:
    """(question, context, answer, answer's char offset); answer "" and offset -1 when unanswerable."""
    pool = ENTITIES[vocabulary(split)]
    n = rng.randint(3, MAX_SENTENCES)
    givers = rng.sample(pool["names"], n)
    objects = rng.sample(pool["objects"], n + 1)  # the last one is mentioned nowhere
    events = [_sentence(rng, pool, giver, obj) for giver, obj in zip(givers, objects)]
    target = rng.choice(events)
    sentences = events + [_distractor(rng, pool) for _ in range(rng.randint(0, 2))]
    rng.shuffle(sentences)
    if has_answer:
        asked = rng.choice([d for d in QUESTIONS if d in target])
    else:
        absent = [d for d in OPTIONAL if d not in target]
        asked = rng.choice(absent) if absent and rng.random() < 0.7 else "giver"
        if asked == "giver":  # no detail missing, or chosen: ask about an object no sentence has
            target = {**target, "obj": objects[-1]}
    question = rng.choice(QUESTIONS[asked]).format(**target)

    words: list[str] = []
    start = -1
    for sentence in sentences:
        if sentence is target and has_answer:
            before = [*words, *sentence["words"][:sentence["slots"][asked]]]
            start = len(" ".join(before)) + bool(before)
        words += sentence["words"]
    return question, " ".join(words), target[asked] if has_answer else "", start


def _sentence(rng: random.Random, pool: dict[str, tuple[str, ...]], giver: str, obj: str) -> dict:
    """One event sentence: its slot values, its words, and each slot's word index."""
    verb, _, base = rng.choice(TRANSFERS)
    receiver = rng.choice([name for name in pool["names"] if name != giver])
    details = {d: rng.random() < 0.6 for d in OPTIONAL}
    slots = {"giver": giver, "verb": verb, "base": base, "obj": obj, "receiver": receiver}
    colour = rng.choice(pool["colours"]) if details["colour"] else None
    words = [giver, verb, article(colour or obj)] + ([colour] if colour else []) + [obj, "to", receiver]
    index = {"giver": 0, "obj": len(words) - 3, "receiver": len(words) - 1}
    if colour:
        slots["colour"], index["colour"] = colour, 3
    if details["city"]:
        slots["city"] = rng.choice(pool["cities"])
        words += ["in", slots["city"]]
        index["city"] = len(words) - 1
    if details["day"]:
        slots["day"] = rng.choice(DAYS)
        if rng.random() < 0.3:  # fronted: "on monday , john sold ..."
            words = ["on", slots["day"], ","] + words
            index = {slot: i + 3 for slot, i in index.items()}
            index["day"] = 1
        else:
            words += ["on", slots["day"]]
            index["day"] = len(words) - 1
    return {**slots, "words": [*words, "."], "slots": index}


def _distractor(rng: random.Random, pool: dict[str, tuple[str, ...]]) -> dict:
    """A sentence no question asks about, with a city and a day to tempt "where" and "when" answers."""
    return {"words": [rng.choice(pool["names"]), "stayed", "in", rng.choice(pool["cities"]), "on",
                      rng.choice(DAYS), "."]}
