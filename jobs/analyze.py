"""Entry point of the analyze step; the logic lives in bertology.steps.analyze."""

from bertology.steps import analyze
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("analyze", analyze.run)
