"""Tasks: the registry of what each task is, and the sources its examples are loaded from."""

from bertology.tasks.registry import TASKS, Task, get_task
from bertology.tasks.sources import check_data, check_source, load_split, parse_source

__all__ = ["TASKS", "Task", "check_data", "check_source", "get_task", "load_split", "parse_source"]
