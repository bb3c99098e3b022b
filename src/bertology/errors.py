"""The two failure kinds every step distinguishes, and the exit codes Argo's retryStrategy keys on.

BadInput  -> exit 2: the user's input is wrong; retrying cannot help, so Argo never retries it.
Transient -> exit 75 (EX_TEMPFAIL): storage hiccups, preemption; Argo retries the step.
"""

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
