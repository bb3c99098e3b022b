"""The device kit and the lent GPU's one call (bench/README.md): bench/device_kit.py, bench/device.sh,
bench/gpu.py's time budget and partial results (bench/gpu_record.py).

The proof that the kit is complete is `make device-kit-test` (BERTOLOGY_DEVICE_KIT=1; .ci/run runs it
after `make test`): a fresh Python 3.12 virtual environment holding exactly bench/gpu-machine.txt (the GPU
machine's packages: torch 2.11.0 is PyPI's CUDA 13.0 build, as there, running on the CPU here), cached in
~/.cache/bertology (about 5.4 GB, built once), runs bench/device.sh, the device call's own script, on CPU
to the end. It is not part of `make test`: the environment's first build downloads about 2.7 GiB of
wheels (9 minutes here), and the run takes about 5 minutes on 2 shared cores.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))
import device_kit  # bench/ is not a package: imported from its folder
import gpu_record

DEVICE_FILES = {"log.txt", "nvidia-smi.txt", "pip-freeze.txt", "report.md", "figures.json"}
# What the device tool brings back from $OUT (its README, Limits): at most 8 files, these characters only.
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def _pins(path: Path) -> dict[str, str]:
    return dict(line.split("==") for line in device_kit.pins(path))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# -- the kit --------------------------------------------------------------------------------------------
def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    """A wheel as setuptools writes one: the files, then a RECORD of their hashes and sizes."""
    info = "pkg-0.1.0.dist-info/"
    files = {**files, info + "METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 0.1.0\n",
             info + "WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [device_kit._record_line(name, data) for name, data in files.items()] + [info + "RECORD,,"]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(info + "RECORD", "\n".join(record) + "\n")
    return path


def test_the_slim_wheel_installs_without_its_weights_under_its_own_version(tmp_path):
    source = _wheel(tmp_path / "pkg-0.1.0-py3-none-any.whl", {
        "pkg/__init__.py": b"", "pkg/model/tokenizer.json": b'{"v": 1}', "pkg/model/vocab.txt": b"[PAD]\n",
        "pkg/model/model.safetensors": b"\0" * 4096, "pkg/model/pytorch_model.bin": b"\0" * 1024})
    (tmp_path / "kit").mkdir()
    slim = device_kit.slim_wheel(source, tmp_path / "kit", "0.1.0+tokenizer")
    assert slim.name == "pkg-0.1.0+tokenizer-py3-none-any.whl"
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    str(slim)], check=True)
    assert sorted(p.name for p in (site / "pkg" / "model").iterdir()) == ["tokenizer.json", "vocab.txt"]
    assert (site / "pkg" / "model" / "tokenizer.json").read_bytes() == b'{"v": 1}'
    meta = (site / "pkg-0.1.0+tokenizer.dist-info" / "METADATA").read_text()
    assert "Version: 0.1.0+tokenizer" in meta
    listed = subprocess.run([sys.executable, "-m", "pip", "list", "--path", str(site), "--format=freeze"],
                            check=True, capture_output=True, text=True).stdout
    assert "pkg==0.1.0+tokenizer" in listed.splitlines()


def test_two_versions_of_one_distribution_in_the_kit_are_refused(tmp_path):
    for name in ("dill-0.4.1-py3-none-any.whl", "Dill-0.4.0-py3-none-any.whl", "datasets-5.2.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(SystemExit, match="two wheels of 'dill'"):
        device_kit.check_one_version(tmp_path)


def test_the_gpu_machine_pins_name_only_what_the_machine_has_and_the_kit_only_what_it_lacks():
    machine = {_norm(line) for line in (BENCH / "gpu-machine-packages.txt").read_text().splitlines()
               if line and not line.startswith("#")}
    pins = {_norm(name): v for name, v in _pins(BENCH / "gpu-machine.txt").items()}
    assert sorted(set(pins) - machine) == []
    # the versions the device documentation gives (KINDS.md's pip list)
    documented = {"torch": "2.11.0", "transformers": "5.17.0", "tokenizers": "0.23.2", "safetensors": "0.8.0",
                  "accelerate": "1.15.0", "huggingface-hub": "1.33.0", "numpy": "2.5.2"}
    assert {k: pins[k] for k in documented} == documented
    kit = {_norm(name) for name in _pins(device_kit.PINS)}
    assert kit == {"datasets", "dill", "multiprocess"}
    assert not kit & machine


# -- the time budget and partial results ------------------------------------------------------------------
def test_a_part_running_at_the_deadline_is_stopped_and_the_rest_skipped_with_every_figure_on_disk(tmp_path):
    rec = gpu_record.Record(tmp_path, 1.0, lambda figures: ["## end"])
    with rec.part("first") as go:
        assert go
        rec.put("first", "value", 1.5)
        rec.lines("first line")
    with rec.part("slow") as go:
        rec.put("slow", "started", True)
        time.sleep(30)  # interrupted by the alarm at the deadline
        rec.put("slow", "finished", True)
    with rec.part("late") as go:
        assert not go
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["first"] == {"value": 1.5}
    assert figures["slow"] == {"started": True}
    assert [figures["parts"][p]["status"] for p in ("first", "slow", "late")] == [
        "done", "stopped at the budget", "skipped: no budget left"]
    assert 0.9 <= figures["parts"]["slow"]["seconds"] < 5
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("first line\n")
    assert "*slow: stopped, the --budget-s of 1 s ran out.*" in report
    assert "*late: skipped, the --budget-s of 1 s was spent.*" in report
    assert report.endswith("## end\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures.json", "report.md"]


def test_a_failing_part_is_recorded_and_the_next_still_runs(tmp_path):
    rec = gpu_record.Record(tmp_path, None, lambda figures: [])
    with rec.part("broken"):
        raise ValueError("no such task")
    with rec.part("next") as go:
        rec.put("next", "ok", go)
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["parts"]["broken"]["status"] == "failed: ValueError: no such task"
    assert figures["parts"]["next"]["status"] == "done" and figures["next"] == {"ok": True}


def test_the_deadline_kills_a_child_and_the_childs_own_children(tmp_path):
    """The finetune step with K > 1 starts a process per run: all of them must go at the deadline."""
    pids = tmp_path / "pids"
    code = ("import subprocess, sys, time; "
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pids)!r}, 'w').write(str(g.pid)); time.sleep(60)")
    rec = gpu_record.Record(None, 3.0, lambda figures: [])
    start = time.monotonic()
    with rec.part("child"):
        gpu_record.run_child([sys.executable, "-c", code], tmp_path, rec.remaining())
    assert time.monotonic() - start < 10
    assert rec.figures["parts"]["child"]["status"] == "stopped at the budget"
    grandchild = int(pids.read_text())
    for _ in range(50):  # killed; reaped by init once its parent is gone
        if not Path(f"/proc/{grandchild}").exists() or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"process {grandchild} outlived the deadline")


def _gpu_py(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(BENCH / "gpu.py"), *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


@pytest.mark.parametrize(("args", "message"), [
    (["--parts", "ours,speed"], ("--parts: unknown part 'speed' (allowed: streams, compiled, streams-check, "
                                 "compiled-check, start, bundle, overhead, sweep, ours, fused, concurrency, "
                                 "optimisations, profile)")),
    (["--budget-s", "-5"], "--budget-s must be a number of seconds >= 0, got -5.0"),
    (["--scale", "0"], "--scale must be a number > 0, got 0.0"),
    (["--concurrency", "1,two"], "--concurrency must be comma-separated integers >= 1, got '1,two'"),
    (["--device", "tpu"], "--device must be cpu or cuda, got 'tpu'"),
    (["--out", "/nonexistent/folder"], "--out must be an existing folder, got '/nonexistent/folder'"),
])
def test_bad_gpu_py_arguments_are_one_line_and_exit_2_before_any_compute(args, message, capsys):
    import gpu

    with pytest.raises(SystemExit) as exit_:
        gpu.parse_args(args)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"bench/gpu.py: {message}\n"


def test_a_gpu_py_run_killed_mid_way_leaves_every_figure_measured_so_far(tmp_path):
    """What a device call cut off at its timeout returns: report.md and figures.json as of the last figure."""
    proc = _gpu_py("--parts", "ours,overhead", "--scale", "0.25", "--out", str(tmp_path))
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            figures = tmp_path / "figures.json"
            if figures.exists() and json.loads(figures.read_text())["parts"].get("ours", {}).get("status") == "done":
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"the ours part did not finish: {proc.communicate()}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["meta"]["cuda"] is False and figures["meta"]["args"]["parts"] == ["ours", "overhead"]
    assert set(figures["ours"]) == {"fixed-128", "sst2", "qnli", "rte"}
    fixed = figures["ours"]["fixed-128"]
    assert fixed["tokens"] == 128 * fixed["rows"] and fixed["ours"]["seq_s"] > 0
    report = (tmp_path / "report.md").read_text()
    assert "| fixed length 128 | ours |" in report and "## Targets" in report
    assert {t["target"]: t["measured"] for t in figures["targets"]}[
        "BERT-base training seq/s at fixed length 128"] == fixed["ours"]["seq_s"]


def test_the_streams_parts_run_on_cpu_and_find_every_run_side_by_side_equal_to_alone(tmp_path):
    """gpu.py's first two parts in the CPU dry mode: K = 1, 2 runs interleaved (eager steps), and the check
    that each run side by side ends exactly as alone, dropout off and on."""
    proc = _gpu_py("--parts", "streams,streams-check", "--out", str(tmp_path))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert {p: s["status"] for p, s in figures["parts"].items()} == {"streams": "done", "streams-check": "done"}
    assert set(figures["streams"]) == {"1", "2"} and all(figures["streams"][k]["seq_s"] > 0 for k in ("1", "2"))
    check = figures["streams-check"]
    assert set(check) == {"fp32, dropout off", "fp32, dropout on", "autocast (fp32 on CPU), dropout off", "all_exact"}
    assert check["all_exact"] is True and check["fp32, dropout on"]["side_by_side_vs_alone"] == {
        "step0_loss": 0.0, "step0_grads": 0.0, "losses": 0.0, "weights": 0.0}
    report = (tmp_path / "report.md").read_text()
    assert "## K runs side by side in one process" in report and "Every run side by side ended exactly as alone" in report


def test_the_compiled_check_and_start_parts_run_on_cpu(tmp_path):
    """gpu.py's compiled-check part in the CPU dry mode (a compiled run against the same run not compiled, to
    fp32 noise) and the process start's (imports only, and -X importtime). The `compiled` part (the streams
    part's timing with compiled models) runs in make device-kit-test."""
    proc = _gpu_py("--parts", "compiled-check,start", "--out", str(tmp_path))
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert {p: s["status"] for p, s in figures["parts"].items()} == {"compiled-check": "done", "start": "done"}
    check = figures["compiled-check"]
    assert 0 < check["fp32: compiled vs not"]["losses"] < 1e-5  # inductor's own kernels: float noise, no more
    start = figures["start"]["bytecode as cached, imports only"]
    assert start["to_first_step_s"] > 0 and start["median_s"]["training imports"] > 0
    assert len(figures["start"]["importtime_self_top"]) == 10
    report = (tmp_path / "report.md").read_text()
    assert "## A compiled run against the same run not compiled" in report and "## A step's process start" in report


