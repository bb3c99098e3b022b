"""Entry point of the verdict step (a workflow's exit handler); the logic lives in bertology.steps.verdict."""

import sys

from bertology.steps import verdict

if __name__ == "__main__":
    sys.exit(verdict.main())
