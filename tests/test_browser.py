"""The real-browser check itself (bertology.browser): it must see what breaks a page, so that the end-to-end
test's "no problems in report.html" (tests/test_e2e.py) means something."""

from __future__ import annotations

import struct

import pytest

BROKEN = """<!doctype html><html><head><title>broken</title></head><body>
<h2>Plots</h2>
<svg width="120" height="80"><rect width="10" height="10"/></svg>
<h2>Empty</h2>
<svg width="0" height="40"></svg>
<details><summary>more</summary><svg width="30" height="20"></svg></details>
<img src="missing.png">
<script>console.error("boom", 42); undefinedFunction();</script>
</body></html>"""

CLEAN = """<!doctype html><html><head><title>clean</title></head><body>
<svg width="120" height="80" viewBox="0 0 12 8"><rect width="10" height="5"/></svg>
<div style="height: 3000px"></div><p>end</p>
</body></html>"""


@pytest.fixture
def chromium(browser):
    if browser is None:
        pytest.skip("BERTOLOGY_NO_BROWSER=1")
    return browser


def test_a_broken_page_shows_every_problem(chromium, tmp_path):
    (tmp_path / "broken.html").write_text(BROKEN)
    page = chromium.open(tmp_path / "broken.html")
    assert page.ready_state == "complete"
    problems = "\n".join(page.problems)
    assert "console.error: boom 42" in problems
    assert "ReferenceError: undefinedFunction is not defined" in problems
    assert f"failed to load {(tmp_path / 'missing.png').as_uri()}: net::ERR_FILE_NOT_FOUND" in problems
    # the zero-width SVG, named by the heading it follows; the one in a closed <details> is measured open
    assert page.empty_svgs == [{"index": 1, "width": 0, "height": 40, "label": 'under "Empty"'}]
    assert [(s["width"], s["height"]) for s in page.svgs] == [(120, 80), (0, 40), (30, 20)]
    assert page.requests == [(tmp_path / "missing.png").as_uri()]


def test_a_clean_page_has_no_problems_and_its_screenshot_is_the_whole_page(chromium, tmp_path):
    (tmp_path / "clean.html").write_text(CLEAN)
    (tmp_path / "broken.html").write_text(BROKEN)
    chromium.open(tmp_path / "broken.html")  # a fresh tab per page: nothing carries over
    page = chromium.open(tmp_path / "clean.html", screenshot=tmp_path / "shot.png")
    assert page.problems == [] and page.requests == []
    assert [(s["width"], s["height"]) for s in page.svgs] == [(120, 80)]
    png = (tmp_path / "shot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert width == chromium.width and height > 3000 > chromium.height  # beyond the 900-pixel viewport


def test_a_missing_chromium_is_named(monkeypatch, tmp_path):
    from bertology.browser import BrowserMissing, find_chromium

    monkeypatch.setenv("BERTOLOGY_CHROMIUM", str(tmp_path / "no-chromium"))
    with pytest.raises(BrowserMissing, match="no-chromium"):
        find_chromium()
    monkeypatch.delenv("BERTOLOGY_CHROMIUM")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrowserMissing, match="make chromium"):
        find_chromium()
