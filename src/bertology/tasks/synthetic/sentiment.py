"""Synthetic SST-2: sentiment of a movie-review sentence, decided by real English sentiment words.

The point is that pre-training knowledge is *measurable* on it. Sentences come from templates with
neutral filler, and what decides the label is real English sentiment words. The validation split uses
sentiment words that never occur in training, so a model can only generalise if pre-training already
placed "superb" near "great" and "sloppy" near "awful": a randomly initialised BERT sits near 50% on
validation, a pre-trained one clearly above. Every word in the lists below is a single word-piece in the
bert-base-uncased vocabulary, so no sub-word leaks the label.

Some sentences negate a word of the opposite polarity ("not dull") or contrast two clauses ("the plot
was dull , but the film was great overall"), so there is headroom above word spotting.
"""

from __future__ import annotations

import random

from bertology.tasks.synthetic.events import article, vocabulary

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

def make(rng: random.Random, split: str, label: int) -> tuple[tuple[str, ...], int]:
    words = SENTIMENT_WORDS[vocabulary(split)]["positive" if label else "negative"]
    other_words = SENTIMENT_WORDS[vocabulary(split)]["negative" if label else "positive"]
    adj, adj2, other = rng.choice(words), rng.choice(words), rng.choice(other_words)
    adv = rng.choice(_ADVERBS)
    aspect, aspect2 = rng.sample(_ASPECTS, 2)
    draw = rng.random()
    templates = next(templates for upto, templates in _FORMS if draw < upto)
    text = rng.choice(templates).format(
        work=rng.choice(_WORKS), aspect=aspect, aspect2=aspect2, adv=adv, adj=adj, adj2=adj2, other=other,
        opener=rng.choice(_OPENERS), context=rng.choice(_CONTEXTS), a_adj=f"{article(adj)} {adj}",
        a_adv_adj=f"{article(adv or adj)} {adv}{adj}", a_other=f"{article(other)} {other}",
    )
    return (text,), label


