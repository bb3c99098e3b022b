"""A store in a local directory (the default, `./.bertology`).

Atomicity comes from the file system: a single file is written beside its key and renamed over it, an
artifact is staged in a hidden `.NAME.PID.UUID.publishing` directory beside its prefix and renamed into
place, and an artifact being deleted is renamed aside first, so a reader sees a whole artifact or none
and a second writer's rename fails instead of mixing two copies.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import uuid
from pathlib import Path

from bertology import chaos, leftovers
from bertology.errors import BadInput, Transient
from bertology.store.base import Store
from bertology.store.digest import MARKER, copy_digest, staged_files
from bertology.store.errors import Missing


def check_writable_dir(path: Path, what: str) -> None:
    """`path` must be a directory this process can write, or creatable inside one: a path that is a file,
    or a read-only directory, is bad input (exit 2), not a traceback half-way through a step."""
    existing = path.expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    allowed = "allowed: a writable directory, or a new path inside one"
    if not existing.is_dir():
        raise BadInput(f"{what} cannot be used: '{existing}' is a file, not a directory ({allowed})")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(f"{what} cannot be used: directory '{existing}' is not writable ({allowed})")


def _sweep_dead_writers(parent: Path, name: str) -> None:
    """Remove the hidden `.NAME.PID.UUID.publishing` / `.old` directories a killed writer left beside an
    artifact (a live writer's are kept: the pid in the name tells)."""
    pattern = re.compile(rf"\.{re.escape(name)}\.(\d+)\.[0-9a-f]+\.(publishing|old)")
    with contextlib.suppress(OSError):
        for path in parent.iterdir():
            match = pattern.fullmatch(path.name)
            if match and int(match[1]) != os.getpid() and not leftovers.alive(int(match[1])):
                shutil.rmtree(path, ignore_errors=True)


class LocalStore(Store):
    def __init__(self, root: Path):
        self.root = root.expanduser().absolute()
        self.uri = "file://" + str(self.root)

    def _path(self, key: str) -> Path:
        return self.root / key

    def check_writable(self) -> None:
        check_writable_dir(self.root, f"store '{self.uri}'")

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise Missing(f"'{self.url(key)}' does not exist") from None

    def write_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)  # atomic: readers see the old file or the new one, never a partial one
        finally:
            tmp.unlink(missing_ok=True)

    def sizes(self, prefix: str) -> dict[str, int]:
        base = self._path(prefix)
        if not base.exists():
            return {}
        return {str(p.relative_to(self.root)): p.stat().st_size for p in base.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(self.root).parts)}

    def modified(self, key: str) -> float:
        try:
            return self._path(key).stat().st_mtime
        except FileNotFoundError:
            raise Missing(f"'{self.url(key)}' does not exist") from None

    def delete_key(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        target = self._path(prefix)
        if not prefix or not target.exists():
            shutil.rmtree(target, ignore_errors=True)
            return
        aside = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}.old")
        with contextlib.suppress(FileNotFoundError):
            os.rename(target, aside)  # readers see the whole artifact or none
        shutil.rmtree(aside, ignore_errors=True)

    def _publish_dir(self, local: Path, prefix: str, info: dict, replace: bool) -> bool:
        target = self._path(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        name = target.name or "root"
        tmp = target.parent / f".{name}.{os.getpid()}.{uuid.uuid4().hex}.publishing"
        _sweep_dead_writers(target.parent, name)
        try:
            files = {}
            for path in staged_files(local):
                rel = str(path.relative_to(local))
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                files[rel] = copy_digest(path, tmp / rel)
            chaos.point("published")  # the files are in place, the marker not yet
            (tmp / MARKER).write_text(json.dumps({**info, "files": files}, indent=2, sort_keys=True, default=str))
            if not prefix:  # the store's root is the artifact: no rename possible, copy in (marker last)
                for rel in files:
                    (target / rel).parent.mkdir(parents=True, exist_ok=True)
                    os.replace(tmp / rel, target / rel)
                os.replace(tmp / MARKER, target / MARKER)
                return True
            for _ in range(100):
                try:
                    os.rename(tmp, target)  # atomic; fails if another writer's (non-empty) directory is there
                    return True
                except OSError as e:
                    if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                if not replace and self.is_done(prefix):
                    return False
                self.delete_prefix(prefix)  # unfinished leftovers (or a slot being rewritten)
            raise Transient(f"could not publish {self.url(prefix)}: other writers kept replacing it")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _fetch_dir(self, prefix: str, marker: bytes) -> Path:
        return self._path(prefix)
