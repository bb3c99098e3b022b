"""The two failure kinds every step distinguishes, and the exit codes Argo's retryStrategy keys on.

BadInput  -> exit 2: the user's input is wrong; retrying cannot help, so Argo never retries it.
Transient -> exit 75 (EX_TEMPFAIL): storage hiccups, preemption; Argo retries the step.

A bad name among a fixed set (a parameter, a task, an intervention, a preset, a regime, …) is said one way
everywhere: `unknown` (or `choices`, the tail of a message that words its first part itself) names the
closest allowed name, "did you mean 'seeds'?", and then every allowed one, on the message's one line.
"""

import difflib
from collections.abc import Iterable

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_TRANSIENT = 75


class BertologyError(Exception):
    exit_code = 1


class BadInput(BertologyError):
    """Wrong user input. The message is one line naming the bad value and what is allowed."""

    exit_code = EXIT_BAD_INPUT


class TooSmall(BadInput):
    """A layer or head selection beyond the model's depth or width: valid for a deeper model. The tiny and
    demo presets drop such variants (their stand-in models are smaller than the report's) and say so, but
    refuse one that fits no BERT either (steps.plan._beyond_every_bert)."""


class Transient(BertologyError):
    """A failure that a retry may cure (network, object store, preemption)."""

    exit_code = EXIT_TRANSIENT


def did_you_mean(value: object, allowed: Iterable[object]) -> str | None:
    """The allowed name closest to a misspelt one, else None: one that differs only in case, else the most
    similar by difflib (a ratio of at least 0.6), else the only one it begins ('glu': 'glue-dir'). Only a
    string has a spelling: any other value gets None."""
    if not isinstance(value, str) or not value.strip():
        return None
    names = [str(a) for a in allowed]
    same = [a for a in names if a.lower() == value.lower() and a != value]
    begun = [a for a in names if len(value) >= 2 and a.lower().startswith(value.lower()) and a != value]
    close = same or difflib.get_close_matches(value, names, n=1, cutoff=0.6) or (begun if len(begun) == 1 else [])
    return close[0] if close else None


def choices(value: object, allowed: Iterable[object], label: str = "known", listed: str | None = None) -> str:
    """`did you mean 'seeds'?; known: a, b, c`: the tail of a one-line error about a value that is not among
    `allowed` (`listed`: the allowed names as the message shows them, e.g. grouped)."""
    allowed = list(allowed)
    names = listed or ", ".join(map(str, allowed)) or "none"
    match = did_you_mean(value, allowed)
    return (f"did you mean {match!r}?; " if match is not None else "") + f"{label}: {names}"


def unknown(what: str, value: object, allowed: Iterable[object], label: str = "known") -> BadInput:
    """`unknown study parameter 'sedds' (did you mean 'seeds'?; known: preset, models, …)`, to raise."""
    return BadInput(f"unknown {what} {value!r} ({choices(value, allowed, label)})")
