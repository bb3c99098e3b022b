"""permute-within: shuffle the elements inside each parameter tensor, independently.

The monolingual report's "oracle" initialisation (§5.2): "for each weight matrix, we shuffle
its elements", which gives every matrix exactly its pre-trained value distribution (same multiset of
values, same norm, mean and variance) with all structure destroyed: the "speed of light" for a random
init. `tensors` takes name globs (see tensor_globs) and defaults to ["*"], every parameter tensor: weights,
embeddings, biases and LayerNorms. The init-distribution study's oracle follows the report's words and
names the weight matrices (`*_embeddings.weight`, `*.attention.self.*.weight`,
`*encoder.layer.*.dense.weight`, `*pooler.dense.weight`: 76 tensors of BERT-base, every matrix of the
encoder); its opt-in oracle-all-tensors keeps the default, the report's other wording ("initialize each
parameter to exactly the same distribution"). Each tensor gets its own uniform permutation of all its
elements, drawn in model order from the chain's generator; a tied tensor is permuted once. Buffers
(position ids) are not parameters and stay.

Speed: a BERT-base has 110M elements to permute, and Fisher-Yates is memory-latency bound, so tensors are
spread over torch's intra-op thread count, each with its own generator seeded in model order from the
chain's (bertology.sampling.child_seeds): the bytes do not depend on the thread count or scheduling.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.interventions import tensor_globs
from bertology.sampling import child_seeds, permutation

# each parameter's (type, allowed values), as `bertology interventions` lists them
ALLOWED: dict[str, tuple[str, str]] = {
    "tensors": ("list[str]", ('parameter-name globs, each matching a tensor, e.g. ["*.attention.self.*.weight"]; '
                             '["*"]: every parameter tensor')),
}


def check(params: dict, config: PretrainedConfig) -> None:
    tensor_globs.check(params["tensors"], config, "permute-within tensors")


def apply(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, params: dict, generator: torch.Generator
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    chosen = [p for _, p in tensor_globs.select(model, params["tensors"], "permute-within tensors")]
    work = sorted(zip(chosen, child_seeds(len(chosen), generator)), key=lambda w: -w[0].numel())
    with ThreadPoolExecutor(max_workers=max(1, min(len(work), torch.get_num_threads()))) as pool:
        list(pool.map(lambda w: permute_elements(*w), work))  # largest first; list() re-raises errors
    return model, tokenizer


@torch.no_grad()  # per call: grad mode is thread-local
def permute_elements(param: torch.Tensor, seed: int) -> None:
    """Shuffle all elements of `param` in place with a uniform permutation drawn from `seed`."""
    flat = param.detach().reshape(-1)
    order = permutation(flat.numel(), torch.Generator().manual_seed(seed)).to(flat.device)
    param.copy_(flat[order].view(param.shape))
