"""The docs site as a reader gets it: built with `mkdocs build --strict` into a temporary folder, served on
loopback, and opened in headless Chromium (bertology.browser, the same browser as the reports' checks).

On the home page, a study page and the Kubernetes page (its first block holds the longest command lines):
the top navigation is one row, code is highlighted and has a copy button, no code block runs past its box
without scrolling, the page does not scroll sideways, search finds a study offline, the quickstart's tabs
switch, and nothing is fetched from another host. A full-page screenshot of each is saved next to the build
(the test's tmp folder), to look at.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bertology import browser as browser_module

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PAGES = {"home": "", "study": "studies/reversed-layers/", "kubernetes": "kubernetes/"}
NAV_TABS = ["Home", "Getting started", "Studies", "Using bertology", "Running on Kubernetes",
            "Performance and measurements", "Development"]

# Run in each page after its load event (and after the helper's own measurement), with `interact` true on
# one page only: search and the content tabs. Material adds the copy buttons and starts the search worker
# from its script, so it waits for them (up to 10 s each).
LOOK = """(async (interact) => {
  const until = async (ok, ms) => {
    const end = Date.now() + ms;
    while (!ok() && Date.now() < end) await new Promise(r => setTimeout(r, 50));
    return ok();
  };
  const pres = [...document.querySelectorAll('.md-content pre')];
  const copies = pre => [...pre.querySelectorAll('button[data-clipboard-target]')];
  await until(() => pres.every(p => copies(p).length), 10000);
  const tabs = [...document.querySelectorAll('.md-tabs__item')];
  const list = document.querySelector('.md-tabs__list');
  const code = pres.map(pre => {
    const el = pre.querySelector('code');
    const style = getComputedStyle(el), base = style.color;
    const spans = [...el.querySelectorAll('span[class]')];
    return {
      text: el.textContent.slice(0, 60),
      copy: copies(pre).some(b => document.querySelector(b.dataset.clipboardTarget) === el),  // copies this
      colored: spans.filter(s => getComputedStyle(s).color !== base).length,
      fontSize: parseFloat(style.fontSize),
      boxes: [el, pre].map(b => ({scrollWidth: b.scrollWidth, clientWidth: b.clientWidth,
                                  overflowX: getComputedStyle(b).overflowX})),
    };
  });
  const out = {
    tabs: tabs.map(t => ({label: t.textContent.trim(), top: t.getBoundingClientRect().top,
                          right: t.getBoundingClientRect().right})),
    tabList: list && {scrollWidth: list.scrollWidth, clientWidth: list.clientWidth,
                      height: list.getBoundingClientRect().height},
    header: document.querySelector('.md-header').getBoundingClientRect().height,
    innerWidth: window.innerWidth,
    pageScrollWidth: document.documentElement.scrollWidth,
    code,
    permalinks: document.querySelectorAll('.md-content a.headerlink').length,
    images: [...document.querySelectorAll('.md-content img')].map(i => ({src: i.getAttribute('src'),
                                                                        width: i.naturalWidth})),
  };
  // search: the query typed into the header's box, the results the worker lists
  const input = document.querySelector('input.md-search__input');
  out.searchBox = !!input;
  out.search = null;
  if (input && interact) {
    input.focus();
    input.value = 'reversed layers';
    for (const type of ['input', 'keyup']) input.dispatchEvent(new Event(type, {bubbles: true}));
    await until(() => document.querySelectorAll('.md-search-result__item').length > 0, 10000);
    out.search = [...document.querySelectorAll('.md-search-result__item a')].map(a => a.getAttribute('href'));
    input.value = '';
    input.dispatchEvent(new Event('keyup', {bubbles: true}));
    input.blur();
    document.getElementById('__search').checked = false;
  }
  // content tabs: choosing the second label shows its block and hides the first's
  const set = document.querySelector('.md-content .tabbed-set');
  out.contentTabs = null;
  if (set && interact) {
    const labels = [...set.querySelectorAll(':scope > .tabbed-labels > label')];
    const blocks = [...set.querySelectorAll(':scope > .tabbed-content > .tabbed-block')];
    const shown = () => blocks.map(b => b.getBoundingClientRect().height > 0);
    const before = shown();
    labels[1].click();
    const after = shown();
    labels[0].click();
    out.contentTabs = {labels: labels.map(l => l.textContent.trim()), before, after};
  }
  window.scrollTo(0, 0);
  // transitions off for the screenshot: the full-page capture resizes the view, and Material's tabs would
  // be caught sliding in again, half transparent
  const still = document.createElement('style');
  still.textContent = '*, *::before, *::after { transition: none !important; animation: none !important; }';
  document.head.append(still);
  return out;
})"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built as `make lint` builds it, served on 127.0.0.1 (Material's search runs in a web
    worker, which a file:// page may not start)."""
    root = tmp_path_factory.mktemp("docs-site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--quiet", "-d", str(root / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(root / "site")))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def look(chromium, url: str, screenshot: Path, interact: bool):
    """`chromium.open(url)` (its problems, requests and screenshot), plus what LOOK measures: run in the same
    tab, right after the helper's own measurement, by wrapping its protocol calls for this one page."""
    seen = {}
    send = chromium._send

    def and_look(method, params=None, session=None):
        result = send(method, params, session)
        if method == "Runtime.evaluate" and params["expression"] == browser_module.MEASURE:
            answer = send("Runtime.evaluate", {"expression": f"({LOOK})({json.dumps(interact)})",
                                               "returnByValue": True, "awaitPromise": True}, session)
            assert "exceptionDetails" not in answer, answer["exceptionDetails"]
            seen.update(answer["result"]["value"])
        return result

    chromium._send = and_look
    try:
        page = chromium.open(url, screenshot=screenshot)
    finally:
        del chromium._send
    assert seen, f"{url}: the page was not measured"
    return page, seen


