"""What each study costs at paper scale: runs, training sequences, and GPU-hours at a given throughput.

The work is counted exactly from each workflow's own defaults (`StudySpec.from_params` + `cells()`, the same
expansion plan uses, no hub access needed) by bertology.study.cost, which `bertology run --dry-run` uses
too: per run, the training examples its task and size select times its epochs, plus the intermediate run
of a sequential run (once per intermediate run id, as the store shares it); a run with regime `none`
trains nothing. Training-set sizes are the public datasets' (GLUE train splits, SQuAD 2.0 train questions,
the 80% training carve of the first 100k Dutch Wikipedia sentences). Evaluation is not counted: it is a
forward pass over dev sets of at most 10k examples, small next to 3 epochs of training. The figure is an
upper bound for the cheaper runs: a probe trains no encoder weights and a shortened model runs faster
than the full model whose throughput is given.

Storage: every built checkpoint is kept, and a run's fine-tuned weights only where something needs them
later (a sequential run's intermediate run, or `keep_weights=true`; bertology.steps.finetune), each at
BERT-base size (110M float32 parameters, about 440 MB; the multilingual and some foreign BERTs are larger,
so their studies' figures are lower bounds). "every run" is what keeping every run's weights would take.

GPU-hours need a measured training throughput in sequences per second (`bench/finetune_throughput.py`
measures it; at max length 128 on one GPU). Without `--throughput`, the table gives GPU-hours per
1,000 seq/s, so a measured figure T scales it by 1000/T; `--measured` takes the solo rate last measured on
a GPU (bertology/study/measured_rates.json, the one the dry run prices a study at).

    .venv/bin/python bench/study_cost.py [--throughput SEQ_PER_S | --measured]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from bertology.steps import budget
from bertology.study import StudySpec, cost

REPO = Path(__file__).resolve().parent.parent


def model_bytes() -> int:
    """A BERT-base task model's float32 weights, counted on the meta device (nothing allocated, no hub)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    with torch.device("meta"):
        model = BertForSequenceClassification(BertConfig())  # BertConfig's defaults are bert-base's
    return 4 * sum(p.numel() for p in model.parameters())


def study_cost(workflow: Path) -> dict:
    doc = yaml.safe_load(workflow.read_text())
    params = {p["name"]: str(p["value"]) for p in doc["spec"]["arguments"]["parameters"]}
    name = params.pop("study")
    spec, _ = StudySpec.from_params(name, params)
    cells = spec.cells()
    work = cost.training_work(cells)
    datasets, checkpoints = len({c.run.dataset.id for c in cells}), len({c.run.checkpoint.id for c in cells})
    bundle = spec.bundle or budget.auto_bundle(len(cells), datasets, checkpoints)
    pods = budget.pod_items(len(cells), bundle)
    kept = {c.run.id for c in cells if c.keep_weights} | {c.run.after.id for c in cells if c.run.after is not None}
    return {"study": name, "cells": len(cells), "runs": work.runs, "sequences": work.sequences, "bundle": bundle,
            "checkpoints": checkpoints, "kept_runs": len(kept),
            "pods": len(pods), "nodes": budget.workflow_nodes(datasets, checkpoints, len(pods)),
            "status_kib": budget.status_bytes(datasets, checkpoints, pods) / 1024}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rate_given = p.add_mutually_exclusive_group()
    rate_given.add_argument("--throughput", type=float, default=None, help="measured training sequences per second")
    rate_given.add_argument("--measured", action="store_true",
                            help="the solo rate last measured on a GPU (bertology/study/measured_rates.json)")
    args = p.parse_args()
    rate = cost.load_rates().solo_seq_per_s if args.measured else args.throughput or 1000.0
    gb = model_bytes() / 1e9
    print(f"| study | runs | training sequences (M) | GPU-hours at {rate:,.0f} seq/s | runs per pod | Argo nodes "
          f"| status (KiB) | kept: checkpoints + runs' weights | storage (GB) | with every run's weights (GB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for workflow in sorted((REPO / "workflows").glob("*.yaml")):
        doc = yaml.safe_load(workflow.read_text())
        if doc["kind"] != "Workflow" or doc["spec"].get("workflowTemplateRef", {}).get("name") != "bertology-study":
            continue  # vocab-overlap (tokenizers only) and the nightly CronWorkflow
        row = study_cost(workflow)
        print(f"| {row['study']} | {row['runs']} | {row['sequences'] / 1e6:.1f} | "
              f"{cost.gpu_hours(row['sequences'], rate):.1f} | {row['bundle']} | {row['nodes']} | {row['status_kib']:.0f} | "
              f"{row['checkpoints']} + {row['kept_runs']} | {(row['checkpoints'] + row['kept_runs']) * gb:,.1f} | "
              f"{(row['checkpoints'] + row['runs']) * gb:,.1f} |")


if __name__ == "__main__":
    main()
