"""bench/real_data_orderings.py resumes: a rerun skips every (lr, study) already in its jsonl and keeps the
rows, runs only the variants a study lacks, and its table shows every lr it holds rows for
(docs/measurements.md, "The studies' orderings on real data")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "real_data_orderings.py"
STUDY_VARIANTS = {"reversed-layers": ["pre-trained", "reversed", "clean"], "shuffled-embeddings": ["base", "shuffled", "clean"],
                  "init-distribution": ["pre-trained", "shuffled", "oracle", "oracle-all-tensors", "clean"]}


def _rows(lr: str) -> list[dict]:
    """One lr's rows of every study, sst2 only, seeds 1 and 2; variant names as the workflows give them."""
    value = {"base": 0.8, "pre-trained": 0.8, "reversed": 0.7, "shuffled": 0.6, "oracle": 0.55,
             "oracle-all-tensors": 0.52, "clean": 0.5}
    return [{"study": study, "lr": lr, "task": "sst2", "variant": v, "seed": seed, "metric": "accuracy",
             "best": value[v] + seed / 100, "best_epoch": 1, "last": value[v], "per_epoch": [value[v]],
             "num_train": 1000, "run_id": f"{study}-{v}-{seed}"}
            for study, variants in STUDY_VARIANTS.items() for v in variants for seed in (1, 2)]


def test_a_rerun_skips_every_finished_lr_and_study_keeps_the_rows_and_tabulates_them(tmp_path):
    out = tmp_path / "orderings"
    rows = _rows("1e-4") + _rows("5e-5")
    out.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = out.with_suffix(".jsonl").read_bytes()
    # A study that did run would fail on this GLUE directory, which does not exist: exit 0 proves none ran.
    done = subprocess.run([sys.executable, str(SCRIPT), "--glue", str(tmp_path / "no-glue"), "--store",
                           str(tmp_path / "store"), "--out", str(out), "--tasks", "sst2", "--lrs", "5e-5"],
                          check=False, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    skipped = [line.split("] ", 1)[1] for line in done.stdout.splitlines() if "skipped" in line]
    assert skipped == [f"{study} lr 5e-5: already in {out.with_suffix('.jsonl')}, skipped" for study in STUDY_VARIANTS]
    assert out.with_suffix(".jsonl").read_bytes() == before
    table = out.with_suffix(".md").read_text()
    # Both lrs appear, the one not asked for (1e-4) too, highest first.
    firsts = ("| 1e-4 | sst2 | 0.810", "| 5e-5 | sst2 | 0.810")
    assert [line[:6] for line in table.splitlines() if line.startswith(firsts)] == ["| 1e-4", "| 5e-5"]
    assert ("| 5e-5 | sst2 | pre-trained > reversed (reversed-layers) | Table 1 | holds (2 above, 0 equal, 0 below "
            "of 2 seeds; mean diff +0.100; best run 0.820 vs 0.720) |") in table
    assert ("| 5e-5 | sst2 | oracle > clean (init-distribution) | Table 6 | holds (2 above, 0 equal, 0 below of 2 "
            "seeds; mean diff +0.050; best run 0.570 vs 0.520) |") in table
    assert ("| 5e-5 | sst2 | oracle-all-tensors > clean (init-distribution) | Table 6 | holds (2 above, 0 equal, 0 "
            "below of 2 seeds; mean diff +0.020; best run 0.540 vs 0.520) |") in table


def test_a_study_lacking_a_variant_runs_that_variant_only(tmp_path):
    """A variant added to a study after its rows were measured (the weight-matrix oracle beside the all-tensors
    one): the rerun runs that variant alone, with the study's own definition of it; a workflow-defined study
    that lacks some of its variants is refused (its variants are the workflow's, not the script's)."""
    out = tmp_path / "orderings"
    rows = [r for r in _rows("5e-5") if r["variant"] != "oracle"]
    out.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run([sys.executable, str(SCRIPT), "--glue", str(tmp_path / "no-glue"), "--store",
                           str(tmp_path / "store"), "--out", str(out), "--tasks", "sst2", "--lrs", "5e-5"],
                          check=False, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode != 0  # the run it started fails on the missing GLUE directory: it was started
    assert f"init-distribution lr 5e-5: only oracle (the rest is in {out.with_suffix('.jsonl')})" in done.stdout
    started = next(line for line in done.stderr.splitlines() if "bertology" in line and "variants=" in line)
    assert '"name": "oracle"' in started and '"oracle-all-tensors"' not in started and '"clean"' not in started
    assert '"tensors": ["*_embeddings.weight", "*.attention.self.*.weight"' in started
    rows = [r for r in _rows("5e-5") if not (r["study"] == "reversed-layers" and r["variant"] == "clean")]
    out.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run([sys.executable, str(SCRIPT), "--glue", str(tmp_path / "no-glue"), "--store",
                           str(tmp_path / "store"), "--out", str(out), "--tasks", "sst2", "--lrs", "5e-5"],
                          check=False, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode != 0
    assert "reversed-layers lr 5e-5: the jsonl has some of its variants only (clean lacking)" in done.stderr
