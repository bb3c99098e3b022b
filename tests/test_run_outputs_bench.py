"""bench/run_outputs.py runs on CPU: both ways of scoring and measuring a run's weights give the same
distances, and each way is timed."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import run_outputs  # bench/ is not a package: imported from its folder


def test_both_ways_agree_and_are_timed(capsys):
    medians = run_outputs.main(["--layers", "1", "--repeats", "1"])
    assert set(medians) == {"saved and read back", "in memory"} and all(t > 0 for t in medians.values())
    out = capsys.readouterr().out
    assert "the same distances both ways (exactly) over 7 modules" in out, out  # embeddings, 4 sub-layers and the projection, pooler
