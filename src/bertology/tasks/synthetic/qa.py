"""Synthetic QNLI: does the sentence contain the answer to the question?

Questions ask one detail of an event (to whom, where, when, what colour). The sentence always talks about
the same giver and object, with a random subset of the other details; it answers the question
(entailment) exactly when it contains the asked detail. Evaluation splits use held-out names, objects,
colours and cities.
"""

from __future__ import annotations

import random

from bertology.tasks.synthetic.events import article, event

# Label order matches the task registry: qnli 0 = entailment, 1 = not_entailment.
_QUESTIONS = {
    "b": ("who did {a} {give_base} the {obj} to ?", "to whom did {a} {give_base} the {obj} ?"),
    "city": ("where did {a} {give_base} the {obj} to {b} ?", "in which city did {a} {give_base} the {obj} ?"),
    "day": ("when did {a} {give_base} the {obj} to {b} ?", "on which day did {a} {give_base} the {obj} ?"),
    "colour": ("what colour was the {obj} that {a} {give} ?", "which colour was the {obj} {a} {give} ?"),
}


def make(rng: random.Random, split: str, label: int) -> tuple[tuple[str, ...], int]:
    slots = event(rng, split)
    asked = rng.choice(tuple(_QUESTIONS))
    has = {detail: rng.random() < 0.5 for detail in _QUESTIONS}
    has[asked] = not label
    thing = f"{slots['colour']} {slots['obj']}" if has["colour"] else slots["obj"]
    parts = [f"{slots['a']} {slots['give']} {article(thing)} {thing}"]
    parts += [f"to {slots['b']}"] * has["b"] + [f"in {slots['city']}"] * has["city"]
    parts += [f"on {slots['day']}"] * has["day"]
    if len(parts) > 1 and rng.random() < 0.3:  # front the last detail: "on monday , john sold ..."
        parts = [parts[-1] + " ,", *parts[:-1]]
    question = rng.choice(_QUESTIONS[asked]).format(**slots)
    return (question, " ".join(parts) + " ."), label
