"""Entry point of the regress step (nightly regression); the logic lives in bertology.results.regression."""

from bertology.results import regression
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("regress", regression.run)
