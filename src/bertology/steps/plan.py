"""plan: type and validate the study's parameters, expand them, and hand Argo the remaining work.

Everything a user can get wrong (unknown task or intervention, a model that cannot be found, a layer
index beyond the model's depth, a malformed parameter) is caught here, before any GPU time is spent.
The full plan is stored under `studies/<name>/<study-id>/plan.json`; the fan-out lists hold only the
work not yet finished, so rerunning a finished study computes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from bertology import tasks
from bertology.errors import BadInput
from bertology.interventions import chain_config, validate_chain
from bertology.results.tables import results_key
from bertology.spec import Intervention, canonical_json
from bertology.steps.common import model_config
from bertology.store import Store
from bertology.study import StudySpec, Variant, parse_pairs
from bertology.train.activation_distance import check_shapes
from bertology.train.regimes import Schedule

log = logging.getLogger("bertology")

# What a cell must have published for a study before plan can leave it out of the fan-out.
CELL_TABLES = ("runs", "curves", "weight_distance")


def validate(spec: StudySpec) -> StudySpec:
    """Cheap checks that need no weights: names, sources, each chain against each model's config, and
    the regime's layers against the depth each chain leaves.

    Returns the spec with every intervention's defaults filled in, so that `reinit` and
    `reinit {scope: all}` are one checkpoint with one id.
    """
    for task in spec.tasks:
        tasks.check_source(tasks.get_task(task), spec.source)
    variants = list(spec.variants)
    schedule = Schedule.of(spec.regime)
    reference = model_config(spec.regime.reference) if spec.regime.reference else None
    for model in spec.models:
        config = model_config(model)
        for i, variant in enumerate(spec.variants):
            chain = validate_chain([step.to_dict() for step in variant.interventions], config)
            schedule.check(chain_config(chain, config).num_hidden_layers)
            if reference is not None:
                check_shapes(chain_config(chain, config), reference)
            variants[i] = Variant(variant.name, tuple(Intervention.from_dict(step) for step in chain))
    return dataclasses.replace(spec, variants=tuple(variants))


def plan_study(store: Store, spec: StudySpec) -> dict:
    cells = spec.cells()
    plan = {"study": spec.name, "study_id": spec.id, "spec": spec.to_dict(),
            "cells": [json.loads(canonical_json(c)) for c in cells]}
    store.write_json(f"studies/{spec.name}/{spec.id}/plan.json", plan)

    published = {k for t in CELL_TABLES for k in store.list(f"results/{t}/study={spec.name}")}
    todo = [c for c in cells if not all(results_key(t, spec.name, c.run.id) in published for t in CELL_TABLES)]
    checkpoints = {c.run.checkpoint.id: c.run.checkpoint for c in todo}
    datasets = {c.run.dataset.id: c.run.dataset for c in todo}
    work = {
        "checkpoints": [{"id": k, "spec": canonical_json(v)} for k, v in checkpoints.items()],
        "datasets": [{"id": k, "spec": canonical_json(v)} for k, v in datasets.items()],
        "runs": [{"id": c.run.id, "spec": canonical_json(c)} for c in todo],
        "study": json.dumps({"name": spec.name, "id": spec.id}),
    }
    log.info("study %s (%s): %d cells, %d to run; %d checkpoints, %d datasets to make",
             spec.name, spec.id, len(cells), len(todo), len(checkpoints), len(datasets))
    return work


def run(store: Store, args) -> None:
    if not args.study:
        raise BadInput("plan needs --study NAME")
    spec, changes = StudySpec.from_params(args.study, parse_pairs(args.param, "--param"))
    for change in changes:
        log.info("preset %s: %s", spec.preset, change)
    spec = validate(spec)
    work = plan_study(store, spec)
    out = Path(args.outputs)
    out.mkdir(parents=True, exist_ok=True)
    for name, value in work.items():
        (out / f"{name}.json").write_text(value if isinstance(value, str) else json.dumps(value))
