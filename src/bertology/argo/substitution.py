"""`{{…}}` substitution as Argo does it: on the template's JSON text, with Go's quoting.

Follows, in argoproj/argo-workflows (v3.6 to v4.1):
- util/template/simple_template.go `simpleReplaceStrict`: a replacement string is escaped with Go's
  `strconv.Quote` (outer quotes stripped) and written into the template's JSON text, which is then
  unmarshalled again. A value with characters Go quotes but JSON cannot read back (`\\a`, `\\v`, other
  control characters as `\\xHH`) makes the substitution fail, and the node is an Error.
- workflow/controller/operator.go `processItem`: what `{{item}}` and `{{item.KEY}}` are for each kind of
  fan-out item, through pkg/apis/workflow/v1alpha1/item.go `Item.String` (`json.Marshal`, outer quotes
  of a string removed, `util/json.Fix` undoing the HTML escapes): a string inside a map item keeps its
  JSON escaping (argoproj/argo-workflows#16061).

Go's `encoding/json` output is reproduced by `go_json` (sorted map keys, HTML-safe escapes, shortest
float formatting), because aggregated fan-out outputs and `{{item}}` of a map or list are made with it.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

# A `{{…}}` tag (fasttemplate's start and end tags); `{{=…}}` expression tags are refused elsewhere.
TAG = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


class SubstitutionError(ValueError):
    """A tag that cannot be substituted: unresolved, or a value Argo's JSON round trip rejects."""


class RawNumber(str):
    """A JSON number kept as written: Go's `json.RawMessage` inside an Item keeps `1.0` as `1.0`."""


def parse_items(text: str) -> Any:
    """JSON as Go unmarshals it into `[]wfv1.Item`: numbers keep their text (operator.go expandTask)."""
    return json.loads(text, parse_float=RawNumber, parse_int=RawNumber)


# --- Go's strconv.Quote --------------------------------------------------------------------------------

_SHORT = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t", "\v": r"\v"}


def go_quote(text: str) -> str:
    """strconv.Quote(text) (Go's appendEscapedRune): printable runes as they are, the rest escaped."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch.isprintable():  # unicode.IsPrint: letters, marks, numbers, punctuation, symbols, ' '
            out.append(ch)
        elif ch in _SHORT:
            out.append(_SHORT[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


# --- Go's encoding/json --------------------------------------------------------------------------------

_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HTML = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_json_string(text: str) -> str:
    """json.Marshal of a Go string (encodeState.string with HTML escaping, as json.Marshal does)."""
    out = ['"']
    for ch in text:
        if ch in _JSON_SHORT:
            out.append(_JSON_SHORT[ch])
        elif ch in _HTML:
            out.append(_HTML[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(value: float) -> str:
    """json.Marshal of a float64 (encoding/json floatEncoder: 'f' in [1e-6, 1e21), else 'e', e-07 -> e-7)."""
    if math.isnan(value) or math.isinf(value):
        raise SubstitutionError(f"json: unsupported value: {value}")
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    if 1e-6 <= abs(value) < 1e21:
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    text = repr(value)
    return re.sub(r"e-0(\d)$", r"e-\1", text)


def go_json(value: Any, *, sort_nested: bool = True) -> str:
    """json.Marshal of a decoded value: compact, numbers as Go writes them, map keys sorted (a nested map
    that came in as an Item's raw JSON keeps its order: `sort_nested=False`)."""
    if isinstance(value, RawNumber):
        return str(value)
    if isinstance(value, str):
        return go_json_string(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict):
        keys = sorted(value) if sort_nested else list(value)
        return "{" + ",".join(f"{go_json_string(k)}:{go_json(value[k], sort_nested=sort_nested)}" for k in keys) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(go_json(v, sort_nested=sort_nested) for v in value) + "]"
    raise SubstitutionError(f"json: unsupported type {type(value).__name__}")


def _fix(text: str) -> str:
    """util/json.Fix: undo json.Marshal's HTML escapes."""
    return text.replace("\\u003c", "<").replace("\\u003e", ">").replace("\\u0026", "&")


def item_string(value: Any) -> str:
    """Item.String(): json.Marshal, a string's outer quotes removed (its escaping kept), then Fix."""
    text = go_json(value, sort_nested=False)  # the Item's raw JSON, compacted
    return _fix(text[1:-1] if text.startswith('"') else text)


def item_scope(item: Any) -> dict[str, str]:
    """The variables processItem sets for one fan-out item."""
    if isinstance(item, dict):
        scope = {f"item.{k}": item_string(v) for k, v in item.items()}  # fmt.Sprintf("%v", itemVal)
        # json.Marshal(map[string]Item): top-level keys sorted, each value's raw JSON as it came; no Fix
        scope["item"] = "{" + ",".join(f"{go_json_string(k)}:{go_json(item[k], sort_nested=False)}"
                                       for k in sorted(item)) + "}"
        return scope
    if isinstance(item, list):
        return {"item": go_json(item, sort_nested=False)}
    if isinstance(item, str) and not isinstance(item, RawNumber):
        return {"item": item}  # GetStrVal
    if isinstance(item, (RawNumber, int, float, bool)):
        return {"item": item_string(item)}
    raise SubstitutionError(f"withItems expected string, number, list, or map. received: {item!r}")


def item_description(item: Any) -> str:
    """The `desc` of generateNodeName: the item's text, map items as sorted `key:value` pairs."""
    if isinstance(item, dict):
        text = ",".join(sorted(f"{k}:{item_string(v)}" for k, v in item.items()))
    elif isinstance(item, str) and not isinstance(item, RawNumber):
        text = item
    else:
        text = item_string(item)
    return text.replace("(", "").replace(")", "")


# --- substitution --------------------------------------------------------------------------------------


def _replace_text(text: str, scope: dict[str, str], strict: bool) -> str:
    def substitute(match: re.Match) -> str:
        name = match.group(1)
        if name not in scope:
            if strict:
                raise SubstitutionError(f"failed to resolve {{{{{name}}}}}")
            return match.group(0)
        return go_quote(scope[name])[1:-1]

    return TAG.sub(substitute, text)


def render(value: Any, scope: dict[str, str], *, strict: bool = True) -> Any:
    """Template.Replace on `value`'s JSON text, then json.Unmarshal, as the controller does for a task or a
    template. Raises SubstitutionError for an unresolved tag (when strict) or a value whose quoted form is
    not valid JSON."""
    text = json.dumps(value, ensure_ascii=False)
    replaced = _replace_text(text, scope, strict)
    if replaced == text:
        return value
    try:
        return json.loads(replaced)
    except json.JSONDecodeError as e:
        bad = next((v for k, v in scope.items() if k in text and go_quote(v) != json.dumps(v, ensure_ascii=False)),
                   None)
        raise SubstitutionError(
            f"invalid character in a substituted value ({e.msg}): Go's strconv.Quote escapes it in a way JSON "
            f"cannot read back" + (f" (value {bad!r})" if bad is not None else "")) from None


def render_string(text: str, scope: dict[str, str], *, strict: bool = True) -> str:
    result = render(text, scope, strict=strict)
    assert isinstance(result, str)
    return result
