"""A study's parameters as an Argo Workflow passes them: the table of names, kinds and defaults, and each
raw string typed on its own.

The Workflow hands `plan` every parameter as a raw string (`--param name=value`), so each one is typed
here by its own name: a malformed `-p` is reported as that parameter, before anything else looks at it.
The rules that span several values, or the specs a value lands in, are `bertology.study.checks`.
"""

from __future__ import annotations

import json
from typing import Any

from bertology.errors import BadInput

# name -> (kind, default as the Workflow would pass it). An empty value means "the default", so a
# step template can declare every parameter with `default: ""`. Where a report states a setting, each
# study's workflow passes it; these defaults are what the reports' fine-tuning scripts (Hugging Face's
# run_glue / run_mlm) default to where the reports are silent: no warmup, no weight decay.
PARAMS: dict[str, tuple[str, str]] = {
    "preset": ("str", "paper"),
    "models": ("json-list", '["google-bert/bert-base-uncased"]'),
    "variants": ("variants", '[{"name": "pre-trained", "interventions": []}]'),
    "tasks": ("json-list", '["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]'),
    "source": ("str", "hub"),
    "seeds": ("int-list", "[1, 2, 3]"),
    "lr": ("float", "2e-5"),
    "batch_size": ("int", "32"),
    "epochs": ("int", "3"),
    "max_length": ("int", "128"),
    "warmup_ratio": ("float", "0"),
    "weight_decay": ("float", "0"),
    "fraction": ("optional-float", ""),
    "count": ("optional-int", ""),
    # a training-size factor: fractions in (0, 1] and {"count": N} (partial-reinit's 100%, 10%, 1%, ~670)
    "sizes": ("sizes", "[]"),
    "subset_seed": ("int", "0"),
    "regime": ("str", "full"),
    "train_layers": ("optional-layers", ""),
    "unfreeze_per_epoch": ("int", "4"),
    # "run": each training seed draws its own random intervention (reinit, shuffles), as the monolingual
    # report's three runs "with no fixed random seed" did; an integer: one fixed draw for every seed
    "intervention_seed": ("intervention-seed", "run"),
    # per-task overrides of dataset and regime settings, e.g. {"squad2": {"fraction": 0.1, "batch_size": 1}}
    "task_settings": ("task-settings", "{}"),
    # sequential fine-tuning: each task is also fine-tuned after each of these (and directly)
    "intermediates": ("json-list", "[]"),
    # the final task's head after an intermediate task: "carried" (the intermediate run's, as run_glue loads
    # a saved classifier of the final task's shape) or "new" (drawn afresh)
    "final_head": ("str", "carried"),
    # which evaluation point's weights are each run's result: "best" (on the first eval split) or "last"
    "selection": ("str", "best"),
    # training batches: random, as run_glue draws them (false), or of similar-length examples (true: fewer pad
    # tokens, but each batch holds one length); part of a run id
    "group_by_length": ("bool", "false"),
    # evaluation and monitoring (the cross-lingual report: every 50 steps, against a native model)
    "eval_every": ("int", "0"),
    "reference": ("optional-str", ""),
    "eval_count": ("optional-int", ""),
    "doc_stride": ("optional-int", ""),
    # how runs execute (never part of a run id)
    "checkpoint_every": ("int", "1000"),
    "compile": ("bool", "false"),
    # on a GPU, each training step replays as one CUDA graph (bertology.train.graphs); false: eager steps
    "cuda_graph": ("bool", "true"),
    # cells per pod: one pod fine-tunes, evaluates and analyses N runs in turn; empty = the smallest N that
    # keeps the Workflow inside Argo's budget (bertology.steps.budget)
    "bundle": ("optional-int", ""),
    # runs of a pod fine-tuned at once, each its own process sharing the GPU (bertology.steps.shared_gpu);
    # 1 until measured on a GPU (bench/gpu.py measures K = 1, 2, 4)
    "gpu_concurrency": ("int", "1"),
    # runs of a pod trained as one model, up to K at once (bertology.train.fused); 1: each run alone. A fused
    # run's id differs from the run alone (fused: true): its numbers differ by float noise and its dropout draws
    "fuse": ("int", "1"),
    # steps per point of the training-loss series (the college report's Figures 1 and 4); 0: none
    "log_every": ("int", "50"),
    # experiment tracking of each fine-tune: wandb, mlflow or tensorboard; empty: none (never part of a run id)
    "tracker": ("optional-str", ""),
    # keep every run's fine-tuned weights in the store (~440 MB a run at BERT-base size); by default only a
    # sequential run's intermediate run keeps them (its final runs start from them)
    "keep_weights": ("bool", "false"),
    # seconds a step's pod may run, by step, over plan's estimate (bertology.steps.timing); {}: the estimate
    "deadlines": ("json-object", "{}"),
}
# Each study parameter's meaning, one wording for every workflow: a workflow's `description:` of a parameter is
# this text, or this text, "; " and the study's own sentence (e.g. why it has two seeds). Besides PARAMS, the
# table has `study` (every workflow's name for its results) and the vocab-overlap workflow's own parameters
# (corpus, max_lines, case, stride). tests/test_docs.py holds every workflows/*.yaml to it; the docs' study
# pages show the descriptions.
DESCRIPTIONS: dict[str, str] = {
    "study": "the study's name: its plan and report in the store (studies/NAME/), its rows of the results "
             "tables (study=NAME)",
    "preset": "paper (the report's models and data, from the hub) | demo (offline: the pre-trained MiniLM, "
              "synthetic data) | tiny (offline: a 4-layer BERT pre-trained in seconds, synthetic data)",
    "models": "the pre-trained models, a JSON list of hub ids, local directories (dir:PATH) or store URIs",
    "variants": "what is compared: a JSON list of variants, each a name and the interventions applied to every "
                "model, in order (`bertology interventions` lists them), optionally with a grid, its own model, "
                "regime or number of runs",
    "tasks": "the tasks, a JSON list: cola, mnli, mrpc, qnli, qqp, rte, sst2, stsb, wnli (GLUE), squad2, mlm-nl",
    "source": "where the data come from: hub | glue-dir:PATH (a GLUE download) | files:SPLIT=PATH,... | synthetic "
              "(offline)",
    "seeds": "the training seeds, a JSON list of integers: one run of every cell per seed",
    "lr": "the peak learning rate (AdamW, linear decay to 0)",
    "batch_size": "training examples per step",
    "epochs": "passes over the training data",
    "max_length": "tokens per example; longer inputs are truncated",
    "warmup_ratio": "the fraction of the training steps over which the learning rate rises linearly from 0",
    "weight_decay": "AdamW's weight decay (none on biases and LayerNorm weights)",
    "fraction": "training fraction (seeded, stratified, nested); empty = all",
    "count": "absolute number of training examples (stratified); empty = all",
    "sizes": 'training sizes, a JSON list of fractions in (0, 1] (1: all) and {"count": N}: every cell runs at each',
    "subset_seed": "the seed of the training subset drawn by fraction, count or sizes",
    "regime": "what trains: full (everything) | freeze (the train_layers) | gradual-unfreeze (unfreeze_per_epoch "
              "more layers each epoch) | probe (only the classifier) | none (evaluated untrained)",
    "train_layers": "with regime freeze, the encoder layers that train: from:K, last:K or a JSON list of "
                    "0-based indices",
    "unfreeze_per_epoch": "with regime gradual-unfreeze, the top layers added to training each epoch",
    "intervention_seed": "run (each training seed draws its own random intervention) or an integer >= 0 (one "
                         "fixed draw for every seed)",
    "task_settings": "per-task overrides (JSON task -> settings)",
    "intermediates": "intermediate tasks, a JSON list: each final task is also fine-tuned after each of these",
    "final_head": "the final task's classifier: carried (the intermediate run's, as run_glue loads it) | new "
                  "(drawn afresh)",
    "selection": "each run's result: its best epoch on dev (best) or its last epoch (last)",
    "group_by_length": "false: random training batches, as run_glue | true: batches of similar-length examples "
                       "(fewer pad tokens)",
    "eval_every": "training steps between evaluations besides each epoch's end (and one before the first "
                  "step); 0: each epoch's end only",
    "reference": "the reference model (a hub id or local directory)",
    "eval_count": "cap on each evaluation split's examples; empty: whole splits",
    "doc_stride": "SQuAD: tokens shared by consecutive windows of a long context; empty: a third of max_length",
    "checkpoint_every": "training steps between resume states; 0: none",
    "compile": "true: torch.compile the model inside the graphed step (what it compiles is kept in the store)",
    "cuda_graph": "on a GPU, replay each training step as CUDA graphs (false: eager steps)",
    "bundle": "runs per GPU pod (fine-tune, evaluate, analyze in turn); empty: the fewest that keep the "
              "Workflow inside Argo's limits",
    "gpu_concurrency": "runs of a pod fine-tuned at once, side by side in its process (a CUDA stream each on a GPU)",
    "fuse": "runs of a pod trained as one model, up to K at once (1: each run alone)",
    "log_every": "training steps per point of the training-loss curve; 0: none",
    "tracker": "experiment tracking of each fine-tune: wandb | mlflow | tensorboard; empty: none",
    "keep_weights": "true: keep every run's fine-tuned weights in the store (~440 MB a run at BERT-base size)",
    "deadlines": "seconds a step's pod may run, by step (a JSON object); {}: plan's estimate",
    # the vocab-overlap workflow's own
    "corpus": "the text the English-like contexts are counted in, for a model without its own corpus: a text "
              "file (one text per line), an XNLI-style .tsv, hub:DATASET/CONFIG, synthetic, or empty: no contexts",
    "max_lines": "read at most this many lines of each corpus; empty: all",
    "case": "how word-pieces are compared with the reference's: exact | fold (lower-cased)",
    "stride": "word-pieces between the starts of consecutive 10-piece contexts, 1 to 10; empty: 10 (no overlap)",
}
NOT_EXPLICIT = ("preset",)  # the one parameter a preset never replaces: the preset itself
# A study Workflow writes its own defaults as `default:VALUE`. Argo hands plan only the final values, so
# this mark is what tells a default (which a preset may replace) from a value the submitter passed with
# `-p` or `--parameter-file` (which it never replaces): `argo submit` and `bertology run` alike.
DEFAULT_MARK = "default:"


