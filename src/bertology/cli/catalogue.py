"""`bertology studies` and `bertology interventions`: what can be run, as text or JSON (the study workflows
with the report each reproduces and their parameters; the intervention registry with each parameter's type,
default and allowed values). The text is a table fitted to the terminal's width: a cell too long for its
column wraps at spaces, never inside a word."""

from __future__ import annotations

import argparse
import json
import shutil
import textwrap
from pathlib import Path

from bertology.errors import BadInput
from bertology.workflow_header import default_workflows, header, title_and_report

GAP = "  "  # between columns
# An example of `bertology checkpoint --apply` with a list-valued parameter: the values after `=` are JSON.
APPLY_EXAMPLE = ("google-bert/bert-base-uncased", 'reinit:scope=heads,heads=["0:3","11:7"]', "./bert-heads")


def terminal_width() -> int:
    """The terminal's columns ($COLUMNS first; 80 where there is no terminal, e.g. in a pipe)."""
    return shutil.get_terminal_size((80, 24)).columns


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def _widths(natural: list[int], minimum: list[int], room: int) -> list[int]:
    """Column widths that share `room`: a column that fits in its fair share gets what it needs, the others
    split the rest evenly; none narrower than its longest word (`minimum`)."""
    widths = list(natural)
    if sum(natural) <= room:
        return widths
    left, open_ = room, sorted(range(len(natural)), key=lambda i: natural[i])
    while open_:
        share = left // len(open_)
        i = open_.pop(0)
        widths[i] = max(minimum[i], min(natural[i], share))
        left -= widths[i]
    return widths


def table(header: list[str], rows: list[list[str]], width: int, fixed: int = 1) -> list[str]:
    """The rows under their header as aligned lines of at most `width` characters: the first `fixed` columns
    as they are, the others wrapped at spaces to share what is left (a word longer than its column stands
    whole). Rows that wrap are set apart by a blank line."""
    cells = [header, *rows]
    natural = [max(len(row[i]) for row in cells) for i in range(len(header))]
    minimum = [max((len(word) for row in cells for word in row[i].split()), default=0) for i in range(len(header))]
    room = width - len(GAP) * (len(header) - 1) - sum(natural[:fixed])
    widths = natural[:fixed] + _widths(natural[fixed:], minimum[fixed:], room)
    out: list[list[str]] = []
    for row in cells:
        columns = [[cell] if i < fixed else _wrap(cell, widths[i]) for i, cell in enumerate(row)]
        out.append([GAP.join(column[k].ljust(widths[i]) if k < len(column) else " " * widths[i]
                              for i, column in enumerate(columns)).rstrip()
                    for k in range(max(map(len, columns)))])
    spaced = any(len(lines) > 1 for lines in out)
    lines = [*out[0], GAP.join("-" * w for w in widths)]
    for i, row_lines in enumerate(out[1:]):
        lines += ([""] if spaced and i else []) + row_lines
    return lines


def _default(value) -> str:
    return "(none)" if value is None else json.dumps(value)


def cmd_interventions(args: argparse.Namespace) -> int:
    from bertology.interventions import REGISTRY

    if args.output == "json":
        print(json.dumps([{"name": name, "doc": entry.doc.removeprefix(f"{name}: "), "random": entry.random,
                           "params": entry.defaults,
                           "parameters": [{"name": key, "type": entry.allowed[key][0], "default": default,
                                           "allowed": entry.allowed[key][1]}
                                          for key, default in entry.defaults.items()]}
                          for name, entry in REGISTRY.items()], indent=2, default=str))
        return 0
    width = terminal_width()
    for name, entry in REGISTRY.items():
        draws = "random: each seed draws its own" if entry.random else "deterministic"
        print("\n".join(_wrap(f"{name}: {entry.doc.removeprefix(f'{name}: ')} ({draws})", width)))
        if entry.defaults:
            rows = [[key, entry.allowed[key][0], _default(default), entry.allowed[key][1]]
                    for key, default in entry.defaults.items()]
            print("\n".join(GAP + line if line else line
                            for line in table(["parameter", "type", "default", "allowed"], rows,
                                              width - len(GAP), fixed=3)))
        else:
            print(f"{GAP}no parameters")
        print()
    print("\n".join(_wrap("Build a checkpoint with them: --apply NAME:key=value,... (values are JSON; repeat "
                          "--apply to chain them, applied in order), e.g.", width)))
    print("\n".join(apply_example(width)))
    from bertology.cli.checkpoint import parse_apply

    step = json.dumps(parse_apply(APPLY_EXAMPLE[1]))
    print("\n".join(_wrap(f"In a study's variants the same step is {step}.", width)))
    return 0


def apply_example(width: int) -> list[str]:
    """The example command, on one line where it fits, else continued with a backslash (never cut inside an
    argument, so it pastes into a shell as it is)."""
    base, apply, out = APPLY_EXAMPLE
    words = [f"{GAP}bertology checkpoint {base}", f"--apply '{apply}'", f"--out {out}"]
    if len(" ".join(words)) <= width:
        return [" ".join(words)]
    return [f"{words[0]} \\", f"{GAP * 3}{words[1]} \\", f"{GAP * 3}{words[2]}"]


def study_entry(path: Path) -> dict | None:
    """A workflow file's name, title and report (its header comment's first sentence: `Title (report,
    section): …`), its parameters as the Workflow passes them (`parameters`: a study's own defaults keep
    their `default:` mark, bertology.study.params.DEFAULT_MARK), their defaults as a user types them
    (`defaults`) and their descriptions; None for a file that is not a Workflow/CronWorkflow."""
    import yaml

    from bertology.study.params import unmark

    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}; "
                       f"a workflow file is UTF-8 YAML)") from None
    except yaml.YAMLError as e:
        raise BadInput(f"{path}: not YAML: {str(e).splitlines()[0]}") from None
    doc = next((d for d in docs if d.get("kind") in ("Workflow", "CronWorkflow")), None)
    if doc is None:
        return None
    summary = header(path)
    title, report = title_and_report(summary)
    spec = doc.get("spec") or {}
    spec = spec.get("workflowSpec", spec) if doc["kind"] == "CronWorkflow" else spec
    declared = [p for p in (spec.get("arguments") or {}).get("parameters") or [] if isinstance(p, dict) and "name" in p]
    params = {p["name"]: p.get("value", "") for p in declared}
    return {"study": path.stem, "file": str(path), "kind": doc["kind"], "title": title, "report": report,
            "summary": summary, "parameters": params,
            "defaults": {name: unmark(str(value if value is not None else ""))[0] for name, value in params.items()},
            "descriptions": {p["name"]: p.get("description", "") for p in declared},
            "template": (spec.get("workflowTemplateRef") or {}).get("name")}


def cmd_studies(args: argparse.Namespace) -> int:
    """Each workflow with the report it reproduces and its parameters."""
    directory = Path(args.dir) if args.dir else default_workflows()
    if not directory.is_dir():
        raise BadInput(f"workflows directory '{directory}' not found (pass --dir DIR)")
    entries = [e for e in (study_entry(p) for p in sorted(directory.glob("*.yaml"))) if e is not None]
    if args.output == "json":
        print(json.dumps(entries, indent=2))
        return 0
    rows = []
    for e in entries:
        names = ", ".join(name for name in e["parameters"] if name != "study")
        if not names:
            names = f"those of WorkflowTemplate {e['template']}" if e["template"] else "none"
        rows.append([e["study"], e["title"] + (f" ({e['report']})" if e["report"] else ""), names])
    print("\n".join(table(["study", "title (report)", "parameters"], rows, terminal_width())))
    return 0
