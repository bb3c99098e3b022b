"""What a `{{...}}` tag may name at one place of a template: the variable scope of the validator.

Argo builds the same scope in workflow/validate/validate.go: `validateTemplate` (workflow and input
parameters), `addItemsToScope` (`item`, `item.KEY` in a task with withItems / withParam),
`addOutputsToScope` (ancestor tasks' output parameters, in `validateDAG`) and `resolveAllVariables`
(anything else fails to resolve). We allow a stricter subset: the variables our workflows use, plus
`workflow.failures` in the exit handler only, as validate.go sets it only for the onExit template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from bertology.argo.documents import parameter_names

BUILTINS = ("workflow.name", "workflow.uid", "workflow.namespace", "workflow.status", "workflow.annotations.json",
            "pod.name", "retries")
# validate.go: `workflow.failures` is set only for the onExit template (after the entrypoint is validated)
EXIT_ONLY = ("workflow.failures",)


@dataclass
class Scope:
    """What `{{...}}` may name at one place: a template's body, or one DAG task."""

    template: str
    inputs: list[str]
    workflow_params: list[str] | None  # None: not known here (a library WorkflowTemplate)
    task: dict | None = None
    ancestors: set[str] = field(default_factory=set)
    targets: dict[str, dict] = field(default_factory=dict)
    exit_handler: bool = False  # the template spec.onExit names

    def for_task(self, task: dict, ancestors: set[str], targets: dict[str, dict]) -> Scope:
        return Scope(self.template, self.inputs, self.workflow_params, task, ancestors, targets, self.exit_handler)

    def check(self, tag: str) -> str | None:
        """None when the tag resolves here, else why not."""
        if tag.startswith("="):
            return "expression tags ('{{=...}}') are not supported"
        if tag in BUILTINS or (tag in EXIT_ONLY and self.exit_handler):
            return None
        if tag in EXIT_ONLY:
            return f"only the exit handler (the template spec.onExit names) can read '{tag}'"
        parts = tag.split(".")
        if tag.startswith("workflow.parameters.") and len(parts) == 3:
            if self.workflow_params is None or parts[2] in self.workflow_params:
                return None
            return (
                f"workflow parameter '{parts[2]}' is not declared in spec.arguments.parameters "
                f"(declared: {', '.join(self.workflow_params) or 'none'})"
            )
        if tag.startswith("inputs.parameters.") and len(parts) == 3:
            if parts[2] in self.inputs:
                return None
            return (
                f"template '{self.template}' declares no input '{parts[2]}' "
                f"(inputs: {', '.join(self.inputs) or 'none'})"
            )
        if parts[0] == "item":
            return self._item(parts[1:]) if self.task is not None else "'item' is only defined in DAG tasks"
        if (
            parts[0] == "tasks"
            and len(parts) == 5
            and parts[2:4] == ["outputs", "parameters"]
            and self.task is not None
        ):
            return self._task_output(parts[1], parts[4])
        allowed = (
            "workflow.parameters.NAME, inputs.parameters.NAME, tasks.TASK.outputs.parameters.NAME, "
            f"item, item.KEY, {', '.join(BUILTINS)}"
        )
        return f"not a supported variable (allowed: {allowed})"

    def _item(self, keys: list[str]) -> str | None:
        assert self.task is not None
        if self.task.get("withParam") is None and self.task.get("withItems") is None:
            name = self.task.get("name")
            return f"'item' is only defined in a task with withParam or withItems ('{name}' has neither)"
        items = self.task.get("withItems")
        if keys and items is not None:
            missing = [i for i in items if not isinstance(i, dict) or keys[0] not in i]
            if missing:
                return f"withItems entry {json.dumps(missing[0])} has no key '{keys[0]}'"
        return None

    def _task_output(self, task: str, param: str) -> str | None:
        if task not in self.targets and task not in self.ancestors:
            return f"no task '{task}' in this DAG"
        if task not in self.ancestors:
            return f"task '{task}' is not a dependency (direct or transitive) of '{self.task.get('name')}'"
        target = self.targets.get(task)
        if target is None:
            return None  # its template is unresolved, reported already
        outputs = parameter_names(target.get("outputs"))
        if param not in outputs:
            return (
                f"template '{target.get('name')}' of task '{task}' declares no output parameter '{param}' "
                f"(outputs: {', '.join(outputs) or 'none'})"
            )
        return None
