"""bench/step_start.py runs on CPU and reports every part of a step's process start."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import step_start  # bench/ is not a package: imported from its folder


def test_parts_of_a_fresh_step_on_cpu(tmp_path, capsys):
    out = tmp_path / "start.json"
    result = step_start.main(["--runs", "1", "--rows", "2", "--width", "8", "--overlap-cuda-init", "--json", str(out)])
    median = result["median"]
    assert set(median) == {*step_start.PARTS, "to first step", "exit"}
    assert all(value >= 0 for value in median.values())
    assert median["training imports"] > median["step module"]  # torch and transformers are imported only for training
    assert median["to first step"] >= sum(median[part] for part in step_start.PARTS) - 1e-6
    assert json.loads(out.read_text())["median"] == median
    assert "first step" in capsys.readouterr().out
