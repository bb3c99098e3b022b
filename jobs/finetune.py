"""Entry point of the finetune step; the logic lives in bertology.steps.finetune."""

from bertology.steps import finetune
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("finetune", finetune.run)
