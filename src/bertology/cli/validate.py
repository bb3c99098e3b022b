"""`bertology validate`: strict validation of Argo YAML files, each error with where the templates were sought."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertology.cli.locations import with_hint
from bertology.errors import BadInput


def cmd_validate(args: argparse.Namespace) -> int:
    from bertology.argo.validate import validate_file

    missing = next((path for path in args.files if not Path(path).exists()), None)
    if missing is not None:  # bad input; a file that is there but not valid (not YAML, …) is a failure: 1
        raise BadInput(f"workflow file '{missing}' not found (give Argo YAML files, e.g. workflows/*.yaml)")
    if args.templates and not Path(args.templates).is_dir():
        raise BadInput(f"--templates '{args.templates}' is not a directory (the WorkflowTemplates' directory)")
    errors = []
    for path in args.files:
        p = Path(path)
        templates = Path(args.templates) if args.templates else (
            p.resolve().parent if p.resolve().parent.name == "templates" else p.resolve().parent / "templates")
        errors += [str(with_hint(BadInput(e), templates)) for e in validate_file(p, templates)]
    for e in errors:
        print(e)
    print(f"{len(args.files)} file(s), {len(errors)} error(s)")
    return 1 if errors else 0
