"""One root URI holds every artifact: a local directory (default `./.bertology`) or `s3://bucket/prefix`.

An artifact is a key prefix (a "directory") written as a unit: its files are staged, published, and
its `_SUCCESS.json` marker is written last. The marker records every file's size and sha256 (hashed while
the files are published); a reader verifies what it reads against it (`local_dir`, `read_member`) and a
mismatch raises `Damaged`, which the reading step handles by discarding and rebuilding the artifact. A
prefix without a readable marker is unfinished and is replaced, never read. A finished artifact is never
overwritten by a second writer of the same key: the first to publish wins, the others keep its copy
(local: an atomic directory rename; S3: a publish lock created with a conditional put, `If-None-Match: *`).
S3 goes through boto3 with explicit timeouts and retries (see `s3_config`) and honours `AWS_ENDPOINT_URL`
(MinIO, SeaweedFS, moto) and the usual AWS credential variables.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import random
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from bertology import chaos, leftovers
from bertology.errors import BadInput, Transient

MARKER = "_SUCCESS.json"
DEFAULT_ROOT = ".bertology"
CHUNK = 8 << 20  # streaming hash and copy buffer
log = logging.getLogger("bertology")


class Missing(BadInput):
    """A key that does not exist: bad input to a reader, a plain `False` to `exists`."""


class Damaged(Transient):
    """A finished artifact whose files do not match its marker (size or sha256), or whose marker is
    unreadable. Steps treat it as missing and rebuild it; uncaught it exits 75, and the rerun rebuilds."""

    def __init__(self, prefix_url: str, why: str, marker: bytes | None = None):
        super().__init__(f"artifact {prefix_url} is damaged ({why})")
        self.marker = marker


def open_store(uri: str | None) -> Store:
    """`file://…`, a plain path, or `s3://bucket[/prefix]`; anything else is refused by name. None means
    the default root; an empty or blank URI is refused (it is a mistake, not a request for the default)."""
    uri = DEFAULT_ROOT if uri is None else uri.strip()
    if not uri:
        raise BadInput("empty store URI (allowed: file://PATH, a local path, s3://BUCKET[/PREFIX])")
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise BadInput(f"store URI '{uri}' has no bucket (expected s3://BUCKET[/PREFIX])")
        return S3Store(parsed.netloc, parsed.path.strip("/"))
    if parsed.scheme == "file":
        path = parsed.netloc + parsed.path if parsed.netloc not in ("", "localhost") else parsed.path
        if not path:
            raise BadInput(f"store URI '{uri}' has no path (expected file:///ABSOLUTE/PATH or file://RELATIVE/PATH)")
        return LocalStore(Path(path))
    if parsed.scheme and len(parsed.scheme) > 1:  # one letter would be a Windows drive
        raise BadInput(f"unsupported store URI scheme '{parsed.scheme}' in '{uri}' "
                       "(allowed: file://PATH, a local path, s3://BUCKET[/PREFIX])")
    return LocalStore(Path(uri))


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


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def file_digest(path: Path) -> dict:
    """Size and sha256 of a file, streamed (a BERT-base checkpoint is 440 MB)."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": h.hexdigest()}


def bytes_digest(data: bytes) -> dict:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def copy_digest(src: Path, dest: Path) -> dict:
    """Copy `src` to `dest` (the kernel's zero-copy path) and hash what landed there, from the page cache:
    1.9 to 2.3 s for 440 MB here, where a Python read-hash-write loop took 3.6 to 5.5 s. No fsync (10x the
    copy): a file the kernel lost in a crash no longer matches the marker, and is rebuilt."""
    shutil.copyfile(src, dest)
    return file_digest(dest)


def _mismatch(name: str, want: dict, got: dict) -> str | None:
    if got["size"] != want["size"]:
        return f"{name}: {got['size']} bytes, the marker says {want['size']}"
    if got["sha256"] != want["sha256"]:
        return f"{name}: sha256 {got['sha256'][:12]}…, the marker says {want['sha256'][:12]}…"
    return None


