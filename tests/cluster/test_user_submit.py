"""The platform team's day one: the user's own `argo submit workflows/foreign-bert.yaml` on a real Argo
controller, against the chart `helm install` put in a namespace that enforces the "restricted" Pod
Security Standard, to Succeeded; and its results in the store equal, row for row, the same study run in
process by `bertology run`."""

from __future__ import annotations

import sys

import polars as pl
from on_cluster import TIMING, in_process_env, new_bucket, run, submitted_name, workflow

from bertology.results import TABLES, scan
from bertology.store import open_store


def _tables(store: str, study: str) -> dict[str, pl.DataFrame]:
    """Every results table the study wrote, its wall-clock columns left out, in a fixed order."""
    keys = open_store(store).list("results")
    found = {}
    for table in TABLES:
        if any(k.startswith(f"results/{table}/study={study}/") for k in keys):
            frame = scan(store, table, study=study).collect()
            frame = frame.drop([c for c in frame.columns if c in TIMING])
            found[table] = frame.sort(frame.columns)
    return found


def test_the_users_argo_submit_of_foreign_bert_succeeds_and_equals_the_in_process_run(studies, s3_server):
    done = run(["argo", "submit", "workflows/foreign-bert.yaml", "-p", "preset=tiny", "--watch"], studies["env"],
               timeout=3600)
    name = submitted_name(done.stdout)
    document = workflow(studies["env"], name)
    assert document["status"]["phase"] == "Succeeded", (document["status"].get("message"), done.stdout[-3000:])
    assert document["spec"]["workflowTemplateRef"] == {"name": "bertology-study"}

    local_store = f"s3://{new_bucket(s3_server)}/store"
    run([sys.executable, "-m", "bertology.cli", "run", "workflows/foreign-bert.yaml", "-p", "preset=tiny",
         "--store", local_store], in_process_env(), timeout=3600)

    on_argo, in_process = _tables(studies["store"], "foreign-bert"), _tables(local_store, "foreign-bert")
    assert set(on_argo) == set(in_process) and "runs" in on_argo
    assert on_argo["runs"]["device"].unique().to_list() == ["cpu"]
    for table, frame in on_argo.items():
        assert frame.height == in_process[table].height > 0, table
        differ = [c for c in frame.columns if not frame[c].equals(in_process[table][c])]
        assert not differ, (table, differ, frame.select(differ), in_process[table].select(differ))
