"""Synthetic sentences in two "languages", Dutch-like ("nl") and English ("en"), for masked-LM tests and
the offline demo of the cross-lingual forgetting curve.

Both render one small world of people and animals doing things somewhere, with the grammar that makes
masked tokens predictable: article–noun gender ("de hond", "het huis", "een groot huis" but "een grote
hond"), subject–verb number ("de honden slapen"), word order (Dutch puts the verb second after a fronted
time phrase and last in an "omdat" clause). A tiny BERT learns this within a few hundred steps, so its
perplexity on the training language drops visibly while the other language's does not.

Splits are disjoint by construction: a sentence belongs to the split its hash selects (80% train, 10%
validation, 10% test), whatever the seed or size, so evaluation sentences are never trained on. The same
(language, split, size, seed) always gives the same sentences (random.Random seeded with a string is
stable across processes and PYTHONHASHSEED).
"""

from __future__ import annotations

import hashlib
import random

from bertology.errors import BadInput
from bertology.tasks.synthetic.events import article

LANGUAGES = ("nl", "en")
SPLITS = ("train", "validation", "test")

# (English singular, plural, Dutch singular, plural, Dutch neuter: takes "het" and the bare adjective
# after "een").
AGENTS = (
    ("dog", "dogs", "hond", "honden", False), ("cat", "cats", "kat", "katten", False),
    ("bird", "birds", "vogel", "vogels", False), ("horse", "horses", "paard", "paarden", True),
    ("child", "children", "kind", "kinderen", True), ("girl", "girls", "meisje", "meisjes", True),
    ("boy", "boys", "jongen", "jongens", False), ("man", "men", "man", "mannen", False),
    ("woman", "women", "vrouw", "vrouwen", False), ("farmer", "farmers", "boer", "boeren", False),
    ("teacher", "teachers", "leraar", "leraren", False), ("sheep", "sheep", "schaap", "schapen", True),
)
THINGS = (
    ("house", "houses", "huis", "huizen", True), ("book", "books", "boek", "boeken", True),
    ("table", "tables", "tafel", "tafels", False), ("chair", "chairs", "stoel", "stoelen", False),
    ("tree", "trees", "boom", "bomen", False), ("garden", "gardens", "tuin", "tuinen", False),
    ("boat", "boats", "boot", "boten", False), ("window", "windows", "raam", "ramen", True),
    ("door", "doors", "deur", "deuren", False), ("bridge", "bridges", "brug", "bruggen", False),
    ("village", "villages", "dorp", "dorpen", True), ("river", "rivers", "rivier", "rivieren", False),
    ("bike", "bikes", "fiets", "fietsen", False), ("ship", "ships", "schip", "schepen", True),
    ("bed", "beds", "bed", "bedden", True),
)
# (English, Dutch bare form, Dutch inflected form).
ADJECTIVES = (
    ("big", "groot", "grote"), ("small", "klein", "kleine"), ("old", "oud", "oude"),
    ("new", "nieuw", "nieuwe"), ("red", "rood", "rode"), ("white", "wit", "witte"),
    ("green", "groen", "groene"), ("black", "zwart", "zwarte"), ("beautiful", "mooi", "mooie"),
    ("young", "jong", "jonge"), ("quiet", "stil", "stille"), ("happy", "blij", "blije"),
)
# (English singular, plural, Dutch singular, plural).
INTRANSITIVE = (
    ("sleeps", "sleep", "slaapt", "slapen"), ("waits", "wait", "wacht", "wachten"),
    ("sits", "sit", "zit", "zitten"), ("stands", "stand", "staat", "staan"),
    ("plays", "play", "speelt", "spelen"), ("sings", "sing", "zingt", "zingen"),
    ("works", "work", "werkt", "werken"), ("walks", "walk", "loopt", "lopen"),
    ("reads", "read", "leest", "lezen"), ("dances", "dance", "danst", "dansen"),
)
TRANSITIVE = (
    ("sees", "see", "ziet", "zien"), ("finds", "find", "vindt", "vinden"),
    ("paints", "paint", "schildert", "schilderen"), ("buys", "buy", "koopt", "kopen"),
    ("sells", "sell", "verkoopt", "verkopen"), ("follows", "follow", "volgt", "volgen"),
    ("visits", "visit", "bezoekt", "bezoeken"), ("draws", "draw", "tekent", "tekenen"),
    ("washes", "wash", "wast", "wassen"), ("carries", "carry", "draagt", "dragen"),
)
PREPOSITIONS = (("near", "bij"), ("behind", "achter"), ("under", "onder"), ("next to", "naast"),
                ("in", "in"), ("on", "op"), ("in front of", "voor"), ("above", "boven"))
TIMES = (("today", "vandaag"), ("now", "nu"), ("often", "vaak"), ("every day", "elke dag"),
         ("in the morning", "in de ochtend"), ("in the evening", "in de avond"), ("on Sunday", "op zondag"),
         ("in the summer", "in de zomer"), ("in the winter", "in de winter"))
