"""Entry point of the vocab-overlap step; the logic lives in bertology.steps.vocab_overlap."""

from bertology.steps import vocab_overlap
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("vocab-overlap", vocab_overlap.run)
