"""A study's workflow file opens with a comment whose first sentence names the study and its source:
`Title (report, section): what it does.` `bertology studies` lists the studies by it, and a study's report
opens with it. Read here once for both.
"""

from __future__ import annotations

from pathlib import Path

# workflows/ of the checkout this package runs from (an installed wheel has none beside it)
CHECKOUT_WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


def default_workflows() -> Path:
    """`workflows/` of the checkout this package runs from, else of the current directory (an image's /app)."""
    return CHECKOUT_WORKFLOWS if CHECKOUT_WORKFLOWS.is_dir() else Path("workflows")


def header(path: Path) -> str:
    """The file's opening comment, its lines joined by spaces (up to the first line that is not a comment,
    or an empty one)."""
    lines = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith("#") or not line.strip("# "):
            break
        lines.append(line.lstrip("# ").strip())
    return " ".join(lines)


def split_header(sentence: str) -> tuple[str, str, str]:
    """(title, report, rest) of a header, `Title (report, section): what it does …`: the report is the whole
    parenthesis, parentheses inside it included ("Probing (…; CoLA's in Fig. 5 (a)): …"), and the rest what
    follows its colon. Without one the title is the text up to its first colon or full stop, the report is
    empty and the rest follows that colon or full stop."""
    text = " ".join(sentence.split())
    ends = [i for i in (text.find(": "), text.find(". ")) if i >= 0]
    stop = min(ends) if ends else len(text.rstrip(".:"))
    start = text.find(" (")
    if 0 <= start < stop:
        depth = 0
        for i in range(start + 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                return text[:start].strip(), text[start + 2:i].strip(), text[i + 1:].removeprefix(":").strip()
    return text[:stop].strip(), "", text[stop + 2:].strip() if ends else ""


def title_and_report(sentence: str) -> tuple[str, str]:
    """(title, report) of a header (`split_header`)."""
    title, report, _ = split_header(sentence)
    return title, report
