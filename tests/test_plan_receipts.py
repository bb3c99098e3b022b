"""plan checks a finished study's published results by listing, against their receipts: no result is read.

A published result is checked by its listed size against the receipt its publisher left (and, on a local
store, its sha256); a damaged one is deleted so its cell runs again; one without a receipt is read once and
given one. On S3 (moto on loopback) the requests plan sends are counted: listings only, however many cells.
"""

from __future__ import annotations

import collections
import json

import pyarrow as pa
import pytest

from bertology.results import receipts
from bertology.results.tables import CELL_TABLES, TABLES, publish, results_key
from bertology.steps.plan import plan_study
from bertology.store import open_store
from bertology.study import StudySpec


def _study(n: int) -> StudySpec:
    return StudySpec.from_params("scale", {"preset": "tiny", "tasks": '["sst2"]', "seeds": json.dumps(list(range(1, n + 1))),
                                           "variants": '[{"name": "pre-trained", "interventions": []}]'})[0]


def _finish(store, spec: StudySpec) -> None:
    for cell in spec.cells():
        for table in CELL_TABLES:
            publish(store, table, cell, TABLES[table].empty_table())


def test_plan_over_a_finished_study_on_s3_lists_and_reads_nothing(s3_bucket):
    store = open_store(f"s3://{s3_bucket}/p")
    spec = _study(30)
    _finish(store, spec)
    fresh = open_store(f"s3://{s3_bucket}/p")
    counts: collections.Counter = collections.Counter()
    fresh.client.meta.events.register("before-call.s3", lambda model, **_: counts.update([model.name]))
    assert plan_study(fresh, spec)["runs"] == []
    # two listings per table (its partition with sizes, its receipts), one write (plan.json)
    assert counts == {"ListObjectsV2": 2 * len(CELL_TABLES), "PutObject": 1}


@pytest.mark.parametrize(("damage", "why"), [
    (lambda b: b[: len(b) // 2], "bytes, its receipt says"),  # truncated: caught by size alone
    (lambda b: bytes(b[:-8]) + bytes(x ^ 0xFF for x in b[-8:]), "not its receipt's"),  # same size: sha256
])
def test_a_damaged_result_is_deleted_and_its_cell_runs_again(tmp_path, caplog, damage, why):
    store = open_store(str(tmp_path / "store"))
    spec = _study(2)
    _finish(store, spec)
    cell = spec.cells()[0]
    path = tmp_path / "store" / results_key("curves", "scale", cell.run.id)
    path.write_bytes(damage(path.read_bytes()))
    work = plan_study(store, spec)
    assert work["runs"] == [cell.run.id]
    assert not path.exists() and not [k for k in store.list(receipts.ROOT) if cell.run.id in k and "/curves/" in k]
    assert any(why in r.getMessage() and "is damaged" in r.getMessage() for r in caplog.records)


def test_a_republished_result_keeps_one_receipt(tmp_path):
    store = open_store(str(tmp_path / "store"))
    (cell,) = _study(1).cells()
    publish(store, "runs", cell, TABLES["runs"].empty_table())
    key = results_key("runs", "scale", cell.run.id)
    receipts.write(store, key, b"other bytes")
    (receipt,) = store.list(receipts.ROOT)
    assert receipt == receipts.receipt_key(key, 11, __import__("hashlib").sha256(b"other bytes").hexdigest())


def test_a_result_without_a_receipt_is_read_once_and_given_one(tmp_path):
    store = open_store(str(tmp_path / "store"))
    spec = _study(1)
    (cell,) = spec.cells()
    key = results_key("runs", "scale", cell.run.id)
    store.write_parquet(key, pa.table({"x": [1]}))  # published before receipts existed
    for table in ("curves", "weight_distance"):
        publish(store, table, cell, TABLES[table].empty_table())
    assert plan_study(store, spec)["runs"] == []
    (receipt,) = [k for k in store.list(receipts.ROOT) if "/runs/" in k]
    size = int(receipt.rsplit("/", 1)[1].split(".")[0])
    assert size == (tmp_path / "store" / key).stat().st_size
    store.write_bytes(key, b"")  # emptied: not a Parquet file, and no longer its receipt's size
    assert plan_study(store, spec)["runs"] == [cell.run.id]
