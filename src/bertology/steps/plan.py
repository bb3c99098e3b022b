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
import os
from pathlib import Path

from bertology import tasks, tiny_pretrain
from bertology.errors import BadInput, TooSmall
from bertology.results import receipts
from bertology.results.tables import CELL_TABLES, results_key
from bertology.spec import TINY_BERT, Cell, Intervention, canonical_json
from bertology.steps import budget, planned, timing
from bertology.steps.common import fusable, model_config, run_key
from bertology.steps.harness import write_outputs
from bertology.store import Store, open_store
from bertology.study import StudySpec, parse_pairs
from bertology.study.checks import check_names
from bertology.variants import Variant

log = logging.getLogger("bertology")

# Set by `bertology run --dry-run`: plan writes nothing into the store (no plan.json, no tiny BERT) and
# puts the plan it would have written in this file instead, where the dry run reads it.
DRY_RUN_PLAN_ENV = "BERTOLOGY_DRY_RUN_PLAN"

# BERT-large: the deepest BERT of Google's release and of any report here (bound of _beyond_every_bert).
DEEPEST_BERT = {"num_hidden_layers": 24, "num_attention_heads": 16, "hidden_size": 1024, "intermediate_size": 4096}



def validate(spec: StudySpec, changes: list[str] | None = None) -> StudySpec:
    """Cheap checks that need no weights: names, sources, each chain against each model's config, and
    each variant's regime against the depth its chain leaves (and its reference's shapes).

    Returns the spec with every intervention's defaults filled in, so that `reinit` and
    `reinit {scope: all}` are one checkpoint with one id. Under a stand-in preset (tiny, demo) a variant
    the smaller stand-in model cannot take (layer 11 of a 4-layer model: TooSmall) is dropped and listed
    in `changes`, unless it fits no BERT at all (layer 99); with the paper preset it is an error like any
    other. Local data files are read here in full, and max_length is checked against each model. First what
    needs neither a model nor torch (names: bertology.study.checks.check_names), which `bertology run` has
    also checked before it started anything.
    """
    check_names(spec)
    for task in (*spec.tasks, *spec.intermediates):
        tasks.check_data(tasks.get_task(task), spec.source)
    variants, dropped = [], []
    for variant in spec.variants:
        try:
            variants.append(_validate_variant(spec, variant))
        except TooSmall as e:
            if spec.preset == "paper":
                raise
            beyond = _beyond_every_bert(spec, variant)
            if beyond is not None:
                raise BadInput(f"variant '{variant.name}': {beyond} (no BERT has more: the deepest, BERT-large, "
                               f"has {DEEPEST_BERT['num_hidden_layers']} layers of "
                               f"{DEEPEST_BERT['num_attention_heads']} heads)") from None
            dropped.append(e)
            if changes is not None:
                changes.append(f"variant '{variant.name}' dropped: {e}")
    if not variants:
        raise dropped[0]
    return dataclasses.replace(spec, variants=tuple(variants))


def _beyond_every_bert(spec: StudySpec, variant: Variant) -> str | None:
    """Why a variant the stand-in model is too small for fits no BERT either (reinit of layer 99), or None.

    Under a preset the study's own model is replaced before plan sees it, and its depth cannot be read
    offline (a hub config), so the bound is the deepest BERT any study could use: BERT-large. A selection
    that fits BERT-large but not the study's real model is still dropped under the preset and refused with
    the paper preset, where the real model's config is read."""
    from transformers import BertConfig

    from bertology.interventions import chain_config, validate_chain
    from bertology.train.regimes import Schedule

    config = BertConfig(**DEEPEST_BERT)
    try:
        chain = validate_chain([step.to_dict() for step in variant.interventions], config)
        Schedule.of(spec.regime_of(variant)).check(chain_config(chain, config).num_hidden_layers)
    except TooSmall as e:
        return str(e)
    return None


def _check_length(spec: StudySpec, model: str, config) -> None:
    """max_length (the study's and each task's own) must fit the model's position embeddings."""
    limit = getattr(config, "max_position_embeddings", None)
    for task in (None, *spec.task_settings):
        length = spec.task_settings.get(task, {}).get("max_length", spec.max_length)
        if limit is not None and length > limit:
            where = "max_length" if task is None else f"task_settings '{task}' max_length"
            raise BadInput(f"{where} {length} is more than model {model!r} takes (allowed: 8..{limit}, its "
                           f"max_position_embeddings)")


