"""Entry point of the evaluate step; the logic lives in bertology.steps.evaluate."""

from bertology.steps import evaluate
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("evaluate", evaluate.run)
