"""The local runner's fork server: each step is still its own process with its own env, cwd and exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, process_alive

from bertology.argo import zygote as fork_server
from bertology.argo.zygote import SHARED_ENV, SharedZygote, Zygote
from bertology.errors import BadInput

# one worker of `make test` runs them all: the module's own server (its imports: ~5 s of CPU) starts once
pytestmark = pytest.mark.xdist_group("test_zygote")

# The steps these tests fork: module name -> source.
JOBS = {
    "echo": "import os, sys\n"
            "print('argv', sys.argv[1:], 'cwd', os.getcwd(), 'env', os.environ.get('STEP_VAR'), 'pid', os.getpid())\n"
            "print('to stderr', file=sys.stderr)\n"
            "sys.exit(int(sys.argv[1]))\n",
    "sleepy": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)\n",
    "crash": "raise RuntimeError('boom')\n",
    "held": "import sys\nprint(sorted(m for m in sys.argv[1].split(',') if m in sys.modules))\n",
    "threads": "import torch\nprint('threads', torch.get_num_threads())\n",
    "warm": "import transformers.conversion_mapping as c\n"
            "print('table', c._checkpoint_conversion_mapping_cache is not None)\n",
    # a step with a child of its own, which it leaves in its process group (as a DataLoader worker would)
    "parent": "import os, subprocess, time\n"
              "child = subprocess.Popen(['sleep', '300'])\n"
              "print(os.getpid(), child.pid, flush=True)\n"
              "time.sleep(300)\n",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "jobs").mkdir()
    (root / "jobs" / "__init__.py").write_text("")
    for name, source in JOBS.items():
        (root / "jobs" / f"{name}.py").write_text(source)
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


def test_a_step_finds_transformers_checkpoint_table_already_built(project):
    """The zygote builds transformers' checkpoint-renaming table, which a process builds on its first
    from_pretrained: every step rebuilt it (1.7 of a tiny reversed-layers study's 15.8 step CPU-seconds)."""
    root, zygote = project
    process = zygote.spawn("jobs.warm", [], dict(os.environ), root)
    out = process.stdout.read()
    assert process.wait() == 0 and out.strip() == "table True", out


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


def test_a_step_takes_its_thread_count_from_its_own_environment(project):
    """torch reads OMP_NUM_THREADS when it is imported, which for a forked step was in the server: the step
    sets the count its environment asks for (the runner gives K steps sharing a GPU a share of the CPUs)."""
    root, zygote = project
    counts = []
    for threads in ("1", "3"):
        process = zygote.spawn("jobs.threads", [], dict(os.environ, OMP_NUM_THREADS=threads), root)
        counts.append(process.stdout.read().strip())
        assert process.wait() == 0
    assert counts == ["threads 1", "threads 3"]


# A runner stand-in: it forks one step from the server for_run picks, prints the step's pids, then waits to
# be killed.
CLIENT = """\
import os, sys, time
from pathlib import Path
from bertology.argo import zygote
root = Path(sys.argv[1])
step = zygote.for_run(root).spawn("jobs.parent", [], dict(os.environ), root)
print(step.stdout.readline().strip(), flush=True)
time.sleep(300)
"""


def _kill_the_runner_of_a_running_step(root: Path, env: dict[str, str]) -> tuple[int, int]:
    runner = subprocess.Popen([sys.executable, "-c", CLIENT, str(root)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        step, child = map(int, runner.stdout.readline().split())
        assert process_alive(step) and process_alive(child)
    finally:
        os.killpg(runner.pid, signal.SIGKILL)  # the runner's group: the step leads a group of its own
        runner.wait()
    deadline = time.monotonic() + 5  # the kernel acts at once; a loaded machine schedules late
    while (process_alive(step) or process_alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return step, child


@pytest.mark.parametrize("shared", [False, True], ids=["its own server", "a shared server"])
def test_a_step_and_its_children_die_with_a_killed_runner(project, shared):
    """SIGKILL of the runner (no cleanup runs) closes its end of the step's connection: the step's waiter
    SIGKILLs the step's whole process group, child included, whether the server died with the runner (its
    own) or lives on (shared, which then still serves the next step)."""
    root, own = project
    env = {k: v for k, v in os.environ.items() if k != SHARED_ENV}
    if shared:
        env[SHARED_ENV] = own.path  # this module's server stands for a shared one: no runner owns it
    step, child = _kill_the_runner_of_a_running_step(root, env)
    assert not process_alive(step), "the step outlived its runner"
    assert not process_alive(child), "the step's child outlived its runner"
    if shared:
        process = SharedZygote(own.path).spawn("jobs.echo", ["0"], {"PATH": os.environ["PATH"]}, root)
        assert process.wait() == 0 and "argv ['0']" in process.stdout.read()


def test_a_shared_server_that_is_not_there_is_bad_input(project, tmp_path, monkeypatch):
    root, _ = project
    monkeypatch.setenv(SHARED_ENV, str(tmp_path / "sock"))
    with pytest.raises(BadInput, match=f"^{SHARED_ENV}={tmp_path}/sock: no fork server's socket is there"):
        fork_server.for_run(root)
    monkeypatch.delenv(SHARED_ENV)
    own = fork_server.for_run(root)  # unset: a server of the run's own, which close() stops
    try:
        assert type(own) is Zygote
        process = own.spawn("jobs.echo", ["0"], {"PATH": os.environ["PATH"]}, root)
        assert process.wait() == 0 and "argv ['0']" in process.stdout.read()
    finally:
        own.close()
    assert not os.path.exists(os.path.dirname(own.path))


def test_a_client_may_connect_while_the_server_still_imports(project, tmp_path):
    """The server listens before it imports (seconds): a shared server's first client waits in the backlog
    instead of finding no socket."""
    root, _ = project
    path = str(tmp_path / "sock")
    server = subprocess.Popen([sys.executable, "-m", "bertology.argo.zygote", path], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(path):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        process = SharedZygote(path).spawn("jobs.echo", ["0"], {"PATH": os.environ["PATH"]}, root)
        assert process.wait() == 0 and "argv ['0']" in process.stdout.read()
        assert server.stdout.readline().strip() == "ready"  # printed once imported, before it served
    finally:
        server.kill()
        server.wait()


def test_bertology_run_with_a_shared_server_that_is_not_there_exits_2_and_writes_nothing(tmp_path, monkeypatch,
                                                                                         capsys):
    from bertology import cli

    monkeypatch.setenv(SHARED_ENV, str(tmp_path / "sock"))
    code = cli.main(["run", "workflows/reversed-layers.yaml", "-p", "preset=tiny", "--store", str(tmp_path / "store")])
    err = capsys.readouterr().err.strip().splitlines()
    line = (f"error: {SHARED_ENV}={tmp_path}/sock: no fork server's socket is there "
            "(start one with python -m bertology.argo.zygote PATH, or unset it)")
    assert code == 2 and err == [line]
    assert not (tmp_path / "store").exists()
