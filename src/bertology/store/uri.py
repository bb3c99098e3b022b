"""A store URI to its store: `file://PATH`, a plain path or `s3://BUCKET[/PREFIX]`; anything else, or a
URI missing its bucket or path, is refused by name (exit 2) before any step starts."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from bertology.errors import BadInput, did_you_mean
from bertology.store.base import Store
from bertology.store.local import LocalStore
from bertology.store.s3 import S3Store

DEFAULT_ROOT = ".bertology"


def open_store(uri: str | None) -> Store:
    """`file://…`, a plain path, or `s3://bucket[/prefix]`; anything else is refused by name. None means
    the default root; an empty or blank URI is refused (it is a mistake, not a request for the default)."""
    uri = DEFAULT_ROOT if uri is None else uri.strip()
    if not uri:
        raise BadInput("empty store URI (allowed: file://PATH, a local path, s3://BUCKET[/PREFIX])")
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise BadInput(f"store URI '{uri}' has no bucket (expected s3://BUCKET[/PREFIX])")
        return S3Store(parsed.netloc, parsed.path.strip("/"))
    if parsed.scheme == "file":
        path = parsed.netloc + parsed.path if parsed.netloc not in ("", "localhost") else parsed.path
        if not path:
            raise BadInput(f"store URI '{uri}' has no path (expected file:///ABSOLUTE/PATH or file://RELATIVE/PATH)")
        return LocalStore(Path(path))
    if parsed.scheme and len(parsed.scheme) > 1:  # one letter would be a Windows drive
        match = did_you_mean(parsed.scheme, ("file", "s3"))
        hint = f"did you mean '{match}://'?; " if match is not None else ""
        raise BadInput(f"unsupported store URI scheme '{parsed.scheme}' in '{uri}' "
                       f"({hint}allowed: file://PATH, a local path, s3://BUCKET[/PREFIX])")
    return LocalStore(Path(uri))
