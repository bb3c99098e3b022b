"""The artifact protocol every store follows, over a handful of byte-level primitives.

`Store` is written once against `exists`/`read_bytes`/`write_bytes`/`sizes`/... and the two hooks
`_publish_dir` and `_fetch_dir`, so the guarantees (stage, publish, marker last; verify what is read;
keep the first writer's copy) hold the same on a local directory and on S3; `LocalStore` and `S3Store`
supply only the primitives.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from bertology import chaos, leftovers
from bertology.errors import BadInput
from bertology.store.digest import MARKER, bytes_digest, mismatch, verify_files
from bertology.store.errors import Damaged, Missing
from bertology.store.parquet import parquet_bytes, parse_parquet

log = logging.getLogger("bertology")


def join_key(*parts: str) -> str:
    """Key parts joined by single slashes, empty parts dropped (keys never start or end with one)."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


class Store:
    """Key-value access plus the artifact protocol; subclasses implement the byte-level primitives."""

    uri: str

    # -- primitives -------------------------------------------------------------------------------
    def exists(self, key: str) -> bool: raise NotImplementedError
    def read_bytes(self, key: str) -> bytes: raise NotImplementedError
    def write_bytes(self, key: str, data: bytes) -> None: raise NotImplementedError
    def sizes(self, prefix: str) -> dict[str, int]: raise NotImplementedError  # key -> bytes, from one listing

    def list(self, prefix: str) -> list[str]:
        return sorted(self.sizes(prefix))
    def modified(self, key: str) -> float: raise NotImplementedError  # POSIX seconds of the last write
    def delete_prefix(self, prefix: str) -> None: raise NotImplementedError
    def delete_key(self, key: str) -> None: raise NotImplementedError
    def _publish_dir(self, local: Path, prefix: str, info: dict, replace: bool) -> bool: raise NotImplementedError
    def _fetch_dir(self, prefix: str, marker: bytes) -> Path: raise NotImplementedError

    def check_writable(self) -> None:
        """Refuse, before any work, a store that cannot take artifacts (a step that writes calls it first).
        Nothing to check cheaply on S3: a refused write is mapped to BadInput where it happens."""

    # -- conveniences -----------------------------------------------------------------------------
    def url(self, key: str = "") -> str:
        return join_key(self.uri, key) if key else self.uri

    def read_json(self, key: str):
        return json.loads(self.read_bytes(key))

    def write_json(self, key: str, obj) -> None:
        self.write_bytes(key, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())

    def write_parquet(self, key: str, table: pa.Table) -> None:
        self.write_bytes(key, parquet_bytes(table))

    def read_parquet(self, key: str) -> pa.Table:
        return parse_parquet(self.read_bytes(key), self.url(key))

    # -- artifacts --------------------------------------------------------------------------------
    def _marker_bytes(self, prefix: str) -> bytes | None:
        try:
            return self.read_bytes(join_key(prefix, MARKER))
        except Missing:
            return None

    def is_done(self, prefix: str) -> bool:
        """A readable marker exists. An unreadable one (truncated, emptied) counts as unfinished: the
        producing step rebuilds the artifact, and says so in one line."""
        raw = self._marker_bytes(prefix)
        if raw is None:
            return False
        try:
            json.loads(raw)
        except ValueError:
            log.warning("artifact %s has an unreadable %s; treated as unfinished and rebuilt", self.url(prefix), MARKER)
            return False
        return True

    def marker(self, prefix: str) -> dict:
        return self.read_json(join_key(prefix, MARKER))

    def _checked_marker(self, prefix: str) -> tuple[bytes, dict]:
        raw = self._marker_bytes(prefix)
        if raw is None:
            raise BadInput(f"artifact '{self.url(prefix)}' does not exist or is unfinished")
        try:
            marker = json.loads(raw)
            if not isinstance(marker, dict):
                raise TypeError("not an object")
        except (ValueError, TypeError) as e:
            raise Damaged(self.url(prefix), f"unreadable {MARKER}: {e}", raw) from None
        return raw, marker

    @contextlib.contextmanager
    def artifact(self, prefix: str, info: dict | None = None, replace: bool = False) -> Iterator[Path]:
        """Stage files in a local directory; on success publish them under `prefix`, marker last.

        On an exception nothing is published. Unfinished leftovers under `prefix` from an earlier crash are
        replaced. A finished artifact another writer published first is kept and this copy dropped, unless
        `replace` (the resume-state slots, which are rewritten on purpose).
        """
        staging = leftovers.make("stage")  # named for this pid: a later run sweeps it if this one is killed
        try:
            yield staging
            chaos.point("staged")
            info = {"finished_at": time.time(), **(info or {})}
            if not self._publish_dir(staging, prefix, info, replace):
                log.info("artifact %s was published by another writer first; its copy is kept", self.url(prefix))
            chaos.point("marked")
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def local_dir(self, prefix: str) -> Path:
        """A local directory holding a finished artifact (the artifact itself for a local store), every file
        verified against the marker (size and sha256, streamed). Raises Damaged on a mismatch."""
        raw, marker = self._checked_marker(prefix)
        path = self._fetch_dir(prefix, raw)
        files = marker.get("files")
        if files is None:  # written before markers had checksums: nothing to verify against
            return path
        key = (self.uri, prefix, raw)
        if key in _VERIFIED:
            return path
        if why := verify_files(path, files):
            path = self._refetch(prefix, raw)  # an S3 store's local copy may be the damaged one
            if path is None or (why := verify_files(path, files)):
                raise Damaged(self.url(prefix), why, raw)
        _VERIFIED.add(key)
        return path

    def _refetch(self, prefix: str, marker: bytes) -> Path | None:
        return None  # a local store has no other copy

    def read_member(self, prefix: str, name: str) -> bytes:
        """One file of a finished artifact, verified against the marker (the step reads only this file)."""
        raw, marker = self._checked_marker(prefix)
        files = marker.get("files")
        if files is not None and name not in files:
            raise Damaged(self.url(prefix), f"{name} is not in its marker", raw)
        try:
            data = self.read_bytes(join_key(prefix, name))
        except Missing:
            raise Damaged(self.url(prefix), f"{name} is missing", raw) from None
        if files is not None and (why := mismatch(name, files[name], bytes_digest(data))):
            raise Damaged(self.url(prefix), why, raw)
        return data

    def has_member(self, prefix: str, name: str) -> bool:
        _, marker = self._checked_marker(prefix)
        files = marker.get("files")
        return name in files if files is not None else self.exists(join_key(prefix, name))

    def discard(self, prefix: str, marker: bytes | None = None) -> None:
        """Remove a damaged artifact, unless another process replaced it since (its marker changed)."""
        if marker is not None and self._marker_bytes(prefix) not in (marker, None):
            return
        self.delete_prefix(prefix)

    def verify(self, prefix: str) -> dict:
        """Verify a whole finished artifact; returns its marker (raises Damaged or BadInput)."""
        self.local_dir(prefix)
        return self.marker(prefix)


_VERIFIED: set[tuple[str, str, bytes]] = set()  # artifacts this process verified (a bundle reads one many times)
