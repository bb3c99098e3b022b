"""The DAG walk: a template invocation bound to its inputs, a DAG's tasks in dependency order, fan-outs.

`Run` adds the walk to containers.py's `Containers` (the run's state and its container nodes). Follows, in
argoproj/argo-workflows:
- workflow/controller/operator.go `executeTemplate` with workflow/common/util.go `ProcessArgs`: a
  template's inputs from the task's arguments, else their `value` / `default`, checked against `enum`;
- dag.go `executeDAG` and `executeDAGTask`: each task starts once the tasks it depends on are fulfilled
  and its `depends` holds, else it is Omitted; a failure stops nothing; the DAG's phase is `assessDAGPhase`'s
  over the node graph (dag.py, expressions.py);
- dag.go `expandTask`: withParam / withItems fan out into one child per item, all started together, their
  TaskGroup's phase and aggregated outputs (fanout.py, substitution.py `processItem`).

A fan-out's size is announced (RunEvent `planned`) as soon as the outputs its items come from exist, before
the tasks it waits for are done, so a progress display knows the run's work from its plan on.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
from collections.abc import Callable

from bertology.argo import dag as dags
from bertology.argo import fanout
from bertology.argo.concurrency import semaphore_names
from bertology.argo.containers import Containers
from bertology.argo.dag import dag_phase
from bertology.argo.documents import Source, resolve_task_template, task_dependencies
from bertology.argo.expressions import TaskOutcome, evaluate_depends, task_names
from bertology.argo.nodes import NodeResult, RunEvent
from bertology.argo.substitution import SubstitutionError, item_scope
from bertology.argo.values import NodeError, any_string, substitute


class Run(Containers):
    """One run of a Workflow: its entrypoint's template invocation, walked to completion."""

    def template(self, template: dict, source: Source, name: str, args: dict[str, str], key: tuple[int, ...]) -> NodeResult:
        """Run one template invocation to completion (in the calling thread)."""
        try:
            inputs = self._bind_inputs(template, args)
        except NodeError as e:
            self.emit(name, f"Error: {e}")
            return self.record(NodeResult(name, template["name"], "Error", message=str(e)))
        if template.get("dag") is None:
            return self.container(template, name, inputs, key)
        return self.dag(template, source, name, inputs, key)

    def _bind_inputs(self, template: dict, args: dict[str, str]) -> dict[str, str]:
        inputs = {}
        for param in (template.get("inputs") or {}).get("parameters") or []:
            name = param["name"]
            if name in args:
                value = args[name]
            elif param.get("value") is not None or param.get("default") is not None:
                chosen = param.get("value") if param.get("value") is not None else param["default"]
                value = substitute(any_string(chosen), self.globals)
            else:
                raise NodeError(f"input parameter '{name}' of template '{template['name']}' has no value")
            if param.get("enum") and value not in [any_string(v) for v in param["enum"]]:
                raise NodeError(f"input parameter '{name}' = {value!r} is not one of {param['enum']}")
            inputs[name] = value
        return inputs

    # -- DAG (dag.py)

    def dag(self, template: dict, source: Source, name: str, inputs: dict[str, str], key: tuple[int, ...]) -> NodeResult:
        """Every task starts once its dependencies are fulfilled and its `depends` holds; a failure stops
        nothing (dag.go executeDAGTask); the phase is assessDAGPhase's once all are fulfilled."""
        tasks = template["dag"]["tasks"]
        depends = {t["name"]: task_dependencies(t) for t in tasks}
        upstream = {n: task_names(expr) for n, expr in depends.items()}
        scope = {**self.globals, **{f"inputs.parameters.{k}": v for k, v in inputs.items()}}
        continue_on = {t["name"]: _continue_on(t) for t in tasks}
        outcomes: dict[str, TaskOutcome] = {}
        outputs: dict[str, dict[str, str]] = {}
        pending = [t["name"] for t in tasks]
        finished: queue.Queue = queue.Queue()
        running = 0
        foreseen: set[str] = set()
        while True:
            self._foresee(tasks, pending, foreseen, name, scope, outputs)
            progressed = True
            while progressed:
                progressed = False
                for index, task in enumerate(tasks):
                    task_name = task["name"]
                    if task_name not in pending or any(d not in outcomes for d in upstream[task_name]):
                        continue
                    pending.remove(task_name)
                    progressed = True
                    node_name = f"{name}.{task_name}" if name else task_name
                    if depends[task_name] is not None and not evaluate_depends(depends[task_name], outcomes):
                        outcomes[task_name] = TaskOutcome("Omitted", continue_on=continue_on[task_name])
                        self.record(NodeResult(node_name, _template_name(task), "Omitted",
                                               message="omitted: depends condition not met"))
                        continue
                    task_scope = {**scope, **{f"tasks.{t}.outputs.parameters.{p}": v
                                              for t, params in outputs.items() for p, v in params.items()}}

                    def run_task(task=task, node_name=node_name, task_scope=task_scope, index=index) -> None:
                        try:
                            result = self.task(task, source, node_name, task_scope, key + (index,))
                        except Exception as e:  # noqa: BLE001 - a bug must fail the node, never hang the DAG
                            self.emit(node_name, f"Error: {type(e).__name__}: {e}")
                            result = (TaskOutcome("Error"), {})
                        finished.put((task["name"], result))

                    _spawn(run_task)
                    running += 1
            if running == 0:
                break
            task_name, (outcome, task_outputs) = finished.get()
            running -= 1
            outcomes[task_name] = dataclasses.replace(outcome, continue_on=continue_on[task_name])
            outputs[task_name] = task_outputs
        assert not pending, pending  # every task is either run or omitted once its dependencies finish
        fail_fast = template["dag"].get("failFast", True) is not False
        node = dags.Node(name or self.workflow, dags.DAG, "")
        prefix = f"{name}." if name else ""
        node.phase = dag_phase(node, [t["name"] for t in tasks], upstream,
                               {t["name"]: self.graph[prefix + t["name"]] for t in tasks}, fail_fast, continue_on)
        return self.record(NodeResult(node.name, template["name"], node.phase), node)

    def _foresee(self, tasks: list[dict], pending: list[str], foreseen: set[str], name: str, scope: dict[str, str],
                 outputs: dict[str, dict[str, str]]) -> None:
        """Announce each pending fan-out's size once the values its items come from exist."""
        task_scope = {**scope, **{f"tasks.{t}.outputs.parameters.{p}": v
                                  for t, params in outputs.items() for p, v in params.items()}}
        for task in tasks:
            if task["name"] in foreseen or task["name"] not in pending or not (task.get("withParam")
                                                                                 or task.get("withItems")):
                continue
            try:
                items = fanout.items(task, lambda v: substitute(v, task_scope))
            except (NodeError, fanout.FanOutError, SubstitutionError):
                continue  # not yet known (or never: the task itself will say why)
            foreseen.add(task["name"])
            if items is not None:
                node_name = f"{name}.{task['name']}" if name else task["name"]
                self.notify(RunEvent("planned", node_name, count=len(items)))

    def task(self, task: dict, source: Source, name: str, scope: dict[str, str],
             key: tuple[int, ...]) -> tuple[TaskOutcome, dict[str, str]]:
        """One DAG task: a single invocation, or a fan-out over withParam / withItems (fanout.py)."""
        target = resolve_task_template(task, source, self.library)
        assert not isinstance(target, str), target  # the validator guarantees templates resolve
        template, target_source = target
        try:
            items = fanout.items(task, lambda v: substitute(v, scope))
            arguments = [
                {p["name"]: any_string(substitute(p["value"], {**scope, **(item_scope(item) if items is not None else {})}))
                 for p in (task.get("arguments") or {}).get("parameters") or []}
                for item in (items if items is not None else [None])
            ]
        except (NodeError, fanout.FanOutError, SubstitutionError) as e:
            self.emit(name, f"Error: {e}")
            return TaskOutcome("Error"), self.record(NodeResult(name, template["name"], "Error", message=str(e))).outputs
        if items is None:
            result = self.template(template, target_source, name, arguments[0], key)
            return TaskOutcome(result.phase), result.outputs
        names = [fanout.child_name(name, i, item) for i, item in enumerate(items)]
        self.notify(RunEvent("fanout", name, count=len(items), children=tuple(names)))
        if not items:
            self.record(NodeResult(name, template["name"], "Skipped", message=fanout.SKIPPED_EMPTY))
            self.emit(name, f"Skipped ({fanout.SKIPPED_EMPTY})")
            return TaskOutcome("Skipped"), {}

        children: list[NodeResult | None] = [None] * len(items)
        used = json.dumps(task.get("arguments") or {})
        self._item_values.update({names[i]: {k: v for k, v in item_scope(item).items() if f"{{{{{k}}}}}" in used}
                                  for i, item in enumerate(items)})

        def run_child(i: int) -> None:
            try:
                children[i] = self.template(template, target_source, names[i], arguments[i], key + (i,))
            except Exception as e:  # noqa: BLE001 - a bug must fail the node, never hang the DAG
                self.emit(names[i], f"Error: {type(e).__name__}: {e}")
                children[i] = NodeResult(names[i], template["name"], "Error", message=str(e))
            finally:
                self.limits.cancel(key + (i,), locks)

        locks = semaphore_names(template)
        if template.get("container") is not None:
            for i in range(len(items)):
                self.limits.reserve(key + (i,), locks)
        for thread in [_spawn(lambda i=i: run_child(i)) for i in range(len(items))]:
            thread.join()
        phases = tuple(c.phase for c in children)
        phase = fanout.group_phase(list(phases))
        declared = [p["name"] for p in (template.get("outputs") or {}).get("parameters") or []]
        outputs = fanout.aggregate_outputs([(c.phase, c.outputs) for c in children], declared)
        succeeded = sum(p == "Succeeded" for p in phases)
        self.record(NodeResult(name, template["name"], phase, outputs=outputs,
                               message=f"{succeeded}/{len(items)} children succeeded"),
                    dags.Node(name, dags.TASK_GROUP, phase, [self.graph[n] for n in names]))
        return TaskOutcome(phase, children=phases), outputs

    # -- container (retries.py, concurrency.py)

def _spawn(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def _continue_on(task: dict) -> tuple[str, ...]:
    """The phases a task's continueOn lets its dependents and its DAG go on after (Failed, Error)."""
    flags = task.get("continueOn") or {}
    return tuple(phase for key, phase in (("failed", "Failed"), ("error", "Error")) if flags.get(key) is True)


def _template_name(task: dict) -> str:
    return task.get("template") or (task.get("templateRef") or {}).get("template", "?")
