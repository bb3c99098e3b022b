"""Entry point of the regress step (nightly regression); the logic lives in bertology.steps.regress."""

from bertology.steps import regress
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("regress", regress.run)
