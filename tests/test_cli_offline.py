"""`bertology run` as a user without the Hugging Face hub runs it (a subprocess each): a study whose preset
needs the hub is one line, at once, naming the model and the ways out; a hub model in the local cache
loads at once; a dry run writes nothing into the store; and the command's edges (a study's name for its file, a parameter given as a flag, a negative
--show, an unknown parameter, a list of seeds that is not one) are one line each, exit 2."""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = "workflows/reversed-layers.yaml"
WAYS_OUT = "run offline with -p preset=tiny, or give a local or cached model: -p models='[\"dir:PATH\"]'"


def _env(tmp_path: Path, endpoint: str | None = None) -> dict[str, str]:
    """An environment with an empty Hugging Face cache; `endpoint`: where the hub is (one that cannot be
    reached), else HF_HUB_OFFLINE=1."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "BERTOLOGY_")) and k.lower() not in ("https_proxy", "http_proxy", "all_proxy")}
    env["HF_HOME"] = str(tmp_path / "hf-home")
    env["BERTOLOGY_CACHE"] = str(tmp_path / "cache")
    if endpoint is None:
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env["HF_ENDPOINT"] = endpoint
    return env


def _run(env: dict[str, str], *args: str) -> tuple[int, str, str, float, float]:
    """The command's exit code, stdout, stderr, wall seconds and CPU seconds (its own work)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "bertology.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.returncode, done.stdout, done.stderr, wall, cpu


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    (store / "studies").mkdir(parents=True)
    (store / "studies" / "kept.txt").write_text("left alone\n")
    return store


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:9", "https://no-such-host.invalid"],
                         ids=["connection-refused", "name-not-known"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_hub_model_the_hub_cannot_give_is_one_line_at_once(tmp_path, endpoint, dry_run):
    """The default preset's model, not cached, where the hub refuses the connection or its name does not
    resolve: one line naming it and the two ways out, exit 2, in well under 2 s of the command's own work,
    nothing written into the store, no "Succeeded" anywhere."""
    store = _store(tmp_path)
    before = _snapshot(store)
    code, out, err, wall, cpu = _run(_env(tmp_path, endpoint), "run", WORKFLOW, "--store", str(store),
                                     *(["--dry-run"] if dry_run else []))
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    host = "127.0.0.1" if "127.0.0.1" in endpoint else "no-such-host.invalid"
    assert lines[0].startswith(f"error: hub model 'google-bert/bert-base-uncased' cannot be reached ({host}: ")
    assert lines[0].endswith(f") and is not in the local Hugging Face cache; {WAYS_OUT}")
    assert cpu < 2.0 and wall < 10, (cpu, wall)
    assert _snapshot(store) == before


def test_hf_hub_offline_is_one_line_too(tmp_path):
    store = _store(tmp_path)
    code, _, err, _, cpu = _run(_env(tmp_path), "run", WORKFLOW, "--store", str(store), "--dry-run")
    assert code == 2 and cpu < 2.0, (err, cpu)
    assert err == ("error: hub model 'google-bert/bert-base-uncased' cannot be reached (HF_HUB_OFFLINE=1 forbids "
                   "downloading it: download it first, or unset HF_HUB_OFFLINE) and is not in the local Hugging "
                   f"Face cache; {WAYS_OUT}\n")


def test_a_dry_run_writes_nothing_and_says_what_the_preset_resolves_to(tmp_path):
    store = _store(tmp_path)
    before = _snapshot(store)
    code, out, err, _, _ = _run(_env(tmp_path), "run", WORKFLOW, "--store", str(store), "--dry-run",
                                "-p", "preset=tiny", "--show", "1")
    assert code == 0, err
    assert _snapshot(store) == before  # no plan.json, no tiny BERT: byte for byte the store it was
    lines = out.splitlines()
    assert lines[0].endswith("(plan ran for real, writing nothing)")
    assert lines[1].startswith("cost: 12 runs, ")
    assert lines[2] == "stored: 0 of the 12 runs; 12 would run, in 12 pods of finetune"
    preset = next(line for line in lines if line.startswith("    preset tiny replaces default: values above: "))
    assert "models: [\"google-bert/bert-base-uncased\"] -> [\"tiny:bert\"]" in preset, preset
    assert err == ""


def test_the_stored_line_says_how_many_are_stored_and_how_many_would_run():
    from bertology.cli.dry_run import stored_line

    doc = {"cells": [{}] * 12}

    def result(runs: str):
        return SimpleNamespace(nodes={"plan": SimpleNamespace(outputs={"runs": runs})})

    assert stored_line(result("[]"), doc) == "stored: all 12 runs (every result is in the store: a run trains nothing)"
    assert stored_line(result('["a,b", "c"]'), doc) == "stored: 9 of the 12 runs; 3 would run, in 2 pods of finetune"
    assert stored_line(result("[]"), None) is None


@pytest.mark.parametrize(("args", "line"), [
    (["run", "reversed-layers"],
     ("error: workflow file 'reversed-layers' not found (did you mean workflows/reversed-layers.yaml? "
      "`bertology studies` lists the studies)")),
    (["run", WORKFLOW, "--preset", "tiny"],
     ("error: bertology: unrecognized arguments: --preset tiny (a workflow parameter is set with -p: did you mean "
      "-p preset=tiny?)")),
    (["run", WORKFLOW, "--show", "-1", "--dry-run"],
     "error: bertology run: argument --show: -1 is negative (allowed: 0 or more)"),
    (["run", WORKFLOW, "-p", "seeds=1"],
     "error: parameter 'seeds' must be a JSON list such as [1, 2, 3], got '1'"),
], ids=["study-name", "preset-flag", "show-negative", "seeds-not-a-list"])
def test_the_commands_edges_are_one_line(tmp_path, args, line):
    code, out, err, _, _ = _run(_env(tmp_path), *args, "--store", str(tmp_path / "store"))
    assert (code, out, err) == (2, "", line + "\n")
    assert not (tmp_path / "store").exists()


def test_an_unknown_parameter_names_the_workflow_file(tmp_path):
    code, _, err, _, _ = _run(_env(tmp_path), "run", WORKFLOW, "-p", "sead=1", "--store", str(tmp_path / "store"))
    assert code == 2
    assert err.startswith(f"error: unknown parameter 'sead' for {WORKFLOW} (did you mean 'seeds'?; declared: ")
    assert err.endswith("; Argo would accept it and ignore it)\n")


def _cached_hub_model(cache: Path) -> Path:
    """A 2-layer BERT in the Hugging Face cache's layout, as `acme/tiny-bert` at `main`; its snapshot folder."""
    from transformers import AutoTokenizer, BertConfig, BertForPreTraining

    from bertology.models import packaged_model_dir

    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--acme--tiny-bert"
    snapshot = repo / "snapshots" / sha
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    BertForPreTraining(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64)).save_pretrained(snapshot)
    AutoTokenizer.from_pretrained(packaged_model_dir()).save_pretrained(snapshot)
    return snapshot


