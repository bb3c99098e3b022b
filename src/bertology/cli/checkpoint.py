"""`bertology checkpoint`: an intervened checkpoint built by hand into a new directory, from `--apply` chains."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from bertology.errors import BadInput
from bertology.store import check_writable_dir


def split_params(text: str) -> list[str]:
    """Split `a=1,b=[1,2],c="x,y"` on the commas that are not inside brackets or quotes."""
    parts, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += ch
    return [*parts, current] if current or parts else []


def parse_apply(text: str) -> dict:
    """`NAME[:key=value,...]` -> {"name", "params"}; values are JSON when they parse, else strings."""
    name, _, rest = text.partition(":")
    if not name.strip():
        raise BadInput(f"malformed --apply '{text}' (expected NAME[:key=value,...])")
    params = {}
    for pair in split_params(rest):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"malformed parameter '{pair}' in --apply '{text}' (expected key=value)")
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value
    return {"name": name.strip(), "params": params}


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """Build an intervened checkpoint into a directory; nothing is left half-written on failure."""
    from bertology.spec import CheckpointSpec
    from bertology.steps.build_checkpoint import make_checkpoint
    from bertology.steps.harness import quiet_libraries

    quiet_libraries()
    out = Path(args.out)
    check_writable_dir(out, f"--out '{out}'")  # the rule of a local store: a directory we can write
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"output directory '{out}' exists and is not empty (choose a new --out)")
    spec = CheckpointSpec.from_dict({"model": args.base, "interventions": [parse_apply(a) for a in args.apply],
                                     "seed": args.seed})
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        manifest, cpu_seconds = make_checkpoint(spec, staging)
        if out.exists():
            out.rmdir()
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    changed = sum(t["changed"] for t in manifest["tensors"])
    before, after = manifest["parameters"]["before"], manifest["parameters"]["after"]
    print(f"{out}: {args.base} + {[a['name'] for a in manifest['chain']] or 'nothing'} "
          f"(checkpoint id {spec.id}); {changed} of {len(manifest['tensors'])} tensors changed; "
          f"{before:,} -> {after:,} parameters; interventions took {cpu_seconds:.2f} CPU s")
    return 0
