"""build-checkpoint: load a base model, apply its intervention chain, store it with a manifest.

The result, `checkpoints/<checkpoint-id>/`, is a normal HF directory (`from_pretrained` loads it) plus
`manifest.json`: which tensors changed, their norms before and after, the chain and its seed. It is
built once and reused by every task and seed. `bertology checkpoint` builds the same thing into a
directory of the user's choosing.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from bertology.spec import CheckpointSpec
from bertology.steps.common import checkpoint_key, local_model_ref, model_config
from bertology.steps.harness import require_one
from bertology.store import Store

log = logging.getLogger("bertology")


def make_checkpoint(spec: CheckpointSpec, out: Path) -> tuple[dict, float]:
    """Validate the chain against the base config, then load, intervene and save into `out`.

    Returns the manifest (also written to `out/manifest.json`; deterministic, so a rebuild gives the same
    bytes) and the CPU seconds the interventions took, loading and saving excluded."""
    from bertology import models
    from bertology.interventions import apply_chain, validate_chain

    chain = validate_chain([i.to_dict() for i in spec.interventions], model_config(spec.model))
    # the pre-trained model is the same for every intervention seed (a tiny model, or weights the checkpoint
    # lacks, are drawn from seed 0): only the chain's own draws follow spec.seed
    model, tokenizer = models.load_pretrained(local_model_ref(spec.model), seed=0)
    start = time.process_time()
    model, tokenizer, manifest = apply_chain(model, tokenizer, chain, spec.seed)
    cpu_seconds = time.process_time() - start
    changed = sum(t["changed"] for t in manifest["tensors"])
    log.info("checkpoint %s: %s + %s: %d of %d tensors changed, %s -> %s parameters, %.2f CPU s",
             spec.id, spec.model, [i.name for i in spec.interventions] or "unmodified", changed,
             len(manifest["tensors"]), f"{manifest['parameters']['before']:,}",
             f"{manifest['parameters']['after']:,}", cpu_seconds)
    models.save_checkpoint(model, tokenizer, out)
    manifest = {"spec": spec.to_dict(), "id": spec.id, **manifest}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest, cpu_seconds


def build(store: Store, spec: CheckpointSpec) -> str:
    key = checkpoint_key(spec.id)
    if store.is_done(key):
        log.info("checkpoint %s: cached", spec.id)
        return key
    with store.artifact(key, {"spec": spec.to_dict()}) as out:
        _, cpu_seconds = make_checkpoint(spec, out)
        # apart from the manifest, which stays byte-for-byte deterministic
        (out / "build.json").write_text(json.dumps({"intervention_cpu_seconds": cpu_seconds}))
    return key


def run(store: Store, args) -> None:
    build(store, require_one(store, args, "build-checkpoint", "checkpoint"))