BECAUSE = {"en": "because", "nl": "omdat"}


def generate(language: str, split: str, size: int, seed: int = 0) -> list[str]:
    """`size` distinct sentences of `language` ("nl" or "en") from `split` ("train", "validation",
    "test"); no sentence of one split occurs in another."""
    if language not in LANGUAGES:
        raise BadInput(f"no synthetic corpus for language {language!r} (allowed: {', '.join(LANGUAGES)})")
    if split not in SPLITS:
        raise BadInput(f"no synthetic corpus split {split!r} (allowed: {', '.join(SPLITS)})")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise BadInput(f"synthetic corpus size must be an integer >= 1, got {size!r}")
    rng = random.Random(f"bertology-synthetic/corpus/{language}/{split}/{seed}")
    sentences: dict[str, None] = {}
    for _ in range(100 * size):  # ~10 draws per evaluation sentence; the space holds billions
        text = _sentence(rng, language)
        if _split_of(text) == split:
            sentences[text] = None
            if len(sentences) == size:
                return list(sentences)
    raise BadInput(f"synthetic corpus {language} {split}: cannot make {size} distinct sentences (ask for fewer)")


def _split_of(sentence: str) -> str:
    bucket = int.from_bytes(hashlib.blake2b(sentence.encode(), digest_size=8).digest(), "big") % 10
    return "validation" if bucket == 0 else "test" if bucket == 1 else "train"


def _sentence(rng: random.Random, language: str) -> str:
    main = _clause(rng)
    text = _main_clause(main, language)
    if rng.random() < 0.25:
        text += f", {BECAUSE[language]} {_subordinate_clause(_clause(rng), language)}"
    return text[0].upper() + text[1:] + "."


def _clause(rng: random.Random) -> dict:
    """One event, language-neutral: who does what (to what or whom), where, when; and whether the time
    phrase comes first."""
    transitive = rng.random() < 0.5
    return {
        "subject": _noun_phrase(rng, AGENTS),
        "verb": rng.choice(TRANSITIVE if transitive else INTRANSITIVE),
        "object": _noun_phrase(rng, rng.choice((AGENTS, THINGS))) if transitive else None,
        "place": (rng.choice(PREPOSITIONS), _noun_phrase(rng, THINGS))
        if not transitive or rng.random() < 0.5 else None,
        "time": rng.choice(TIMES) if rng.random() < 0.5 else None,
        "time_first": rng.random() < 0.5,
    }


def _noun_phrase(rng: random.Random, nouns: tuple) -> dict:
    return {"noun": rng.choice(nouns), "plural": rng.random() < 0.3, "definite": rng.random() < 0.6,
            "adjective": rng.choice(ADJECTIVES) if rng.random() < 0.5 else None}


def _main_clause(c: dict, language: str) -> str:
    subject, verb, rest = _parts(c, language)
    time = c["time"] and c["time"][language == "nl"]
    if language == "en":
        words = [time, subject, verb, *rest] if c["time_first"] else [subject, verb, *rest, time]
    elif time and c["time_first"]:  # Dutch main clauses put the finite verb second
        words = [time, verb, subject, *rest]
    else:
        words = [subject, verb, time, *rest]
    return " ".join(w for w in words if w)


def _subordinate_clause(c: dict, language: str) -> str:
    subject, verb, rest = _parts(c, language)
    time = c["time"] and c["time"][language == "nl"]
    words = [subject, verb, *rest, time] if language == "en" else [subject, time, *rest, verb]  # nl: verb last
    return " ".join(w for w in words if w)


def _parts(c: dict, language: str) -> tuple[str, str, list[str]]:
    """Subject, finite verb (agreeing with the subject's number) and the rest: object, then place."""
    plural = c["subject"]["plural"]
    verb = c["verb"][(2 if language == "nl" else 0) + plural]
    rest = []
    if c["object"]:
        rest.append(_render_np(c["object"], language))
    if c["place"]:
        preposition, np_ = c["place"]
        rest.append(f"{preposition[language == 'nl']} {_render_np(np_, language)}")
    return _render_np(c["subject"], language), verb, rest


def _render_np(np_: dict, language: str) -> str:
    en_sg, en_pl, nl_sg, nl_pl, neuter = np_["noun"]
    adjective, plural, definite = np_["adjective"], np_["plural"], np_["definite"]
    if language == "en":
        words = [adjective[0] if adjective else None, en_pl if plural else en_sg]
        head = " ".join(w for w in words if w)
        if definite:
            return f"the {head}"
        return head if plural else f"{article(head)} {head}"
    # Dutch: "het" for a singular neuter noun, else "de"; the adjective is bare only after "een" + neuter.
    bare = neuter and not plural and not definite
    words = [adjective[1 if bare else 2] if adjective else None, nl_pl if plural else nl_sg]
    head = " ".join(w for w in words if w)
    if definite:
        return f"{'het' if neuter and not plural else 'de'} {head}"
    return head if plural else f"een {head}"
