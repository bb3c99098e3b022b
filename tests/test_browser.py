"""The real-browser check itself (bertology.browser): it must see what breaks a page, so that the end-to-end
test's "no problems in report.html" (tests/test_e2e.py) means something."""

from __future__ import annotations

import json
import struct
import time

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


# -- a study report as a reader opens it ------------------------------------------------------------------

READ = """(() => {
  const h1 = document.querySelector('h1');
  const verdict = document.querySelector('#verdict-the-report-vs-this-run table');
  const figure = document.querySelector('figure');
  const main = document.querySelector('#main-table table');
  const marks = [...document.querySelectorAll('figure g[id^="report-"]')].map(g => {
    const r = g.getBoundingClientRect(); return [g.id, r.width, r.height]; });
  return {h1: h1 && h1.textContent, firstH2: document.querySelector('h2').textContent,
          verdictFirst: !!(verdict && figure && (verdict.compareDocumentPosition(figure) & Node.DOCUMENT_POSITION_FOLLOWING)),
          verdictRows: verdict ? verdict.rows.length - 1 : 0, main: main ? main.innerText : '',
          legend: figure ? [...figure.querySelectorAll('text')].map(t => t.textContent) : [], marks};
})()"""


def _read_in_browser(chromium, page) -> dict:
    """What READ finds on the page, loaded in a fresh tab of the session's Chromium."""
    target = chromium._send("Target.createTarget", {"url": page.as_uri()})["targetId"]
    session = chromium._send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    try:
        # until the page itself has loaded: a new tab is first about:blank, whose readyState is "complete"
        loaded = f"document.readyState === 'complete' && location.href === {json.dumps(page.as_uri())}"
        deadline = time.monotonic() + 60  # seconds on a loaded machine
        while not chromium._send("Runtime.evaluate", {"expression": loaded, "returnByValue": True},
                                 session)["result"].get("value"):
            assert time.monotonic() < deadline, f"{page} did not load in 60 s"
            time.sleep(0.05)
        answer = chromium._send("Runtime.evaluate", {"expression": READ, "returnByValue": True}, session)
        assert "value" in answer["result"], answer  # an exception in READ: its details
        return answer["result"]["value"]
    finally:
        chromium._send("Target.closeTarget", {"targetId": target})


def test_a_study_report_opens_with_its_title_and_verdict_and_draws_the_reports_numbers(chromium, tmp_path):
    """reversed-layers with two seeds per variant on CoLA: the first heading is the study's title, the
    verdict table comes before the first figure, the main table prints no interval for n = 2 (the two runs
    instead), and the main figure carries the report's printed values as markers."""
    from test_paper_numbers import reversed_layers_on_cola

    from bertology.results.report import build_report, html
    from bertology.results.study_results import load_study_results
    from bertology.store import open_store

    store = open_store(f"file://{tmp_path}")
    reversed_layers_on_cola(store, "00000000000000dd", seeds=(1, 2))
    report = build_report(load_study_results(store, "reversed-layers", "00000000000000dd"))
    page = tmp_path / "report.html"
    page.write_text(html(report))
    assert chromium.open(page).problems == []
    seen = _read_in_browser(chromium, page)
    assert seen["h1"] == "Layer reversal"  # the workflow's title, not the study id
    assert seen["firstH2"] == "Verdict: the report vs this run" and seen["verdictFirst"] and seen["verdictRows"] == 3
    assert "0.595 (runs 0.590, 0.600; n=2)" in seen["main"]
    assert "[" not in seen["main"]  # no interval for n < 3
    assert "report" in seen["legend"]
    assert [m[0] for m in seen["marks"]] == ["report-0"] and all(w > 0 and h > 0 for _, w, h in seen["marks"])
