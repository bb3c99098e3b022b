"""The two small boolean languages our workflows use: a DAG task's `depends` and a retry `expression`.

Both are `&&` / `||` / `!` / parentheses over atoms; only the atoms differ. Parsing is strict so that the
validator and the local runner refuse (by name) anything Argo would read differently.

depends atoms:  `task` or `task.Result`. A bare `task` means `(task.Succeeded || task.Skipped ||
task.Daemoned)`, as in Argo's enhanced depends logic, plus `task.Errored` / `task.Failed` when the task
has `continueOn` error / failed (workflow/common/ancestry.go `expandDependency`).
retry atoms:    comparisons over the variables operator.go `buildRetryStrategyLocalScope` gives the expression
                (expr-lang, with `asInt` = expr's `int`, util/expr/env/env.go `GetFuncMap`):
                `asInt(lastRetry.exitCode) == N` / `!= N` / `in [N, ...]` (the exit code is a string, "-1"
                when the pod has none: a pod the kubelet rejected, or one deleted before it ran),
                `lastRetry.status == "Error"|"Failed"` / `!=`, and `lastRetry.message contains "TEXT"`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# The task results Argo's depends logic knows (docs: "Enhanced Depends Logic").
TASK_RESULTS = (
    "Succeeded",
    "Failed",
    "Errored",
    "Skipped",
    "Omitted",
    "Daemoned",
    "AnySucceeded",
    "AllFailed",
)
RETRY_SUBSET = (
    'asInt(lastRetry.exitCode) == N | != N | in [N, ...], lastRetry.status == | != "Error"|"Failed"|"Succeeded", '
    'lastRetry.message contains "TEXT", joined by &&, || and !'
)


class ExpressionError(ValueError):
    """A depends / retry expression that is malformed or outside the supported subset (one-line message)."""


@dataclass(frozen=True)
class Not:
    operand: Expr


@dataclass(frozen=True)
class BoolOp:
    op: str  # "&&" or "||"
    left: Expr
    right: Expr


@dataclass(frozen=True)
class TaskAtom:
    task: str
    result: str | None  # None: a bare name


@dataclass(frozen=True)
class RetryAtom:
    field: str  # "exitCode", "status" or "message"
    op: str  # "==", "!=", "in" (exitCode) or "contains" (message)
    value: int | str | tuple[int, ...]


Expr = Not | BoolOp | TaskAtom | RetryAtom

# An operator, or an atom: a run of anything else, where a call like `asInt(x)`, a quoted string and `!=`
# count as part of the atom.
_TOKEN = re.compile(r"""\s*(?:(&&|\|\||!(?!=)|\(|\))|((?:\w+\([^()]*\)|"[^"]*"|'[^']*'|!=|[^&|!()"'])+))""")


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ExpressionError(f"malformed expression {text!r} at {text[pos:].strip()!r}")
        operator, atom = match.groups()
        tokens.append(operator or atom.strip())
        pos = match.end()
    return tokens


def _parse(text: str, parse_atom: Callable[[str], Expr]) -> Expr:
    tokens = _tokenize(text)
    if not tokens:
        raise ExpressionError(f"empty expression {text!r}")
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def parse_or() -> Expr:
        node = parse_and()
        while peek() == "||":
            take()
            node = BoolOp("||", node, parse_and())
        return node

    def parse_and() -> Expr:
        node = parse_unary()
        while peek() == "&&":
            take()
            node = BoolOp("&&", node, parse_unary())
        return node

    def parse_unary() -> Expr:
        token = peek()
        if token is None or token in ("&&", "||", ")"):
            raise ExpressionError(f"malformed expression {text!r}: expected a term, got {token or 'the end'}")
        take()
        if token == "!":
            return Not(parse_unary())
        if token == "(":
            node = parse_or()
            if peek() != ")":
                raise ExpressionError(f"malformed expression {text!r}: missing ')'")
            take()
            return node
        return parse_atom(token)

    node = parse_or()
    if pos != len(tokens):
        raise ExpressionError(f"malformed expression {text!r}: unexpected {tokens[pos]!r}")
    return node


_TASK_ATOM = re.compile(r"^([A-Za-z0-9_-]+)(?:\.([A-Za-z]+))?$")


def _task_atom(token: str) -> TaskAtom:
    match = _TASK_ATOM.match(token)
    if not match:
        raise ExpressionError(f"malformed depends term {token!r} (expected TASK or TASK.Result)")
    task, result = match.groups()
    if result is not None and result not in TASK_RESULTS:
        raise ExpressionError(
            f"unknown task result '.{result}' in depends (allowed: {', '.join(TASK_RESULTS)})"
        )
    return TaskAtom(task, result)


def parse_depends(text: str) -> Expr:
    return _parse(text, _task_atom)


def dependencies_to_expr(names: list[str]) -> Expr | None:
    """The legacy `dependencies: [A, B]` list is `A && B` with bare-name semantics."""
    expr: Expr | None = None
    for name in names:
        atom = _task_atom(name)
        expr = atom if expr is None else BoolOp("&&", expr, atom)
    return expr


def task_names(expr: Expr | None) -> list[str]:
    """The tasks an expression mentions, in order of first mention."""
    found: list[str] = []

    def walk(node: Expr | None) -> None:
        if isinstance(node, TaskAtom) and node.task not in found:
            found.append(node.task)
        elif isinstance(node, Not):
            walk(node.operand)
        elif isinstance(node, BoolOp):
            walk(node.left)
            walk(node.right)

    walk(expr)
    return found


@dataclass(frozen=True)
class TaskOutcome:
    """What depends can see of a finished task: its phase and, for a fan-out, its children's phases."""

    phase: str  # an Argo node phase: Succeeded | Failed | Error | Skipped | Omitted
    children: tuple[str, ...] | None = None  # None: not a fan-out
    continue_on: tuple[str, ...] = ()  # the phases of the task's continueOn: Failed, Error


def task_result(outcome: TaskOutcome, result: str | None) -> bool:
    if result is None:  # Daemoned never happens locally
        return outcome.phase in ("Succeeded", "Skipped", *outcome.continue_on)
    if result == "AnySucceeded":
        return any(p == "Succeeded" for p in outcome.children or ())
    if result == "AllFailed":
        return bool(outcome.children) and all(p == "Failed" for p in outcome.children or ())
    if result == "Daemoned":
        return False
    return outcome.phase == ("Error" if result == "Errored" else result)


def evaluate(expr: Expr, atom: Callable[[Expr], bool]) -> bool:
    if isinstance(expr, Not):
        return not evaluate(expr.operand, atom)
    if isinstance(expr, BoolOp):
        if expr.op == "&&":
            return evaluate(expr.left, atom) and evaluate(expr.right, atom)
        return evaluate(expr.left, atom) or evaluate(expr.right, atom)
    return atom(expr)


def evaluate_depends(expr: Expr, outcomes: dict[str, TaskOutcome]) -> bool:
    return evaluate(expr, lambda a: task_result(outcomes[a.task], a.result))  # type: ignore[union-attr]


_INT = r"-?\d+"
_STRING = r"""(?:"([^"]*)"|'([^']*)')"""
_EXIT_ATOM = re.compile(rf"^asInt\(\s*lastRetry\.exitCode\s*\)\s*(==|!=)\s*({_INT})$")
_EXIT_IN = re.compile(rf"^asInt\(\s*lastRetry\.exitCode\s*\)\s+in\s*\[\s*({_INT}(?:\s*,\s*{_INT})*)\s*\]$")
_STATUS_ATOM = re.compile(rf"^lastRetry\.status\s*(==|!=)\s*{_STRING}$")
_MESSAGE_ATOM = re.compile(rf"^lastRetry\.message\s+contains\s+{_STRING}$")


def _retry_atom(token: str) -> RetryAtom:
    if match := _EXIT_ATOM.match(token):
        return RetryAtom("exitCode", match.group(1), int(match.group(2)))
    if match := _EXIT_IN.match(token):
        return RetryAtom("exitCode", "in", tuple(int(n) for n in re.findall(_INT, match.group(1))))
    if match := _STATUS_ATOM.match(token):
        status = match.group(2) if match.group(2) is not None else match.group(3)
        if status in ("Error", "Failed", "Succeeded"):
            return RetryAtom("status", match.group(1), status)
    if match := _MESSAGE_ATOM.match(token):
        return RetryAtom("message", "contains", match.group(1) if match.group(1) is not None else match.group(2))
    raise ExpressionError(f"unsupported retryStrategy.expression term {token!r} (supported: {RETRY_SUBSET})")


def parse_retry(text: str) -> Expr:
    return _parse(text, _retry_atom)


def evaluate_retry(expr: Expr, exit_code: int | None, status: str, message: str = "") -> bool:
    """Argo's lastRetry: `status` Failed (non-zero exit, or a pod the kubelet failed) or Error; `exit_code`
    None when the pod has none, which Argo passes as "-1"; `message` the node's message."""
    code = -1 if exit_code is None else exit_code

    def atom(a: Expr) -> bool:
        assert isinstance(a, RetryAtom)
        if a.field == "message":
            return str(a.value) in message
        if a.op == "in":
            return code in a.value  # type: ignore[operator]
        left = code if a.field == "exitCode" else status
        return (left == a.value) == (a.op == "==")

    return evaluate(expr, atom)
