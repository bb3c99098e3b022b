"""Receipts of published results: what plan checks a study's finished cells against, by listing only.

A cell's results (`results/<table>/study=<name>/<run-id>.parquet`) are written by its steps. plan must tell a
sound one from an emptied, truncated or otherwise damaged one, so that the cell runs again, and at paper
scale it must not read them: the largest study has about 1,200 of them, and reading each was one whole-object
GET per file per plan. So every publication leaves a receipt, an empty object whose key records the file's
size and sha256:

    results/_receipts/<table>/study=<name>/<run-id>/<size>.<sha256>

(a publication that replaces the file with other bytes drops the older receipts: one listing).
and plan lists each table's partition (with sizes) and its receipts: two listings per table, a request per
1,000 keys on S3, and no read of any result. A file whose listed size is no receipt's is damaged. On a local
store, where reading costs no request, the sha256 is checked too (a disk can flip a bit in place; an S3 object
changes only by a new PUT, which S3 checksums). A file without a receipt (published before receipts, or its
publisher died between the two writes) is read once, the old way, and given its receipt if it is sound.
Several receipts for one file (a step published it twice) are fine: the file must match one of them.
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor

from bertology.store import Damaged, LocalStore, Store, parse_parquet

log = logging.getLogger("bertology")

ROOT = "results/_receipts"
READERS = 16  # files without a receipt read at once (I/O-bound: S3 GETs)


def _receipts_of(key: str) -> str:
    """The receipts' prefix of a result (no key under it ends in .parquet, so no `results/**/*.parquet`
    glob of a notebook ever matches one)."""
    return f"{ROOT}/{key.removeprefix('results/').removesuffix('.parquet')}"


def receipt_key(key: str, size: int, sha256: str) -> str:
    return f"{_receipts_of(key)}/{size}.{sha256}"


def write(store: Store, key: str, data: bytes) -> None:
    """Publish `data` at `key`, then its receipt, then drop the receipts of bytes it replaced."""
    store.write_bytes(key, data)
    mine = receipt_key(key, len(data), hashlib.sha256(data).hexdigest())
    store.write_bytes(mine, b"")
    for old in store.list(_receipts_of(key)):
        if old != mine:
            store.delete_key(old)


def _receipts(store: Store, prefix: str) -> dict[str, set[tuple[int, str]]]:
    """result key -> {(size, sha256)} of the receipts under results/<prefix> (one listing)."""
    found: dict[str, set[tuple[int, str]]] = {}
    for name in store.list(f"{ROOT}/{prefix}"):
        base, receipt = name.rsplit("/", 1)
        size, sha = receipt.split(".", 1)
        found.setdefault("results/" + base.removeprefix(f"{ROOT}/") + ".parquet", set()).add((int(size), sha))
    return found


def _readable(store: Store, key: str) -> Damaged | None:
    try:
        data = store.read_bytes(key)
        parse_parquet(data, store.url(key))
    except Damaged as e:
        return e
    store.write_bytes(receipt_key(key, len(data), hashlib.sha256(data).hexdigest()), b"")
    return None


def damaged(store: Store, study: str, tables: tuple[str, ...], wanted: set[str]) -> tuple[set[str], set[str]]:
    """(the published keys among `wanted`, those damaged: deleted with their receipts, so their cells run
    again). Requests: two listings per table, plus one read per file that has no receipt yet."""
    published: dict[str, int] = {}
    receipts: dict[str, set[tuple[int, str]]] = {}
    for table in tables:
        published.update(store.sizes(f"results/{table}/study={study}"))
        receipts.update(_receipts(store, f"{table}/study={study}"))
    present = {k for k in wanted if k in published}
    found: dict[str, str] = {}
    unreceipted = []
    for key in sorted(present):
        have = receipts.get(key)
        if not have:
            unreceipted.append(key)
        elif published[key] not in {size for size, _ in have}:
            found[key] = f"{published[key]} bytes, its receipt says {' or '.join(str(s) for s, _ in sorted(have))}"
        elif isinstance(store, LocalStore):
            sha = hashlib.sha256(store.read_bytes(key)).hexdigest()
            if (published[key], sha) not in have:
                found[key] = f"sha256 {sha[:12]}…, not its receipt's"
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        for key, error in zip(unreceipted, pool.map(lambda k: _readable(store, k), unreceipted)):
            if error is not None:
                found[key] = str(error)
    for key, why in found.items():
        log.warning("published result %s is damaged (%s); deleted, and the run's steps publish it again",
                    store.url(key), why)
        store.delete_key(key)
        for size, sha in receipts.get(key, ()):
            store.delete_key(receipt_key(key, size, sha))
    return present, set(found)