def _verify_files(path: Path, files: dict) -> str | None:
    """What is wrong with the files under `path` compared with a marker's `files`, or None."""
    for name, want in files.items():
        try:
            got = file_digest(path / name)
        except FileNotFoundError:
            return f"{name} is missing"
        if why := _mismatch(name, want, got):
            return why
    return None


def staged_files(local: Path) -> list[Path]:
    return sorted(p for p in local.rglob("*") if p.is_file() and p.name != MARKER)


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
        return _join(self.uri, key) if key else self.uri

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
            return self.read_bytes(_join(prefix, MARKER))
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
        return self.read_json(_join(prefix, MARKER))

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
        if why := _verify_files(path, files):
            path = self._refetch(prefix, raw)  # an S3 store's local copy may be the damaged one
            if path is None or (why := _verify_files(path, files)):
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
            data = self.read_bytes(_join(prefix, name))
        except Missing:
            raise Damaged(self.url(prefix), f"{name} is missing", raw) from None
        if files is not None and (why := _mismatch(name, files[name], bytes_digest(data))):
            raise Damaged(self.url(prefix), why, raw)
        return data

    def has_member(self, prefix: str, name: str) -> bool:
        _, marker = self._checked_marker(prefix)
        files = marker.get("files")
        return name in files if files is not None else self.exists(_join(prefix, name))

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


def parquet_bytes(table: pa.Table) -> bytes:
    """A table as the store writes Parquet: zstd, with page checksums."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_page_checksum=True)
    return buf.getvalue()


def parse_parquet(data: bytes, where: str) -> pa.Table:
    """A Parquet file read whole, page checksums verified where the writer wrote them; an emptied or
    truncated file raises Damaged (naming it) instead of a reader's traceback."""
    try:
        return pq.read_table(io.BytesIO(data), page_checksum_verification=True)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise Damaged(where, f"unreadable Parquet, {len(data)} bytes: {str(e)[:120]}") from None


def is_disk_full(e: BaseException) -> bool:
    """ENOSPC or EDQUOT anywhere in the exception's chain (libraries wrap OSError in their own errors)."""
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(e) or "Disk quota exceeded" in str(e):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


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


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    try:
        return float(value) if value else default
    except ValueError:
        raise BadInput(f"{name}={value!r} is not a number of seconds") from None


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise BadInput(f"{name}={value!r} is not a positive whole number")
    return int(value)


def s3_config():
    """botocore's client settings: explicit timeouts and bounded retries with backoff and jitter.

    BERTOLOGY_S3_CONNECT_TIMEOUT (s, default 10), BERTOLOGY_S3_READ_TIMEOUT (s, default 30: a stalled
    endpoint costs at most that per attempt, not botocore's 60), BERTOLOGY_S3_MAX_ATTEMPTS (default AWS_MAX_ATTEMPTS or 5,
    first try included) and BERTOLOGY_S3_RETRY_MODE (standard or adaptive; default standard: exponential backoff
    with full jitter on throttling, 5xx, connection errors and timeouts)."""
    from botocore.config import Config

    mode = os.environ.get("BERTOLOGY_S3_RETRY_MODE", "standard")
    attempts = _env_int("AWS_MAX_ATTEMPTS", 5)  # botocore's own variable, as a fallback
    if mode not in ("standard", "adaptive"):
        raise BadInput(f"BERTOLOGY_S3_RETRY_MODE={mode!r} (allowed: standard, adaptive)")
    return Config(connect_timeout=_env_float("BERTOLOGY_S3_CONNECT_TIMEOUT", 10.0),
                  read_timeout=_env_float("BERTOLOGY_S3_READ_TIMEOUT", 30.0),
                  retries={"max_attempts": _env_int("BERTOLOGY_S3_MAX_ATTEMPTS", attempts), "mode": mode})


