"""Write the README's table of contents (between `<!-- toc -->` and `<!-- /toc -->`) from its `##` and `###`
headings, with GitHub's anchors. `python docs/readme_toc.py` rewrites it; `--check` exits 1 when it is stale
(tests/test_readme.py runs that)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- toc -->", "<!-- /toc -->"


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every `##`/`###` heading outside fenced code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(#{2,3}) (.+)", line)):
            found.append((len(match[1]), match[2].strip()))
    return found


def anchor(title: str, seen: dict[str, int]) -> str:
    """GitHub's heading id: lower case, punctuation dropped (but - and _), spaces to -, -1, -2… for repeats."""
    slug = re.sub(r"[^\w\- ]", "", title.lower().replace("`", "")).replace(" ", "-")
    n = seen.get(slug, 0)
    seen[slug] = n + 1
    return slug if n == 0 else f"{slug}-{n}"


def toc(text: str) -> str:
    seen: dict[str, int] = {}
    lines = [f"{'  ' * (level - 2)}- [{title}](#{anchor(title, seen)})" for level, title in headings(text)]
    return "\n".join([START, *lines, END])


def rewrite(text: str) -> str:
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    return before + toc(before + after) + after


if __name__ == "__main__":
    text = README.read_text()
    new = rewrite(text)
    if "--check" in sys.argv[1:]:
        sys.exit(0 if new == text else 1)
    README.write_text(new)
