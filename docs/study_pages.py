"""The docs site's study pages, generated from the workflows themselves so they cannot drift: one page per
`workflows/*.yaml`, from its header comment (what it reproduces, which settings come from the report and
which are assumed, how to run it) and its parameters with their defaults. An MkDocs hook (mkdocs.yml
`hooks:`): `on_config` lists the pages under the nav's "Studies", `on_files` adds them to the build.
tests/test_docs.py checks every page against its workflow file.

The pages exist only on the site, so the docs' Markdown links a study by its workflow file
(`[reversed-layers](../../workflows/reversed-layers.yaml)` in docs/studies/index.md): read in the
repository (on GitHub), the link opens the file the page is made of; `on_page_markdown` turns it into a
link to the study's page on the site.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path

import yaml

from bertology.study.params import unmark

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
WORKFLOWS = REPO / "workflows"
SECTION = "Studies"  # the nav entry whose pages these are
_CODE_SPAN = re.compile(r"(`[^`\n]*`)")


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.yaml"))


def header(text: str) -> list[str]:
    """The leading comment lines of a YAML file, without `# ` ('' for a bare `#`)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[2:] if line.startswith("# ") else line[1:])
    return lines


def blocks(lines: list[str]) -> list[tuple[str, str]]:
    """The header as ("text", paragraph) and ("code", commands) blocks: indented lines are commands, a bare
    `#` ends a paragraph."""
    out: list[tuple[str, list[str]]] = []
    for line in lines:
        kind = "gap" if not line.strip() else "code" if line.startswith("  ") else "text"
        if out and out[-1][0] == kind and kind != "gap":
            out[-1][1].append(line.strip())
        else:
            out.append((kind, [line.strip()]))
    return [(kind, (" " if kind == "text" else "\n").join(body)) for kind, body in out if kind != "gap"]


def parameters(document: dict) -> tuple[list[dict], str | None]:
    """The workflow's parameters (a CronWorkflow's are in its workflowSpec), or where it declares none, those
    of the WorkflowTemplate it references (the nightly's), with that template's name."""
    spec = _spec(document)
    own = [p for p in (spec.get("arguments") or {}).get("parameters") or [] if isinstance(p, dict)]
    name = (spec.get("workflowTemplateRef") or {}).get("name")
    if own or name is None:
        return own, None
    for path in sorted((WORKFLOWS / "templates").glob("*.yaml")):
        for template in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(template, dict) and (template.get("metadata") or {}).get("name") == name:
                return parameters(template)[0], name
    return [], name


def _spec(document: dict) -> dict:
    spec = document.get("spec") or {}
    return spec.get("workflowSpec", spec) if document.get("kind") == "CronWorkflow" else spec


def default_text(value) -> str:
    """A parameter's default as one line, as a user would type it: without the `default:` mark a study's own
    defaults carry (bertology.study.params.DEFAULT_MARK), JSON compacted (YAML's folded values keep their line
    breaks)."""
    text = " ".join(unmark(str(value if value is not None else ""))[0].split())
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return json.dumps(parsed, separators=(", ", ": ")) if isinstance(parsed, (list, dict)) else text


def default_cell(parameter: dict) -> str:
    """A parameter's default in the table: its value as code, where a `valueFrom` takes it from, or (empty)."""
    default = default_text(parameter.get("value", ""))
    ref = (parameter.get("valueFrom") or {}).get("configMapKeyRef")
    if default:
        return _cell(f"`{default}`")
    return f"from ConfigMap `{ref['name']}`, key `{ref['key']}`" if ref else "(empty)"


def preset_replaces(parameter: dict) -> bool:
    """Whether a preset may replace this parameter's default (a study's own default, marked `default:`)."""
    return unmark(str(parameter.get("value") or ""))[1]


PRESET_NOTE = ("The `demo` and `tiny` presets replace some of these defaults (the models, the data and its size, "
               "the training settings); a value passed with `-p` or `-f` they keep.")


