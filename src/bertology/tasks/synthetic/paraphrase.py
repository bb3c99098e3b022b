"""Synthetic MRPC (are two statements paraphrases?) and QQP (do two questions ask the same thing?).

MRPC: two phrasings of one event (active, fronted place, the receiver's converse verb); the non-paraphrase
changes one detail (the receiver, the colour, the city, the object) or swaps the roles, so word overlap
stays high either way. Evaluation splits use held-out names, objects, colours and cities.

QQP: questions about a topic with an intent (how to learn it, is it hard, which jobs use it, ...), each
intent phrased several ways. Duplicates share intent and topic in different words; non-duplicates share
the topic but not the intent, or the intent but not the topic. Evaluation topics are held out.
"""

from __future__ import annotations

import random

from bertology.tasks.synthetic.events import article, event, vocabulary

# Label order matches the task registry: mrpc 0 = not_equivalent, 1 = equivalent.
_STATEMENTS = (
    "{a} {give} {art_colour} {colour} {obj} to {b} in {city} .",
    "in {city} , {a} {give} {b} {art_colour} {colour} {obj} .",
    "{b} {get} {art_colour} {colour} {obj} from {a} in {city} .",
    "in {city} , {b} {get} {art_colour} {colour} {obj} from {a} .",
    "the {colour} {obj} went from {a} to {b} in {city} .",
)


def make_mrpc(rng: random.Random, split: str, label: int) -> tuple[tuple[str, ...], int]:
    slots = event(rng, split)
    first, second = rng.sample(_STATEMENTS, 2)
    other = dict(slots)
    if not label:
        change = rng.choice(("b", "colour", "city", "obj", "roles"))
        if change == "roles":
            other.update(a=slots["b"], b=slots["a"])
        elif change == "b":
            other.update(b=slots["c"])
        elif change == "colour":
            other.update(colour=slots["colour2"], art_colour=article(slots["colour2"]))
        else:
            other[change] = slots[f"{change}2"]
    return (first.format(**slots), second.format(**other)), label


# Label order matches the task registry: qqp 0 = not_duplicate, 1 = duplicate.
TOPICS: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {
        "topics": ("python", "chess", "guitar", "cooking", "photography", "spanish", "physics", "swimming",
                   "java", "drawing", "french", "yoga", "calculus", "economics", "running", "poker",
                   "knitting", "surfing", "statistics", "philosophy", "dancing", "linux", "algebra",
                   "gardening"),
    },
    "validation": {
        "topics": ("german", "tennis", "chemistry", "violin", "baking", "poetry", "golf", "biology", "skiing",
                   "japanese"),
    },
}
_INTENTS = (
    ("how do i learn {t} ?", "what is the best way to learn {t} ?", "how should i learn {t} ?"),
    ("how do i get started with {t} ?", "where should a beginner start with {t} ?",
     "what should i do first to begin {t} ?"),
    ("is {t} hard to learn ?", "how difficult is it to learn {t} ?", "is learning {t} difficult ?"),
    ("what jobs can i get with {t} ?", "which careers use {t} ?", "can {t} get me a job ?"),
    ("why do people like {t} ?", "what makes {t} so popular ?", "why is {t} popular ?"),
    ("what are good books about {t} ?", "which books should i read on {t} ?",
     "can you recommend a book about {t} ?"),
    ("am i too old to learn {t} ?", "is it ever too late to learn {t} ?"),
)
_PREFIXES = ("", "", "honestly , ", "in your experience , ")


def make_qqp(rng: random.Random, split: str, label: int) -> tuple[tuple[str, ...], int]:
    topic, topic2 = rng.sample(TOPICS[vocabulary(split)]["topics"], 2)
    intent, intent2 = rng.sample(_INTENTS, 2)
    first = rng.choice(intent)
    if label:
        second, topic2 = rng.choice([q for q in intent if q != first]), topic
    elif rng.random() < 0.5:  # the same topic, another question
        second, topic2 = rng.choice(intent2), topic
    else:  # the same question (maybe in other words), another topic
        second = rng.choice(intent)
    return (rng.choice(_PREFIXES) + first.format(t=topic), rng.choice(_PREFIXES) + second.format(t=topic2)), label
