"""Synthetic CoLA: is the sentence grammatical? Subject-verb agreement, word order, determiners.

Acceptable sentences are transitive clauses, some with a relative clause between the subject and its
verb ("the dogs that the cat sees follow the boy ."), so agreement must skip an attractor noun of the
other number. Unacceptable ones break one rule: the verb disagrees with its subject (often agreeing with
the attractor instead), the verb comes last, or the determiner follows its noun. Nouns and verbs of
evaluation splits are held out from training; all are regular (plural noun + s, third person verb + s).
"""

from __future__ import annotations

import random

from bertology.tasks.synthetic.events import vocabulary

# Label order matches the task registry: cola 0 = unacceptable, 1 = acceptable.
WORDS: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {
        "nouns": ("dog", "cat", "boy", "girl", "farmer", "teacher", "doctor", "student", "bird", "horse",
                  "king", "singer", "driver", "baker", "pilot", "friend"),
        "verbs": ("see", "like", "follow", "help", "visit", "call", "find", "hear", "meet", "thank", "greet",
                  "trust"),
    },
    "validation": {
        "nouns": ("lawyer", "nurse", "sailor", "soldier", "painter", "dancer", "monkey", "rabbit"),
        "verbs": ("admire", "ignore", "avoid", "protect", "warn", "blame", "remember", "attack"),
    },
}
_ADJECTIVES = ("", "old ", "young ", "tall ", "happy ", "angry ", "quiet ")
_ADVERBS = ("", "often ", "never ", "always ", "rarely ")


def _noun(noun: str, plural: bool) -> str:
    return noun + "s" if plural else noun


def _verb(verb: str, plural: bool) -> str:
    return verb if plural else verb + "s"


def make(rng: random.Random, split: str, label: int) -> tuple[tuple[str, ...], int]:
    pool = WORDS[vocabulary(split)]
    subj, obj, other = rng.sample(pool["nouns"], 3)
    verb, verb2 = rng.sample(pool["verbs"], 2)
    plural, obj_plural, other_plural = (rng.random() < 0.5 for _ in range(3))
    adj, adv = rng.choice(_ADJECTIVES), rng.choice(_ADVERBS)
    relative = rng.choice((
        "",
        f" that {_verb(verb2, plural)} the {_noun(other, other_plural)}",  # subject relative
        f" that the {_noun(other, not plural)} {_verb(verb2, not plural)}",  # object relative: attractor
    ))
    subject, object_ = f"{adj}{_noun(subj, plural)}", f"the {_noun(obj, obj_plural)}"
    violation = None if label else rng.choice(("agreement", "order", "determiner"))
    main = _verb(verb, plural != (violation == "agreement"))
    if violation == "order":
        return (f"the {subject}{relative} {object_} {adv}{main} .",), label
    if violation == "determiner":
        return (f"{subject} the{relative} {adv}{main} {object_} .",), label
    return (f"the {subject}{relative} {adv}{main} {object_} .",), label