def _validate_variant(spec: StudySpec, variant: Variant) -> Variant:
    # the chain is checked against each model's config: transformers (and the torch it imports) load here,
    # in the plan pod's run, not when a step module is imported (docs/development.md)
    from bertology.interventions import chain_config, validate_chain
    from bertology.train.activation_distance import check_shapes
    from bertology.train.regimes import Schedule

    regime = spec.regime_of(variant)
    schedule = Schedule.of(regime)
    reference = model_config(regime.reference) if regime.reference else None
    chain: list[dict] = []
    for model in dict.fromkeys(spec.model_of(m, variant) for m in spec.models):
        config = model_config(model)
        _check_length(spec, model, config)
        chain = validate_chain([step.to_dict() for step in variant.interventions], config)
        after = chain_config(chain, config)
        schedule.check(after.num_hidden_layers)
        if regime.name != "full" and config.model_type != "bert":
            raise BadInput(f"regime '{regime.name}' needs a BERT checkpoint; {model!r} is "
                           f"{config.model_type!r}, which fine-tunes only with regime 'full'")
        if reference is not None:
            check_shapes(after, reference)
    return dataclasses.replace(variant, interventions=tuple(Intervention.from_dict(step) for step in chain))


def _datasets_of(run) -> list:
    """A run's dataset and those of the runs it comes `after` (a sequential run trains its intermediate run
    first when that is not finished, so the intermediate task's data must be made too)."""
    datasets = []
    while run is not None:
        datasets.append(run.dataset)
        run = run.after
    return datasets


def fusing_order(cells: list[Cell]) -> list[Cell]:
    """The cells with those that can train together adjacent: a stable sort by `fusable`, its groups in the
    order of their first cell (the table order otherwise)."""
    first: dict[tuple, int] = {}
    for cell in cells:
        first.setdefault(fusable(cell), len(first))
    return sorted(cells, key=lambda cell: first[fusable(cell)])


def pack(cells: list[Cell], bundle: int, fuse: int = 1) -> list[list[Cell]]:
    """The cells, in order, into pods of at most `bundle`, never splitting a group the finetune step trains
    as one model: up to `fuse` adjacent cells with the same `fusable` key. With fuse 1, `bundle` at a time."""
    groups: list[list[Cell]] = []
    for cell in cells:
        if groups and len(groups[-1]) < fuse and fusable(groups[-1][0]) == fusable(cell):
            groups[-1].append(cell)
        else:
            groups.append([cell])
    pods: list[list[Cell]] = []
    for group in groups:
        if pods and len(pods[-1]) + len(group) <= bundle:
            pods[-1].extend(group)
        else:
            pods.append(list(group))
    return pods