LOAD_CACHED = """
import sys, time
from safetensors.torch import load_file
from bertology.models import ModelRef, load_config, load_pretrained, load_tokenizer
import bertology.models as models
asked = []
ask = models._hub_unreachable
models._hub_unreachable = lambda timeout: asked.append(1) or ask(timeout)
start = time.monotonic()
ref = ModelRef("hub", "acme/tiny-bert")
config, tokenizer = load_config(ref), load_tokenizer(ref)
model, _ = load_pretrained(ref)
seconds = time.monotonic() - start
saved = load_file(sys.argv[1] + "/model.safetensors")
same = all(model.state_dict()[k].equal(v) for k, v in saved.items() if k in model.state_dict())
print(f"{seconds:.1f} {len(asked)} {same} {config.num_hidden_layers} {tokenizer('hello').input_ids}")
"""


def test_a_cached_hub_model_loads_at_once_where_the_hub_refuses(tmp_path):
    """A hub model in the local cache, with the hub refusing connections: config, tokenizer and weights come
    from the cache at once (transformers alone asks the hub about each file, retrying each, for minutes),
    and the process asks whether the hub answers once."""
    snapshot = _cached_hub_model(tmp_path / "hub-cache")
    env = {**_env(tmp_path, "http://127.0.0.1:9"), "HF_HUB_CACHE": str(tmp_path / "hub-cache"), "PYTHONPATH": "src"}
    done = subprocess.run([sys.executable, "-c", LOAD_CACHED, str(snapshot)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seconds, asked, same, layers, ids = done.stdout.split(maxsplit=4)
    assert float(seconds) < 20 and (asked, same, layers) == ("1", "True", "2"), done.stdout
    assert ids.strip() == "[101, 7592, 102]" and "Retrying" not in done.stderr
