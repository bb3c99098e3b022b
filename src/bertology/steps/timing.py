"""How long each step's pod may run: the activeDeadlineSeconds that plan hands the Workflow.

A deadline turns a hung pod (a stuck download, a hung NCCL call, an image that never pulls) into a failed
step, and the Workflow into a failed one, instead of a run that never ends and, on a GPU step, keeps the
GPU semaphore (bertology.argo.deadlines has what Argo does at a deadline). It must never cut a healthy
step short, so it is sized from what the step does, generously:

    deadline = SAFETY × estimate + STARTUP, in whole minutes

- finetune: per pod, the sum over its runs (and their intermediate runs) of
  train examples × epochs / train rate + eval examples × (epochs + 1) / eval rate, scaled by
  max_length / 128, plus what evaluate and analyze take (finetune scores and measures its runs itself);
- evaluate: the pod's eval examples / eval rate (same scaling); analyze: a fixed time per run;
- prepare-data, build-checkpoint, aggregate, regress: a fixed time per pod (aggregate: plus one per run);
and the longest pod of each kind sets that kind's deadline (Argo passes one value per task).

Examples come from the cell's `count` or `fraction` of the task's training set: the hub's sizes below
(GLUE's train and dev splits as the hub serves them), the synthetic generator's for `source=synthetic`, and
UNKNOWN_EXAMPLES for a task or source not listed. The rates are assumptions, not measurements: no GPU was
available to measure them (README "GPU performance"). The paper preset assumes one older GPU (BERT-base at
128 tokens: 100 training and 400 evaluation examples a second; an A100 is several times faster, so the
deadline errs long); demo and tiny run on CPU. The study parameter `deadlines` sets any of them by hand,
e.g. `-p deadlines='{"finetune": 86400}'` (seconds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bertology.errors import BadInput, choices
from bertology.spec import Cell, RunSpec
from bertology.tasks.synthetic import SIZES as SYNTHETIC_SIZES

SAFETY = 3.0
STARTUP_S = 600  # image pull, interpreter and library start, hub downloads, model load
UNKNOWN_EXAMPLES = (100_000, 10_000)
# (train, all evaluation splits) of each task on the hub (GLUE: nyu-mll/glue; squad2; mlm-nl: the carved
# Dutch Wikipedia 80/10/10 of 100k sentences plus the XNLI set)
HUB_EXAMPLES = {
    "cola": (8_551, 1_043), "sst2": (67_349, 872), "mrpc": (3_668, 408), "stsb": (5_749, 1_500),
    "qqp": (363_846, 40_430), "mnli": (392_702, 19_647), "qnli": (104_743, 5_463), "rte": (2_490, 277),
    "wnli": (635, 71), "squad2": (130_319, 11_873), "mlm-nl": (80_000, 30_000),
}


@dataclass(frozen=True)
class Rates:
    train: float  # examples a second, at 128 tokens
    eval: float
    analyze_s: float  # one run's analysis
    prepare_s: float  # one dataset: download and tokenize
    build_s: float  # one checkpoint
    aggregate_s: float  # the report, besides one second per run
    regress_s: float


RATES = {
    "paper": Rates(train=100, eval=400, analyze_s=300, prepare_s=3600, build_s=1800, aggregate_s=1800,
                   regress_s=900),
    "demo": Rates(train=20, eval=100, analyze_s=120, prepare_s=600, build_s=600, aggregate_s=900, regress_s=600),
    "tiny": Rates(train=200, eval=1000, analyze_s=30, prepare_s=300, build_s=300, aggregate_s=600, regress_s=300),
}
STEPS = ("prepare-data", "build-checkpoint", "finetune", "evaluate", "analyze", "aggregate", "regress")


def check(deadlines: dict) -> dict[str, int]:
    """The `deadlines` study parameter: step -> seconds (an integer >= 60)."""
    if not isinstance(deadlines, dict):
        raise BadInput(f"parameter 'deadlines' must be a JSON object of step -> seconds such as "
                       f'{{"finetune": 86400}}, got {deadlines!r}')
    for step, value in deadlines.items():
        if step not in STEPS:
            raise BadInput(f"parameter 'deadlines': '{step}' is not a step with a deadline "
                           f"({choices(step, STEPS, 'allowed')})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 60:
            raise BadInput(f"parameter 'deadlines': {step} = {value!r} must be an integer number of seconds >= 60")
    return dict(deadlines)


def _examples(run: RunSpec) -> tuple[int, int]:
    data = run.dataset
    if data.source == "synthetic":
        train, evaluation = SYNTHETIC_SIZES["train"], SYNTHETIC_SIZES["validation"]
    else:
        train, evaluation = HUB_EXAMPLES.get(data.task, UNKNOWN_EXAMPLES)
    if data.count is not None:
        train = min(train, data.count)
    elif data.fraction is not None:
        train = max(1, round(train * data.fraction))
    if data.eval_count is not None:
        evaluation = min(evaluation, data.eval_count)
    return train, evaluation


def _scale(run: RunSpec) -> float:
    return max(1.0, run.dataset.max_length / 128)


def finetune_s(run: RunSpec, rates: Rates) -> float:
    """One run's fine-tuning and its evaluations, and its intermediate run's."""
    train, evaluation = _examples(run)
    own = (train * run.regime.epochs / rates.train + evaluation * (run.regime.epochs + 1) / rates.eval) * _scale(run)
    return own + (finetune_s(run.after, rates) if run.after is not None else 0.0)


def evaluate_s(run: RunSpec, rates: Rates) -> float:
    return _examples(run)[1] / rates.eval * _scale(run)


def deadline(estimate_s: float) -> int:
    return int(math.ceil((SAFETY * estimate_s + STARTUP_S) / 60) * 60)


def deadlines(preset: str, pods: list[list[Cell]], datasets: int, checkpoints: int, cells: int,
              overrides: dict[str, int]) -> dict[str, int]:
    """Seconds per step kind for this plan's pods (`pods`: the cells of each cell pod)."""
    rates = RATES.get(preset, RATES["paper"])
    longest = lambda per_run: max((sum(per_run(c.run) for c in pod) for pod in pods), default=0.0)
    estimates = {
        "prepare-data": rates.prepare_s if datasets else 0.0,
        "build-checkpoint": rates.build_s if checkpoints else 0.0,
        # finetune also scores and measures its runs before their weights leave the pod
        "finetune": longest(lambda run: finetune_s(run, rates) + evaluate_s(run, rates) + rates.analyze_s),
        "evaluate": longest(lambda run: evaluate_s(run, rates)),
        "analyze": longest(lambda run: rates.analyze_s),
        "aggregate": rates.aggregate_s + cells,
        "regress": rates.regress_s,
    }
    return {step: overrides.get(step, deadline(estimate)) for step, estimate in estimates.items()}
