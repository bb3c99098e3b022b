"""Entry point of the queue watch (the chart's CronWorkflow); the logic lives in bertology.steps.queue_watch."""

import sys

from bertology.steps import queue_watch

if __name__ == "__main__":
    sys.exit(queue_watch.main())
