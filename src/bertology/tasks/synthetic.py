"""Synthetic SST-2- and RTE-like data the project owns: for tests and the offline demo.

The point of the sentiment task is that pre-training knowledge is *measurable* on it. Sentences come
from templates with neutral filler, and what decides the label is real English sentiment words. The
validation split uses sentiment words that never occur in training, so a model can only generalise if
pre-training already placed "superb" near "great" and "sloppy" near "awful": a randomly initialised BERT
sits near 50% on validation, a pre-trained one clearly above. Every word in the lists below is a single
word-piece in the bert-base-uncased vocabulary, so no sub-word leaks the label.

Some sentences negate a word of the opposite polarity ("not dull") or contrast two clauses ("the plot
was dull , but the film was great overall"), so there is headroom above word spotting.

The entailment task pairs a premise (who gave what to whom, where) with a hypothesis that restates part
of it (entailment) or swaps a role, an entity or an attribute (not_entailment). Its validation split uses
names, objects, colours and cities held out from training.

Generation is deterministic: the same (task, split, size, seed) always gives the same examples, on any
machine (random.Random seeded with a string is stable across processes and PYTHONHASHSEED).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from bertology.errors import BadInput

SIZES = {"train": 2000, "validation": 400}

# Label order matches the task registry: sst2 0 = negative, 1 = positive.
SENTIMENT_WORDS: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {
        "negative": ("bad", "terrible", "awful", "horrible", "dreadful", "boring", "dull", "poor",
                     "weak", "disappointing", "ugly", "stupid", "painful", "annoying", "pathetic",
                     "miserable"),
        "positive": ("good", "great", "excellent", "wonderful", "fantastic", "brilliant", "delightful",
                     "lovely", "beautiful", "charming", "amazing", "terrific", "pleasant", "nice",
                     "perfect", "enjoyable"),
    },
    "validation": {
        "negative": ("awkward", "bland", "clumsy", "sloppy", "shallow", "unpleasant", "ridiculous",
                     "worthless", "disgusting", "lame"),
        "positive": ("superb", "splendid", "outstanding", "magnificent", "marvelous", "gorgeous",
                     "fabulous", "glorious", "impressive", "remarkable"),
    },
}

# Neutral filler shared by both splits: it carries no label information.
_WORKS = ("film", "movie", "show", "series", "play", "documentary", "sequel")
_ASPECTS = ("acting", "plot", "script", "music", "ending", "dialogue", "cast", "soundtrack", "direction",
            "pacing", "story", "camera work")
_ADVERBS = ("", "really ", "very ", "quite ", "rather ", "truly ", "simply ", "fairly ")
_OPENERS = ("honestly", "overall", "in the end", "on the whole", "for me", "to be fair",
            "after the first hour", "as expected")
_CONTEXTS = ("from start to finish", "at times", "in the second half", "most of the time", "throughout",
             "for a change")
_SENTIMENT_TEMPLATES = (
    "the {work} was {adv}{adj} .",
    "i thought the {aspect} was {adv}{adj} .",
    "{opener} , the {aspect} of this {work} is {adv}{adj} .",
    "the {aspect} felt {adv}{adj} {context} .",
    "what {a_adj} {work} .",
    "{opener} it is {a_adv_adj} {work} .",
    "my friends said the {aspect} was {adv}{adj} .",
    "the {aspect} is {adj} and the {aspect2} is {adv}{adj2} .",
)
# Harder forms, so a model must read the sentence and not only spot a word: a negated word of the opposite
# polarity ("not dull" is positive), or a contrast whose last clause decides.
_NEGATED_TEMPLATES = (
    "the {work} was not {other} .",
    "i would not call the {aspect} {other} .",
    "{opener} , the {aspect} of this {work} is not {other} .",
)
_CONTRAST_TEMPLATES = (
    "the {aspect2} was {other} , but the {work} was {adv}{adj} overall .",
    "despite {a_other} {aspect2} , the {aspect} felt {adv}{adj} {context} .",
)
_FORMS = ((0.7, _SENTIMENT_TEMPLATES), (0.85, _NEGATED_TEMPLATES), (1.0, _CONTRAST_TEMPLATES))

# Label order matches the task registry: rte 0 = entailment, 1 = not_entailment.
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
# (giver's verb, receiver's verb): "a sold x to b" <=> "b bought x from a".
_TRANSFERS = (("sold", "bought"), ("gave", "got"), ("lent", "borrowed"), ("sent", "received"))
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_PREMISES = (
    "{a} {give} {art_colour} {colour} {obj} to {b} in {city} .",
    "in {city} , {a} {give} {b} {art_colour} {colour} {obj} .",
    "last {day} , {a} {give} {art_colour} {colour} {obj} to {b} while visiting {city} .",
    "while they were both in {city} , {a} {give} {art_colour} {colour} {obj} to {b} .",
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


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _sentiment(rng: random.Random, split: str, label: int) -> tuple[str, ...]:
    words = SENTIMENT_WORDS[split]["positive" if label else "negative"]
    other_words = SENTIMENT_WORDS[split]["negative" if label else "positive"]
    adj, adj2, other = rng.choice(words), rng.choice(words), rng.choice(other_words)
    adv = rng.choice(_ADVERBS)
    aspect, aspect2 = rng.sample(_ASPECTS, 2)
    draw = rng.random()
    templates = next(templates for upto, templates in _FORMS if draw < upto)
    text = rng.choice(templates).format(
        work=rng.choice(_WORKS), aspect=aspect, aspect2=aspect2, adv=adv, adj=adj, adj2=adj2, other=other,
        opener=rng.choice(_OPENERS), context=rng.choice(_CONTEXTS), a_adj=f"{_article(adj)} {adj}",
        a_adv_adj=f"{_article(adv or adj)} {adv}{adj}", a_other=f"{_article(other)} {other}",
    )
    return (text,)


def _entailment(rng: random.Random, split: str, label: int) -> tuple[str, ...]:
    pool = ENTITIES[split]
    a, b, c = rng.sample(pool["names"], 3)
    obj, obj2 = rng.sample(pool["objects"], 2)
    colour, colour2 = rng.sample(pool["colours"], 2)
    city, city2 = rng.sample(pool["cities"], 2)
    give, get = rng.choice(_TRANSFERS)
    slots = {"a": a, "b": b, "c": c, "obj": obj, "obj2": obj2, "colour": colour, "colour2": colour2,
             "city": city, "city2": city2, "give": give, "get": get, "day": rng.choice(_DAYS),
             "art_colour": _article(colour), "art_obj": _article(obj), "art_obj2": _article(obj2)}
    premise = rng.choice(_PREMISES).format(**slots)
    hypothesis = rng.choice(_NOT_ENTAILED if label else _ENTAILED).format(**slots)
    return premise, hypothesis


_GENERATORS: dict[str, tuple[tuple[str, ...], Callable[[random.Random, str, int], tuple[str, ...]]]] = {
    "sst2": (("text_a",), _sentiment),
    "rte": (("text_a", "text_b"), _entailment),
}
TASKS = tuple(sorted(_GENERATORS))


def generate(task: str, split: str, *, size: int | None = None, seed: int = 0) -> dict[str, list]:
    """Columns text_a, [text_b], label of `size` distinct examples (default SIZES[split]), labels balanced
    (the first label gets the extra example when `size` is odd) and shuffled."""
    if task not in _GENERATORS:
        raise BadInput(f"no synthetic data for task {task!r} (synthetic tasks: {', '.join(TASKS)})")
    if split not in SIZES:
        raise BadInput(f"no synthetic split {split!r} (synthetic splits: {', '.join(SIZES)})")
    size = SIZES[split] if size is None else size
    if not isinstance(size, int) or size < 2:
        raise BadInput(f"synthetic size must be an integer >= 2, got {size!r}")
    fields, make = _GENERATORS[task]
    rng = random.Random(f"bertology-synthetic/{task}/{split}/{seed}")
    labels = [i % 2 for i in range(size)]
    rng.shuffle(labels)
    seen: set[tuple[str, ...]] = set()
    rows = []
    for label in labels:
        for _ in range(1000):
            texts = make(rng, split, label)
            if texts not in seen:
                break
        else:
            raise BadInput(f"synthetic {task} {split}: cannot make {size} distinct examples (ask for fewer)")
        seen.add(texts)
        rows.append((*texts, label))
    columns = list(zip(*rows))
    return {**{field: list(col) for field, col in zip(fields, columns)}, "label": list(columns[-1])}
