"""S3 faults between a step and a real S3 server (moto on loopback, behind tests/s3_fault_proxy.py).

Connection resets, 503 SlowDown, a stall longer than the read timeout and a truncated response body: a
few of each are retried with backoff and jitter (one log line per retry) and the step succeeds; faults
that outlast the retries end the step with exit 75 (never 2) and no marker; the rerun heals and its
artifact equals one made without faults. Timeouts are short through the environment, so each fault
costs seconds (BERTOLOGY_S3_READ_TIMEOUT=1, BERTOLOGY_S3_MAX_ATTEMPTS=3).
"""

from __future__ import annotations

import json
import time

import pytest
from s3_fault_proxy import Fault, start
from test_integrity import CELL

from bertology.errors import Transient
from bertology.steps import prepare_data
from bertology.steps.common import dataset_key
from bertology.steps.harness import main
from bertology.store import base as store_base
from bertology.store import open_store

KINDS = ["reset", "503", "stall", "truncate"]
DATASET = json.dumps(CELL.run.dataset.to_dict())
KEY = dataset_key(CELL.run.dataset.id)


@pytest.fixture
def proxied(s3_bucket, s3_server, monkeypatch):
    proxy, url, server = start(s3_server["AWS_ENDPOINT_URL"], stall_s=2.5)
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("BERTOLOGY_S3_READ_TIMEOUT", "1")
    monkeypatch.setenv("BERTOLOGY_S3_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("BERTOLOGY_S3_MAX_ATTEMPTS", "3")
    yield proxy, f"s3://{s3_bucket}/p"
    server.shutdown()
    server.server_close()


def _prepare(uri: str) -> int:
    store_base._VERIFIED.clear()
    return main("prepare-data", prepare_data.run, ["--store", uri, "--spec", DATASET])


@pytest.fixture(scope="module")
def clean_files(tmp_path_factory):
    """The dataset's files (size and sha256) made without any fault: what every healed run must equal."""
    store = open_store(str(tmp_path_factory.mktemp("clean")))
    prepare_data.prepare(store, CELL.run.dataset)
    return store.verify(KEY)["files"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_few_faults_are_retried_and_the_step_succeeds(kind, proxied, clean_files, capsys):
    proxy, uri = proxied
    assert _prepare(uri) == 0  # publish through the proxy
    open_store(uri).discard(KEY)
    capsys.readouterr()
    # two faults on the first requests of their kind (reads for a cut body), then the server answers
    proxy.queue += [Fault(kind, "GET" if kind == "truncate" else None)] * 2
    if kind == "truncate":  # a body to cut: read the artifact back
        assert _prepare(uri) == 0
        open_store(uri).local_dir(KEY)
    else:
        assert _prepare(uri) == 0
    assert proxy.injected.get(kind) == 2 and not proxy.queue
    out = capsys.readouterr().out  # the step's log (its handler writes to stdout)
    retries = [line for line in out.splitlines() if "retrying with backoff" in line]
    assert len(retries) >= 1, out[-3000:]
    assert open_store(uri).verify(KEY)["files"] == clean_files


@pytest.mark.parametrize("kind", KINDS)
def test_faults_that_outlast_the_retries_exit_75_and_the_rerun_heals(kind, proxied, clean_files, capsys):
    proxy, uri = proxied
    if kind == "truncate":  # bodies are cut on reads: the artifact exists and is read back
        assert _prepare(uri) == 0
        proxy.always = Fault("truncate", "GET")
        start_ = time.monotonic()
        with pytest.raises(Transient):
            store_base._VERIFIED.clear()
            open_store(uri).local_dir(KEY)
    else:
        proxy.always = Fault(kind)
        start_ = time.monotonic()
        assert _prepare(uri) == 75
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("transient error"), err
    elapsed = time.monotonic() - start_
    assert elapsed < 60, f"{kind}: {elapsed:.0f} s before giving up"
    proxy.always = None
    if kind != "truncate":
        with pytest.raises(Exception):  # noqa: B017 - nothing was published: no marker
            open_store(uri).marker(KEY)
    assert _prepare(uri) == 0  # the rerun heals
    store_base._VERIFIED.clear()
    assert open_store(uri).verify(KEY)["files"] == clean_files
    assert proxy.injected.get(kind, 0) >= 3
