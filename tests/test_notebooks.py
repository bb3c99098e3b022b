"""The example notebooks (examples/*.ipynb) run as Jupyter runs them: nbclient on an ipykernel of this
interpreter, every cell in order from the notebook's own folder, any cell's error failing the test. They
need the `notebook` extra (`make install` installs it); without it they are skipped, saying so."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
MISSING = [m for m in ("nbclient", "nbformat", "ipykernel") if importlib.util.find_spec(m) is None]
needs_extra = pytest.mark.skipif(bool(MISSING), reason=(
    f"the notebook extra is not installed ({', '.join(MISSING)} missing): make install, "
    "or pip install -e '.[notebook]'"))


def execute(path: Path, env: dict[str, str]):
    """The notebook at `path`, executed in a fresh kernel started with `env`: the notebook with its outputs."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    saved = dict(os.environ)
    os.environ.update(env)  # the kernel is a child of this process: it inherits the environment
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return notebook


def outputs(notebook, kind: str) -> list[str]:
    """Every output's data of the given MIME type, in cell order."""
    return [out["data"][kind] for cell in notebook.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if kind in out.get("data", {})]


def test_every_example_notebook_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.ipynb")) == ["results.ipynb"]


@needs_extra
def test_the_results_notebook_runs_a_tiny_study_and_shows_its_table_and_figure(tmp_path):
    """examples/results.ipynb as a researcher runs it: the tiny reversed-layers study into a store of its own
    (here under tmp_path), read back with `scan` and `load_study_results`, a Polars table of the means and a
    matplotlib figure. The table it shows holds what the store holds: one row per variant, each over both
    seeds, with the means `scan` gives here."""
    import polars as pl

    from bertology.results import scan
    from bertology.results.study_results import latest_study_id, load_study_results
    from bertology.store import open_store

    store = tmp_path / "store"
    started = time.monotonic()
    notebook = execute(EXAMPLES / "results.ipynb", {"BERTOLOGY_STORE": str(store), "HF_HUB_OFFLINE": "1",
                                                    "BERTOLOGY_CACHE": str(tmp_path / "cache"),
                                                    "MPLBACKEND": "module://matplotlib_inline.backend_inline"})
    print(f"examples/results.ipynb ran in {time.monotonic() - started:.1f} s")
    errors = [out for cell in notebook.cells for out in cell.get("outputs", []) if out["output_type"] == "error"]
    assert errors == []

    runs = scan(str(store), "runs", study="reversed-layers").filter("primary").collect()
    means = runs.group_by("variant").agg(n=pl.len(), mean=pl.col("value").mean()).sort("variant")
    results = load_study_results(open_store(str(store)), "reversed-layers",
                                 latest_study_id(open_store(str(store)), "reversed-layers"))
    assert results.complete and len(results.cells) == runs.height == 6
    assert means["n"].to_list() == [2, 2, 2] and sorted(means["variant"]) == sorted(results.variants)

    [table] = [text for text in outputs(notebook, "text/html") if "<table" in text and "mean" in text]
    for variant, mean in means.select("variant", "mean").iter_rows():
        assert f"&quot;{variant}&quot;" in table, table
        assert f"{mean:.6g}"[:6] in table, (variant, mean, table)  # Polars shows 6 significant digits
    printed = "".join(out["text"] for cell in notebook.cells for out in cell.get("outputs", [])
                      if out["output_type"] == "stream")
    assert f"plan {results.study_id}: 6 runs, variants {results.variants}, complete: True" in printed
    [figure] = outputs(notebook, "image/png")  # the one figure: bars and seeds, and the loss curves
    assert len(figure) > 1000
