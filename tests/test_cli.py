"""`bertology checkpoint` and `bertology interventions`: the user-facing model-surgery commands."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel

from bertology.cli import main
from bertology.cli.checkpoint import parse_apply, split_params
from bertology.models import tiny_bert


def test_parse_apply_reads_json_values_and_keeps_strings():
    assert parse_apply("reverse-layers") == {"name": "reverse-layers", "params": {}}
    assert parse_apply('reinit:scope=heads,heads=["1:3","2:4"],std=0.02') == {
        "name": "reinit", "params": {"scope": "heads", "heads": ["1:3", "2:4"], "std": 0.02}}
    assert parse_apply("remove-layers:layers=last:6") == {"name": "remove-layers", "params": {"layers": "last:6"}}
    assert split_params('a=1,b=[1,2],c="x,y"') == ["a=1", "b=[1,2]", 'c="x,y"']


@pytest.mark.parametrize("text", [":x=1", "reinit:scope"])
def test_malformed_apply_is_refused(text):
    from bertology.errors import BadInput

    with pytest.raises(BadInput, match="malformed"):
        parse_apply(text)


def test_checkpoint_builds_a_loadable_hf_directory_with_a_manifest(tmp_path, capsys):
    out = tmp_path / "reversed"
    assert main(["checkpoint", "tiny:bert", "--apply", "reverse-layers", "--seed", "3", "--out", str(out)]) == 0
    assert "tensors changed" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 3 and manifest["chain"][0]["name"] == "reverse-layers"
    reversed_ = AutoModel.from_pretrained(out).state_dict()
    base = tiny_bert(seed=0)[0].state_dict()  # the base model is the same whatever the intervention seed
    layers = 4
    for name, tensor in base.items():
        if name.startswith("encoder.layer."):
            i, rest = name[len("encoder.layer."):].split(".", 1)
            assert torch.equal(reversed_[f"encoder.layer.{layers - 1 - int(i)}.{rest}"], tensor), name
        else:
            assert torch.equal(reversed_[name], tensor), name
    assert [p.name for p in tmp_path.iterdir()] == ["reversed"]  # no staging directory left behind


def test_bad_input_exits_2_and_leaves_an_existing_directory_alone(tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["checkpoint", "tiny:bert", "--apply", "reverse-layers", "--out", str(out)]) == 2
    assert (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1
    assert main(["checkpoint", "tiny:bert", "--apply", "no-such", "--out", str(tmp_path / "n")]) == 2
    assert main(["checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)
    assert "not empty" in err[0] and "no-such" in err[1] and "missing" in err[2]
    assert not (tmp_path / "n").exists() and not (tmp_path / "m").exists()


def test_interventions_lists_every_registry_entry_with_its_parameters(capsys):
    from bertology.interventions import REGISTRY

    assert main(["interventions"]) == 0
    out = capsys.readouterr().out
    for name, entry in REGISTRY.items():
        assert name in out
        for param in entry.defaults:
            assert f"{param}=" in out


def test_checkpoint_from_a_store_uri_shrinks_a_built_checkpoint(tmp_path, capsys):
    from bertology.spec import CheckpointSpec
    from bertology.steps.build_checkpoint import build
    from bertology.store import open_store

    store = open_store(str(tmp_path / "store"))
    key = build(store, CheckpointSpec("tiny:bert"))
    out = tmp_path / "two-layers"
    uri = store.url(key)
    assert main(["checkpoint", uri, "--apply", "remove-layers:layers=last:2", "--out", str(out)]) == 0
    assert "-> " in capsys.readouterr().out
    small = AutoModel.from_pretrained(out).state_dict()
    base = AutoModel.from_pretrained(store.local_dir(key)).state_dict()
    assert AutoModel.from_pretrained(out).config.num_hidden_layers == 2
    for name, tensor in small.items():
        assert torch.equal(tensor, base[name]), name  # layers 0 and 1 keep their weights
    assert not any(k.startswith("encoder.layer.2.") for k in small)
