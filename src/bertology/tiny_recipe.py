"""What the tiny preset's pre-trained BERT is: its recipe (the corpus and the training settings) and the
key that names it, apart from the training that makes it (bertology.tiny_pretrain).

Why a module of its own: every id that names `tiny:bert` hashes this key (bertology.spec.content_id), and
the training needs the model and store layers above the spec; the recipe needs neither, so the spec can
depend on it without a cycle.
"""

from __future__ import annotations

import functools
import hashlib
import random

from bertology.canonical import canonical_json, hash_id

VERSION = "1"  # bump when the training code changes what the same recipe makes
SEED = 0
STEPS = 600
BATCH_SIZE = 32
LR = 2e-3
MAX_LENGTH = 32
REVIEWS = 1000
REVIEW_WORDS = 8
ENGLISH_SENTENCES = 150


def corpus(seed: int = SEED) -> list[str]:
    """Reviews that string together sentiment words of one polarity (both splits' words: pre-training
    sees the held-out words, fine-tuning does not), and synthetic English sentences, shuffled."""
    from bertology.tasks.synthetic import SENTIMENT_WORDS
    from bertology.tasks.synthetic.corpus import generate

    rng = random.Random(f"bertology-tiny-pretrain/{seed}")
    words = {label: [w for split in SENTIMENT_WORDS.values() for w in split[label]]
             for label in ("negative", "positive")}
    lines = [" ".join(rng.choice(words[("negative", "positive")[i % 2]]) for _ in range(REVIEW_WORDS))
             for i in range(REVIEWS)]
    lines += [s.lower() for s in generate("en", "train", ENGLISH_SENTENCES, seed)]
    rng.shuffle(lines)
    return lines


def recipe() -> dict:
    """Everything the pre-trained weights depend on; its hash is the artifact's id."""
    from bertology.models import tiny_bert_config_dict

    text = "\n".join(corpus())
    return {"config": tiny_bert_config_dict(), "corpus_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "steps": STEPS, "batch_size": BATCH_SIZE, "lr": LR, "max_length": MAX_LENGTH, "seed": SEED}


def key() -> str:
    return _key(STEPS, BATCH_SIZE, LR, MAX_LENGTH, SEED, REVIEWS, REVIEW_WORDS, ENGLISH_SENTENCES)


@functools.lru_cache(maxsize=4)
def _key(*settings) -> str:
    """Once per process for each setting of the recipe's constants (every id naming tiny:bert asks)."""
    return f"pretrained/tiny-bert-{hash_id(f'pretrain:{VERSION}:{canonical_json(recipe())}')}"
