"""How far a model's hidden states are from a native reference model's, layer by layer, on fixed sentences.

The cross-lingual report (§3.3, Fig. 1, A.1–A.4) fine-tunes multilingual BERT on Dutch and, during
training, compares each layer's activations with those of BERTje (pre-trained on Dutch only) on one batch
of 16 held-out sentences: the L2 norm of the difference, averaged over the batch and the sequence. Both
models run in eval mode (no dropout) and in fp32, so the value is a deterministic function of the weights.

The two models may tokenize differently (mBERT's and BERTje's vocabularies differ), so each reads the
sentences with its own tokenizer and positions are compared up to the shorter of the two tokenizations of
each sentence; with one tokenizer that is every token. Layer 0 is the embeddings' output, layer i the
output of encoder layer i.
"""

from __future__ import annotations

import torch

from bertology.errors import BadInput


class ActivationDistance:
    """A training-loop monitor: called with the model at each evaluation point, it returns one row per layer
    (`layer`, `distance`, `tokens`). The reference's hidden states are computed once."""

    def __init__(self, reference, texts: list[str], *, tokenizer, max_length: int):
        from bertology import models

        if not texts:
            raise BadInput("the activation distance needs sentences (the dataset's probe batch is empty)")
        self.texts = list(texts)
        self.tokenizer = tokenizer
        self.max_length = max_length
        reference_model, reference_tokenizer = models.load_pretrained(reference)
        self.reference_config = reference_model.config
        self.reference_states, self.reference_mask = _hidden_states(
            reference_model.float().eval(), reference_tokenizer, self.texts, max_length)

    def check(self, config) -> None:
        check_shapes(config, self.reference_config)

    def __call__(self, model: torch.nn.Module) -> list[dict]:
        device = next(model.parameters()).device
        states, mask = _hidden_states(model, self.tokenizer, self.texts, self.max_length)
        rows = []
        for layer, (mine, theirs) in enumerate(zip(states, self.reference_states)):
            width = min(mine.shape[1], theirs.shape[1])
            both = (mask[:, :width] & self.reference_mask[:, :width].to(device)).float()
            distance = torch.linalg.vector_norm(mine[:, :width] - theirs[:, :width].to(device), dim=-1)
            tokens = both.sum()
            rows.append({"layer": layer, "distance": ((distance * both).sum() / tokens).item(),
                         "tokens": int(tokens.item())})
        return rows


def check_shapes(config, reference_config) -> None:
    """One-line BadInput, before training, when a reference cannot be compared with the model."""
    for name in ("num_hidden_layers", "hidden_size"):
        mine, theirs = getattr(config, name), getattr(reference_config, name)
        if mine != theirs:
            raise BadInput(f"the reference model's {name} is {theirs} but the fine-tuned model's is {mine} "
                           "(the activation distance compares layers of equal shape)")


def _hidden_states(model, tokenizer, texts: list[str], max_length: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Every layer's hidden states (fp32, eval mode) and the attention mask, on the model's device."""
    device = next(model.parameters()).device
    batch = tokenizer(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    batch = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    was_training = model.training
    model.eval()
    with torch.no_grad():  # not inference_mode: the reference's tensors are kept and reused
        out = model(**batch, output_hidden_states=True)
    model.train(was_training)
    return tuple(h.to(torch.float32, copy=True) for h in out.hidden_states), batch["attention_mask"].bool()
