"""Entry point of the aggregate step; the logic lives in bertology.steps.aggregate."""

from bertology.steps import aggregate
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("aggregate", aggregate.run)
