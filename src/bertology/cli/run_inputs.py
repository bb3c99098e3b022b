"""`bertology run`'s flags turned into the runner's inputs: `-f FILE` (Argo's parameter file) and the
local limits (--parallelism, --semaphore, and their environment defaults)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bertology.errors import BadInput

# Defaults for `run --parallelism` and `--semaphore`: how many pods this machine runs at once.
PARALLELISM_ENV, SEMAPHORES_ENV = "BERTOLOGY_PARALLELISM", "BERTOLOGY_SEMAPHORES"


def local_limits(args) -> tuple[int, dict[str, int]]:
    """--parallelism and every --semaphore CONFIGMAP/KEY=N, else their environment defaults (a CPU
    machine running tiny studies: BERTOLOGY_PARALLELISM=2 BERTOLOGY_SEMAPHORES=bertology-semaphores/gpu=2)."""
    where = "--parallelism"
    parallelism = args.parallelism
    if parallelism is None and os.environ.get(PARALLELISM_ENV):
        where, value = f"${PARALLELISM_ENV}", os.environ[PARALLELISM_ENV].strip()
        if not value.isdigit():
            raise BadInput(f"{where}={value!r}: parallelism must be an integer, at least 1")
        parallelism = int(value)
    if parallelism is not None and parallelism < 1:
        raise BadInput(f"{where} {parallelism}: parallelism must be at least 1")
    pairs, where = args.semaphore, "--semaphore"
    if not pairs and os.environ.get(SEMAPHORES_ENV):
        pairs, where = [p.strip() for p in os.environ[SEMAPHORES_ENV].split(",") if p.strip()], f"${SEMAPHORES_ENV}"
    semaphores = {}
    for pair in pairs:
        name, sep, limit = pair.partition("=")
        if not sep or "/" not in name or not limit.isdigit() or int(limit) < 1:
            raise BadInput(f"{where} {pair!r}: expected CONFIGMAP/KEY=N with N >= 1 (e.g. bertology-semaphores/gpu=2)")
        semaphores[name] = int(limit)
    return parallelism or 1, semaphores


def parameter_file(path: str | None) -> dict[str, str]:
    """Argo's `-f FILE`: a YAML or JSON mapping of parameter name to value; lists and mappings are
    passed as JSON, as Argo passes them."""
    if path is None:
        return {}
    import yaml

    file = Path(path)
    if not file.is_file():
        raise BadInput(f"parameter file '{path}' not found")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise BadInput(f"parameter file '{path}' is not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                       f"{e.start}); allowed: YAML or JSON in UTF-8") from None
    except yaml.YAMLError as e:
        raise BadInput(f"parameter file '{path}' is not YAML/JSON: {str(e).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise BadInput(f"parameter file '{path}' must be a mapping of NAME: VALUE, got {type(data).__name__}")
    out = {}
    for name, value in data.items():
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, (list, dict)):
            out[name] = json.dumps(value)
        else:
            out[name] = "" if value is None else str(value)
    return out