def unmark(text: str) -> tuple[str, bool]:
    """(the value, whether it is a Workflow default) of a raw study parameter."""
    stripped = text.strip()
    if stripped.startswith(DEFAULT_MARK):
        return stripped[len(DEFAULT_MARK):].strip(), True
    return stripped, False


# The study parameters that make up its Regime.
REGIME_PARAMS = ("lr", "batch_size", "epochs", "warmup_ratio", "weight_decay", "train_layers", "unfreeze_per_epoch",
                 "eval_every", "reference", "checkpoint_every", "log_every", "compile", "cuda_graph",
                 "tracker", "selection", "group_by_length")

# The settings task_settings may override per task, and which spec each lands in.
TASK_DATASET_KEYS = ("fraction", "count", "max_length", "doc_stride", "eval_count")
TASK_REGIME_KEYS = ("lr", "batch_size", "epochs", "warmup_ratio", "weight_decay", "eval_batch_size", "eval_every")

Size = tuple["float | None", "int | None"]  # (fraction, count); (None, None) is all the training data


def check_study_name(name: str) -> None:
    """A study name is a path segment of the store (`studies/<name>/`, `study=<name>`): letters, digits, '-'."""
    if not name or not name.replace("-", "").isalnum():
        raise BadInput(f"study name '{name}' must be letters, digits and '-' (e.g. reversed-layers)")