@pytest.fixture(scope="module")
def looked(site, browser):
    if browser is None:
        pytest.skip("BERTOLOGY_NO_BROWSER=1")
    root, base = site
    return {name: (*look(browser, base + path, root / "screenshots" / f"{name}.png", name == "home"), base)
            for name, path in PAGES.items()}


@pytest.mark.parametrize("name", PAGES)
def test_a_page_loads_cleanly_from_this_host_only(looked, site, name):
    page, _, base = looked[name]
    # errors only: the helper's check of <svg> sizes does not apply here (Material keeps the icons of hidden
    # controls, such as the other palette's toggle, in the page at 0x0)
    assert page.ready_state == "complete" and page.errors == [], page.errors
    assert page.requests, "the page fetched no script or stylesheet: is it Material's?"
    assert [r for r in page.requests if not r.startswith(base)] == []
    png = (site[0] / "screenshots" / f"{name}.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width == 1280 and height >= 900


@pytest.mark.parametrize("name", PAGES)
def test_the_top_navigation_is_one_row_of_every_section(looked, name):
    _, seen, _ = looked[name]
    assert [t["label"] for t in seen["tabs"]] == NAV_TABS
    assert len({round(t["top"]) for t in seen["tabs"]}) == 1, seen["tabs"]  # one row
    assert max(t["right"] for t in seen["tabs"]) <= seen["innerWidth"]  # every tab in view
    assert seen["tabList"]["scrollWidth"] <= seen["tabList"]["clientWidth"], seen["tabList"]  # none hidden
    assert seen["header"] < 64 and seen["tabList"]["height"] < 64  # one line each


@pytest.mark.parametrize("name", PAGES)
def test_code_is_highlighted_copyable_and_never_runs_past_its_box(looked, name):
    _, seen, _ = looked[name]
    assert seen["code"], "no code block"
    for block in seen["code"]:
        assert block["copy"], f"no copy button: {block['text']!r}"
        assert block["fontSize"] >= 12, block
        for box in block["boxes"]:  # the <code> and its <pre>: wider content only where it scrolls
            assert box["scrollWidth"] <= box["clientWidth"] or box["overflowX"] in ("auto", "scroll"), block
    assert sum(block["colored"] for block in seen["code"]) > 0, "no highlighted token"
    assert seen["pageScrollWidth"] <= seen["innerWidth"], "the page scrolls sideways"
    assert seen["permalinks"] > 0 and seen["searchBox"]


def test_the_kubernetes_pages_long_commands_scroll_in_their_box(looked):
    """Blocks there are wider than the column (so the check above is not vacuous): each scrolls, and the
    page does not."""
    _, seen, _ = looked["kubernetes"]
    wide = [box for block in seen["code"] for box in block["boxes"] if box["scrollWidth"] > box["clientWidth"]]
    assert wide, "no block wider than its column on the Kubernetes page"
    assert all(box["overflowX"] in ("auto", "scroll") for box in wide), wide
    assert seen["pageScrollWidth"] <= seen["innerWidth"]


def test_search_finds_a_study_offline(looked):
    _, seen, _ = looked["home"]
    assert seen["search"], "search listed nothing for 'reversed layers'"
    assert any("studies/reversed-layers/" in href for href in seen["search"]), seen["search"]


def test_the_quickstart_has_tabs_for_one_machine_and_a_cluster_and_the_report_picture(looked):
    _, seen, _ = looked["home"]
    tabs = seen["contentTabs"]
    assert tabs["labels"] == ["On one machine", "On a cluster"]
    assert tabs["before"] == [True, False] and tabs["after"] == [False, True]
    (picture,) = [i for i in seen["images"] if i["src"].endswith("screenshots/reversed-layers.png")]
    assert picture["width"] > 0  # loaded


# Tags that load something, and what they load it from; CSS url() and @import.
ASSET = re.compile(r"<(?:script|link|img|iframe|source|video|audio|embed)\b[^>]*?\b(?:src|href|srcset)=\"([^\"]+)\"")
CSS_ASSET = re.compile(r"url\(\s*['\"]?([^'\")]+)|@import\s+(?:url\()?['\"]?([^'\");]+)")


def test_the_built_site_loads_nothing_from_another_host(site):
    """Every page, stylesheet and the fonts: no web font (`theme.font: false`), no CDN script or style."""
    root = site[0] / "site"
    pages, styles = sorted(root.rglob("*.html")), sorted(root.rglob("*.css"))
    assert len(pages) > 20 and styles
    remote = [(p.relative_to(root), url) for p in pages for url in ASSET.findall(p.read_text())
              if re.match(r"(https?:)?//", url)]
    remote += [(p.relative_to(root), url) for p in styles for m in CSS_ASSET.findall(p.read_text())
               for url in m if re.match(r"(https?:)?//", url)]
    assert remote == []
    assert "fonts.googleapis" not in (root / "index.html").read_text()
