"""`bertology studies` and `bertology interventions`: what can be run, as text or JSON (the study workflows
with the report each reproduces and their parameters; the intervention registry with its parameters)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bertology.errors import BadInput


def cmd_interventions(args: argparse.Namespace) -> int:
    from bertology.interventions import REGISTRY

    if args.output == "json":
        print(json.dumps([{"name": name, "doc": entry.doc.removeprefix(f"{name}: "), "params": entry.defaults}
                          for name, entry in REGISTRY.items()], indent=2, default=str))
        return 0
    for name, entry in REGISTRY.items():
        params = ", ".join(f"{k}={json.dumps(v)}" for k, v in entry.defaults.items()) or "no parameters"
        doc = entry.doc.removeprefix(f"{name}: ")
        print(f"{name:20s} {doc}\n{'':20s} params: {params}")
    return 0


def _default_workflows() -> Path:
    """`workflows/` of the checkout this package runs from, else of the current directory."""
    here = Path(__file__).resolve().parents[3] / "workflows"
    return here if here.is_dir() else Path("workflows")


def study_entry(path: Path) -> dict | None:
    """A workflow file's name, title and report (its header comment's first line: `Title (report, section):
    …`), and its parameters with their defaults; None for a file that is not a Workflow/CronWorkflow."""
    import yaml

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
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or not line.strip("# "):
            break
        header.append(line.lstrip("# ").strip())
    summary = " ".join(header)
    first = header[0] if header else ""
    title, _, rest = first.partition(" (")
    report = rest.split(")", 1)[0] if rest else ""
    spec = doc.get("spec") or {}
    spec = spec.get("workflowSpec", spec) if doc["kind"] == "CronWorkflow" else spec
    params = {p["name"]: p.get("value", "") for p in (spec.get("arguments") or {}).get("parameters") or []
              if isinstance(p, dict) and "name" in p}
    return {"study": path.stem, "file": str(path), "kind": doc["kind"], "title": title.strip(),
            "report": report.strip(), "summary": summary, "parameters": params}


def cmd_studies(args: argparse.Namespace) -> int:
    """Each workflow with the report it reproduces and its parameters."""
    directory = Path(args.dir) if args.dir else _default_workflows()
    if not directory.is_dir():
        raise BadInput(f"workflows directory '{directory}' not found (pass --dir DIR)")
    entries = [e for e in (study_entry(p) for p in sorted(directory.glob("*.yaml"))) if e is not None]
    if args.output == "json":
        print(json.dumps(entries, indent=2))
        return 0
    for e in entries:
        names = ", ".join(name for name in e["parameters"] if name not in ("study",))
        print(f"{e['study']:22s} {e['title']}" + (f" ({e['report']})" if e["report"] else ""))
        print(f"{'':22s} parameters: {names or 'none'}")
    return 0
