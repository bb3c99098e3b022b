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

This package is the public face; callers import from `bertology.store` only. Its modules, each one idea:
`uri` (a URI to its store), `base` (the artifact protocol over byte primitives), `local` and `s3` (the
two back-ends), `s3_config` (the S3 client's settings from the environment), `digest` (the marker and
file digests), `parquet` (tables with page checksums) and `errors` (Missing, Damaged, a full disk).
"""

from bertology.store.base import Store
from bertology.store.digest import MARKER
from bertology.store.errors import Damaged, Missing, is_disk_full
from bertology.store.local import LocalStore, check_writable_dir
from bertology.store.parquet import parquet_bytes, parse_parquet
from bertology.store.s3 import S3Store
from bertology.store.uri import DEFAULT_ROOT, open_store

__all__ = [
    "DEFAULT_ROOT",
    "MARKER",
    "Damaged",
    "LocalStore",
    "Missing",
    "S3Store",
    "Store",
    "check_writable_dir",
    "is_disk_full",
    "open_store",
    "parquet_bytes",
    "parse_parquet",
]
