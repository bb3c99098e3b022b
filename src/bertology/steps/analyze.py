"""analyze: the run's weight distances (bertology.steps.weight_distance) from its kept fine-tuned weights.

Writes `runs/<run-id>/analyze/weight_distance.parquet` and publishes the `weight_distance` rows. An
analysis stored before the output-projection rows existed is measured again when the run's weights were
kept; otherwise it is published as it is (training the run again for it is not worth it) and the study
report counts the runs without the row.
"""

from __future__ import annotations

import logging

from bertology.results.tables import publish
from bertology.spec import Cell
from bertology.steps.common import read_or_rebuild, read_table, run_key
from bertology.steps.finetune import model_dir, redo_from_weights
from bertology.steps.harness import require_cells
from bertology.steps.weight_distance import lacks_projection_rows, measure
from bertology.store import Store

log = logging.getLogger("bertology")

def analyze(store: Store, cell: Cell) -> str:
    run = cell.run
    key = run_key(run.id, "analyze")
    if store.is_done(key):
        log.info("run %s: analyze cached", run.id)
    else:
        redo_from_weights(store, cell, lambda: _measure_published(store, cell))
    table = read_or_rebuild(store, key, lambda: read_table(store, key, "weight_distance.parquet"),
                            lambda: redo_from_weights(store, cell, lambda: _measure_published(store, cell)))
    if lacks_projection_rows(table):
        if store.exists(f"{run_key(run.id, 'finetune')}/model/config.json"):  # kept weights: cheap to redo
            log.info("run %s: its weight distances predate the output-projection rows; measuring again", run.id)
            store.delete_prefix(key)
            _measure_published(store, cell)
            table = read_table(store, key, "weight_distance.parquet")
        else:  # training the run again for one analysis row is not worth it: the report says what is missing
            log.info("run %s: its weight distances predate the output-projection rows and its weights were "
                     "not kept; published as they are", run.id)
    publish(store, "weight_distance", cell, table)
    return key


def _measure_published(store: Store, cell: Cell) -> None:
    measure(store, cell, model_dir(store, cell))  # damaged weights are trained again first


def run(store: Store, args) -> None:
    for cell in require_cells(store, args, "analyze"):
        analyze(store, cell)
