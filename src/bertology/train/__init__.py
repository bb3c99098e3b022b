"""Fine-tuning and evaluation for every task kind (sequence, span, mlm)."""

from bertology.train.heads import evaluate, head_for, load_finetuned
from bertology.train.loop import FinetuneResult, Hyper, finetune

__all__ = ["FinetuneResult", "Hyper", "evaluate", "finetune", "head_for", "load_finetuned"]
