"""The tiny preset's BERT, really pre-trained: seconds of masked-LM on a synthetic corpus, cached in the
store.

Why: a randomly drawn tiny BERT is, bit for bit, what `reinit` makes of it, so under `tiny` the clean
variant was the pre-trained one and every study's central comparison was empty. The corpus is built so
that what pre-training learns is what the synthetic SST-2 task needs: every sentiment word, the words
held out for evaluation included, occurs beside words of its own polarity, so masked-LM places "superb"
near "great" as real pre-training does; the synthetic English corpus (bertology.tasks.synthetic.corpus)
adds grammar. Fine-tuned on SST-2's training words, the pre-trained tiny BERT then generalises to the
held-out words (about 0.75 accuracy) and the clean one cannot (0.50).

Measured while choosing the recipe (`tests/test_tiny_pretrain.py` checks the outcome): a tiny BERT learns
the polarity of a word only from dense co-occurrence. With one sentiment word per review ("the film was
superb , i loved it") 1,500 steps left the held-out words unsorted; with reviews that string 8 words of
one polarity together, the held-out words separate after 200 to 500 steps (pre-training seeds 0-7), so
600 steps leave a margin. A learning rate of 3e-3 was unstable; batches of 128 separate them in fewer
steps but not in less time.

Deterministic: seeded draws, one CPU thread, so every machine builds the same bytes. The artifact's id
hashes the config, the corpus text, the steps and the seed (`pretrained/tiny-bert-<id>/`), and every
checkpoint, run and study id that names `tiny:bert` hashes it too (bertology.spec.content_id). It is
built once per store, published atomically like every artifact. Steps find it through `use_store`, which
the step harness calls with its store; without a store (unit tests, `bertology checkpoint`), `tiny:bert`
stays the random tiny BERT.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import time
from pathlib import Path

from bertology import models, tiny_recipe
from bertology.store import MARKER, Store
from bertology.tiny_recipe import corpus, key, recipe

log = logging.getLogger("bertology")

def pretrain(out: Path) -> float:
    """Masked-LM training of the tiny BERT into `out` (an HF directory with its MLM head); wall seconds."""
    import numpy as np
    import torch
    from transformers import BertForPreTraining

    from bertology.tasks.corpora import tokenize_corpus

    start, threads = time.time(), torch.get_num_threads()
    tokenizer = models.load_tokenizer(models.ModelRef("tiny", "bert"))
    table = tokenize_corpus(corpus(), tokenizer, tiny_recipe.MAX_LENGTH)
    rows = [np.asarray(r, dtype=np.int64) for r in table.column("input_ids").to_pylist()]
    torch.set_num_threads(1)  # the same kernels in the same order on every machine
    try:
        # dropout draws from torch's global RNG: seeded here, in a fork, so the caller's RNG is left alone
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(tiny_recipe.SEED)
            model = _train(BertForPreTraining(models.tiny_config("bert")), tokenizer, rows)
    finally:
        torch.set_num_threads(threads)
    models.save_checkpoint(model.eval(), tokenizer, out)
    return time.time() - start


def _train(model, tokenizer, rows: list) -> object:
    """The recipe's STEPS of AdamW on masked batches drawn (and masked) from one seeded NumPy generator."""
    import numpy as np
    import torch

    from bertology.tasks.corpora import IGNORE, mask_tokens
    from bertology.weight_init import reinit_all

    config, rng = model.config, np.random.default_rng(tiny_recipe.SEED)
    reinit_all(model, std=config.initializer_range, generator=torch.Generator().manual_seed(tiny_recipe.SEED))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=tiny_recipe.LR, weight_decay=0.0)
    special = list(tokenizer.all_special_ids)
    # the vocabulary projection only over the corpus's own tokens (the only targets): ~100x less work
    vocab = torch.from_numpy(np.unique(np.concatenate(rows)))
    head = model.cls.predictions
    for step in range(tiny_recipe.STEPS):
        batch = [rows[i] for i in rng.choice(len(rows), tiny_recipe.BATCH_SIZE, replace=False)]
        ids = np.full((tiny_recipe.BATCH_SIZE, max(len(r) for r in batch)), tokenizer.pad_token_id, dtype=np.int64)
        for i, r in enumerate(batch):
            ids[i, :len(r)] = r
        masked, labels = mask_tokens(ids, np.isin(ids, special), mask_id=tokenizer.mask_token_id,
                                     vocab_size=config.vocab_size, rng=rng)
        labels = torch.from_numpy(labels)
        hidden = model.bert(input_ids=torch.from_numpy(masked),
                            attention_mask=torch.from_numpy(ids != tokenizer.pad_token_id).long()).last_hidden_state
        chosen = labels != IGNORE  # scored positions only
        logits = head.transform(hidden[chosen]) @ head.decoder.weight[vocab].T + head.decoder.bias[vocab]
        loss = torch.nn.functional.cross_entropy(logits, torch.searchsorted(vocab, labels[chosen]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == tiny_recipe.STEPS - 1:
            log.info("tiny BERT pre-training: step %d/%d, masked-LM loss %.3f", step + 1, tiny_recipe.STEPS, loss.item())
    return model


def ensure(store: Store) -> Path:
    """The pre-trained tiny BERT's directory in `store`, built first if the store lacks it: copied from the
    local store `$BERTOLOGY_TINY_PRETRAINED` names when that one has this recipe's (verified; the test
    suite builds it once for its hundreds of stores), else trained here."""
    prefix = key()
    if not store.is_done(prefix):
        seed = _seeded(prefix)
        with store.artifact(prefix, {"recipe": recipe()}) as out:
            if seed is not None:
                shutil.copytree(seed, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(MARKER))
                done = f"tiny BERT pre-trained: copied from {seed}"
            else:
                done = f"tiny BERT pre-trained in {pretrain(out):.1f} s ({tiny_recipe.STEPS} masked-LM steps): {store.url(prefix)}"
        log.info("%s", done)  # once published
    return store.local_dir(prefix)


def _seeded(prefix: str) -> Path | None:
    from bertology.store import open_store

    root = os.environ.get("BERTOLOGY_TINY_PRETRAINED")
    if not root:
        return None
    other = open_store(root)
    return other.local_dir(prefix) if other.is_done(prefix) else None


def use_store(store: Store | None) -> None:
    """Where `tiny:bert` comes from in this process: the store's pre-trained tiny BERT, built on first
    use (None: the random draw)."""
    models.use_pretrained_tiny_bert(None if store is None else functools.partial(ensure, store))
