"""S3 requests of one plan over a finished study, by kind, on the S3 test server (moto on loopback).

    .venv/bin/python bench/plan_requests.py 1000 10000

For each size N: a study of N cells (one task, one variant, N seeds) whose results are all published as
the cells' steps publish them (three tables per cell, each with its receipt), then `plan_study` over it,
counting the requests its S3 client sends (botocore `before-call` events), and for comparison what the
check before receipts cost: a GET of every published file (`read_parquet` of each). Prints a Markdown row
per size for docs/measurements.md.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pyarrow as pa
from moto.server import ThreadedMotoServer

from bertology.results.tables import CELL_TABLES, TABLES, publish
from bertology.steps.plan import plan_study
from bertology.store import open_store
from bertology.study import StudySpec


def counting(store) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    store.client.meta.events.register("before-call.s3", lambda model, **_: counts.update([model.name]))
    return counts


def empty_rows(table: str) -> pa.Table:
    return TABLES[table].empty_table()


def measure(n: int) -> dict:
    bucket = f"plan-{n}"
    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket=bucket)
    store = open_store(f"s3://{bucket}/store")
    spec, _ = StudySpec.from_params("scale", {"preset": "tiny", "tasks": '["sst2"]', "seeds": json.dumps(list(range(1, n + 1))),
                                              "variants": '[{"name": "pre-trained", "interventions": []}]'})
    cells = spec.cells()
    assert len(cells) == n, len(cells)
    start = time.time()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda c: [publish(store, t, c, empty_rows(t)) for t in CELL_TABLES], cells))
    published_s = time.time() - start
    fresh = open_store(f"s3://{bucket}/store")
    counts = counting(fresh)
    start = time.time()
    work = plan_study(fresh, spec)
    plan_s = time.time() - start
    assert work["runs"] == [], "every cell is finished: nothing to run"
    before = counting(old := open_store(f"s3://{bucket}/store"))
    keys = [k for t in CELL_TABLES for k in old.list(f"results/{t}/study=scale")]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(old.read_parquet, keys))
    return {"cells": n, "plan": dict(counts), "plan_s": plan_s, "publish_s": published_s,
            "before": dict(before), "files": len(keys)}


def main(sizes: list[int]) -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    os.environ.update({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        for n in sizes:
            r = measure(n)
            print(json.dumps(r), flush=True)
            plan, before = r["plan"], r["before"]
            print(f"| {n:,} cells ({r['files']:,} results files) | {sum(plan.values()):,} "
                  f"({', '.join(f'{k} {v:,}' for k, v in sorted(plan.items()))}) | "
                  f"{before.get('GetObject', 0):,} GETs + {before.get('ListObjectsV2', 0):,} LISTs | "
                  f"{r['plan_s']:.1f} s |", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 10000])
