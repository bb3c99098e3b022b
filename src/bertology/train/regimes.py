"""Fine-tuning regimes: which parameters train in which epoch.

A regime only switches `requires_grad`; the optimizer holds every parameter, and one whose gradient is
None is skipped by AdamW entirely (no update, no weight decay), so a frozen tensor stays bit-identical.

- `full`:             everything trains.
- `freeze`:           only the listed encoder layers train (`train_layers`: a list, `from:K` or `last:K`),
                      plus the pooler and the task head; embeddings train only with `train_embeddings`. The
                      cross-lingual study reads its report's "layers 6-12" as the last 6 (`last:6`, the same
                      as `from:6` of 12), as the report's "we train the last 1, 3, 6, 12 layers" says
                      (assumed: read inclusively and 1-based, "6 to 12" would be seven layers, `from:5`).
- `gradual-unfreeze`: the cross-lingual report's scheme: in epoch e the top `unfreeze_per_epoch * e`
                      layers train (4 per epoch there); embeddings always frozen; pooler and head always
                      trained.
- `probe`:            everything frozen but the classifier (the partial-reinitialization report's probing;
                      drop the top K layers first with the `remove-layers` intervention).
- `none`:             no training at all: the model as built is evaluated once (the cross-lingual report's
                      native BERTje on the Dutch test set, next to the fine-tuned models).

Layer indices count from 0, as in the weight names.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from bertology.errors import BadInput, TooSmall, unknown

NAMES = ("full", "freeze", "gradual-unfreeze", "probe", "none")


@dataclass(frozen=True)
class Schedule:
    name: str = "full"
    train_layers: str | tuple[int, ...] | None = None
    train_embeddings: bool = False
    unfreeze_per_epoch: int = 4

    @classmethod
    def of(cls, regime) -> Schedule:
        """The schedule a `bertology.spec.Regime` describes."""
        return cls(regime.name, regime.train_layers, regime.train_embeddings, regime.unfreeze_per_epoch)

    def check(self, num_layers: int) -> None:
        """One-line BadInput for parameters that do not fit the model."""
        if self.name not in NAMES:
            raise unknown("regime", self.name, NAMES)
        if self.name == "freeze":
            if self.train_layers is None:
                raise BadInput("regime 'freeze' needs train_layers (a list, from:K or last:K)")
            layer_set(self.train_layers, num_layers)
        if self.name == "gradual-unfreeze" and self.unfreeze_per_epoch < 1:
            raise BadInput(f"unfreeze_per_epoch must be >= 1, got {self.unfreeze_per_epoch}")

    def layers_trained(self, epoch: int, num_layers: int) -> set[int]:
        """The encoder layers that train in `epoch` (1-based)."""
        if self.name == "full":
            return set(range(num_layers))
        if self.name == "freeze":
            return layer_set(self.train_layers, num_layers)
        if self.name == "gradual-unfreeze":
            top = min(num_layers, self.unfreeze_per_epoch * epoch)
            return set(range(num_layers - top, num_layers))
        return set()  # probe

    def embeddings_trained(self) -> bool:
        return self.name == "full" or (self.name == "freeze" and self.train_embeddings)

    def pooler_trained(self) -> bool:
        return self.name != "probe"


def layer_set(spec: str | tuple[int, ...] | list[int], num_layers: int) -> set[int]:
    """`from:K` (K..L-1), `last:K` (the top K) or an explicit list, checked against the depth."""
    if isinstance(spec, str):
        form, _, value = spec.partition(":")
        if form not in ("from", "last") or not value.isdigit():
            raise BadInput(f"train_layers '{spec}' is malformed (allowed: from:K, last:K or a list of indices)")
        k = int(value)
        if form == "from":
            if not 0 <= k < num_layers:
                raise (TooSmall if k >= num_layers else BadInput)(
                    f"train_layers '{spec}': K must be in 0..{num_layers - 1}")
            return set(range(k, num_layers))
        if not 1 <= k <= num_layers:
            raise (TooSmall if k > num_layers else BadInput)(f"train_layers '{spec}': K must be in 1..{num_layers}")
        return set(range(num_layers - k, num_layers))
    layers = set(spec)
    bad = sorted(i for i in layers if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers)
    if bad or not layers:
        raise BadInput(f"train_layers {list(spec)!r} must be a non-empty list of layer indices in 0..{num_layers - 1}")
    return layers


def apply(model: nn.Module, schedule: Schedule, epoch: int) -> dict[str, int]:
    """Set `requires_grad` for `epoch`; returns how many parameters train, by part, for the log."""
    bert = model.base_model
    layers = (bert.encoder if hasattr(bert, "encoder") else bert.transformer).layer  # BERT | DistilBERT
    trained = schedule.layers_trained(epoch, len(layers))
    counts = {"embeddings": 0, "layers": 0, "pooler": 0, "head": 0}
    for p in model.parameters():
        p.requires_grad_(True)  # the task head and anything outside the encoder
    for p in bert.embeddings.parameters():
        p.requires_grad_(schedule.embeddings_trained())
    for i, layer in enumerate(layers):
        for p in layer.parameters():
            p.requires_grad_(i in trained)
    if getattr(bert, "pooler", None) is not None:
        for p in bert.pooler.parameters():
            p.requires_grad_(schedule.pooler_trained())
    encoder = {id(p) for p in bert.parameters()}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if id(p) not in encoder:
            counts["head"] += p.numel()
        elif ".pooler." in f".{name}" or name.startswith("pooler."):
            counts["pooler"] += p.numel()
        elif "embeddings." in name:
            counts["embeddings"] += p.numel()
        else:
            counts["layers"] += p.numel()
    return counts
