"""Fine-tuning and evaluation of sequence classifiers."""

from bertology.train.evaluate import evaluate, load_finetuned
from bertology.train.loop import FinetuneResult, Hyper, finetune

__all__ = ["FinetuneResult", "Hyper", "evaluate", "finetune", "load_finetuned"]
