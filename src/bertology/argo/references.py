"""The reference walk: every document, its templates and DAGs, and what each name and `{{...}}` points at.

Entrypoint, onExit, template / templateRef targets (WorkflowTemplates in the templates directory),
`depends` / `dependencies`, cycles, task arguments against the target's inputs and every `{{...}}`
variable. It follows Argo's walk in workflow/validate/validate.go: `Workflow` / `WorkflowTemplate` /
`CronWorkflow` (the document), `validateTemplateHolder` (template references), `validateDAG`,
`verifyNoCycles` and `validateDAGTaskArgumentDependency`; on the way it applies the schema
(bertology.argo.schema) and Argo's own rules (bertology.argo.rules) to what it reaches.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from bertology.argo import rules
from bertology.argo.documents import (
    Source,
    effective_spec,
    parameter_names,
    resolve_task_template,
    tags,
    task_dependencies,
)
from bertology.argo.expressions import ExpressionError, task_names
from bertology.argo.schema import later_fields, schema_errors
from bertology.argo.variables import Scope


@dataclass
class Checker:
    """Collects "file: document: location: message" lines; each document is checked once."""

    library: dict[str, Source]
    errors: list[str] = field(default_factory=list)
    checked: set[int] = field(default_factory=set)

    def error(self, source: Source, where: str, message: str) -> None:
        self.errors.append(f"{source.path}: {source.label}: {where}: {message}")

    def report(self, source: Source, problems: Iterable[rules.Problem]) -> None:
        for where, message in problems:
            self.error(source, where, message)

    def document(self, source: Source) -> None:
        """Schema and references of one document, once; then of the WorkflowTemplates it references."""
        if id(source.doc) in self.checked:
            return
        self.checked.add(id(source.doc))
        schema = schema_errors(source)
        self.errors.extend(schema)
        if schema:
            return  # reference checks assume the shapes the schema guarantees
        spec, sp = source.spec, source.spec_path
        self.report(source, rules.metadata(source))
        self.report(source, later_fields(source))
        if source.kind == "CronWorkflow":
            self.report(source, rules.cron(source))
        # Each document's own arguments: a Workflow's replace its WorkflowTemplate's whole, by name
        # (util.MergeParameters), so checking both documents covers the merged list Argo checks.
        self.report(source, rules.argument_list(f"{sp}.arguments", spec.get("arguments"), allow_empty=True))
        ref = spec.get("workflowTemplateRef")
        if ref is not None:
            if ref.get("clusterScope"):
                self.error(source, f"{sp}.workflowTemplateRef", "ClusterWorkflowTemplates are not supported")
            elif ref.get("name") not in self.library:
                known = ", ".join(sorted(self.library)) or "none"
                self.error(
                    source,
                    f"{sp}.workflowTemplateRef",
                    f"WorkflowTemplate '{ref.get('name')}' not found (known: {known})",
                )
            if spec.get("templates"):
                self.error(source, f"{sp}.templates", "not allowed together with workflowTemplateRef")
        merged, template_source = effective_spec(source, self.library)
        declared = parameter_names(merged.get("arguments"))
        self.report(source, rules.unique(f"{sp}.arguments", declared, "parameter '{}' is declared twice"))
        runnable = source.kind != "WorkflowTemplate"
        # A library WorkflowTemplate declares no arguments: its callers' workflows provide them.
        workflow_params = declared if runnable or merged.get("arguments") else None
        entrypoint = merged.get("entrypoint")
        if entrypoint is None:
            if runnable:
                self.error(source, sp, "missing 'entrypoint'")
        elif template_source.template(entrypoint) is None:
            self.error(source, f"{sp}.entrypoint", f"template '{entrypoint}' not found")
        elif runnable:
            self.entrypoint_inputs(source, template_source.template(entrypoint), declared)
        on_exit = merged.get("onExit")
        if on_exit is not None and template_source.template(on_exit) is None:
            self.error(source, f"{sp}.onExit", f"template '{on_exit}' not found")
        names = [t.get("name") for t in spec.get("templates") or []]
        self.report(source, rules.unique(f"{sp}.templates", names, "template '{}' is defined twice"))
        for template in spec.get("templates") or []:
            self.template(source, template, workflow_params)
        if runnable and entrypoint is not None and template_source.template(entrypoint) is not None:
            self.reachable_workflow_params(source, template_source, entrypoint, declared)

    def entrypoint_inputs(self, source: Source, template: dict, declared: list[str]) -> None:
        for param in (template.get("inputs") or {}).get("parameters") or []:
            if param["name"] not in declared and "value" not in param and "default" not in param:
                self.error(
                    source,
                    f"{source.spec_path}.entrypoint",
                    f"entrypoint '{template['name']}' needs input '{param['name']}', which "
                    f"spec.arguments.parameters does not declare",
                )

    def reachable_workflow_params(
        self, source: Source, start: Source, entrypoint: str, declared: list[str]
    ) -> None:
        """Templates reached through templateRef see this Workflow's parameters: check their uses."""
        seen: set[tuple[int, str]] = set()
        stack = [(start, start.template(entrypoint))]
        while stack:
            owner, template = stack.pop()
            if template is None or (id(owner.doc), template.get("name")) in seen:
                continue
            seen.add((id(owner.doc), template.get("name")))
            if owner is not source:
                self.document(owner)
                for tag in tags(template):
                    if tag.startswith("workflow.parameters.") and tag.split(".", 2)[2] not in declared:
                        self.error(
                            source,
                            f"(via {owner.label}) template '{template.get('name')}'",
                            f"uses '{{{{{tag}}}}}', which spec.arguments.parameters does not declare "
                            f"(declared: {', '.join(declared) or 'none'})",
                        )
            for task in (template.get("dag") or {}).get("tasks") or []:
                target = resolve_task_template(task, owner, self.library)
                if not isinstance(target, str):
                    stack.append((target[1], target[0]))

    def template(self, source: Source, template: dict, workflow_params: list[str] | None) -> None:
        where = f"{source.spec_path}.templates[{template.get('name')}]"
        self.report(source, rules.template(where, template))
        scope = Scope(template.get("name"), parameter_names(template.get("inputs")), workflow_params,
                      exit_handler=template.get("name") == source.spec.get("onExit"))
        for key, value in template.items():
            if key != "dag":
                for tag in tags(value):
                    self.reference(source, f"{where}.{key}", tag, scope)
        if template.get("dag") is not None:
            self.dag(source, where, template, scope)

    def dag(self, source: Source, where: str, template: dict, scope: Scope) -> None:
        tasks = template["dag"].get("tasks") or []
        names = [t.get("name") for t in tasks]
        self.report(source, rules.dag(where, tasks))
        deps: dict[str, list[str]] = {}
        targets: dict[str, dict] = {}
        uses_depends = any(t.get("depends") for t in tasks)
        for task in tasks:
            at = f"{where}.dag.tasks[{task.get('name')}]"
            self.report(source, rules.dag_task(at, task, uses_depends))
            given = [k for k in ("template", "templateRef", "inline") if task.get(k) is not None]
            if len(given) != 1:
                self.error(
                    source,
                    at,
                    f"needs exactly one of template, templateRef (has {', '.join(given) or 'none'})",
                )
            else:
                target = resolve_task_template(task, source, self.library)
                if isinstance(target, str):
                    self.error(source, f"{at}.{given[0]}", target)
                else:
                    targets[task["name"]] = target[0]
                    self.arguments(source, at, task, target[0])
            try:
                deps[task.get("name")] = task_names(task_dependencies(task))
            except ExpressionError as e:
                self.error(source, f"{at}.depends", str(e))
                deps[task.get("name")] = []
            for dep in deps[task.get("name")]:
                if dep not in names:
                    self.error(
                        source,
                        f"{at}.depends",
                        f"unknown task '{dep}' (tasks in this DAG: {', '.join(names)})",
                    )
        cycle = _find_cycle({n: [d for d in ds if d in deps] for n, ds in deps.items()})
        if cycle:
            self.error(source, f"{where}.dag", f"dependency cycle: {' -> '.join(cycle)}")
            return
        for task in tasks:
            at = f"{where}.dag.tasks[{task.get('name')}]"
            task_scope = scope.for_task(task, _ancestors(task.get("name"), deps), targets)
            for key, value in task.items():
                if key not in ("name", "template", "templateRef", "depends", "dependencies"):
                    for tag in tags(value):
                        self.reference(source, f"{at}.{key}", tag, task_scope)
        for tag in tags(template.get("outputs")):  # DAG outputs may name any of its tasks
            self.reference(source, f"{where}.outputs", tag, scope.for_task({}, set(names), targets))

    def arguments(self, source: Source, at: str, task: dict, target: dict) -> None:
        declared = (target.get("inputs") or {}).get("parameters") or []
        names = [p["name"] for p in declared]
        passed = parameter_names(task.get("arguments"))
        for param in (task.get("arguments") or {}).get("parameters") or []:
            if param["name"] not in names:
                self.error(
                    source,
                    f"{at}.arguments",
                    f"parameter '{param['name']}' is not an input of template "
                    f"'{target.get('name')}' (inputs: {', '.join(names) or 'none'})",
                )
            if param.get("value") is None and param.get("valueFrom") is None:
                self.error(source, f"{at}.arguments", f"parameter '{param['name']}' has no value")
        self.report(source, rules.unique(f"{at}.arguments", passed, "parameter '{}' is passed twice"))
        for param in declared:
            if param["name"] not in passed and param.get("value") is None and param.get("default") is None:
                self.error(
                    source,
                    f"{at}.arguments",
                    f"missing parameter '{param['name']}' required by template '{target.get('name')}'",
                )

    def reference(self, source: Source, where: str, tag: str, scope: Scope) -> None:
        problem = scope.check(tag)
        if problem:
            self.error(source, where, f"unresolved '{{{{{tag}}}}}': {problem}")


def _ancestors(name: str, deps: dict[str, list[str]]) -> set[str]:
    found: set[str] = set()
    stack = list(deps.get(name, []))
    while stack:
        dep = stack.pop()
        if dep not in found:
            found.add(dep)
            stack.extend(deps.get(dep, []))
    return found


def _find_cycle(deps: dict[str, list[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in deps.get(node, []):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in deps:
        if node not in state and (cycle := visit(node)):
            return cycle
    return None
