"""Entry point of the plan step; the logic lives in bertology.steps.plan."""

from bertology.steps import plan
from bertology.steps.harness import entry

if __name__ == "__main__":
    entry("plan", plan.run)
