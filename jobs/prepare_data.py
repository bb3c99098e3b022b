"""Entry point of the prepare-data step; the logic lives in bertology.steps.prepare_data."""

from bertology.steps import prepare_data
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("prepare-data", prepare_data.run)
