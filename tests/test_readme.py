"""The README as a newcomer's page: short, in the order a newcomer needs, every local link and image it
names there (anchors in the docs pages included), and its studies table true to the workflows and to the
docs' full cost table. The docs pages' own links are checked by `mkdocs build --strict` (tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from markdown.extensions.toc import slugify

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
LINK = re.compile(r"\]\(([^)#\s]+)(?:#([^)\s]*))?\)|<img src=\"([^\"]+)\"")


def test_the_readme_is_short_and_in_a_newcomers_order():
    assert len(README.splitlines()) <= 250
    sections = re.findall(r"^## (.+)$", README, re.MULTILINE)
    assert sections == ["The four reports", "On one machine, first", "A report", "The studies", "On a cluster",
                        "From a notebook", "Documentation"]


def _anchors(page: Path) -> set[str]:
    """The heading ids MkDocs gives a page (Python-Markdown's toc slugify)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {slugify(title.replace("`", ""), "-") for title in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def test_every_local_link_and_anchor_of_the_readme_exists():
    links = LINK.findall(README)
    assert len(links) > 20
    for target, anchor, image in links:
        path = REPO / (target or image)
        if "://" in (target or image):
            continue
        assert path.exists(), f"README links to {target or image}, which does not exist"
        if anchor:
            assert anchor in _anchors(path), f"README links to {target}#{anchor}: no such heading"


def _studies_table() -> dict[str, list[str]]:
    rows = re.findall(r"^\| \[([a-z-]+)\]\(workflows/\1\.yaml\) \| (.+) \|$", README, re.MULTILINE)
    return {name: [c.strip() for c in rest.split(" | ")] for name, rest in rows}


def test_the_studies_table_lists_every_study_workflow_with_its_docs_cost():
    """One row per study Workflow (the nightly CronWorkflow is not a study), and its runs and GPU-hours are
    those of the full cost table in docs/studies/index.md (bench/study_cost.py's output)."""
    table = _studies_table()
    workflows = {p.stem for p in (REPO / "workflows").glob("*.yaml")
                 if yaml.safe_load(p.read_text())["kind"] == "Workflow"}
    assert set(table) == workflows
    costs = {row[0]: row[1:] for row in (
        [c.strip() for c in line.strip("|").split("|")]
        for line in (REPO / "docs" / "studies" / "index.md").read_text().splitlines()
        if re.match(r"\| [a-z-]+ \| \d", line))}
    for name, cells in table.items():
        runs, hours = cells[-2], cells[-1]
        if name not in costs:  # vocab-overlap trains nothing
            assert runs == "—" and hours.startswith("—"), name
            continue
        assert [runs, hours] == [costs[name][0], costs[name][2]], name