def escape(text: str) -> str:
    """Header prose as Markdown shows it: `<store>` and `\\#` stay text, `*` no emphasis; `code` stays code
    (a code span shows its text as written, so a glob such as `*.weight` is left as it is)."""
    parts = _CODE_SPAN.split(text)  # odd parts are the code spans
    return "".join(part if i % 2 else part.replace("\\", "\\\\").replace("<", "&lt;").replace("*", "\\*")
                   for i, part in enumerate(parts))


def unescape(text: str) -> str:
    return text.replace("\\*", "*").replace("&lt;", "<").replace("\\\\", "\\")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def page(path: Path) -> str:
    """The Markdown page of one workflow file."""
    text = path.read_text(encoding="utf-8")
    document = next(d for d in yaml.safe_load_all(text) if isinstance(d, dict))
    note = (f"`workflows/{path.name}` ({document['kind']}). This page is generated from the file's header "
            "comment and parameters: edit them there.")
    out = [f"# {path.stem}", "", note, ""]
    for kind, body in blocks(header(text)):
        out += ([escape(body), ""] if kind == "text" else ["```bash", body, "```", ""])
    if document["kind"] == "CronWorkflow":
        cron = document["spec"]
        schedule = (f"`{', '.join(cron.get('schedules', []))}` ({cron.get('timezone', 'UTC')}); concurrencyPolicy "
                    f"{cron.get('concurrencyPolicy', 'Allow')}, suspended: {str(cron.get('suspend', False)).lower()}.")
        out += ["## Schedule", "", schedule, ""]
    declared, template = parameters(document)
    referenced = f"Those of WorkflowTemplate `{template}` (workflows/templates/), which this file references."
    out += ["## Parameters", "", *([referenced, ""] if template else []),
            *([PRESET_NOTE, ""] if any(map(preset_replaces, declared)) else []),
            "| parameter | default | description |", "|---|---|---|"]
    for p in declared:
        out.append(f"| `{p['name']}` | {default_cell(p)} | "
                   f"{_cell(escape(p.get('description', '')))} |")
    return "\n".join(out) + "\n"


# A Markdown link (or image) target naming a workflow file, with an optional anchor.
_WORKFLOW_LINK = re.compile(r"\]\((?P<path>[^()\s#]*\.yaml)(?P<anchor>#[^()\s]*)?\)")


def site_links(markdown: str, src_uri: str) -> str:
    """The Markdown of the docs page `src_uri` (relative to docs/) with each link to a workflow file that has a
    generated page (`../../workflows/NAME.yaml`, as the repository resolves it from the page's own folder)
    turned into a link to that page (`NAME.md` from docs/studies/); other links as they are."""
    folder = posixpath.dirname(src_uri)
    stems = {path.stem for path in workflow_files()}

    def replace(match: re.Match) -> str:
        in_repo = posixpath.normpath(posixpath.join("docs", folder, match["path"]))
        stem = posixpath.basename(in_repo).removesuffix(".yaml")
        if posixpath.dirname(in_repo) != "workflows" or stem not in stems:
            return match[0]
        page = posixpath.relpath(f"studies/{stem}.md", folder or ".")
        return f"]({page}{match['anchor'] or ''})"

    return _WORKFLOW_LINK.sub(replace, markdown)


def nav_entries() -> list[dict]:
    return [{path.stem: f"studies/{path.stem}.md"} for path in workflow_files()]


# -- the MkDocs hook -------------------------------------------------------------------------------------

def on_config(config):
    """The nav's "Studies" section: its own pages (the overview), then one page per workflow."""
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and SECTION in entry:
            entry[SECTION] = [*(e for e in entry[SECTION] if e not in nav_entries()), *nav_entries()]
    return config


def on_page_markdown(markdown, page, config, files):
    return site_links(markdown, page.file.src_uri)


def on_files(files, config):
    from mkdocs.structure.files import File

    for path in workflow_files():
        files.append(File.generated(config, f"studies/{path.stem}.md", content=page(path)))
    return files
