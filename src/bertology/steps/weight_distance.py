"""How far fine-tuning moved each module's weights away from the built checkpoint.

Per module (the embeddings; each encoder layer's sub-layers: attention.self (Q, K, V), attention.output,
intermediate and output; the pooler): the L2 norm of the weight change over all of the module's tensors,
and that norm relative to the module's starting norm; a whole layer is the root of its modules' summed
squares, which the analysis computes. Besides, per layer, the partial-reinitialization report's own measure (§4.5,
Figure 3): "the euclidean distance between the weight matrices of the linear projections contained in
the output sub-layer", the output dense layer's weight matrix alone, without its bias or the sub-layer's
LayerNorm (module `layer.N.output.dense.weight`). Reads the safetensors files directly, so no model is
instantiated; the fine-tune step, which holds the fine-tuned model, passes its tensors instead of a
folder, so that weights it does not keep are never written to disk and read back.

Why apart from the analyze step: the fine-tune step measures a run's weights in its own pod when they
are not kept, and the analyze step measures kept ones; both call this, and neither imports the other.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bertology.results.tables import OUTPUT_PROJECTION
from bertology.spec import Cell
from bertology.steps.common import run_key
from bertology.steps.inputs import checkpoint_dir
from bertology.store import Store

log = logging.getLogger("bertology")

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.((?:attention\.)?[^.]+)\.")
_PROJECTION = re.compile(rf"^encoder\.layer\.(\d+)\.{re.escape(OUTPUT_PROJECTION)}$")


def _encoder_tensors(weights: Path | dict) -> dict:
    """The encoder's tensors (from a folder's safetensors files, or a model's `state_dict` where it is)
    keyed without the task-model prefix (`bert.`), heads dropped; DistilBERT's
    `distilbert.transformer.layer.N` is named `encoder.layer.N` like BERT's."""
    from safetensors.torch import load_file

    if isinstance(weights, dict):
        named = weights.items()  # a state_dict's tensors are detached already
    else:
        named = (item for path in sorted(weights.glob("*.safetensors")) for item in load_file(path).items())
    tensors = {}
    for name, t in named:
        name = name.removeprefix("bert.").removeprefix("distilbert.").replace("transformer.layer.", "encoder.layer.")
        if name.startswith(("embeddings.", "encoder.", "pooler.")) and t.is_floating_point():
            tensors[name] = t
    return tensors


def module_of(name: str, num_layers: int) -> tuple[str, int]:
    """(module, layer index): `layer.N.<sub-layer>` in the encoder, embeddings at layer -1, the pooler at L."""
    m = _LAYER.match(name)
    if m:
        return f"layer.{m.group(1)}.{m.group(2)}", int(m.group(1))
    if name.startswith("embeddings."):
        return "embeddings", -1
    return "pooler", num_layers


def weight_distance(before: Path | dict, after: Path | dict) -> pa.Table:
    """Per-module distances from `before` to `after`: each a folder of safetensors files or a state dict.
    Computed in float64 on the device `after`'s tensors are on (the fine-tune step's GPU: no copy of the
    fine-tuned weights to the host), so a GPU's sums agree with the CPU's to float64 rounding."""
    import torch

    before, after = _encoder_tensors(before), _encoder_tensors(after)
    shared = sorted(set(before) & set(after))
    num_layers = 1 + max((int(m.group(1)) for n in shared if (m := _LAYER.match(n))), default=-1)
    sums = []  # per tensor: its squared change and its squared starting norm, read in one transfer
    for name in shared:
        a = before[name].to(after[name].device, torch.float64).flatten()
        change = after[name].to(torch.float64).flatten().sub_(a)
        sums.append(torch.stack([torch.dot(change, change), torch.dot(a, a)]))
    acc: dict[tuple[str, int], list[float]] = {}
    for name, (diff, base) in zip(shared, torch.stack(sums).tolist() if sums else []):
        projection = _PROJECTION.match(name)
        slots = [module_of(name, num_layers)]
        if projection:  # also a row of its own: the output sub-layer's weight matrix
            slots.append((f"layer.{projection.group(1)}.{OUTPUT_PROJECTION}", int(projection.group(1))))
        for slot in (acc.setdefault(s, [0.0, 0.0, 0]) for s in slots):
            slot[0] += diff
            slot[1] += base
            slot[2] += before[name].numel()
    rows = [{"module": mod, "layer": layer, "l2": diff ** 0.5,
             "rel_l2": (diff ** 0.5) / (base ** 0.5) if base > 0 else float("nan"), "n_params": n}
            for (mod, layer), (diff, base, n) in sorted(acc.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    return pa.Table.from_pylist(rows)


def lacks_projection_rows(table: pa.Table) -> bool:
    """A BERT run's distances (it has `layer.N.output` sub-layers) without the output-projection rows: an
    analysis stored before they existed. DistilBERT has no such sub-layer, so nothing is missing there."""
    modules = set(table.column("module").to_pylist())
    sublayers = any(re.fullmatch(r"layer\.\d+\.output", m) for m in modules)
    return sublayers and not any(m.endswith(OUTPUT_PROJECTION) for m in modules)


def measure(store: Store, cell: Cell, weights: Path | dict) -> None:
    """Weight distances between the built checkpoint (verified) and fine-tuned `weights` (their folder, or
    the model's state dict), published as the run's analyze artifact."""
    run = cell.run
    table = weight_distance(checkpoint_dir(store, run.checkpoint), weights)
    with store.artifact(run_key(run.id, "analyze"), {"spec": run.to_dict()}) as out:
        pq.write_table(table, out / "weight_distance.parquet")
    log.info("run %s: weight distance over %d modules", run.id, table.num_rows)
