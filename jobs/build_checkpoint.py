"""Entry point of the build-checkpoint step; the logic lives in bertology.steps.build_checkpoint."""

from bertology.steps import build_checkpoint
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("build-checkpoint", build_checkpoint.run)
