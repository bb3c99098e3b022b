"""`bertology checkpoint` and `bertology interventions`, the user-facing model-surgery commands, and
`bertology studies`: what they print, fitted to the terminal."""

from __future__ import annotations

import json
import re

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


def read_table(lines: list[str]) -> list[list[str]]:
    """The cells of a table `catalogue.table` printed: the columns where the rule's dashes are, a row from
    one line with a first cell (that column never wraps) to the next, each cell's wrapped lines joined by
    single spaces."""
    rule = next(i for i, line in enumerate(lines) if set(line) <= {"-", " "} and "-" in line)
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rule])]
    rows: list[list[str]] = []
    for line in lines[rule + 1:]:
        if line[:spans[0][1]].strip():
            rows.append([])
        if line.strip():
            rows[-1].append(line)
    cells = []
    for row in rows:
        cells.append([" ".join(part for line in row if (part := line[a:b if i < len(spans) - 1 else None].strip()))
                      for i, (a, b) in enumerate(spans)])
    return cells


def _interventions(capsys, monkeypatch, columns: int) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["interventions"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", [80, 200])
def test_interventions_lists_each_parameter_once_with_type_default_and_allowed_values(capsys, monkeypatch, columns):
    from bertology.interventions import REGISTRY

    lines = _interventions(capsys, monkeypatch, columns).splitlines()
    assert all(len(line) <= columns for line in lines)
    starts = [i for i, line in enumerate(lines) if line.startswith(tuple(f"{n}: " for n in REGISTRY))]
    assert [lines[i].split(":")[0] for i in starts] == list(REGISTRY)
    end = next(i for i, line in enumerate(lines) if line.startswith("Build a checkpoint"))
    for name, entry, start, stop in zip(REGISTRY, REGISTRY.values(), starts, [*starts[1:], end], strict=True):
        section = lines[start:stop]
        title = " ".join(line for line in section if line and not line.startswith("  "))
        # the one-line doc no longer lists the parameters that the table lists
        assert "(param" not in title and f"({', '.join(entry.defaults)})" not in title, title
        table = [line[2:] for line in section if line.startswith("  ") or not line]
        if not entry.defaults:
            assert [line for line in table if line] == ["no parameters"]
            continue
        rows = read_table(table)
        assert [row[0] for row in rows] == list(entry.defaults)  # each parameter once, in order
        for (param, kind, default, allowed), (key, value) in zip(rows, entry.defaults.items(), strict=True):
            assert (kind, allowed) == entry.allowed[key]
            assert default == ("(none)" if value is None else json.dumps(value))


def test_every_intervention_describes_exactly_its_parameters_and_lists_what_check_allows():
    from transformers import BertConfig

    from bertology.errors import BadInput
    from bertology.interventions import REGISTRY
    from bertology.interventions.match_moments import MATCHES
    from bertology.interventions.reinit import SCOPES
    from bertology.interventions.shuffle_embeddings import OTHERS

    for entry in REGISTRY.values():
        assert set(entry.allowed) == set(entry.defaults), entry.name
        assert all(kind and allowed for kind, allowed in entry.allowed.values()), entry.name
    config = BertConfig()  # BERT-base's shape: 12 layers of 12 heads
    listed = {("reinit", "scope"): SCOPES, ("match-moments", "match"): MATCHES,
              ("shuffle-embeddings", "others"): OTHERS}
    companions = {"layers": {"layers": [0]}, "heads": {"heads": ["0:0"]}, "variance": {}, "norm": {},
                  "keep": {"english_only": True}}
    for (name, key), values in listed.items():
        entry = REGISTRY[name]
        shown = entry.allowed[key][1]
        for value in values:
            assert value in shown.split(";")[0].replace("required:", "").replace(" ", "").split("|")
            entry.validate({key: value, **companions.get(value, {})}, config)
        with pytest.raises(BadInput, match="allowed"):
            entry.validate({key: "nonesuch"}, config)


def test_interventions_ends_with_an_apply_example_that_builds_with_a_list_valued_parameter(capsys, monkeypatch):
    """The example pastes into a shell as printed, one line or continued with backslashes, and its --apply is
    a valid chain with a list value."""
    import shlex

    from transformers import BertConfig

    from bertology.interventions import validate_chain

    argvs = []
    for columns in (80, 200):
        out = _interventions(capsys, monkeypatch, columns)
        command = out[out.index("  bertology checkpoint "):].split("\n\n")[0]
        command = command.split("\nIn a study's variants")[0]
        argvs.append(shlex.split(command.replace("\\\n", " ")))
    assert argvs[0] == argvs[1] and argvs[0][:2] == ["bertology", "checkpoint"]
    step = parse_apply(argvs[0][argvs[0].index("--apply") + 1])
    assert any(isinstance(v, list) for v in step["params"].values())
    (resolved,) = validate_chain([step], BertConfig())
    assert resolved["params"]["heads"] == ["0:3", "11:7"]
    assert json.dumps(step) in " ".join(out.split())  # the same step as a study's variants write it


def test_interventions_as_json_gives_each_parameter_s_type_default_and_allowed(capsys):
    from bertology.interventions import REGISTRY

    assert main(["interventions", "-o", "json"]) == 0
    for listed in json.loads(capsys.readouterr().out):
        entry = REGISTRY[listed["name"]]
        assert listed["random"] == entry.random
        assert [(p["name"], p["type"], p["default"], p["allowed"]) for p in listed["parameters"]] == [
            (key, *entry.allowed[key][:1], value, entry.allowed[key][1]) for key, value in entry.defaults.items()]


# -- bertology studies ----------------------------------------------------------------------------------------

def test_a_title_is_the_header_s_first_sentence_up_to_its_report():
    from bertology.workflow_header import title_and_report

    assert title_and_report("Probing (partial-reinitialization report, §4.4, §6.2 and Fig. 2; CoLA's in Fig. 5 "
                            "(a)): drop BERT's top K layers") == (
        "Probing", "partial-reinitialization report, §4.4, §6.2 and Fig. 2; CoLA's in Fig. 5 (a)")
    assert title_and_report("A smoke test: runs (quickly) on one machine.") == ("A smoke test", "")
    assert title_and_report("One sentence. Another (with a parenthesis).") == ("One sentence", "")
    assert title_and_report("Unclosed (report, Table 1: …") == ("Unclosed (report, Table 1", "")


def _studies(capsys, monkeypatch, columns: int) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["studies"]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("columns", [80, 200])
def test_studies_fits_the_terminal_and_shows_whole_titles(capsys, monkeypatch, columns):
    """Each row's cells, read back from the wrapped table, are the whole title with its report and every
    parameter: cut only at spaces, never inside a word, and no line wider than the terminal."""
    from bertology.cli.catalogue import study_entry
    from bertology.workflow_header import default_workflows

    lines = _studies(capsys, monkeypatch, columns)
    assert all(len(line) <= columns for line in lines)
    assert lines[0].split() == ["study", "title", "(report)", "parameters"]
    rows = read_table(lines)
    entries = [study_entry(p) for p in sorted(default_workflows().glob("*.yaml"))]
    assert [row[0] for row in rows] == [e["study"] for e in entries]
    for (study, titled, names), entry in zip(rows, entries, strict=True):
        assert titled == f"{entry['title']} ({entry['report']})"
        assert entry["summary"].startswith(f"{titled}: ")  # the header's whole first sentence, up to its colon
        assert "DESIGN" not in titled and "…" not in titled
        if entry["kind"] == "Workflow":
            assert names == ", ".join(n for n in entry["parameters"] if n != "study")
    probing = next(row for row in rows if row[0] == "probing")
    assert probing[1] == ("Probing (partial-reinitialization report, §4.4, §6.2 and Fig. 2; CoLA's in "
                          "Fig. 5 (a))")
    nightly = next(row for row in rows if row[0] == "nightly-regression")
    assert nightly[1:] == ["Nightly regression (monolingual report, Table 1)",
                           "those of WorkflowTemplate bertology-nightly-regression"]


def test_studies_as_json_gives_the_defaults_as_typed_and_the_descriptions(capsys):
    assert main(["studies", "-o", "json"]) == 0
    entries = {e["study"]: e for e in json.loads(capsys.readouterr().out)}
    reversed_ = entries["reversed-layers"]
    assert reversed_["parameters"]["lr"] == "default:2e-5"  # as the Workflow passes it to plan
    assert reversed_["defaults"]["lr"] == "2e-5" and reversed_["defaults"]["preset"] == "paper"
    assert not any(str(v).startswith("default:") for e in entries.values() for v in e["defaults"].values())
    assert reversed_["descriptions"]["lr"].startswith("the peak learning rate")


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
