"""The built docs site's own links, as a reader's browser follows them from disk: every internal `href`,
`src` and `srcset` of every HTML page names a file of the site, and every `#anchor` an id on the page it
points to. `mkdocs build --strict` checks the links of the Markdown; this checks the HTML that comes out,
so a raw `<img src>`, the theme's links and the hooks' pages are checked too.

Refused: a target that is not in the site; a folder (opened from disk, a browser shows its listing, not a
page); a path from the site's root (`/…`: from disk, the root of the file system); an anchor with no such
id. Links to other hosts (`https:`, `mailto:`, …) and `data:` URLs are not followed, and `404.html` is not
checked as a page: it is a web server's answer for a missing path, at any depth, so MkDocs links it from the
site's root; opened from disk, no link leads to it.

    python docs/check_site.py [SITE]    (default: build/site) prints one line per broken link, exits 1
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

SITE = Path(__file__).resolve().parent.parent / "build" / "site"
LINK_ATTRS = ("href", "src", "xlink:href")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
SERVER_ONLY = ("404.html",)  # pages only a web server shows (see above)


class _Page(HTMLParser):
    """The ids of one page, and its links as (tag, attribute, value)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            elif name in LINK_ATTRS:
                self.links.append((tag, name, value))
            elif name in ("srcset", "imagesrcset"):  # "URL [descriptor], URL [descriptor]"
                self.links += [(tag, name, part.split()[0]) for part in value.split(",") if part.strip()]

    handle_startendtag = handle_starttag


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    page.close()
    return page


def check(site: Path) -> tuple[list[str], int]:
    """The broken links of the site at `site` (one line each, `PAGE: <tag attr="value">: why`), and how many
    links were checked."""
    site = site.resolve()
    pages = {path: _parse(path) for path in sorted(site.rglob("*.html"))}
    broken, checked = [], 0
    for path, page in pages.items():
        if str(path.relative_to(site)) in SERVER_ONLY:
            continue
        for tag, attr, value in page.links:
            url = value.strip()
            if not url or SCHEME.match(url) or url.startswith("//"):
                continue  # another host, mailto:, data:, javascript:
            checked += 1
            why = _broken(site, path, url, pages)
            if why:
                broken.append(f'{path.relative_to(site)}: <{tag} {attr}="{value}">: {why}')
    return broken, checked


def _broken(site: Path, page: Path, url: str, pages: dict[Path, _Page]) -> str | None:
    parts = urlsplit(url)
    if parts.path.startswith("/"):
        return "a path from the site's root, which opened from disk is the file system's root"
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    if target != site and site not in target.parents:
        return "outside the site"
    if target.is_dir():
        return "a folder: opened from disk, the browser lists it instead of showing a page"
    if not target.is_file():
        return f"no such file ({target.relative_to(site)})"
    anchor = unquote(parts.fragment)
    if anchor and target.suffix == ".html" and anchor not in pages[target].ids:
        return f"no id {anchor!r} on {target.relative_to(site)}"
    return None


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else SITE
    if not (site / "index.html").is_file():
        print(f"docs/check_site.py: no site at {site} (no index.html): `make docs` builds it", file=sys.stderr)
        return 2
    broken, checked = check(site)
    for line in broken:
        print(line)
    pages = sum(1 for _ in site.rglob("*.html"))
    print(f"{site}: {len(broken)} broken of {checked} links on {pages} pages" if broken else
          f"{site}: all {checked} links on {pages} pages resolve", file=sys.stderr if broken else sys.stdout)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
