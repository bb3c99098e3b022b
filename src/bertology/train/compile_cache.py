"""What torch.compile made for a model, kept in the study's store, so that the next pod compiling the same
model on the same software and device loads it instead of compiling again.

Why: a finetune pod is a fresh container, and inductor's local caches (/tmp/torchinductor_<user>) start
empty in every one, so each pod of a compiled study would pay the whole compilation of the training step
(minutes for BERT-base on a GPU, with autotuning) before its first step. Kept in the store, a study pays
it once per model, software and batch width, whichever pod meets that width first.

How: PyTorch's portable cache (`torch.compiler.save_cache_artifacts` / `load_cache_artifacts`) packs
inductor's FX-graph cache, AOTAutograd's cache, autotuning results and Triton kernels as bytes. Before the
first compile of a model in a process, every blob under `compile-cache/<key>/` is loaded into the local
caches. After a run, what this process compiled or loaded is saved as one blob named by its content's
hash, if it holds an artefact none of the loaded blobs held: so pods saving at once never overwrite each
other, a blob is whole or absent (a store's writes are atomic), and a pod that compiled nothing new writes
nothing. `<key>` covers what the compiled code depends on besides the shapes: torch's, triton's and
Python's versions, the device (its name and compute capability) and the model (its class and the config
fields that change what it computes). The shapes are inside the blobs, in inductor's own keys.

A blob that cannot be loaded (truncated, or from another build that hashed alike) is said in one line and
skipped: the run compiles, as it would without the cache. The blobs are compiled code that finetune pods
load and run; whoever may write the study's store may write them, as they may its checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Callable

import torch

from bertology.train.engine import computing_config

PREFIX = "compile-cache"


def cache_key(model: torch.nn.Module, device: torch.device) -> str:
    """The key of what compiling `model` on `device` with this software makes, besides its shapes."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        where = [props.name, f"{props.major}.{props.minor}"]
    else:
        where = [device.type, platform.machine()]
    described = json.dumps([torch.__version__, triton_version, platform.python_version(), where,
                            type(model).__qualname__, computing_config(model)], sort_keys=True, default=str)
    return hashlib.sha256(described.encode()).hexdigest()[:16]


def artefacts(info) -> set[str]:
    """The names of the artefacts a `torch.compiler.CacheInfo` lists (by kind: inductor, aot_autograd, ...)."""
    return {f"{kind}/{name}" for kind, names in info.artifacts.items() for name in names}


class CompileCache:
    """The compile cache of one store, for this process: which keys it loaded, and which artefacts those
    held."""

    def __init__(self, store, log: Callable[[str], None] = print):
        self.store, self.log = store, log
        self.known: dict[str, set[str]] = {}  # key -> the artefacts its loaded (or saved) blobs hold

    def load(self, key: str) -> None:
        """Load every blob stored under `key` into this process's local caches (once per key)."""
        if key in self.known:
            return
        known = self.known[key] = set()
        blobs = self.store.list(f"{PREFIX}/{key}/")
        for blob in blobs:
            try:
                known |= artefacts(torch.compiler.load_cache_artifacts(self.store.read_bytes(blob)))
            except Exception as e:  # noqa: BLE001 - whatever torch raises, a cache never fails a run: it compiles
                self.log(f"compile cache: {self.store.url(blob)} could not be loaded ({type(e).__name__}: "
                         f"{str(e)[:200]}); skipped, compiling what it held")
        if blobs:
            self.log(f"compile cache: loaded {len(known)} compiled artefacts from {len(blobs)} blob"
                     f"{'s' if len(blobs) != 1 else ''} under {self.store.url(f'{PREFIX}/{key}/')}")

    def save(self, key: str) -> str | None:
        """Store what this process compiled or loaded, as a new blob under `key`, when it holds an artefact
        no blob loaded or saved under `key` held; the blob's store key, or None."""
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            return None
        data, info = saved
        names = artefacts(info)
        known = self.known.setdefault(key, set())
        if names <= known:
            return None
        blob = f"{PREFIX}/{key}/{hashlib.sha256(data).hexdigest()[:32]}.bin"
        self.store.write_bytes(blob, data)
        self.log(f"compile cache: stored {len(names - known)} new compiled artefacts ({len(data) / 1e6:.1f} MB) "
                 f"as {self.store.url(blob)}")
        known |= names
        return blob
