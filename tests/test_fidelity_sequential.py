"""Sequential fine-tuning as the college report ran it (Experiment 1, Figure 2): which task head the final
task starts with (`final_head`, a disclosed assumption), the run ids that keep the two heads apart, and
Figure 2's diagonal as the direct fine-tune.

Every quoted string is checked against the paper text in ../shared/papers/ where that is present, so a
quote cannot drift from its source.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest
import torch
from safetensors.torch import load_file
from test_fidelity import _workflow_header as header
from test_fidelity import quoted, study, workflow_params

from bertology import tasks
from bertology.errors import BadInput
from bertology.results import conventions
from bertology.results.paper_comparison import paper_numbers
from bertology.results.report import build_report, markdown
from bertology.results.study_results import StudyResults, with_defaults
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Regime, RunSpec
from bertology.steps import build_checkpoint, finetune, prepare_data
from bertology.steps.common import run_key
from bertology.store import LocalStore
from bertology.study import PARAMS, StudySpec
from bertology.train import head_for

REPO = Path(__file__).resolve().parents[1]
COLLEGE = "bert-goes-to-college"
BERT_CASED = "google-bert/bert-base-cased"


# -- the final task's head: carried by default, an assumption said where the report is silent -------------

def test_the_final_head_is_carried_by_default_as_the_hugging_face_code_the_report_built_on():
    """The report never says whether the final task gets a new classifier; its code was built on Hugging
    Face's, whose run_glue loads a saved model's classifier when its shape fits (two classes each here)."""
    quoted(COLLEGE, "We then use this resulting model and finetune on the final task (task 2).")
    quoted(COLLEGE, "For our code, we built off of the Transformers library by HuggingFace.")
    assert PARAMS["final_head"] == ("str", "carried")
    assert workflow_params("sequential-finetune")["final_head"] == "default:carried"
    text = header("sequential-finetune")
    assert "Assumed, because the report does not say whether the final task gets a new classifier" in text
    assert "final_head=carried" in text and "final_head=new" in text
    assert conventions.of_study("sequential-finetune").final_head[0] == "carried"
    spec = study("sequential-finetune")
    assert {c.run.final_head for c in spec.cells() if c.run.after is not None} == {"carried"}
    assert {c.run.final_head for c in spec.cells() if c.run.after is None} == {"new"}
    assert {tasks.get_task(t).num_labels for t in (*spec.tasks, *spec.intermediates)} == {2}  # every pair carries


def test_the_study_report_says_which_head_and_that_it_is_assumed():
    runs = _runs({(None, "cola"): 0.5, ("mrpc", "cola"): 0.55})
    text = markdown(build_report(_results(runs, ["mrpc"], final_head="carried")))
    assert "The final task's head: the intermediate run's classifier, carried (`final_head=carried`)." in text
    assert "Assumed: the report does not say whether the final task gets a new classifier" in text
    assert "the final task's head: carried" in text  # the settings paragraph
    old_plan = markdown(build_report(_results(runs, ["mrpc"])))  # a plan without the setting: new heads
    assert "(`final_head=new`)" in old_plan and "`final_head=carried` would follow it" in old_plan


# -- run ids: the head is part of a sequential run's id, and no other id changed ---------------------------

def _pair(final_head: str = "new") -> tuple[RunSpec, RunSpec]:
    checkpoint = CheckpointSpec(BERT_CASED)
    first = RunSpec(checkpoint, DatasetSpec("mrpc", "hub", BERT_CASED), Regime(selection="last"), seed=1)
    final = RunSpec(checkpoint, DatasetSpec("cola", "hub", BERT_CASED), Regime(selection="last"), seed=1,
                    after=first, final_head=final_head)
    return first, final


def test_sequential_ids_differ_by_head_and_every_other_id_is_as_before():
    first, new = _pair("new")
    _, carried = _pair("carried")
    # ids computed before the setting existed: a direct run's, and a sequential run's, whose head was new
    assert first.id == "9c3cd1ff18644d23" and new.id == "ba73fba92f5d424d"
    assert carried.id != new.id and carried.after.id == first.id
    assert "final_head" not in new.to_dict() and carried.to_dict()["final_head"] == "carried"
    assert RunSpec.from_dict(carried.to_dict()) == carried
    assert RunSpec(CheckpointSpec(BERT_CASED), DatasetSpec("rte", "hub", BERT_CASED)).id == "7825c836b9c716b3"

    carrying, renewing = study("sequential-finetune"), study("sequential-finetune", final_head="new")
    ids = {c.run.id: c for c in carrying.cells()}
    renewed = {c.run.id: c for c in renewing.cells()}
    direct = {i for i, c in ids.items() if c.run.after is None}
    assert len(direct) == 8 and direct == {i for i, c in renewed.items() if c.run.after is None}
    assert not (set(ids) - direct) & set(renewed)  # no sequential run is shared between the two heads
    assert carrying.id != renewing.id
    assert "final_head" not in renewing.to_dict() and carrying.to_dict()["final_head"] == "carried"
    # a study without intermediate tasks: the setting is in neither its id nor its runs'
    plain = study("reversed-layers")
    assert plain.final_head == "carried" and "final_head" not in plain.to_dict()
    assert plain.id == study("reversed-layers", final_head="new").id
    assert all("final_head" not in c.run.to_dict() for c in plain.cells())


def test_a_bad_head_is_refused_in_one_line_before_any_training():
    with pytest.raises(BadInput) as e:
        study("sequential-finetune", final_head="old")
    assert str(e.value) == ("final_head must be one of new, carried (a new task head for the final task, or the "
                            "intermediate run's), got 'old'")
    with pytest.raises(BadInput, match="final_head must be one of new, carried"):
        RunSpec.from_dict({**_pair()[1].to_dict(), "final_head": "kept"})
    with pytest.raises(BadInput, match="final_head carried needs an intermediate run"):
        dataclasses.replace(_pair()[0], final_head="carried")


def test_a_pair_whose_heads_differ_cannot_carry_and_is_refused_at_plan_time():
    """STS-B's one regression output cannot be RTE's two classes: refused, naming the pair and the values,
    rather than a new head drawn in a matrix of carried ones."""
    params = {"tasks": '["rte", "mrpc"]', "intermediates": '["mrpc", "stsb"]', "seeds": "[1]"}
    with pytest.raises(BadInput) as e:
        StudySpec.from_params("s", params)
    assert str(e.value) == ("final_head carried: intermediate task stsb's regression head (1 output) does not fit "
                            "final task rte's 2-class head (allowed: final_head=new, which draws a new head, or "
                            "intermediates whose head fits)")
    assert StudySpec.from_params("s", {**params, "final_head": "new"})[0].final_head == "new"
    after_itself = {**params, "tasks": '["stsb"]', "intermediates": '["stsb"]'}
    assert StudySpec.from_params("s", after_itself)[0].final_head == "carried"  # STS-B's head fits STS-B


# -- the weights a final run starts with -----------------------------------------------------------------

def _final_start(store, first: RunSpec, final_head: str) -> tuple[dict, dict]:
    """The intermediate run's weights and the final run's as it starts: its regime `none` trains nothing,
    so the weights it keeps are those it was built with."""
    final = RunSpec(first.checkpoint, DatasetSpec("rte", "synthetic", "tiny:bert", 32, count=32),
                    Regime(name="none", batch_size=16), seed=1, after=first, final_head=final_head)
    prepare_data.prepare(store, final.dataset)
    finetune.finetune(store, Cell("seq", "pre-trained", "tiny:bert", final, keep_weights=True))
    model = "model/model.safetensors"
    return (load_file(store.local_dir(run_key(first.id, "finetune")) / model),
            load_file(store.local_dir(run_key(final.id, "finetune")) / model))


@pytest.mark.usefixtures("one_thread")
def test_carried_starts_with_the_intermediate_classifier_and_new_with_a_drawn_one(tmp_path):
    """MRPC then RTE (two classes each) on the tiny BERT: the encoder is the intermediate run's, bit for bit,
    with either head; carried keeps the intermediate run's classifier exactly, new draws another."""
    first = RunSpec(CheckpointSpec("tiny:bert"), DatasetSpec("mrpc", "synthetic", "tiny:bert", 32, count=32),
                    Regime(lr=1e-3, batch_size=16, epochs=1), seed=1)
    store = LocalStore(tmp_path)
    prepare_data.prepare(store, first.dataset)
    build_checkpoint.build(store, first.checkpoint)
    intermediate, carried = _final_start(store, first, "carried")
    again, new = _final_start(store, first, "new")
    assert all(torch.equal(intermediate[k], again[k]) for k in intermediate)  # trained once, kept with its head
    head = ("classifier.weight", "classifier.bias")
    assert intermediate["classifier.weight"].shape == (2, 32)
    for start in (carried, new):
        assert set(start) == set(intermediate)
        assert all(torch.equal(start[k], intermediate[k]) for k in intermediate if k not in head)
    assert all(torch.equal(carried[k], intermediate[k]) for k in head)
    assert not torch.equal(new["classifier.weight"], intermediate["classifier.weight"])
    assert torch.equal(new["classifier.bias"], torch.zeros(2))
    assert new["classifier.weight"].std().item() == pytest.approx(0.02, rel=0.3)


