"""One root URI holds every artifact: a local directory (default `./.bertology`) or `s3://bucket/prefix`.

An artifact is a key prefix (a "directory") written as a unit: its files are staged, published, and
its `_SUCCESS.json` marker is written last. A prefix without a marker is unfinished and is replaced,
never read, so a crash cannot leave a half artifact that looks done. S3 goes through boto3 and honours
`AWS_ENDPOINT_URL` (MinIO, SeaweedFS, moto) and the usual AWS credential variables.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
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


class Missing(BadInput):
    """A key that does not exist: bad input to a reader, a plain `False` to `exists`."""


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
def _umask() -> int:
    """This process's umask, read without changing it (os.umask sets it, racing other threads)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        status = Path("/proc/self/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


class Store:
    """Key-value access plus the artifact protocol; subclasses implement the byte-level primitives."""

    uri: str

    # -- primitives -------------------------------------------------------------------------------
    def exists(self, key: str) -> bool: raise NotImplementedError
    def read_bytes(self, key: str) -> bytes: raise NotImplementedError
    def write_bytes(self, key: str, data: bytes) -> None: raise NotImplementedError
    def list(self, prefix: str) -> list[str]: raise NotImplementedError
    def modified(self, key: str) -> float: raise NotImplementedError  # POSIX seconds of the last write
    def delete_prefix(self, prefix: str) -> None: raise NotImplementedError
    def _publish_dir(self, local: Path, prefix: str) -> None: raise NotImplementedError
    def _fetch_dir(self, prefix: str) -> Path: raise NotImplementedError

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
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        self.write_bytes(key, buf.getvalue())

    def read_parquet(self, key: str) -> pa.Table:
        return pq.read_table(io.BytesIO(self.read_bytes(key)))

    # -- artifacts --------------------------------------------------------------------------------
    def is_done(self, prefix: str) -> bool:
        return self.exists(_join(prefix, MARKER))

    def marker(self, prefix: str) -> dict:
        return self.read_json(_join(prefix, MARKER))

    @contextlib.contextmanager
    def artifact(self, prefix: str, info: dict | None = None) -> Iterator[Path]:
        """Stage files in a local directory; on success publish them under `prefix`, marker last.

        On an exception nothing is published, and any unfinished leftovers under `prefix` from an
        earlier crash are cleared before the new files go in.
        """
        staging = leftovers.make("stage")  # named for this pid: a later run sweeps it if this one is killed
        try:
            yield staging
            chaos.point("staged")
            self.delete_prefix(prefix)  # unfinished leftovers of a crashed attempt
            self._publish_dir(staging, prefix)
            chaos.point("published")
            self.write_json(_join(prefix, MARKER), {"finished_at": time.time(), **(info or {})})
            chaos.point("marked")
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def local_dir(self, prefix: str) -> Path:
        """A local directory holding a finished artifact (the artifact itself for a local store)."""
        if not self.is_done(prefix):
            raise BadInput(f"artifact '{self.url(prefix)}' does not exist or is unfinished")
        return self._fetch_dir(prefix)


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
        except FileNotFoundError:
            raise Missing(f"'{self.url(key)}' does not exist") from None

    def write_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # atomic: readers see the old file or the new one, never a partial one

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.exists():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file())

    def modified(self, key: str) -> float:
        try:
            return self._path(key).stat().st_mtime
        except FileNotFoundError:
            raise Missing(f"'{self.url(key)}' does not exist") from None

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)

    def _publish_dir(self, local: Path, prefix: str) -> None:
        target = self._path(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        # new files get the umask's mode, as any file a user writes (a team can read a shared store); the
        # staging directory is private (mkdtemp: 0700) and some writers make 0600 files
        shutil.copytree(local, target, dirs_exist_ok=True, copy_function=shutil.copyfile)
        for directory in [target, *(p for p in target.rglob("*") if p.is_dir())]:
            os.chmod(directory, 0o777 & ~_umask())

    def _fetch_dir(self, prefix: str) -> Path:
        return self._path(prefix)


class S3Store(Store):
    def __init__(self, bucket: str, prefix: str):
        import boto3
        from botocore.config import Config

        self.bucket, self.prefix = bucket, prefix
        self.uri = f"s3://{_join(bucket, prefix)}"
        self.client = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
                                   config=Config(retries={"max_attempts": 5, "mode": "standard"}))
        cache = os.environ.get("BERTOLOGY_CACHE", str(Path.home() / ".cache" / "bertology"))
        self.cache = Path(cache) / "s3" / bucket / prefix

    def _key(self, key: str) -> str:
        return _join(self.prefix, key)

    @contextlib.contextmanager
    def _errors(self, key: str):
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
            raise Transient(f"S3 error on '{self.url(key)}': {code} {e}") from e
        except BotoCoreError as e:  # connection refused, timeouts: retry the step
            raise Transient(f"S3 unreachable for '{self.url(key)}': {e}") from e

    def exists(self, key: str) -> bool:
        try:
            with self._errors(key):
                self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except Missing:
            return False

    def read_bytes(self, key: str) -> bytes:
        with self._errors(key):
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()

    def modified(self, key: str) -> float:
        with self._errors(key):
            return self.client.head_object(Bucket=self.bucket, Key=self._key(key))["LastModified"].timestamp()

    def write_bytes(self, key: str, data: bytes) -> None:
        with self._errors(key):  # a PUT is atomic: readers see the whole object or none
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        root = self._key(prefix)
        with self._errors(prefix):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=root + "/" if root else ""):
                keys += [o["Key"] for o in page.get("Contents", [])]
        strip = len(self.prefix) + 1 if self.prefix else 0
        return sorted(k[strip:] for k in keys)

    def delete_prefix(self, prefix: str) -> None:
        keys = self.list(prefix)
        with self._errors(prefix):
            for i in range(0, len(keys), 1000):
                self.client.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": self._key(k)} for k in keys[i:i + 1000]], "Quiet": True})

    def _publish_dir(self, local: Path, prefix: str) -> None:
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            with self._errors(prefix):
                self.client.upload_file(str(path), self.bucket,
                                        self._key(_join(prefix, str(path.relative_to(local)))))

    def _fetch_dir(self, prefix: str) -> Path:
        """Download once into the local cache; the cached copy is keyed by the marker's content."""
        marker = self.read_bytes(_join(prefix, MARKER))
        target = self.cache / prefix
        if (target / MARKER).exists() and (target / MARKER).read_bytes() == marker:
            return target
        staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
        for key in self.list(prefix):
            rel = key[len(prefix.strip("/")) + 1:]
            dest = staging / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with self._errors(key):
                self.client.download_file(self.bucket, self._key(key), str(dest))
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, target)
        return target
