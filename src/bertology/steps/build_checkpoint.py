"""build-checkpoint: load a base model, apply its intervention chain, store it with a manifest.

The result, `checkpoints/<checkpoint-id>/`, is a normal HF directory (`from_pretrained` loads it) plus
`manifest.json`: which tensors changed, their norms before and after, the chain and its seed. It is
built once and reused by every task and seed.
"""

from __future__ import annotations

import json
import logging

from bertology.spec import CheckpointSpec
from bertology.steps.common import checkpoint_key, local_model_ref
from bertology.steps.harness import require_spec
from bertology.store import Store

log = logging.getLogger("bertology")


def build(store: Store, spec: CheckpointSpec) -> str:
    key = checkpoint_key(spec.id)
    if store.is_done(key):
        log.info("checkpoint %s: cached", spec.id)
        return key
    from bertology import models
    from bertology.interventions import apply_chain, validate_chain

    ref = local_model_ref(spec.model)
    chain = [i.to_dict() for i in spec.interventions]
    validate_chain(chain, models.load_config(ref))
    model, tokenizer = models.load_pretrained(ref, seed=spec.seed)
    model, tokenizer, manifest = apply_chain(model, tokenizer, chain, spec.seed)
    changed = sum(t["changed"] for t in manifest["tensors"])
    log.info("checkpoint %s: %s + %s: %d of %d tensors changed", spec.id, spec.model,
             [i.name for i in spec.interventions] or "unmodified", changed, len(manifest["tensors"]))
    with store.artifact(key, {"spec": spec.to_dict()}) as out:
        models.save_checkpoint(model, tokenizer, out)
        (out / "manifest.json").write_text(json.dumps({"spec": spec.to_dict(), **manifest}, indent=2))
    return key


def run(store: Store, args) -> None:
    build(store, CheckpointSpec.from_dict(require_spec(args, "build-checkpoint")))