def test_a_head_that_does_not_fit_is_never_carried_silently(tmp_path):
    """A model saved with STS-B's one output, loaded to carry its head into RTE: refused, not re-drawn."""
    from transformers import BertConfig, BertForSequenceClassification

    from bertology.models import load_tokenizer, parse_model_ref

    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    load_tokenizer(parse_model_ref("tiny:bert")).save_pretrained(tmp_path)
    with pytest.raises(BadInput, match=r"task rte cannot carry the head .*classifier.bias, classifier.weight does "
                                       r"not fit or is missing \(allowed: final_head=new\)"):
        head_for(tasks.get_task("rte")).load(tmp_path, carry_head=True, device="cpu")
    with pytest.raises(BadInput, match="new or carried, not both"):
        head_for(tasks.get_task("rte")).load(tmp_path, new_head=True, carry_head=True, device="cpu")


# -- Figure 2: the diagonal is the direct fine-tune --------------------------------------------------------

def _runs(values: dict[tuple[str | None, str], float]) -> pl.DataFrame:
    """Runs rows of bert-base-cased: (intermediate, final task) -> the primary metric of seed 1 (seed 2 is
    0.01 lower), MRPC by accuracy as Figure 2 shows it."""
    rows = []
    for (after, task), value in values.items():
        metric = "accuracy" if task == "mrpc" else "matthews_corrcoef"
        for seed, shift in ((1, 0.0), (2, -0.01)):
            rows.append({"model": BERT_CASED, "variant": "pre-trained", "task": task, "intermediate": after,
                         "split": "validation", "fraction": None, "count": None, "seed": seed, "metric": metric,
                         "primary": True, "value": value + shift, "run_id": f"{after}-{task}-{seed}"})
    return pl.from_dicts(rows, infer_schema_length=None)


