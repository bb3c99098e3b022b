"""Every task kind through the real steps (prepare-data, build-checkpoint, finetune, evaluate) on the tiny
BERT: SQuAD 2.0 span extraction, masked-LM with the forgetting curve and the activation distance to a
native model, and sequential fine-tuning; plus the `files:` source and kill-and-resume for masked-LM."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from conftest import Killed, MemorySink
from safetensors.torch import load_file

from bertology import tasks
from bertology.errors import BadInput
from bertology.results import scan
from bertology.spec import Cell, CheckpointSpec, DatasetSpec, Intervention, Regime, RunSpec
from bertology.steps import build_checkpoint, evaluate, finetune, prepare_data
from bertology.steps.common import checkpoint_key, dataset_key, run_key
from bertology.store import LocalStore
from bertology.tasks.registry import MLM_METRICS, SPAN_METRICS
from bertology.train import Hyper, head_for
from bertology.train import finetune as train_loop

pytestmark = pytest.mark.usefixtures("one_thread")

CHECKPOINT = CheckpointSpec("tiny:bert")




def run_cell(store, cell: Cell) -> None:
    for spec in (cell.run.dataset, *([cell.run.after.dataset] if cell.run.after else [])):
        prepare_data.prepare(store, spec)
    build_checkpoint.build(store, cell.run.checkpoint)
    finetune.finetune(store, cell)
    evaluate.evaluate(store, cell)


def test_squad2_trains_and_scores_with_the_official_metrics(tmp_path):
    dataset = DatasetSpec("squad2", "synthetic", "tiny:bert", max_length=64, count=160, eval_count=60,
                          doc_stride=16)
    cell = Cell("kinds", "pre-trained", "tiny:bert",
                RunSpec(CHECKPOINT, dataset, Regime(lr=1e-3, batch_size=16, epochs=2), seed=1))
    store = LocalStore(tmp_path)
    run_cell(store, cell)

    data = store.local_dir(dataset_key(dataset.id))
    meta = json.loads((data / "meta.json").read_text())
    assert meta["splits"]["train"]["rows"] == 160 and meta["splits"]["validation"]["rows"] == 60
    windows = pq.read_table(data / "validation.parquet")
    examples = pq.read_table(data / "validation.examples.parquet")
    assert windows.num_rows == meta["splits"]["validation"]["sequences"] > examples.num_rows == 60  # doc stride
    assert len(json.loads((data / "probe.json").read_text())) == 16

    runs = scan(str(tmp_path), "runs", study="kinds").collect()
    assert set(runs["metric"]) == set(SPAN_METRICS) and set(runs["split"]) == {"validation"}
    assert runs.filter(pl.col("primary"))["metric"].to_list() == ["f1"]
    scores = runs.filter(~pl.col("metric").str.ends_with("thresh"))["value"]
    assert ((scores >= 0) & (scores <= 1)).all()
    predictions = scan(str(tmp_path), "predictions", study="kinds").collect()
    assert predictions.height == 60
    answerable = [bool(a) for a in examples.column("answer_texts").to_pylist()]
    assert predictions.sort("idx")["label"].to_list() == [float(a) for a in answerable]
    # an answer is given exactly where the model did not predict "no answer"
    assert ((predictions["text"] != "") == (predictions["prediction"] == 1.0)).all()


def test_mlm_forgetting_curve_activation_distance_and_gradual_unfreezing(tmp_path):
    """The tiny checkpoint is also the native reference: before the first step every layer's distance is
    exactly 0, and while gradual unfreezing trains only the top 2 layers (epoch 1) the embeddings and
    the bottom layers stay bit-identical, so their distances stay exactly 0."""
    dataset = DatasetSpec("mlm-nl", "synthetic", "tiny:bert", max_length=32, count=128, eval_count=48)
    regime = Regime(name="gradual-unfreeze", unfreeze_per_epoch=2, lr=1e-2, batch_size=16, epochs=2,
                    eval_every=4, reference="tiny:bert")
    cell = Cell("kinds", "pre-trained", "tiny:bert", RunSpec(CHECKPOINT, dataset, regime, seed=1), keep_weights=True)
    store = LocalStore(tmp_path)
    run_cell(store, cell)

    curves = scan(str(tmp_path), "curves", study="kinds").collect().filter(pl.col("kind") != "train")
    assert sorted(set(curves["step"])) == [0, 4, 8, 12, 16]  # 8 steps an epoch, every 4, and before training
    assert set(curves["split"]) == {"validation", "test", "xnli"} and set(curves["metric"]) == set(MLM_METRICS)
    ppl = curves.filter(pl.col("metric") == "perplexity").pivot("split", index="step", values="value").sort("step")
    # it learns the training language, and far less so the other one
    assert ppl["validation"].diff().drop_nulls().max() < 0 and ppl["validation"][-1] < 0.9 * ppl["validation"][0]
    assert ppl["xnli"][-1] / ppl["xnli"][0] > ppl["validation"][-1] / ppl["validation"][0]
    assert curves.filter(pl.col("step") == 0)["train_loss"].is_null().all()

    distance = scan(str(tmp_path), "activation_distance", study="kinds").collect()
    assert distance.height == 5 * 5  # evaluation points x (embeddings + 4 layers)
    assert set(distance["reference"]) == {"tiny:bert"} and (distance["tokens"] > 0).all()
    at = {(row["step"], row["layer"]): row["distance"] for row in distance.iter_rows(named=True)}
    assert all(at[0, layer] == 0.0 for layer in range(5))
    assert all(at[4, layer] == 0.0 for layer in range(3))  # embeddings, layers 0 and 1 frozen in epoch 1
    assert at[4, 3] > 0 and at[4, 4] > 0
    assert at[16, 1] > 0  # epoch 2 opens 4 layers

    runs = scan(str(tmp_path), "runs", study="kinds").collect()
    assert set(runs["split"]) == {"validation", "test", "xnli"}
    best = json.loads((store.local_dir(run_key(cell.run.id, "finetune")) / "result.json").read_text())
    assert best["best_step"] in (4, 8, 12, 16)
    final = runs.filter(pl.col("primary") & (pl.col("split") == "validation"))["value"].item()
    assert final == pytest.approx(min(ppl["validation"][1:]), rel=1e-5)  # lower perplexity is better
    trained = load_file(store.local_dir(run_key(cell.run.id, "finetune")) / "model" / "model.safetensors")
    base = load_file(store.local_dir(checkpoint_key(CHECKPOINT.id)) / "model.safetensors")
    embeddings = [k for k in base if k.startswith("embeddings.")]
    assert embeddings and all(torch.equal(trained[f"bert.{k}"], base[k]) for k in embeddings)


def test_sequential_run_starts_from_the_intermediate_weights_with_a_new_head(tmp_path):
    """STS-B (regression, 1 output) then RTE (2 classes), the final run probing (encoder frozen): its encoder
    is bit-identical to the intermediate run's fine-tuned encoder, not to the checkpoint's."""
    first = RunSpec(CHECKPOINT, DatasetSpec("stsb", "synthetic", "tiny:bert", 32, count=64),
                    Regime(lr=1e-3, batch_size=16, epochs=1), seed=1)
    final = RunSpec(CHECKPOINT, DatasetSpec("rte", "synthetic", "tiny:bert", 32, count=64),
                    Regime(name="probe", lr=1e-3, batch_size=16, epochs=1), seed=1, after=first)
    store = LocalStore(tmp_path)
    run_cell(store, Cell("kinds", "stsb→rte", "tiny:bert", final, keep_weights=True))

    assert store.is_done(run_key(first.id, "finetune"))  # trained first, in the same process
    intermediate = load_file(store.local_dir(run_key(first.id, "finetune")) / "model" / "model.safetensors")
    got = load_file(store.local_dir(run_key(final.id, "finetune")) / "model" / "model.safetensors")
    base = load_file(store.local_dir(checkpoint_key(CHECKPOINT.id)) / "model.safetensors")
    encoder = [k for k in got if k.startswith("bert.")]
    assert all(torch.equal(got[k], intermediate[k]) for k in encoder)
    assert any(not torch.equal(got[k], base[k.removeprefix("bert.")]) for k in encoder)
    assert got["classifier.weight"].shape == (2, 32) and intermediate["classifier.weight"].shape == (1, 32)
    config = json.loads((store.local_dir(run_key(final.id, "finetune")) / "model" / "config.json").read_text())
    assert config["problem_type"] == "single_label_classification"
    runs = scan(str(tmp_path), "runs", study="kinds").collect()
    assert set(runs["intermediate"]) == {"stsb"} and set(runs["task"]) == {"rte"}


def test_a_new_head_is_freshly_initialised_even_when_the_shapes_match(tmp_path):
    """MRPC then RTE (both 2 classes): loading with new_head keeps every encoder tensor and draws a new
    classifier (HF would otherwise silently keep the old one)."""
    from transformers import BertConfig, BertForSequenceClassification

    from bertology.models import load_tokenizer, parse_model_ref

    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=2)
    torch.manual_seed(0)
    old = BertForSequenceClassification(config)
    old.save_pretrained(tmp_path)
    load_tokenizer(parse_model_ref("tiny:bert")).save_pretrained(tmp_path)
    torch.manual_seed(1)
    new = head_for(tasks.get_task("rte")).load(tmp_path, new_head=True, device="cpu")
    old_state, new_state = old.state_dict(), new.state_dict()
    assert all(torch.equal(old_state[k], new_state[k]) for k in old_state if not k.startswith("classifier."))
    assert not torch.equal(old_state["classifier.weight"], new_state["classifier.weight"])
    assert torch.equal(new_state["classifier.bias"], torch.zeros(2))
    assert new_state["classifier.weight"].std().item() == pytest.approx(0.02, rel=0.2)
    with pytest.raises(BadInput, match="mlm-nl"):
        head_for(tasks.get_task("mlm-nl")).load(tmp_path, new_head=True)


def test_a_killed_mlm_run_resumes_bit_for_bit_with_the_same_masks_and_curve(tmp_path):
    dataset = DatasetSpec("mlm-nl", "synthetic", "tiny:bert", max_length=32, count=96, eval_count=32)
    store = LocalStore(tmp_path / "store")
    prepare_data.prepare(store, dataset)
    build_checkpoint.build(store, CHECKPOINT)
    data = store.local_dir(dataset_key(dataset.id))
    task = tasks.get_task("mlm-nl")
    head = head_for(task)
    evals = {s: head.read_split(data, s) for s in task.eval_splits}
    train = pq.read_table(data / "train.parquet")
    model_dir = store.local_dir(checkpoint_key(CHECKPOINT.id))
    hp = Hyper(lr=2e-3, batch_size=16, epochs=2, eval_every=4, checkpoint_every=5)  # 6 steps an epoch

    def go(name, state=None):
        return train_loop(model_dir, task, train, evals, hp, 3, tmp_path / name, device="cpu", log=lambda _: None,
                          state=state)

    whole = go("whole")
    sink = MemorySink(kill_after=1)
    with pytest.raises(Killed):
        go("killed", sink)
    resumed = go("resumed", sink)
    assert [c["step"] for c in whole.curves] == [0, 4, 6, 8, 12]
    assert [{k: v for k, v in c.items() if k != "seconds"} for c in resumed.curves] == \
        [{k: v for k, v in c.items() if k != "seconds"} for c in whole.curves]
    a, b = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "resumed" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    other = train_loop(model_dir, task, train, evals, dataclasses.replace(hp, checkpoint_every=0), 4,
                       tmp_path / "other", device="cpu", log=lambda _: None)
    assert other.curves[1]["train_loss"] != whole.curves[1]["train_loss"]  # the seed decides the masks


def test_files_source_reads_squad_json_text_and_xnli_and_carves_one_corpus(tmp_path):
    squad = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "Ann gave Bob a pen.", "qas": [
        {"id": "q1", "question": "Who gave a pen?", "answers": [{"text": "Ann", "answer_start": 0}],
         "is_impossible": False},
        {"id": "q2", "question": "Who sold a car?", "answers": [], "is_impossible": True}]}]}]}
    (tmp_path / "dev.json").write_text(json.dumps(squad))
    source = f"files:train={tmp_path / 'dev.json'},validation={tmp_path / 'dev.json'}"
    examples = tasks.load_split("squad2", source, "validation")
    assert list(examples["id"]) == ["q1", "q2"] and list(examples["answer_texts"]) == [["Ann"], []]

    corpus = tmp_path / "nl"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n".join(f"zin nummer {i} ." for i in range(60)) + "\n")
    (corpus / "b.txt").write_text("\n".join(f"nog een zin {i} ." for i in range(40)) + "\n")
    (tmp_path / "dev-en.tsv").write_text("A man sleeps.\tA person rests.\tentailment\r\n"
                                         "A dog runs.\tA cat sits.\tcontradiction\r\n")
    source = f"files:corpus={corpus},xnli={tmp_path / 'dev-en.tsv'}"
    parts = {split: list(tasks.load_split("mlm-nl", source, split)["text"]) for split in ("train", "validation", "test")}
    assert [len(parts[s]) for s in ("train", "validation", "test")] == [80, 10, 10]
    assert sorted(line for part in parts.values() for line in part) == sorted(
        [f"zin nummer {i} ." for i in range(60)] + [f"nog een zin {i} ." for i in range(40)])
    assert list(tasks.load_split("mlm-nl", source, "xnli")["text"]) == [
        "A man sleeps.", "A person rests.", "A dog runs.", "A cat sits."]


@pytest.mark.parametrize("task, source, message", [
    ("squad2", "files:validation=/nowhere.json", "/nowhere.json"),
    ("squad2", "files:train=x", "does not exist"),
    ("squad2", "files:dev=x", "'dev=x' must be SPLIT=PATH"),
    ("mlm-nl", "files:train=/tmp", "names no file for split 'validation'"),
    ("squad2", "glue-dir:/tmp", "glue-dir is a source of GLUE tasks only"),
    ("sst2", "files:train=/tmp", "glue-dir:PATH, not files:"),
    ("squad2", "ftp://x", "unknown data source"),
])
def test_bad_sources_are_refused_by_name(task, source, message):
    with pytest.raises(BadInput, match=message):
        tasks.check_source(task, source)


def test_sequential_and_reference_specs_are_checked():
    first = RunSpec(CHECKPOINT, DatasetSpec("stsb", "synthetic", "tiny:bert"))
    with pytest.raises(BadInput, match="one checkpoint"):
        RunSpec(CheckpointSpec("tiny:bert", seed=3), DatasetSpec("rte", "synthetic", "tiny:bert"), after=first)
    final = RunSpec(CHECKPOINT, DatasetSpec("rte", "synthetic", "tiny:bert"), after=first)
    assert RunSpec.from_dict(final.to_dict()) == final and final.id != dataclasses.replace(final, after=None).id
    assert "after" not in dataclasses.replace(final, after=None).to_dict()  # older ids unchanged
    with pytest.raises(BadInput, match="reference must be a model reference"):
        Regime.from_dict({"reference": ""})
    assert "eval_every" not in Regime().to_dict() and Regime.from_dict({"eval_every": 50}).eval_every == 50
    with pytest.raises(BadInput, match="eval_count must be >= 1"):
        DatasetSpec.from_dict({"task": "mlm-nl", "tokenizer": "tiny:bert", "eval_count": 0})


def test_a_reference_of_another_shape_is_refused_before_training():
    from transformers import BertConfig

    from bertology.models import load_tokenizer, parse_model_ref
    from bertology.train.activation_distance import ActivationDistance

    tokenizer = load_tokenizer(parse_model_ref("tiny:bert"))
    monitor = ActivationDistance(parse_model_ref("tiny:bert"), ["een zin ."], tokenizer=tokenizer, max_length=16)
    with pytest.raises(BadInput, match="num_hidden_layers is 4 but the fine-tuned model's is 12"):
        monitor.check(BertConfig())
    assert np.isfinite(monitor.reference_states[0].numpy()).all()


def test_a_pretrained_masked_lm_head_survives_into_the_checkpoint_and_the_clean_model_redraws_it(tmp_path):
    """Masked-LM perplexity at step 0 is only meaningful with the checkpoint's own MLM head."""
    from transformers import AutoModelForMaskedLM, BertConfig, BertForPreTraining

    from bertology.models import load_tokenizer, parse_model_ref
    from bertology.steps.build_checkpoint import make_checkpoint

    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64)
    torch.manual_seed(0)
    source = BertForPreTraining(config)
    with torch.no_grad():
        source.cls.predictions.bias.normal_()
    (tmp_path / "base").mkdir()
    source.save_pretrained(tmp_path / "base")
    load_tokenizer(parse_model_ref("tiny:bert")).save_pretrained(tmp_path / "base")
    head = {k: v for k, v in source.state_dict().items() if k.startswith("cls.predictions.")}

    make_checkpoint(CheckpointSpec(f"dir:{tmp_path / 'base'}"), tmp_path / "plain")
    model, info = AutoModelForMaskedLM.from_pretrained(tmp_path / "plain", output_loading_info=True)
    assert not info["missing_keys"]
    assert all(torch.equal(model.state_dict()[k], v) for k, v in head.items())

    manifest, _ = make_checkpoint(CheckpointSpec(f"dir:{tmp_path / 'base'}", (Intervention("reinit"),), seed=1), tmp_path / "clean")
    clean = AutoModelForMaskedLM.from_pretrained(tmp_path / "clean").state_dict()
    assert torch.equal(clean["cls.predictions.bias"], torch.zeros(30522))
    assert not torch.equal(clean["cls.predictions.transform.dense.weight"],
                           head["cls.predictions.transform.dense.weight"])
    changed = {t["name"] for t in manifest["tensors"] if t["changed"]}
    assert {"cls.predictions.bias", "cls.predictions.transform.dense.weight"} <= changed
