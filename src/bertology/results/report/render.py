"""The report's two renderings of the same sections: Markdown (report.md, what a terminal or a code host
shows) and one self-contained HTML page (report.html: inline CSS and SVG, nothing fetched).

The page is a Jinja2 template (templates/report.html.j2, its CSS in templates/report.css, both package
data), so its markup is read as HTML rather than assembled from strings, and every value is escaped by
the engine. The notes are Markdown (they read the same in report.md); markdown-it-py renders the subset
the page has always shown: `code`, **bold** and [links](relative/or#anchor) (*emphasis* stays as written).
Raw HTML in a note is escaped, and a link that would leave the page stays text, so the page never fetches
anything. Text, code and values are escaped by html.escape, as before the template, so a report rebuilt
from the same results is byte-identical.
"""

from __future__ import annotations

import html as html_lib
from urllib.parse import urlsplit

import jinja2
import polars as pl
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markupsafe import Markup

from bertology.results.report.document import Report, anchor

SETTINGS = "Settings"  # the last section: the plan's settings in one paragraph


def markdown(report: Report) -> str:
    """report.md: the sections in order, each table as a pipe table; figures are only in report.html."""
    lines = [f"# {report.heading}", "", *([report.question, ""] if report.question else []),
             f"Study `{report.name}`, id `{report.study_id}`", ""]
    for section in report.sections:
        lines += [f"## {section.title}", "", section.note, ""]
        for caption, table in section.tables:
            lines += ([f"**{caption}**", ""] if caption else []) + [markdown_table(table), ""]
        lines += [f"- {item}" for item in section.items] + ([""] if section.items else [])
        if section.figures:
            lines += [f"({len(section.figures)} figure{'s' if len(section.figures) > 1 else ''} in report.html)", ""]
    lines += [f"## {SETTINGS}", "", report.settings, ""]
    return "\n".join(lines)


def markdown_table(df: pl.DataFrame) -> str:
    """A pipe table of display text ("—" for none; a `|` in a cell escaped)."""
    def cell(v) -> str:
        return "—" if v is None else str(v).replace("|", "\\|")

    header = "| " + " | ".join(map(cell, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    return "\n".join([header, rule, *("| " + " | ".join(map(cell, row)) + " |" for row in df.iter_rows())])


def html(report: Report) -> str:
    """report.html, from templates/report.html.j2."""
    return _PAGES.get_template("report.html.j2").render(report=report)


def inline_html(text: str) -> Markup:
    """A note's Markdown as inline HTML: `code`, **bold** and [links](relative/or#anchor); a link to another
    site or scheme stays text, "site (https://…)"; anything else, raw HTML and *emphasis* included, is
    escaped text."""
    return Markup(_NOTES.renderInline(text))


def _offline_links(state: StateCore) -> None:
    """A core rule: each link whose target names a scheme or another host becomes its text followed by the
    target in brackets, so the page links only within itself and beside itself."""
    for block in state.tokens:
        target = None
        for i, token in enumerate(block.children or ()):
            if token.type == "link_open":
                href = token.attrGet("href") or ""
                parts = urlsplit(href)
                if parts.scheme or parts.netloc:
                    target = state.md.normalizeLinkText(href)
                    block.children[i] = Token("text", "", 0, content="")
            elif token.type == "link_close" and target is not None:
                block.children[i] = Token("text", "", 0, content=f" ({target})")
                target = None


def _text(self, tokens: list[Token], idx: int, options, env) -> str:
    """Text escaped as before markdown-it: quotes stay quotes outside attributes (byte-identical pages)."""
    return html_lib.escape(tokens[idx].content, quote=False)


def _code(self, tokens: list[Token], idx: int, options, env) -> str:
    """A code span escaped as before markdown-it, quotes included (byte-identical pages)."""
    return f"<code>{html_lib.escape(tokens[idx].content)}</code>"


def _as_written(self, tokens: list[Token], idx: int, options, env) -> str:
    """*Emphasis* as written, asterisks and all, as before markdown-it (byte-identical pages)."""
    return tokens[idx].markup


_NOTES = MarkdownIt("zero").enable(["backticks", "emphasis", "link"])
_NOTES.core.ruler.push("offline_links", _offline_links)
_NOTES.add_render_rule("text", _text)
_NOTES.add_render_rule("code_inline", _code)
for _rule in ("em_open", "em_close"):
    _NOTES.add_render_rule(_rule, _as_written)


def _escaped(value) -> Markup:
    """Every value the page shows, escaped by html.escape rather than MarkupSafe: the same HTML, written
    `&quot;` and `&#x27;` as the page was before its template, so a report rebuilt from the same results
    is byte-identical (autoescape stays on behind it, for anything this misses)."""
    return value if hasattr(value, "__html__") else Markup(html_lib.escape(str(value)))


_PAGES = jinja2.Environment(
    loader=jinja2.PackageLoader("bertology.results.report", "templates"), autoescape=True, finalize=_escaped,
    undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
_PAGES.filters["inline"] = inline_html
_PAGES.filters["anchor"] = anchor
_PAGES.globals["SETTINGS"] = SETTINGS