def _results(runs: pl.DataFrame, intermediates: list[str], **spec) -> StudyResults:
    spec = with_defaults({"preset": "paper", "models": [BERT_CASED], "seeds": [1, 2],
                          "variants": [{"name": "pre-trained", "interventions": []}],
                          "intermediates": intermediates, **spec})
    return StudyResults("sequential-finetune", "id", spec, [], [], {"runs": runs.lazy()}, [])


def test_figure_2s_diagonal_is_the_direct_fine_tune_and_each_task_after_itself_is_apart():
    quoted(COLLEGE, "compare the results to the baseline (finetune directly on the final task without an "
                    "intermediate task)")
    quoted(COLLEGE, "The diagonal scores are the baseline scores")
    quoted(COLLEGE, "BERT pretrained layers → CoLA finetuning\n - BERT pretrained layers → MRPC finetuning → CoLA")
    runs = _runs({(None, "cola"): 0.50, ("cola", "cola"): 0.60, ("mrpc", "cola"): 0.55,
                  (None, "mrpc"): 0.80, ("mrpc", "mrpc"): 0.70, ("cola", "mrpc"): 0.75})
    report = build_report(_results(runs, ["cola", "mrpc"], final_head="carried"))
    text = markdown(report)
    # rows: the intermediate task; columns: the final task (cola, mrpc); the diagonal: the direct runs
    assert "| intermediate | cola | mrpc |" in text
    assert "| cola | 0.495 ± 0.007 (direct) | 0.745 ± 0.007 |" in text
    assert "| mrpc | 0.545 ± 0.007 | 0.795 ± 0.007 (direct) |" in text
    assert "| none |" not in text.split("## Sequential fine-tuning", 1)[1].split("## ", 1)[0]
    assert "each task fine-tuned after itself (not in the report's Figure 2)" in text
    assert "| task | after itself | direct (the diagonal) |" in text
    assert "| cola | 0.595 ± 0.007 | 0.495 ± 0.007 |" in text and "| mrpc | 0.695 ± 0.007 | 0.795 ± 0.007 |" in text
    # the comparison with the report: Figure 2's diagonal cells are our direct runs (the better of two)
    cells = report.tables["paper_cells"].filter(pl.col("table") == "Figure 2", pl.col("status") == "compared")
    ours = {(c["row"], c["column"]): c["ours"] for c in cells.iter_rows(named=True)}
    assert ours == {("CoLA", "CoLA"): 0.50, ("CoLA", "MRPC"): 0.55, ("MRPC", "MRPC"): 0.80,
                    ("MRPC", "CoLA"): 0.75}


def test_the_transcribed_diagonal_is_keyed_to_the_direct_run():
    """paper_numbers.csv: each Figure 2 cell's `intermediate` is its column's task, and "none" (fine-tuned
    directly) where the column is the row's own task."""
    figure = paper_numbers("sequential-finetune").filter(pl.col("table") == "Figure 2")
    assert figure.height == 16
    for cell in figure.iter_rows(named=True):
        assert cell["task"] == cell["row"].lower()
        assert cell["intermediate"] == ("none" if cell["row"] == cell["column"] else cell["column"].lower())


def test_each_task_after_itself_still_runs_and_costs_a_fifth_of_the_study():
    """The report lists no task after itself; the study still runs them (a control for the intermediate
    task's three extra epochs), and shows them apart: 8 of its 40 runs, each after the direct run."""
    spec = study("sequential-finetune")
    itself = [c for c in spec.cells() if c.run.after is not None and c.run.after.dataset.task == c.run.dataset.task]
    assert len(itself) == 8 and len(spec.cells()) == 40
    direct = {c.run.id for c in spec.cells() if c.run.after is None}
    assert all(c.run.after.id in direct for c in itself)  # its intermediate run is the direct run
