"""What a report is, apart from how it is built or rendered: the study's title and what it does (from its
workflow's header), its name and id, the study's settings in one paragraph, and an ordered list of
sections, each a note with tables (display text), figures (inline SVG) and items.

The section builders produce these and the renderers (render.py) only read them, so Markdown and HTML
show the same content and a new section needs no change to either renderer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from bertology.results.labels import size_text
from bertology.workflow_header import CHECKOUT_WORKFLOWS, header, split_header


@dataclass(frozen=True)
class Section:
    title: str
    note: str
    tables: tuple[tuple[str, pl.DataFrame], ...] = ()  # (caption, table of display text)
    figures: tuple[str, ...] = ()  # inline SVG
    items: tuple[str, ...] = ()  # a list, e.g. the missing runs


@dataclass(frozen=True)
class Report:
    name: str
    study_id: str
    settings: str  # the study's settings in one paragraph
    sections: tuple[Section, ...]
    tables: dict[str, pl.DataFrame]  # analysis tables, written as tables/<name>.parquet
    title: str = ""  # what the study is called ("Layer reversal"); the name where its workflow is not at hand
    question: str = ""  # what it reproduces and does, from its workflow's header

    @property
    def heading(self) -> str:
        return self.title or self.name


def workflow_heading(name: str, directories: tuple[Path, ...] | None = None) -> tuple[str, str]:
    """(title, question) of a study from the first sentence of its workflow's header comment, `Title (report,
    table): what it does.`: ("Layer reversal", "Reproduces the monolingual report, Table 1: fine-tune …"); the
    workflow is workflows/<name>.yaml of this checkout or the current directory. ("", "") where there is
    none (a report rebuilt where no checkout is at hand)."""
    directories = directories or (CHECKOUT_WORKFLOWS, Path("workflows"))
    path = next((d / f"{name}.yaml" for d in directories if (d / f"{name}.yaml").is_file()), None)
    if path is None:
        return "", ""
    title, source, rest = split_header(header(path))
    end = rest.find(". ")
    rest = rest if end < 0 else rest[:end + 1]
    if len(title) > 80:  # no `Title:` sentence: the name stands
        return "", ""
    what = rest[:1].upper() + rest[1:]
    return title.strip(), (f"Reproduces the {source}" + (f": {rest}" if rest else ".") if source else what)


def anchor(title: str) -> str:
    """A section's id in report.html, from its title: "Verdict: the report vs this run" ->
    "verdict-the-report-vs-this-run"."""
    return "-".join("".join(c if c.isalnum() else " " for c in title.lower()).split())


def figures_drawn(*figures: str | None) -> tuple[str, ...]:
    """The figures that were drawn (a plot function gives None when there is nothing to draw)."""
    return tuple(f for f in figures if f)


def training_choices(spec: dict) -> str:
    """How the batches were drawn and in which precision the runs computed, where Hugging Face's run_glue
    (whose defaults a study assumes where its report is silent) may differ. A plan's regime lacks
    `group_by_length` where it is true: so did every plan made before the setting, whose runs were grouped."""
    study = spec["regime"].get("group_by_length", True)
    text = ("Training batches: of similar-length examples (`group_by_length=true`; run_glue's are random)"
            if study else "Training batches: random, as run_glue draws them (`group_by_length=false`)")
    others = [v["name"] for v in spec.get("variants", [])
              if (v.get("regime") or {}).get("group_by_length", study) != study]
    if others:
        text += f", except {', '.join(f'`{v}`' for v in others)} (its own `group_by_length`)"
    return text + ("; bf16 autocast on a GPU (run_glue computes in fp32; the runs table's `device` says where each "
                   "run trained), fp32 on CPU.")


def settings(spec: dict) -> str:
    """The plan's settings in one paragraph (those it has: a vocabulary plan has no regime or seeds)."""
    parts = [f"Preset `{spec.get('preset')}`", f"models {', '.join(spec.get('models', []))}"]
    if "seeds" in spec:
        parts.append(f"seeds {spec['seeds']}")
        fewer = {v["name"]: v["runs"] for v in spec["variants"] if v.get("runs", len(spec["seeds"])) < len(spec["seeds"])}
        if fewer:
            parts[-1] += " (" + ", ".join(f"{name} {'once' if n == 1 else f'{n} times'}" for name, n in fewer.items()) \
                + ": the first of them)"
    if "regime" in spec:
        regime = spec["regime"]
        parts.append(f"regime {regime['name']} (lr {regime['lr']}, batch {regime['batch_size']}, "
                     f"{regime['epochs']} epochs, max length {spec.get('max_length')})")
    if "source" in spec:
        parts.append(f"data source `{spec['source']}`")
    text = "; ".join(parts) + "."
    sizes = [size_text(s.get("fraction"), s.get("count")) for s in spec["sizes"]]
    if sizes != ["all data"]:
        text += f" Training data: {', '.join(sizes)}."
    if spec["intermediates"]:
        text += (f" Intermediate tasks: {', '.join(spec['intermediates'])}; the final task's head: "
                 f"{spec.get('final_head', 'new')} (`final_head`).")  # absent: new, as before the setting
    if "regime" in spec:
        text += " " + training_choices(spec)
    if spec.get("regime", {}).get("fused"):
        text += (" Runs trained fused: several runs of one architecture, data and seed as one stacked model, "
                 "with eager attention and one dropout mask per dropout call shared by them (their numbers "
                 "differ from runs trained alone by float noise and dropout draws, never with the group).")
    axes = list(dict.fromkeys(a for v in spec["variants"] for a in v["levels"]))
    if axes:
        text += f" Variants vary {', '.join(axes)}."
    return text
