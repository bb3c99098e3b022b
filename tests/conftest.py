"""Shared fixtures: a real S3 server on loopback (moto's threaded server) and the repo layout."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """An S3 endpoint on 127.0.0.1; yields the environment a client (or a subprocess) needs."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    yield env
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch, tmp_path):
    """A fresh bucket on the loopback server, with this process's environment pointed at it."""
    import uuid

    import boto3

    for k, v in s3_server.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    name = f"b-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return name


@pytest.fixture
def subprocess_env(tmp_path):
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env["BERTOLOGY_CACHE"] = str(tmp_path / "cache")
    return env
