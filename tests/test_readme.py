"""The README as a document: its table of contents is current, and every local file it links to exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_table_of_contents_lists_every_heading():
    """docs/readme_toc.py --check: the TOC between the markers is what the headings give (rerun it after
    adding a section)."""
    done = subprocess.run([sys.executable, "docs/readme_toc.py", "--check"], cwd=REPO, check=False)
    assert done.returncode == 0, "README's table of contents is stale: run python docs/readme_toc.py"
    text = (REPO / "README.md").read_text()
    toc = text.split("<!-- toc -->", 1)[1].split("<!-- /toc -->", 1)[0]
    assert "- [The four reports](#the-four-reports)" in toc and "  - [Store guarantees](#store-guarantees)" in toc


def test_every_local_link_of_the_readme_and_docs_exists():
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()) + re.findall(
                r'<img src="([^"]+)"', doc.read_text()):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"
