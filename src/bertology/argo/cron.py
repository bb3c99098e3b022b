"""Cron schedules and time zones as Argo's CronWorkflow validation reads them.

Argo (workflow/validate/validate.go, `CronWorkflow`; `ValidateCronWorkflow` in v3.6) parses every
`spec.schedules` entry with `cron.ParseStandard` of github.com/robfig/cron/v3 v3.0.1 (Argo's go.mod), and
loads `spec.timezone` with Go's `time.LoadLocation`. This module ports that parser (robfig/cron parser.go:
`Parser.Parse`, `normalizeFields`, `getField`, `getRange`, `parseIntOrName`, `mustParseInt`,
`parseDescriptor`; bounds from spec.go) so that a schedule is accepted here exactly when Argo accepts it,
with robfig's error messages. Only validation is ported: nothing here computes firing times.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass


class CronError(ValueError):
    """A schedule or time zone that Argo rejects; the message is robfig's (or Go's) error text."""


@dataclass(frozen=True)
class _Bounds:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


# robfig/cron spec.go: the bounds of each field. ParseStandard has no seconds field (defaults to 0).
MINUTES = _Bounds("minute", 0, 59)
HOURS = _Bounds("hour", 0, 23)
DOM = _Bounds("day of month", 1, 31)
MONTHS = _Bounds(
    "month",
    1,
    12,
    {
        m: i + 1
        for i, m in enumerate(
            ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
        )
    },
)
DOW = _Bounds(
    "day of week", 0, 6, {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
)
STANDARD_FIELDS = (MINUTES, HOURS, DOM, MONTHS, DOW)
# robfig/cron parser.go parseDescriptor: the named schedules (exact, case-sensitive matches).
DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

# Go's strconv.Atoi: an optional sign and decimal digits, nothing else (no spaces, no underscores).
_GO_INT = re.compile(r"[+-]?[0-9]+")
# Go's time.ParseDuration: "0", or a signed sequence of decimal numbers each with a unit.
_GO_DURATION = re.compile(r"[+-]?(?:0|(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+)")


def parse_standard(spec: str) -> None:
    """Raise CronError unless robfig/cron's `ParseStandard(spec)` accepts `spec`.

    Accepted: five whitespace-separated fields (minute hour day-of-month month day-of-week), each a
    comma-separated list of `*`, `?`, `N`, `N-M`, with an optional `/STEP`, where months and weekdays may
    be named (JAN-DEC, SUN-SAT, any case); a descriptor (@yearly, @annually, @monthly, @weekly, @daily,
    @midnight, @hourly, `@every <Go duration>`); either one after an optional `TZ=<zone> ` or
    `CRON_TZ=<zone> ` prefix.
    """
    if len(spec) == 0:
        raise CronError("empty spec string")
    if spec.startswith(("TZ=", "CRON_TZ=")):
        if " " not in spec:  # Go would slice out of range here (a panic); no schedule results either way
            raise CronError(f"provided bad location {spec.split('=', 1)[1]}: missing schedule after it")
        zone = spec[spec.index("=") + 1 : spec.index(" ")]
        try:
            load_location(zone)
        except CronError as e:
            raise CronError(f"provided bad location {zone}: {e}") from None
        spec = spec[spec.index(" ") :].strip()
    if spec.startswith("@"):
        _parse_descriptor(spec)
        return
    fields = spec.split()
    if len(fields) != len(STANDARD_FIELDS):
        raise CronError(
            f"expected exactly {len(STANDARD_FIELDS)} fields, found {len(fields)}: [{' '.join(fields)}]"
        )
    for text, bounds in zip(fields, STANDARD_FIELDS, strict=True):
        _get_field(text, bounds)


def _get_field(text: str, bounds: _Bounds) -> None:
    # strings.FieldsFunc on ',' drops empty pieces, so "1,,2" (and even ",") pass robfig's parser.
    for expr in (r for r in text.split(",") if r):
        _get_range(expr, bounds)


def _get_range(expr: str, bounds: _Bounds) -> None:
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    single = len(low_and_high) == 1
    if low_and_high[0] in ("*", "?"):  # robfig ignores anything after "*-" here; so does this port
        start, end = bounds.low, bounds.high
    else:
        start = _int_or_name(low_and_high[0], bounds.names)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _int_or_name(low_and_high[1], bounds.names)
        else:
            raise CronError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _must_int(range_and_step[1])
        if single:  # "N/step" means "N-max/step"
            end = bounds.high
    else:
        raise CronError(f"too many slashes: {expr}")
    if start < bounds.low:
        raise CronError(f"beginning of range ({start}) below minimum ({bounds.low}): {expr}")
    if end > bounds.high:
        raise CronError(f"end of range ({end}) above maximum ({bounds.high}): {expr}")
    if start > end:
        raise CronError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise CronError(f"step of range should be a positive number: {expr}")


def _int_or_name(expr: str, names: dict[str, int] | None) -> int:
    if names is not None and expr.lower() in names:
        return names[expr.lower()]
    return _must_int(expr)


def _must_int(expr: str) -> int:
    if not _GO_INT.fullmatch(expr):
        raise CronError(f'failed to parse int from {expr}: strconv.Atoi: parsing "{expr}": invalid syntax')
    num = int(expr)
    if num < 0:
        raise CronError(f"negative number ({num}) not allowed: {expr}")
    return num


def _parse_descriptor(descriptor: str) -> None:
    if descriptor in DESCRIPTORS:
        return
    every = "@every "
    if descriptor.startswith(every):
        if not _GO_DURATION.fullmatch(descriptor[len(every) :]):
            raise CronError(f"failed to parse duration {descriptor}: time: invalid duration")
        return
    raise CronError(f"unrecognized descriptor: {descriptor}")


def load_location(name: str) -> None:
    """Raise CronError unless Go's `time.LoadLocation(name)` succeeds (an IANA zone, "UTC" or "Local").

    Go answers "" and "UTC" with UTC and "Local" with the controller's own zone before it looks in the
    zone database; a name containing ".." or starting with "/" is refused (time/zoneinfo_read.go).
    """
    if name in ("", "UTC", "Local"):
        return
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"unknown time zone {name}") from None
