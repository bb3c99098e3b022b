"""The docs site as a reader gets it: built as `make docs` builds it (`mkdocs build --strict`, then
docs/check_site.py) into a temporary folder, and opened from disk (file://) in headless Chromium
(bertology.browser, the same browser as the reports' checks), as a reader opens the built folder.

On the home page, a study page and the Kubernetes page (its first block holds the longest command lines):
every link of the navigation names a page file, and following one shows that page (not a folder's listing);
the top navigation is one row, code is highlighted and has a copy button, no code block runs past its box
without scrolling, the page does not scroll sideways, search finds a study from disk, the quickstart's tabs
switch, and nothing is fetched from another host. A full-page screenshot of each is saved next to the build
(the test's tmp folder), to look at. Then the link check itself: it passes the built site and refuses a
copy with a broken link, image or anchor planted in it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from bertology import browser as browser_module

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PAGES = {"home": "index.html", "study": "studies/reversed-layers.html", "kubernetes": "kubernetes.html"}
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
    h1: (document.querySelector('.md-content h1') || {}).textContent,
    title: document.title,
    // the navigation: the header's tabs and the sidebars' links, as the browser resolves them
    nav: [...document.querySelectorAll('a.md-tabs__link, .md-sidebar a.md-nav__link[href]')].map(
      a => ({label: a.textContent.trim(), href: a.href, tab: a.classList.contains('md-tabs__link')})),
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
    """The site, built as `make docs` and `make lint` build it, and its address on disk (file://). Material
    runs search in a web worker, which a file:// page may not start: the site carries the shim that stands in
    for one (docs/javascripts/iframe-worker.js) and its index as a script (the offline plugin)."""
    root = tmp_path_factory.mktemp("docs-site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--quiet", "-d", str(root / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    return root, (root / "site").as_uri() + "/"


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
def test_a_page_loads_cleanly_from_disk_only(looked, site, name):
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
def test_every_navigation_link_opened_from_disk_names_a_page_file(looked, site, name):
    """A link to a folder (`getting-started/`, as MkDocs makes them by default) opens the folder's listing
    from disk: every tab and sidebar link must name an HTML file of the site (an anchor on it allowed)."""
    _, seen, base = looked[name]
    assert len(seen["nav"]) > 20
    for link in seen["nav"]:
        url = link["href"]
        assert url.startswith(base), link
        target = Path(unquote(urlsplit(url).path))
        assert target.suffix == ".html" and target.is_file(), link


def test_following_a_tab_from_disk_shows_the_page_not_a_folder_listing(looked, browser, site):
    """What a reader does first: open index.html from the built folder and choose a tab."""
    _, seen, _ = looked["home"]
    (tab,) = [link for link in seen["nav"] if link["tab"] and link["label"] == "Getting started"]
    page, shown = look(browser, tab["href"], site[0] / "screenshots" / "getting-started.png", False)
    assert page.ready_state == "complete" and page.errors == [], page.errors
    assert shown["title"] == "Getting started - bertology", shown["title"]  # a folder's: "Index of /…/"
    assert shown["h1"].startswith("Getting started")
    assert [t["label"] for t in shown["tabs"]] == NAV_TABS


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
    assert any("studies/reversed-layers.html" in href for href in seen["search"]), seen["search"]


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


def test_the_search_shim_is_the_published_one_unchanged():
    """docs/javascripts/iframe-worker.js is npm's iframe-worker 1.0.4 `shim/index.js` byte for byte after its
    licence comment, and it is the polyfill the site lists (else the offline plugin adds unpkg.com's)."""
    text = (REPO / "docs" / "javascripts" / "iframe-worker.js").read_text()
    comment, _, shim = text.partition("*/\n")
    assert "iframe-worker 1.0.4" in comment and "Permission is hereby granted" in comment
    assert hashlib.sha256(shim.encode()).hexdigest() == \
        "e8e412dbcfea9b7e31b5ffa288d7b6035915e714c542f4176a0cdbe262fc9609"
    import yaml

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["extra"]["polyfills"] == ["javascripts/iframe-worker.js"]
    assert "offline" in config["plugins"] and config["use_directory_urls"] is False


# -- the link check over the built HTML (docs/check_site.py, run by make docs and make lint) --------------

CHECK = REPO / "docs" / "check_site.py"


def _check(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(site)], capture_output=True, text=True, check=False,
                          timeout=120)


def test_the_link_check_passes_the_built_site(site):
    done = _check(site[0] / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    checked = int(re.search(r"all (\d+) links on (\d+) pages resolve", done.stdout)[1])
    assert checked > 1000  # the theme's links, every page's, the search index's script, the images


# id: (page, the HTML planted before its </article>, what the check says of it)
PLANTED = {
    "missing-image": ("reports.html", '<img src="screenshots/no-such.png">', "no such file (screenshots/no-such.png)"),
    "missing-anchor": ("studies/index.html", '<a href="reversed-layers.html#no-such-heading">x</a>',
                       "no id 'no-such-heading' on studies/reversed-layers.html"),
    "missing-anchor-here": ("index.html", '<a href="#not-here">x</a>', "no id 'not-here' on index.html"),
    "folder": ("index.html", '<a href="studies/">x</a>',
               "a folder: opened from disk, the browser lists it instead of showing a page"),
    "from-the-root": ("development.html", '<a href="/index.html">x</a>',
                      "a path from the site's root, which opened from disk is the file system's root"),
    "outside": ("store.html", '<link rel="stylesheet" href="../outside.css">', "outside the site"),
    "srcset": ("kubernetes.html", '<img srcset="screenshots/reversed-layers.png 1x, missing@2x.png 2x">',
               "no such file (missing@2x.png)"),
}


@pytest.mark.parametrize("planted", PLANTED)
def test_the_link_check_refuses_a_broken_link_planted_in_a_copy(site, tmp_path, planted):
    page, planted, said = PLANTED[planted]
    copy = tmp_path / "site"
    shutil.copytree(site[0] / "site", copy)
    html = (copy / page).read_text()
    assert html.count("</article>") == 1
    (copy / page).write_text(html.replace("</article>", planted + "</article>"))
    done = _check(copy)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()  # the planted link only, named by its page, tag and attribute
    assert line.startswith(f"{page}: <") and line.endswith(f">: {said}"), line
    assert "1 broken of" in done.stderr
