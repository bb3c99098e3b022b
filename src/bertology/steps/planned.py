"""What Argo hands a step: a reference to a stored plan and ids in it, never a spec.

Why: for a map item Argo fills `{{item.KEY}}` with `fmt.Sprintf("%v", value)`, and for a string value that
keeps its JSON escaping (workflow/controller/operator.go `processItem`, pkg/apis/workflow/v1alpha1/item.go
`Item.String`; argoproj/argo-workflows#16061), so a spec passed as `{{item.spec}}` reaches the pod as
`{\"dataset\":…}`. Every copy of a spec in an item is also kept in the workflow's status. So `plan` stores
every spec once, in `studies/<name>/<study-id>/plan.json`, and hands Argo only plain tokens:

- the plan reference `NAME:STUDY_ID` (plan's `study` output), and
- the ids of one item: a dataset, a checkpoint, or the runs of one pod (`ID` or `ID,ID,…` for a bundle).

Each step looks its specs up here and checks that each one hashes to the id it was asked for, so a plan
that was edited or damaged in the store is refused instead of silently running something else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from bertology.errors import BadInput
from bertology.spec import Cell, CheckpointSpec, DatasetSpec
from bertology.store import Store

# Everything Argo substitutes from an item or a plan output matches this; nothing needs escaping.
TOKEN = re.compile(r"[A-Za-z0-9._,:-]+")
_ID = re.compile(r"[0-9a-f]{16}")


def plan_ref(name: str, study_id: str) -> str:
    return f"{name}:{study_id}"


def plan_key(name: str, study_id: str) -> str:
    return f"studies/{name}/{study_id}/plan.json"


def parse_plan_ref(text: str) -> tuple[str, str]:
    name, sep, study_id = text.strip().partition(":")
    if not sep or not name or not _ID.fullmatch(study_id) or not name.replace("-", "").isalnum():
        raise BadInput(f"--plan {text!r} is not a plan reference NAME:STUDY_ID (e.g. reversed-layers:3f2a9c0d1e4b5a67)")
    return name, study_id


def parse_ids(text: str | None, step: str) -> list[str]:
    ids = [i for i in (text or "").split(",") if i]
    if not ids:
        raise BadInput(f"{step} needs --ids ID[,ID…] (the plan's ids of its work)")
    bad = next((i for i in ids if not _ID.fullmatch(i)), None)
    if bad is not None:
        raise BadInput(f"--ids: {bad!r} is not an id (16 hex digits)")
    return ids


@dataclass
class Plan:
    """A stored plan, with its specs indexed by id (each id recomputed from its spec)."""

    name: str
    study_id: str
    doc: dict[str, Any]
    _cells: dict[str, Cell] | None = field(default=None, repr=False)

    @property
    def ref(self) -> str:
        return plan_ref(self.name, self.study_id)

    def cells(self, ids: list[str]) -> list[Cell]:
        if self._cells is None:
            self._cells = {}
            for raw in self.doc.get("cells") or []:
                cell = Cell.from_dict(raw)
                self._cells[cell.run.id] = cell
        return [self._lookup(self._cells, i, "run") for i in ids]

    def dataset(self, spec_id: str) -> DatasetSpec:
        return self._spec("datasets", spec_id, DatasetSpec.from_dict, "dataset")

    def checkpoint(self, spec_id: str) -> CheckpointSpec:
        return self._spec("checkpoints", spec_id, CheckpointSpec.from_dict, "checkpoint")

    def work(self, kind: str, spec_id: str) -> dict:
        """A raw spec of the plan's `work` (e.g. the vocab-overlap study's analyses), by id."""
        return self._lookup(self.doc.get(kind) or {}, spec_id, kind.rstrip("s"))

    def _spec(self, kind: str, spec_id: str, parse, what: str):
        spec = parse(self._lookup(self.doc.get(kind) or {}, spec_id, what))
        if spec.id != spec_id:
            raise BadInput(f"plan {self.ref}: the {what} stored under id {spec_id} hashes to {spec.id} "
                           f"(the plan was changed after it was written; run plan again)")
        return spec

    def _lookup(self, table: dict, spec_id: str, what: str):
        if spec_id not in table:
            raise BadInput(f"plan {self.ref} has no {what} with id {spec_id} "
                           f"(it has {len(table)}; was the plan rewritten with other parameters?)")
        return table[spec_id]


def load_plan(store: Store, ref: str) -> Plan:
    name, study_id = parse_plan_ref(ref)
    key = plan_key(name, study_id)
    if not store.exists(key):
        raise BadInput(f"no plan {ref} in {store.uri} (expected {key}; the plan step writes it)")
    return Plan(name, study_id, store.read_json(key))
