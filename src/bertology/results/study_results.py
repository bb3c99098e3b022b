"""A study's results as its report reads them: the plan, and lazy frames over exactly the plan's runs.

A study name holds one plan per set of parameters (`studies/<name>/<study-id>/plan.json`), while
`results/<table>/study=<name>/` holds the runs of all of them, so each frame scans the files of the plan's
run ids only: one listing per table, then one lazy Polars scan over those files, in the plan's cell order.
Runs the plan expected but that published no `runs` file are `missing`, and runs that published it but
lack another table every cell publishes (CELL_TABLES: a failed analyze leaves no `weight_distance`) are
`incomplete`; neither is dropped silently, and either fails the study's aggregate step.

Vocabulary rows (`vocab_overlap`) belong to a model, not to a run: they are the study's partition's rows
for the plan's models, measured with the plan's settings where the plan has them (the vocab-overlap
study's reference, case and corpus, or each model's own corpus: `corpora`). A plan without cells (that study's) has only those.

Under selection `best`, the `runs` frame has each split its task reads at its own best epoch (MNLI-mm) at
that epoch, from the run's curves (bertology.results.selection.per_split): value and `best_epoch`.

Facts an intervention recorded in its checkpoint's manifest (FACT_INTERVENTIONS: how many word-embedding
rows of each kind a shuffle moved and kept) are read from one built checkpoint per model and variant.

Plans written before the spec grew `levels`, `sizes` and `intermediates` read as one size (the study's
fraction or count), no intermediate task, and variants without levels.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import polars as pl

from bertology.errors import BadInput, choices
from bertology.results import selection
from bertology.results.tables import CELL_TABLES, LABELS, results_key, scan_keys
from bertology.spec import Cell
from bertology.store import Damaged, Store

log = logging.getLogger("bertology")

# Tables a study may have besides `runs`: each is read when any of the plan's runs published it.
OPTIONAL_TABLES = ("curves", "activation_distance", "weight_distance", "model_profile")
# Settings of a vocabulary measurement a plan's spec may fix (bertology.steps.vocab_overlap.VocabSpec).
VOCAB_SETTINGS = ("reference", "case", "corpus", "max_lines", "stride")
LABEL_TYPES = pl.from_arrow(LABELS.empty_table()).schema
PUBLISHED_BY = {"runs": "finetune", "curves": "finetune", "weight_distance": "analyze"}
# Interventions whose manifest records `facts` (a module-level `facts` in bertology.interventions), named here
# because a report reads stored manifests without importing torch.
FACT_INTERVENTIONS = ("shuffle-embeddings",)


@dataclass(frozen=True)
class StudyResults:
    name: str
    study_id: str
    spec: dict  # the plan's study spec, optional keys filled in
    cells: list[Cell]  # every run the plan expects, in table order
    run_ids: list[str]  # the cells' run ids
    tables: dict[str, pl.LazyFrame]  # "runs" (unless the plan has no cells), and each optional table published
    missing: list[Cell]  # cells without a `runs` file
    vocabulary: pl.DataFrame | None = None  # vocab_overlap rows of the plan's models, when measured
    preset_changes: tuple[str, ...] = ()  # what the preset replaced or dropped (stand-in models, variants)
    incomplete: tuple[tuple[Cell, tuple[str, ...]], ...] = ()  # cells with `runs` but without these tables
    unmeasured: tuple[str, ...] = ()  # models of a vocabulary plan without a measurement
    # per model and variant, each step's manifest facts ({"model", "variant", "step", "intervention", ...})
    intervention_facts: tuple[dict, ...] = ()

    @property
    def complete(self) -> bool:
        return not (self.missing or self.incomplete or self.unmeasured)

    def shortfall(self) -> str:
        """What is missing, in a few words: '3 of 12 runs incomplete (no weight_distance: analyze failed)'."""
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} of {len(self.cells)} runs missing")
        if self.incomplete:
            tables = sorted({t for _, lacking in self.incomplete for t in lacking})
            steps = sorted({PUBLISHED_BY[t] for t in tables})
            parts.append(f"{len(self.incomplete)} of {len(self.cells)} runs incomplete (no {', '.join(tables)}: "
                         f"{', '.join(steps)} failed)")
        if self.unmeasured:
            parts.append(f"{len(self.unmeasured)} of {len(self.spec.get('models', []))} models not measured "
                         f"({', '.join(self.unmeasured)})")
        return "; ".join(parts)

    @property
    def variants(self) -> list[str]:
        return [v["name"] for v in self.spec["variants"]]

    @property
    def baseline(self) -> str | None:
        """The unmodified model: as plan names it (`spec.baseline`), or for older plans the first variant
        without interventions, preferably one that changes nothing else either (its own regime or model)."""
        if "baseline" in self.spec:
            return self.spec["baseline"]
        plain = [v for v in self.spec["variants"] if not v["interventions"]]
        untouched = [v for v in plain if not v.get("regime") and not v.get("model")]
        return (untouched or plain or [{"name": None}])[0]["name"]


def with_defaults(spec: dict) -> dict:
    """The spec with the keys older plans (and plans without runs) lack: one size, no intermediate tasks,
    variants without levels."""
    variants = [{"interventions": [], "levels": {}, **v} for v in spec.get("variants", [])]
    sizes = spec.get("sizes") or [{"fraction": spec.get("fraction"), "count": spec.get("count")}]
    return {**spec, "variants": variants, "sizes": sizes, "intermediates": spec.get("intermediates") or []}


def study_ids(store: Store, name: str) -> list[str]:
    """The ids of the study's plans in the store."""
    return [k.split("/")[2] for k in store.list(f"studies/{name}")
            if k.count("/") == 3 and k.endswith("/plan.json")]


