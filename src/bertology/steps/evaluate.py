"""evaluate: score the run's kept fine-tuned weights (bertology.steps.scoring) on every evaluation split.

Writes `runs/<run-id>/evaluate/{metrics.parquet, predictions.parquet, profile.parquet}` and publishes
the `runs` row(s), the per-example predictions (masked-LM corpora have perplexities, not predictions) and
the model's size and measured inference speed (`model_profile`, layer-removal's Table 7), measured here
because this step runs on the training device.
"""

from __future__ import annotations

import logging

from bertology.results.tables import publish
from bertology.spec import Cell
from bertology.steps import scoring
from bertology.steps.common import read_or_rebuild, read_table, run_key
from bertology.steps.finetune import model_dir, redo_from_weights, trained_result
from bertology.steps.harness import require_cells
from bertology.store import Store

log = logging.getLogger("bertology")


# the tables this step publishes, and the artifact file each comes from
OUTPUTS = {"runs": "metrics.parquet", "predictions": "predictions.parquet", "model_profile": "profile.parquet"}


def evaluate(store: Store, cell: Cell) -> str:
    run = cell.run
    key = run_key(run.id, "evaluate")
    if store.is_done(key):
        log.info("run %s: evaluate cached", run.id)
    else:
        redo_from_weights(store, cell, lambda: _score_published(store, cell))
    tables = read_or_rebuild(store, key, lambda: {t: read_table(store, key, f) for t, f in OUTPUTS.items()
                                                  if t == "runs" or store.has_member(key, f)},
                             lambda: redo_from_weights(store, cell, lambda: _score_published(store, cell)))
    for table, rows in tables.items():
        publish(store, table, cell, rows)
    return key


def _score_published(store: Store, cell: Cell) -> None:
    """Score the run's published weights (verified; damaged weights are trained again first, which
    rewrites result.json too, so it is read after them)."""
    weights = model_dir(store, cell)
    scoring.score(store, cell, weights, trained_result(store, cell))


def run(store: Store, args) -> None:
    for cell in require_cells(store, args, "evaluate"):
        evaluate(store, cell)