def parse_sizes(value: Any, text: str) -> tuple[Size, ...]:
    """`sizes`: a JSON list of fractions in (0, 1] (1 = all the data) and {"count": N} objects."""
    allowed = 'a JSON list of fractions in (0, 1] and {"count": N} objects, e.g. [1, 0.1, 0.01, {"count": 670}]'
    if not isinstance(value, list):
        raise BadInput(f"parameter 'sizes' must be {allowed}, got {text!r}")
    sizes: list[Size] = []
    for item in value:
        if isinstance(item, (int, float)) and not isinstance(item, bool) and 0 < item <= 1:
            sizes.append((None, None) if item == 1 else (float(item), None))
        elif (isinstance(item, dict) and set(item) == {"count"} and isinstance(item["count"], int)
              and not isinstance(item["count"], bool) and item["count"] >= 1):
            sizes.append((None, item["count"]))
        else:
            raise BadInput(f"parameter 'sizes' item {json.dumps(item)} is not allowed; allowed: {allowed}")
    return tuple(sizes)


def show(value: Any) -> str:
    """A value as a log or error line quotes it: lists and objects as JSON."""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def parse_pairs(pairs: list[str], flag: str) -> dict[str, str]:
    """`NAME=VALUE` arguments (`-p` of bertology run, `--param` of plan) to a dict, one-line errors."""
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"malformed {flag} '{pair}' (expected NAME=VALUE, e.g. {flag} preset=tiny)")
        params[name.strip()] = value
    return params


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def typed_param(name: str, text: str) -> Any:
    """One raw parameter string to its typed value, with a one-line error naming the parameter."""
    kind = PARAMS[name][0]
    text = text.strip()
    if kind.startswith("optional-"):
        if text.lower() in ("", "null", "none"):
            return None
        kind = kind[len("optional-"):]
    if kind == "str":
        if not text:
            raise BadInput(f"parameter '{name}' is empty")
        return text
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise BadInput(f"parameter '{name}' must be true or false, got {text!r}")
        return text.lower() == "true"
    if kind == "layers":  # from:K, last:K or a JSON list of layer indices
        return json.loads(text) if text.startswith("[") and _is_json(text) else text
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise BadInput(f"parameter '{name}' must be an integer, got {text!r}")
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadInput(f"parameter '{name}' must be a number, got {text!r}")
        return float(value)
    if kind in ("json-list", "int-list"):
        if not isinstance(value, list):
            example = "[1, 2, 3]" if kind == "int-list" else '["a", "b"]'
            raise BadInput(f"parameter '{name}' must be a JSON list such as {example}, got {text!r}")
        want = int if kind == "int-list" else str
        bad = [v for v in value if isinstance(v, bool) or not isinstance(v, want)]
        if bad:
            raise BadInput(f"parameter '{name}' must be a list of {want.__name__}s, got {bad[0]!r} in {text!r}")
        return value
    if kind == "variants":
        return value
    if kind == "intervention-seed":  # "run" (follow each run's seed) or a fixed integer >= 0
        if text.lower() == "run":
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadInput(f"parameter '{name}' must be run (each training seed draws its own intervention) "
                           f"or an integer >= 0 (one fixed draw), got {text!r}")
        return value
    if kind == "task-settings":
        return value
    if kind == "json-object":
        if not isinstance(value, dict):
            raise BadInput(f"parameter '{name}' must be a JSON object such as {{\"key\": 1}}, got {text!r}")
        return value
    if kind == "sizes":
        return parse_sizes(value, text)
    raise AssertionError(kind)  # pragma: no cover