def latest_study_id(store: Store, name: str) -> str:
    """The id of the study's most recently written plan."""
    ids = study_ids(store, name)
    if not ids:
        raise _unknown_study(store, name)
    return max(ids, key=lambda i: store.modified(f"studies/{name}/{i}/plan.json"))


def load_study_results(store: Store, name: str, study_id: str) -> StudyResults:
    key = f"studies/{name}/{study_id}/plan.json"
    if not store.exists(key):
        ids = study_ids(store, name)
        if not ids:
            raise _unknown_study(store, name)
        raise BadInput(f"no plan for study '{name}' id {study_id} in {store.uri} (ids: {', '.join(ids)})")
    plan = store.read_json(key)
    spec = with_defaults(plan["spec"])
    cells = [Cell.from_dict(c) for c in plan["cells"]]
    run_ids = [c.run.id for c in cells]
    tables, missing, lacking = {}, [], {}
    for table in ("runs", *OPTIONAL_TABLES) if cells else ():
        published = set(store.list(f"results/{table}/study={name}"))  # one listing, not a request per cell
        keys = [results_key(table, name, run_id) for run_id in run_ids]
        if table == "runs":
            missing = [c for c, k in zip(cells, keys) if k not in published]
        elif table in CELL_TABLES:
            for cell, key in zip(cells, keys):
                if key not in published:
                    lacking.setdefault(cell.run.id, []).append(table)
        present = list(dict.fromkeys(k for k in keys if k in published))  # variants may share a run
        if present:
            tables[table] = _with_labels(scan_keys(store, present))
    if "runs" in tables:  # a split read at its own best epoch (MNLI-mm) is read there: bertology.results.selection
        tables["runs"] = selection.per_split(tables["runs"], tables.get("curves"), spec)
    absent = {c.run.id for c in missing}
    incomplete = tuple(dict.fromkeys((c, tuple(lacking[c.run.id])) for c in cells
                                     if c.run.id in lacking and c.run.id not in absent))
    vocabulary = _vocabulary(store, name, spec, {c.model for c in cells} | set(spec.get("models", [])))
    unmeasured = ()
    if plan.get("analyses"):  # a vocabulary plan: one measurement per model
        measured = set(vocabulary["model"].to_list()) if vocabulary is not None else set()
        unmeasured = tuple(m for m in spec.get("models", []) if m not in measured)
    if cells and "runs" not in tables:
        raise BadInput(f"study '{name}' has no finished runs in {store.uri} ({len(cells)} expected)")
    if not cells and vocabulary is None:
        raise BadInput(f"study '{name}' id {study_id} has no results in {store.uri} yet")
    return StudyResults(name, study_id, spec, cells, run_ids, tables, missing, vocabulary,
                        tuple(plan.get("preset_changes", ())), incomplete, unmeasured,
                        intervention_facts(store, cells))


def intervention_facts(store: Store, cells: list[Cell]) -> tuple[dict, ...]:
    """The manifest facts of one built checkpoint per (model, variant) whose chain records some, each with
    its model and variant. One checkpoint speaks for the variant: the facts depend on the model and the
    chain's params, not on the seed. A checkpoint not built in this store, or built before its intervention
    recorded facts, gives none; a damaged manifest is skipped with a warning."""
    facts, seen = [], set()
    for cell in cells:
        checkpoint = cell.run.checkpoint
        records = any(i.name in FACT_INTERVENTIONS for i in checkpoint.interventions)
        if not records or (cell.model, cell.variant) in seen:
            continue
        key = f"checkpoints/{checkpoint.id}"  # bertology.steps.common.checkpoint_key
        if not store.is_done(key):
            continue
        try:
            manifest = json.loads(store.read_member(key, "manifest.json"))
        except Damaged as e:
            log.warning("checkpoint %s: manifest not read for the report (%s)", checkpoint.id, e)
            continue
        seen.add((cell.model, cell.variant))
        facts += [{"model": cell.model, "variant": cell.variant, **f} for f in manifest.get("facts", [])]
    return tuple(facts)


def _unknown_study(store: Store, name: str) -> BadInput:
    known = sorted({k.split("/")[1] for k in store.list("studies") if k.endswith("/plan.json")})
    if not known:
        return BadInput(f"no study '{name}' in {store.uri} (studies: none; run one first)")
    return BadInput(f"no study '{name}' in {store.uri} ({choices(name, known, 'studies')})")


def _with_labels(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Every label column, null where older results lack it (the first file's columns are the frame's)."""
    names = frame.collect_schema().names()
    return frame.with_columns(pl.lit(None, dtype).alias(n) for n, dtype in LABEL_TYPES.items() if n not in names)


def _vocabulary(store: Store, name: str, spec: dict, models: set[str]) -> pl.DataFrame | None:
    """The study's vocab_overlap rows of these models, with the spec's measurement settings where it has any."""
    keys = [k for k in store.list(f"results/vocab_overlap/study={name}") if k.endswith(".parquet")]
    if not keys:
        return None
    rows = scan_keys(store, keys).filter(pl.col("model").is_in(sorted(models)))
    for setting in VOCAB_SETTINGS:
        if setting == "corpus" and spec.get("corpora") is not None:  # each model measured on its own corpus
            own = pl.col("model").replace_strict(spec["corpora"], default=spec.get("corpus"), return_dtype=pl.String)
            rows = rows.filter(pl.col("corpus").eq_missing(own))
        elif spec.get(setting) is not None:
            rows = rows.filter(pl.col(setting) == spec[setting])
    rows = rows.collect()
    return rows if rows.height else None
