"""The store contract, run against a local directory and against a real S3 server on loopback."""

import time
from pathlib import Path

import pyarrow as pa
import pytest

from bertology.errors import BadInput, Transient
from bertology.store import MARKER, LocalStore, S3Store, open_store
from bertology.store import base as store_base


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path):
    if request.param == "file":
        return open_store(str(tmp_path / "root"))
    bucket = request.getfixturevalue("s3_bucket")
    return open_store(f"s3://{bucket}/some/prefix")


def test_bytes_json_parquet_roundtrip(store):
    store.write_bytes("a/b.bin", b"\x00\x01")
    store.write_json("a/c.json", {"x": [1, 2]})
    store.write_parquet("a/t.parquet", pa.table({"v": [1.5, 2.5]}))
    assert store.read_bytes("a/b.bin") == b"\x00\x01"
    assert store.read_json("a/c.json") == {"x": [1, 2]}
    assert store.read_parquet("a/t.parquet").column("v").to_pylist() == [1.5, 2.5]
    assert store.list("a") == ["a/b.bin", "a/c.json", "a/t.parquet"]
    assert store.exists("a/b.bin") and not store.exists("a/missing")


def test_modified_is_the_time_of_the_last_write(store):
    before = time.time()
    store.write_bytes("m/k", b"x")
    assert before - 2 <= store.modified("m/k") <= time.time() + 2  # S3 keeps whole seconds
    with pytest.raises(BadInput, match="does not exist"):
        store.modified("m/missing")


def test_artifact_publishes_files_then_marker(store):
    with store.artifact("art/1", {"spec": {"k": 1}}) as out:
        (out / "model").mkdir()
        (out / "model" / "w.bin").write_bytes(b"w")
        assert not store.is_done("art/1")
    assert store.is_done("art/1")
    assert store.marker("art/1")["spec"] == {"k": 1}
    local = store.local_dir("art/1")
    assert (local / "model" / "w.bin").read_bytes() == b"w"
    assert (local / MARKER).exists()


def test_a_crash_publishes_nothing_and_leftovers_are_replaced(store):
    with pytest.raises(RuntimeError), store.artifact("art/2") as out:
        (out / "half.bin").write_bytes(b"half")
        raise RuntimeError("killed")
    assert not store.is_done("art/2") and store.list("art/2") == []
    # leftovers of a crash that died mid-publish (files but no marker) are not read and get replaced
    store.write_bytes("art/2/stale.bin", b"stale")
    assert not store.is_done("art/2")
    with pytest.raises(BadInput, match="unfinished"):
        store.local_dir("art/2")
    with store.artifact("art/2") as out:
        (out / "fresh.bin").write_bytes(b"fresh")
    assert store.list("art/2") == ["art/2/_SUCCESS.json", "art/2/fresh.bin"]


def test_missing_key_is_a_one_line_bad_input(store):
    with pytest.raises(BadInput, match="does not exist"):
        store.read_bytes("nope.json")


def test_uri_parsing(tmp_path):
    assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
    assert open_store(f"file://{tmp_path}").root == tmp_path
    assert open_store(str(tmp_path / "x")).uri == f"file://{tmp_path / 'x'}"
    with pytest.raises(BadInput, match="unsupported store URI scheme 'gs'"):
        open_store("gs://bucket/x")
    with pytest.raises(BadInput, match="has no bucket"):
        open_store("s3:///x")


def test_s3_store_uses_the_endpoint_and_caches_downloads(s3_bucket, tmp_path):
    store = open_store(f"s3://{s3_bucket}/p")
    assert isinstance(store, S3Store) and store.uri == f"s3://{s3_bucket}/p"
    with store.artifact("ck") as out:
        (out / "f.txt").write_text("one")
    first = store.local_dir("ck")
    assert first.is_relative_to(tmp_path / "cache")
    (first / "f.txt").write_text("one")  # a cached copy is reused while the marker is unchanged
    assert store.local_dir("ck") == first
    (first / "f.txt").write_text("locally touched")  # ... and verified: a damaged copy is downloaded again
    store_base._VERIFIED.clear()  # as in a new process
    assert (store.local_dir("ck") / "f.txt").read_text() == "one"
    with store.artifact("ck") as out:  # a second writer of a finished artifact keeps the first one's
        (out / "f.txt").write_text("two")
    assert (store.local_dir("ck") / "f.txt").read_text() == "one"
    with store.artifact("ck", replace=True) as out:  # replaced on purpose: new marker, fresh download
        (out / "f.txt").write_text("two")
    assert (store.local_dir("ck") / "f.txt").read_text() == "two"


def test_s3_cache_keeps_the_copy_another_process_put_in_place_first(s3_bucket, monkeypatch):
    """Two processes sharing a cache fetch one artifact at once. The one that finishes second must not delete
    the first one's copy, which the first may be reading: it keeps it and drops its own download."""
    import shutil

    store = open_store(f"s3://{s3_bucket}/p")
    with store.artifact("ck") as out:
        (out / "f.txt").write_text("one")
    marker = store.read_bytes("ck/_SUCCESS.json")
    target = store.cache / "ck"
    download = store.client.download_file

    def meanwhile_the_other_process_finishes(bucket, key, dest):
        download(bucket, key, dest)
        if not target.exists():  # the other process's copy, being read by it right now
            shutil.copytree(Path(dest).parent, target)
            (target / "_SUCCESS.json").write_bytes(marker)
            (target / "being-read").touch()

    monkeypatch.setattr(store.client, "download_file", meanwhile_the_other_process_finishes)
    assert store.local_dir("ck") == target
    assert (target / "being-read").exists() and (target / "f.txt").read_text() == "one"
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".ck.") and p.is_dir()]  # no staging left


def test_s3_errors_are_classified(s3_server, monkeypatch):
    for k, v in s3_server.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(BadInput, match="NoSuchBucket"):
        open_store("s3://no-such-bucket-xyz/p").write_bytes("k", b"x")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens: retry later
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(Transient, match="unreachable"):
        open_store("s3://bucket/p").read_bytes("k")
