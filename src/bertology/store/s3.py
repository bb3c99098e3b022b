"""A store in an S3 bucket (`s3://bucket/prefix`), through boto3; honours `AWS_ENDPOINT_URL` (MinIO,
SeaweedFS, moto) and the usual AWS credential variables.

S3 has no rename, so one writer at a time per artifact holds a publish lock, created with a conditional
put (`If-None-Match: *`); a single object is atomic by itself (one PUT). boto3's errors are mapped to the
project's (`_errors`): a missing key, a refused bucket or bad credentials are bad input, anything a
retry may cure is transient. Artifacts are read through a local cache keyed by the marker's content.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import time
import uuid
from pathlib import Path

from bertology import chaos
from bertology.errors import BadInput, Transient
from bertology.store.base import Store, join_key
from bertology.store.digest import MARKER, file_digest, staged_files
from bertology.store.errors import Missing
from bertology.store.s3_config import env_float, log_retry, s3_config

log = logging.getLogger("bertology")


class S3Store(Store):
    def __init__(self, bucket: str, prefix: str):
        import boto3

        self.bucket, self.prefix = bucket, prefix
        self.uri = f"s3://{join_key(bucket, prefix)}"
        config = s3_config()
        self.attempts = config.retries["max_attempts"]
        self.client = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None, config=config)
        self.client.meta.events.register_first("needs-retry.s3", log_retry(self.attempts))
        cache = os.environ.get("BERTOLOGY_CACHE", str(Path.home() / ".cache" / "bertology"))
        self.cache = Path(cache) / "s3" / bucket / prefix
        self.lock_stale_after = env_float("BERTOLOGY_PUBLISH_LOCK_STALE", 900.0)

    def _key(self, key: str) -> str:
        return join_key(self.prefix, key)

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
        marker = join_key(prefix, MARKER)
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
        return join_key("_locks", prefix or "_root") + ".json"

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
                    self.client.upload_file(str(local / rel), self.bucket, self._key(join_key(prefix, rel)))
            chaos.point("published")  # the files are in place, the marker not yet
            self.write_json(join_key(prefix, MARKER), {**info, "files": files})
            return True
        finally:
            with contextlib.suppress(Exception):
                self._delete([self._lock_key(prefix)])

    def _refetch(self, prefix: str, marker: bytes) -> Path | None:
        shutil.rmtree(self.cache / prefix, ignore_errors=True)
        return self._fetch_dir(prefix, marker)

    def _fetch_dir(self, prefix: str, marker: bytes) -> Path:
        """Download once into the local cache; the cached copy is keyed by the marker's content (and
        verified by `local_dir` like any other copy). Processes sharing the cache (two writers of one run)
        swap a download in under a lock, and one that finds the same marker already in place keeps that
        copy: deleting it would pull the files from under the process reading them."""
        target = self.cache / prefix
        if _holds(target, marker):
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
            target.parent.mkdir(parents=True, exist_ok=True)
            with _locked(target):
                if not _holds(target, marker):  # else another process put the same copy in place first
                    shutil.rmtree(target, ignore_errors=True)
                    os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target


def _holds(target: Path, marker: bytes) -> bool:
    """Whether the cached copy at `target` is the artifact that `marker` describes."""
    return (target / MARKER).exists() and (target / MARKER).read_bytes() == marker


@contextlib.contextmanager
def _locked(target: Path):
    """An exclusive lock on `target`'s cached copy, across processes (a lock file beside it)."""
    import fcntl

    with open(target.with_name(f".{target.name}.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
