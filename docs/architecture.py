"""The architecture picture on docs/development.md, drawn from the import map itself so it cannot drift:
the path of a study's data (spec -> plan -> steps -> library -> store) on top, and below it the library's
layers exactly as pyproject.toml's import-linter `layers` contract lists them (each layer imports only the
layers beneath it; `make lint` enforces that), every module of each layer named.

The picture is a file of the repository, docs/architecture.svg, so that docs/development.md shows it where
the repository is read (on GitHub) as well as on the site. `python docs/architecture.py` redraws it (`make
docs` does, before it builds); as an MkDocs hook this module refuses to build the site with a picture that
is not the current import map's, so `make lint` fails on one left stale."""

from __future__ import annotations

import html
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
NAME = "architecture.svg"
PICTURE = REPO / "docs" / NAME
# the data's path through a study: what each stage is, and where it lives
FLOW = [("spec", "bertology.spec, study/"), ("plan", "steps/plan, steps/planned"),
        ("steps", "jobs/<step>.py, steps/"), ("library", "models, interventions, train, tasks, results"),
        ("store", "store/ (file:// or s3://)")]
CHAR_W, LINE_H, PAD = 7.2, 18, 10


def layers() -> list[list[str]]:
    """The layers contract's rows, top to bottom, each a list of module names."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    contract = next(c for c in config if c["type"] == "layers")
    return [[name.strip() for name in row.split(":")] for row in contract["layers"]]


def _box(x: float, y: float, w: float, h: float, lines: list[str], fill: str) -> str:
    bold = ' font-weight="bold"'
    texts = "".join(f'<text x="{x + w / 2:.1f}" y="{y + PAD + LINE_H * (i + 0.7):.1f}" text-anchor="middle"'
                    f'{bold if i == 0 else ""}>{html.escape(t)}</text>' for i, t in enumerate(lines))
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="6" fill="{fill}" stroke="#555"/>{texts}'


def svg() -> str:
    """The picture: the flow as a row of boxes joined by arrows, then one full-width box per layer."""
    parts, x, y = [], PAD, PAD
    widths = [max(len(a), len(b)) * CHAR_W + 2 * PAD for a, b in FLOW]
    flow_h = 2 * LINE_H + 2 * PAD
    for (stage, where), w in zip(FLOW, widths):
        if x > PAD:
            parts.append(f'<line x1="{x - 24:.1f}" y1="{y + flow_h / 2:.1f}" x2="{x - 4:.1f}" '
                         f'y2="{y + flow_h / 2:.1f}" stroke="#333" marker-end="url(#arrow)"/>')
        parts.append(_box(x, y, w, flow_h, [stage, where], "#dbe9f6"))
        x += w + 28
    width = x - 28 + PAD
    y += flow_h + 2 * PAD
    parts.append(f'<text x="{PAD}" y="{y + 4:.1f}" font-style="italic">the library\'s layers '
                 "(pyproject.toml, import-linter): each imports only those below it</text>")
    y += PAD
    rows = layers()
    for i, row in enumerate(rows):
        h = LINE_H + 2 * PAD
        shade = f"hsl(35, 70%, {92 - 4 * i * 6 // len(rows)}%)"
        parts.append(_box(PAD, y, width - 2 * PAD, h, [" · ".join(row)], shade))
        y += h + 4
    height = y + PAD
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="12">'
            '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
            '<path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>'
            f'<rect width="100%" height="100%" fill="white"/>{"".join(parts)}</svg>\n')


def stale() -> bool:
    """Whether docs/architecture.svg is missing or not the picture of the current import map."""
    return not PICTURE.is_file() or PICTURE.read_text(encoding="utf-8") != svg()


def write() -> bool:
    """Redraws docs/architecture.svg where it is stale; whether it was."""
    if not stale():
        return False
    PICTURE.write_text(svg(), encoding="utf-8")
    return True


# -- the MkDocs hook -------------------------------------------------------------------------------------

def on_pre_build(config):
    from mkdocs.exceptions import PluginError

    if stale():
        raise PluginError(f"docs/{NAME} is not the picture of pyproject.toml's import-linter layers: "
                          "`make docs` (or `python docs/architecture.py`) redraws it")


if __name__ == "__main__":
    if write():
        print(f"docs/{NAME}: redrawn from pyproject.toml's layers")
