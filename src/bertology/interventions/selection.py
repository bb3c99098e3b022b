"""Which encoder layers or attention heads a parameter names, checked against the config (no weights).

Indices count from 0, as the state_dict does (`encoder.layer.3.…` is layer 3, head h is rows h·d…(h+1)·d
of Q, K and V). The reports count from 1: bert-goes-to-college's "re-initialise layers ≥ k" is `from:k-1`,
its "head 6 of layer 12" is "11:5". A selection that names a layer or head the model does not have, names
one twice, or selects nothing is a one-line BadInput naming the value and the allowed range, raised at plan
time, before any weights load.

Layer forms (each intervention says which it accepts):
- a list of layer indices, e.g. [0, 5];
- "from:K": layers K … L-1 (re-initialise from K upwards);
- "last:K": the last K layers;
- "every:N": every layer except 0, N, 2N, … (remove-layers keeps those).
"""

from __future__ import annotations

import re

from transformers import PretrainedConfig

from bertology.errors import BadInput, TooSmall

_FORM = re.compile(r"(from|last|every):(-?\d+)")
_HEAD = re.compile(r"(\d+):(\d+)")


def layer_indices(value: object, config: PretrainedConfig, what: str, forms: tuple[str, ...]) -> list[int]:
    """The selected layers, sorted; `forms` are the accepted forms ("list", "from", "last", "every").

    The selection must leave `config.num_hidden_layers` in range; "last" and "every" must keep at least
    one layer and remove at least one, "from" must select at least one.
    """
    depth = config.num_hidden_layers
    allowed = _describe(forms, depth)
    if isinstance(value, list) and "list" in forms:
        if not value or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            raise BadInput(f"{what} {value!r} must be a non-empty list of layer indices; allowed: {allowed}")
        for i in value:
            if i >= depth:
                raise TooSmall(f"{what} {value!r}: layer {i} is beyond the model's {depth} layers; "
                               f"allowed: indices 0..{depth - 1}")
            if not 0 <= i < depth:
                raise BadInput(f"{what} {value!r}: layer {i} is beyond the model's {depth} layers; "
                               f"allowed: indices 0..{depth - 1}")
        if len(set(value)) != len(value):
            raise BadInput(f"{what} {value!r} names a layer twice; allowed: each index once")
        return sorted(value)
    match = _FORM.fullmatch(value) if isinstance(value, str) else None
    if match is None or match.group(1) not in forms:
        raise BadInput(f"{what} {value!r} is not a layer selection; allowed: {allowed}")
    form, k = match.group(1), int(match.group(2))
    if form == "from":
        if not 0 <= k < depth:
            raise (TooSmall if k >= depth else BadInput)(f"{what} {value!r}: K={k} is outside the model's {depth} layers; "
                           f"allowed: from:0..from:{depth - 1}")
        return list(range(k, depth))
    if depth < 2:
        raise TooSmall(f"{what} {value!r}: the model has {depth} layer, so none can be removed")
    if form == "last":
        if not 1 <= k < depth:
            raise (TooSmall if k >= depth else BadInput)(f"{what} {value!r}: K={k} must leave at least one of the model's {depth} layers; "
                           f"allowed: last:1..last:{depth - 1}")
        return list(range(depth - k, depth))
    if not 2 <= k <= depth:
        raise (TooSmall if k > depth else BadInput)(f"{what} {value!r}: N={k} is not allowed for a model of {depth} layers; "
                       f"allowed: every:2..every:{depth}")
    return [i for i in range(depth) if i % k]


def head_indices(value: object, config: PretrainedConfig, what: str) -> list[tuple[int, int]]:
    """The selected (layer, head) pairs, sorted, from a non-empty list of "layer:head" strings."""
    depth, heads = config.num_hidden_layers, config.num_attention_heads
    allowed = f'a non-empty list of "layer:head" strings, layer 0..{depth - 1}, head 0..{heads - 1}'
    if not isinstance(value, list) or not value:
        raise BadInput(f"{what} {value!r} is not a head selection; allowed: {allowed}")
    pairs = []
    for item in value:
        match = _HEAD.fullmatch(item) if isinstance(item, str) else None
        if match is None:
            raise BadInput(f"{what} item {item!r} is not a head; allowed: {allowed}")
        layer, head = int(match.group(1)), int(match.group(2))
        if layer >= depth:
            raise TooSmall(f"{what} item {item!r}: layer {layer} is beyond the model's {depth} layers; "
                           f"allowed: layer 0..{depth - 1}")
        if head >= heads:
            raise TooSmall(f"{what} item {item!r}: head {head} is beyond the model's {heads} heads per "
                           f"layer; allowed: head 0..{heads - 1}")
        pairs.append((layer, head))
    if len(set(pairs)) != len(pairs):
        raise BadInput(f"{what} {value!r} names a head twice; allowed: each head once")
    return sorted(pairs)


def _describe(forms: tuple[str, ...], depth: int) -> str:
    text = {
        "list": f"a list of layer indices 0..{depth - 1}",
        "from": f'"from:K" with K 0..{depth - 1}',
        "last": f'"last:K" with K 1..{depth - 1}',
        "every": f'"every:N" with N 2..{depth}',
    }
    return ", ".join(text[f] for f in forms)