def _log_retry(max_attempts: int):
    """A `needs-retry` hook that logs one line for each failed attempt botocore will retry."""

    def hook(attempts=0, response=None, caught_exception=None, operation=None, **_):
        if caught_exception is not None:
            why = f"{type(caught_exception).__name__}: {str(caught_exception)[:120]}"
        elif response is not None and response[0].status_code >= 500 or response is not None and \
                response[0].status_code == 429:
            code = (response[1] or {}).get("Error", {}).get("Code", "")
            why = f"HTTP {response[0].status_code} {code}".strip()
        else:
            return
        if attempts < max_attempts:
            log.warning("S3 %s attempt %d of %d failed (%s); retrying with backoff",
                        getattr(operation, "name", "request"), attempts, max_attempts, why)

    return hook


class S3Store(Store):
    def __init__(self, bucket: str, prefix: str):
        import boto3

        self.bucket, self.prefix = bucket, prefix
        self.uri = f"s3://{_join(bucket, prefix)}"
        config = s3_config()
        self.attempts = config.retries["max_attempts"]
        self.client = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None, config=config)
        self.client.meta.events.register_first("needs-retry.s3", _log_retry(self.attempts))
        cache = os.environ.get("BERTOLOGY_CACHE", str(Path.home() / ".cache" / "bertology"))
        self.cache = Path(cache) / "s3" / bucket / prefix
        self.lock_stale_after = _env_float("BERTOLOGY_PUBLISH_LOCK_STALE", 900.0)

    def _key(self, key: str) -> str:
        return _join(self.prefix, key)

    @contextlib.contextmanager
    def _errors(self, key: str):
        from boto3.exceptions import RetriesExceededError, S3TransferFailedError, S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            yield
        except NoCredentialsError:
            raise BadInput(f"no S3 credentials for '{self.url(key)}' (set AWS_ACCESS_KEY_ID and "
                           "AWS_SECRET_ACCESS_KEY)") from None
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404"):
                raise Missing(f"'{self.url(key)}' does not exist") from None
            if code in ("NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
                raise BadInput(f"S3 refused '{self.url(key)}': {code} (check the bucket name and "
                               "credentials)") from None
            raise Transient(f"S3 error on '{self.url(key)}' after {self.attempts} attempts: {code} {e}") from e
        except BotoCoreError as e:  # connection refused, timeouts, cut bodies: retry the step
            raise Transient(f"S3 unreachable for '{self.url(key)}' after {self.attempts} attempts: {e}") from e
        except (S3TransferFailedError, S3UploadFailedError, RetriesExceededError) as e:  # transfers gave up
            if any(code in str(e) for code in ("NoSuchBucket", "AccessDenied", "InvalidAccessKeyId")):
                raise BadInput(f"S3 refused '{self.url(key)}': {e}") from None
            raise Transient(f"S3 transfer of '{self.url(key)}' failed after retries: {e}") from e

    def exists(self, key: str) -> bool:
        try:
            with self._errors(key):
                self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except Missing:
            return False

    def read_bytes(self, key: str) -> bytes:
        """GET, and read the body: a body cut short or stalled mid-stream happens after botocore's own
        retries, so it is retried here, with the same attempts, backoff and jitter."""
        from botocore.exceptions import BotoCoreError

        for attempt in range(1, self.attempts + 1):
            try:
                with self._errors(key):
                    return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
            except Transient as e:
                if attempt == self.attempts or not isinstance(e.__cause__, BotoCoreError):
                    raise
                log.warning("S3 GetObject %s attempt %d of %d failed (%s); retrying with backoff",
                            self.url(key), attempt, self.attempts, str(e.__cause__)[:120])
                time.sleep(random.uniform(0, min(20.0, 0.5 * 2 ** attempt)))
        raise AssertionError("unreachable")

    def modified(self, key: str) -> float:
        with self._errors(key):
            return self.client.head_object(Bucket=self.bucket, Key=self._key(key))["LastModified"].timestamp()

    def write_bytes(self, key: str, data: bytes) -> None:
        with self._errors(key):  # a PUT is atomic: readers see the whole object or none
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def sizes(self, prefix: str) -> dict[str, int]:
        found: dict[str, int] = {}
        root = self._key(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        with self._errors(prefix):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=root + "/" if root else ""):
                found.update({o["Key"][strip:]: o["Size"] for o in page.get("Contents", [])})
        return found

    def delete_prefix(self, prefix: str) -> None:
        keys = self.list(prefix)
        marker = _join(prefix, MARKER)
        if marker in keys:  # the marker first: readers never see a finished artifact with files gone
            self._delete([marker])
            keys.remove(marker)
        self._delete(keys)

    def delete_key(self, key: str) -> None:
        self._delete([key])

    def _delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            with self._errors(keys[i]):
                self.client.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": self._key(k)} for k in keys[i:i + 1000]], "Quiet": True})

    # -- publishing: one writer at a time per artifact ------------------------------------------------
    def _lock_key(self, prefix: str) -> str:
        return _join("_locks", prefix or "_root") + ".json"

    def _try_lock(self, prefix: str) -> bool:
        """Create the publish lock only if absent (a conditional put, `If-None-Match: *`). A lock older than
        BERTOLOGY_PUBLISH_LOCK_STALE seconds (default 900) is a dead writer's and is broken."""
        from botocore.exceptions import ClientError

        key = self._lock_key(prefix)
        body = json.dumps({"owner": f"{os.uname().nodename}:{os.getpid()}", "since": time.time()}).encode()
        with self._errors(key):
            try:
                self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=body, IfNoneMatch="*")
                return True
            except ClientError as e:  # 412: another writer holds it; anything else is mapped by _errors
                if e.response.get("Error", {}).get("Code", "") not in ("PreconditionFailed", "412",
                                                                       "ConditionalRequestConflict", "409"):
                    raise
        try:
            if time.time() - self.modified(key) > self.lock_stale_after:
                log.warning("publish lock %s is older than %.0f s (a dead writer's); broken", self.url(key),
                            self.lock_stale_after)
                self._delete([key])
        except Missing:
            pass
        return False

    def _publish_dir(self, local: Path, prefix: str, info: dict, replace: bool) -> bool:
        files = {str(p.relative_to(local)): file_digest(p) for p in staged_files(local)}
        wait = 0.2
        while True:
            if not replace and self.is_done(prefix):
                return False
            if self._try_lock(prefix):
                break
            time.sleep(random.uniform(wait / 2, wait))  # another writer is publishing this artifact
            wait = min(wait * 2, 5.0)
        try:
            if not replace and self.is_done(prefix):
                return False
            self.delete_prefix(prefix)  # unfinished leftovers of a crashed attempt
            for rel in files:
                with self._errors(prefix):
                    self.client.upload_file(str(local / rel), self.bucket, self._key(_join(prefix, rel)))
            chaos.point("published")  # the files are in place, the marker not yet
            self.write_json(_join(prefix, MARKER), {**info, "files": files})
            return True
        finally:
            with contextlib.suppress(Exception):
                self._delete([self._lock_key(prefix)])

    def _refetch(self, prefix: str, marker: bytes) -> Path | None:
        shutil.rmtree(self.cache / prefix, ignore_errors=True)
        return self._fetch_dir(prefix, marker)

    def _fetch_dir(self, prefix: str, marker: bytes) -> Path:
        """Download once into the local cache; the cached copy is keyed by the marker's content (and
        verified by `local_dir` like any other copy)."""
        target = self.cache / prefix
        if (target / MARKER).exists() and (target / MARKER).read_bytes() == marker:
            return target
        staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
        try:
            for key in self.list(prefix):
                rel = key[len(prefix.strip("/")) + 1:] if prefix.strip("/") else key
                dest = staging / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                if rel == MARKER:
                    dest.write_bytes(marker)  # the marker this copy is verified against
                    continue
                with self._errors(key):
                    self.client.download_file(self.bucket, self._key(key), str(dest))
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target