def test_the_device_script_refuses_a_missing_out_folder_a_bad_budget_and_an_empty_kit(tmp_path):
    copy = tmp_path / "repo"
    (copy / "bench").mkdir(parents=True)
    shutil.copy(BENCH / "device.sh", copy / "bench")
    cases = [({"OUT": str(tmp_path / "none")}, f"OUT must name an existing folder for the results, got '{tmp_path}/none'"),
             ({"OUT": str(tmp_path), "BUDGET_S": "5m"}, "BUDGET_S must be a whole number of seconds, got '5m'"),
             ({"OUT": str(tmp_path)}, "no wheels in .whl/: run 'make device-kit' first and name .whl in the call's carry")]
    for env, message in cases:
        done = subprocess.run(["bash", str(copy / "bench" / "device.sh")], env={"PATH": os.environ["PATH"], **env},
                              capture_output=True, text=True, check=False)
        assert (done.returncode, done.stderr) == (2, f"bench/device.sh: {message}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]  # nothing written to OUT


# -- the proof: the device call's script, on CPU, with only the machine's packages and the kit ---------
def _python312() -> Path:
    candidates = [os.environ.get("BERTOLOGY_PYTHON312"), shutil.which("python3.12"),
                  *sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.12.*/bin/python"))]
    for candidate in filter(None, candidates):
        version = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                                 capture_output=True, text=True, check=False).stdout.strip()
        if version == "True":
            return Path(candidate)
    raise AssertionError("no Python 3.12 found (the GPU machine's); set BERTOLOGY_PYTHON312 to one")


def gpu_machine_venv() -> Path:
    """A venv of exactly bench/gpu-machine.txt, built once per pin list in ~/.cache/bertology (a stamp file
    marks a finished build; an unfinished one is built again)."""
    pins = BENCH / "gpu-machine.txt"
    digest = hashlib.sha256("\n".join(device_kit.pins(pins)).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bertology"
    venv = cache / f"gpu-machine-py312-{digest}"
    if not (venv / ".complete").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([str(_python312()), "-m", "venv", str(venv)], check=True)
        # --no-deps: the pins are the whole set (pip check below says whether it is consistent)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "-r", str(pins)],
                       check=True, cwd=cache)
        (venv / ".complete").write_text(digest + "\n")
    return venv


@pytest.mark.skipif(os.environ.get("BERTOLOGY_DEVICE_KIT") != "1",
                    reason="make device-kit-test runs it (a 5 GB environment built once, then minutes on CPU)")
def test_the_device_call_runs_bench_gpu_py_to_the_end_with_only_the_machines_packages_and_the_kit(tmp_path):
    kit = sorted(p.name for p in (REPO / ".whl").glob("*.whl"))
    assert kit, "no kit: make device-kit first"
    venv = gpu_machine_venv()
    python = venv / "bin" / "python"
    freeze = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze", "--exclude", "pip"],
                            check=True, capture_output=True, text=True).stdout
    assert {_norm(n): v for n, v in (line.split("==") for line in freeze.split())} == {
        _norm(n): v for n, v in _pins(BENCH / "gpu-machine.txt").items()}
    out, site = tmp_path / "out", tmp_path / "site"
    out.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path)), "OUT": str(out),
           "PYTHON": str(python), "KIT_SITE": str(site), "BUDGET_S": "3600", "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    done = subprocess.run(["bash", str(BENCH / "device.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    log = (out / "log.txt").read_text()
    assert done.returncode == 0, log[-5000:]
    assert set(os.listdir(out)) == DEVICE_FILES and all(OUT_NAME.match(n) for n in DEVICE_FILES)
    assert sorted(p.name for p in site.glob("*.dist-info")) == sorted(
        re.sub(r"^(.+?)-(.+?)-.*$", r"\1-\2.dist-info", name) for name in kit)
    assert "torch==2.11.0" in (out / "pip-freeze.txt").read_text().split()
    assert "datasets==5.2.0" in (out / "pip-freeze.txt").read_text().split()
    figures = json.loads((out / "figures.json").read_text())
    assert {p: s["status"] for p, s in figures["parts"].items()} == {
        p: "done" for p in ("streams", "compiled", "streams-check", "compiled-check", "start", "bundle", "overhead",
                            "sweep", "ours", "fused", "concurrency", "optimisations", "profile")}
    meta = figures["meta"]
    assert (meta["cuda"], meta["python"][:4], meta["versions"]["torch"], meta["versions"]["transformers"],
            meta["versions"]["datasets"]) == (False, "3.12", "2.11.0", "5.17.0", "5.2.0")
    for row in ("fixed-128", "sst2", "qnli", "rte"):  # the HF Trainer ran: datasets and accelerate work there
        assert figures["ours"][row]["trainer"]["seq_s"] > 0 and figures["ours"][row]["ours_over_trainer"] > 0
    assert set(figures["overhead"]) == {"RTE-sized", "SST-2-sized"}
    assert set(figures["sweep"]["tasks"]) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"}
    assert figures["sweep"]["train_sequences"] == 2_849_199 and figures["sweep"]["with_measured_overheads"]
    assert set(figures["concurrency"]["RTE-sized, 3 epochs"]) == {"1", "2", "processes"}
    assert set(figures["concurrency"]["RTE-sized, 3 epochs"]["processes"]) == {"2"}
    assert set(figures["bundle"]["RTE-sized, 3 epochs"]) == {"1", "2"}  # side by side only
    assert set(figures["streams"]) == {"1", "2"} and figures["streams-check"]["all_exact"] is True
    assert {name: set(rows) for name, rows in figures["fused"].items() if name not in ("best_seq_s", "precision")} == {
        "one run, eager": {"1"}, "fused, eager": {"1", "2"}}  # vmap over the machine's transformers works
    assert figures["fused"]["precision"]["fp32, TF32 off: fused run 0 vs one run"]["losses"] < 1e-5
    assert all("seq_s" in row for name, rows in figures["fused"].items() if isinstance(rows, dict) and name != "precision"
               for row in rows.values())
    measured = {t["target"] for t in figures["targets"] if t["measured"] is not None}
    missing = {t["target"] for t in figures["targets"]} - measured
    assert missing == {"RTE-sized, 3 epochs: aggregate speed-up of K = 4 over K = 1",  # K = 4: CUDA only
                       "process start to the first training step (BERT-base)"}  # on CPU: the imports only
    assert set(figures["compiled"]) == {"1", "2"} and all(figures["compiled"][k]["seq_s"] > 0 for k in ("1", "2"))
    assert {t["target"]: t["measured"] for t in figures["targets"]}["one compiled run"] == figures["compiled"]["1"]["seq_s"]
    assert figures["compiled-check"]["fp32: compiled vs not"]["losses"] < 1e-4  # inductor on the machine's torch
    assert all(t["met"] is None for t in figures["targets"])  # CPU figures meet or miss nothing
    report = (out / "report.md").read_text()
    assert set(figures["profile"]) == {"eager", "eager-no-clip", "eager-batch-128", "loop-fixed", "loop-sst2-exact",
                                       "loop-sst2-multiple-8", "loop-rte-exact-no-cudnn-attention", "compile",
                                       "compile-reduce-overhead"}
    assert figures["profile"]["loop-sst2-exact"]["seq_s"] > 0 and figures["profile"]["compile"] is None  # CUDA only
    assert report.count("\n## ") == 14 and "| fixed length 128 | Trainer |" in report
    print(f"bench/device.sh on CPU: {seconds:.0f} s")