def plan_study(store: Store, spec: StudySpec, changes: list[str] = ()) -> dict:
    """Write the plan (every spec, once) and return Argo's work lists: plain tokens only (see planned)."""
    cells = spec.cells()
    plan = {"study": spec.name, "study_id": spec.id, "spec": {**spec.to_dict(), "baseline": spec.baseline},
            "preset_changes": list(changes),
            "execution": {"gpu_concurrency": spec.gpu_concurrency, "fuse": spec.fuse},
            "cells": [json.loads(canonical_json(c)) for c in cells],
            "datasets": {d.id: json.loads(canonical_json(d)) for c in cells for d in _datasets_of(c.run)},
            "checkpoints": {c.run.checkpoint.id: json.loads(canonical_json(c.run.checkpoint)) for c in cells}}
    dry_run = os.environ.get(DRY_RUN_PLAN_ENV)
    if dry_run:
        Path(dry_run).write_text(json.dumps(plan, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    else:
        store.write_json(planned.plan_key(spec.name, spec.id), plan)

    keys = {c.run.id: [results_key(t, spec.name, c.run.id) for t in CELL_TABLES] for c in cells}
    # by listing only: each result's size against its receipt (bertology.results.receipts)
    published, damaged = receipts.damaged(store, spec.name, CELL_TABLES, {k for ks in keys.values() for k in ks})
    todo = [c for c in cells if not all(k in published and k not in damaged for k in keys[c.run.id])
            or (c.keep_weights and not store.exists(f"{run_key(c.run.id, 'finetune')}/model/config.json"))]
    checkpoints = list(dict.fromkeys(c.run.checkpoint.id for c in todo))
    datasets = list(dict.fromkeys(d.id for c in todo for d in _datasets_of(c.run)))
    bundle = spec.bundle or budget.auto_bundle(len(todo), len(datasets), len(checkpoints))
    plan_ref = planned.plan_ref(spec.name, spec.id)
    if spec.fuse > 1:  # runs that train together side by side, and pods of whole groups of them
        todo = fusing_order(todo)
        if bundle % spec.fuse:
            rounded = -(-bundle // spec.fuse) * spec.fuse
            log.info("fuse %d: %s bundle %d rounded up to %d, so that a pod holds whole groups of fused runs",
                     spec.fuse, "the study's" if spec.bundle else "the automatic", bundle, rounded)
            bundle = rounded
    pod_cells = pack(todo, bundle, spec.fuse)
    # a group cut short (fewer runs than fuse share a key) can leave room in a pod: automatic bundles grow by
    # whole groups while the pods are over budget
    while (spec.fuse > 1 and spec.bundle is None and bundle < budget.MAX_AUTO_BUNDLE
           and not budget.pods_fit(len(datasets), len(checkpoints), _items(pod_cells), store.uri, plan_ref)):
        bundle += spec.fuse
        pod_cells = pack(todo, bundle, spec.fuse)
    pods = _items(pod_cells)
    nodes = budget.workflow_nodes(len(datasets), len(checkpoints), len(pods))
    size = budget.status_bytes(len(datasets), len(checkpoints), pods, store.uri, plan_ref)
    if nodes > budget.MAX_NODES or size > budget.MAX_STATUS_BYTES:
        log.warning("study %s: about %d Argo nodes and %d KiB of workflow status, over the budget of %d nodes "
                    "and %d KiB (set a larger bundle)", spec.name, nodes, size // 1024, budget.MAX_NODES,
                    budget.MAX_STATUS_BYTES // 1024)
    seconds = timing.deadlines(spec.preset, pod_cells, len(datasets), len(checkpoints), len(cells),
                               timing.check(spec.deadlines))
    # The store is fixed here, once: every later step takes it from this output, not from the ConfigMap
    # the Workflow's `store` parameter reads, which Argo reads again on every reconcile (operator.go
    # setGlobalParameters runs in each operate), so an edit mid-run would move the rest of the study.
    work = {"checkpoints": checkpoints, "datasets": datasets, "runs": pods,
            "study": plan_ref, "store": store.uri,
            **{f"{step.replace('-', '_')}_deadline": str(s) for step, s in seconds.items()}}
    log.info("deadlines (s): %s", ", ".join(f"{step} {s}" for step, s in seconds.items()))
    fused = f", runs fused up to {spec.fuse} at once" if spec.fuse > 1 else ""
    log.info("study %s (%s): %d cells, %d to run in %d pods of up to %d%s; %d checkpoints, %d datasets to make",
             spec.name, spec.id, len(cells), len(todo), len(pods), bundle, fused, len(checkpoints), len(datasets))
    return work


def _items(pods: list[list[Cell]]) -> list[str]:
    """Argo's fan-out items: each pod's run ids, comma-joined."""
    return [",".join(c.run.id for c in pod) for pod in pods]


def run(store: Store, args) -> None:
    if not args.study:
        raise BadInput("plan needs --study NAME")
    spec, changes = StudySpec.from_params(args.study, parse_pairs(args.param, "--param"))
    timing.check(spec.deadlines)  # before anything is written (the tiny model below)
    spec = validate(spec, changes)
    for change in changes:
        log.info("preset %s: %s", spec.preset, change)
    baseline = open_store(args.baseline_store).uri if (args.baseline_store or "").strip() else ""
    if TINY_BERT in canonical_json(spec) and not os.environ.get(DRY_RUN_PLAN_ENV):
        tiny_pretrain.ensure(store)  # built here, once, before parallel steps would each build it
    write_outputs(args.outputs, {**plan_study(store, spec, changes), "baseline_store": baseline})
