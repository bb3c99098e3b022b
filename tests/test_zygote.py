"""The local runner's fork server: each step is still its own process with its own env, cwd and exit code."""

from __future__ import annotations

import os
import time

import pytest

from bertology.argo.zygote import Zygote


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "jobs").mkdir()
    (root / "jobs" / "__init__.py").write_text("")
    (root / "jobs" / "echo.py").write_text(
        "import os, sys\n"
        "print('argv', sys.argv[1:], 'cwd', os.getcwd(), 'env', os.environ.get('STEP_VAR'), 'pid', os.getpid())\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(int(sys.argv[1]))\n")
    (root / "jobs" / "sleepy.py").write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(60)\n")
    (root / "jobs" / "crash.py").write_text("raise RuntimeError('boom')\n")
    (root / "jobs" / "held.py").write_text(
        "import sys\nprint(sorted(m for m in sys.argv[1].split(',') if m in sys.modules))\n")
    zygote = Zygote(root)
    yield root, zygote
    zygote.close()


@pytest.mark.parametrize("code", [0, 2, 75])
def test_exit_code_output_env_and_cwd_are_the_steps_own(project, code):
    root, zygote = project
    process = zygote.spawn("jobs.echo", [str(code), "x"], {"STEP_VAR": "v1", "PATH": os.environ["PATH"]}, root)
    out = process.stdout.read()
    assert process.wait() == code
    assert f"argv ['{code}', 'x'] cwd {root} env v1" in out and "to stderr" in out
    assert f"pid {os.getpid()}" not in out and f"pid {process.pid}" in out


def test_an_uncaught_exception_is_exit_1_with_its_traceback(project):
    root, zygote = project
    process = zygote.spawn("jobs.crash", [], dict(os.environ), root)
    out = process.stdout.read()
    assert process.wait() == 1 and "RuntimeError: boom" in out


def test_a_step_starts_with_the_model_libraries_already_imported(project):
    """The step modules import torch and transformers only where they use them (so that a container that
    only publishes never loads them); the zygote's point is that in-process steps find them loaded."""
    root, zygote = project
    wanted = ["bertology.interventions", "bertology.train", "datasets", "sklearn", "torch", "transformers",
              "transformers.models.bert.modeling_bert"]
    process = zygote.spawn("jobs.held", [",".join(wanted)], dict(os.environ), root)
    out = process.stdout.read()
    assert process.wait() == 0 and out.strip() == repr(wanted)


def test_terminate_stops_a_running_step(project):
    root, zygote = project
    process = zygote.spawn("jobs.sleepy", [], dict(os.environ), root)
    assert process.stdout.readline().strip() == "sleeping"
    start = time.time()
    process.terminate()
    assert process.wait() == -15 and time.time() - start < 10


def test_steps_run_concurrently(project):
    root, zygote = project
    processes = [zygote.spawn("jobs.echo", ["0"], {"STEP_VAR": str(i)}, root) for i in range(4)]
    outs = [p.stdout.read() for p in processes]
    assert [p.wait() for p in processes] == [0, 0, 0, 0]
    assert all(f"env {i}" in out for i, out in enumerate(outs))
    assert len({p.pid for p in processes}) == 4


def test_a_deep_tmpdir_does_not_stop_the_fork_server(project, tmp_path, monkeypatch):
    """A $TMPDIR deeper than a Unix socket path may be (sun_path: 108 bytes): the server's socket goes to
    /tmp instead of failing to bind (it did: "AF_UNIX path too long", and no step could start)."""
    import tempfile

    from bertology.argo.zygote import SOCKET_PATH_MAX

    root, _ = project
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    zygote = Zygote(root)
    try:
        assert len(zygote.path) < SOCKET_PATH_MAX and zygote.path.startswith("/tmp/bertology-zygote-")
        process = zygote.spawn("jobs.echo", ["0"], {"PATH": os.environ["PATH"]}, root)
        assert process.wait() == 0 and "argv ['0']" in process.stdout.read()
    finally:
        zygote.close()
