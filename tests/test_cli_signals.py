"""SIGTERM or Ctrl-C on `bertology run` stops every process of the run, the fork server included, with
exit 143 / 130 and no traceback. Real processes: the CLI, the zygote, its waiters, the steps and their
children, and a host step (`sh`); each is found by pid in /proc and must be gone afterwards."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import process_alive

REPO = Path(__file__).resolve().parent.parent

# A step run by the fork server (python -m) that starts a child of its own, and a host step (sh) with a
# child: both sleep far longer than the test waits.
WORKFLOW = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: sleepers-
spec:
  entrypoint: main
  parallelism: 2
  arguments:
    parameters:
      - name: pids
      - name: store
  templates:
    - name: main
      dag:
        tasks:
          - {name: forked, template: forked}
          - {name: host, template: host}
    - name: forked
      container:
        image: example/sleepy:0.1
        command: [python, -m, jobs.sleepy, "{{workflow.parameters.pids}}/forked"]
    - name: host
      container:
        image: example/sleepy:0.1
        command: [sh, -c, "echo $$ > {{workflow.parameters.pids}}/host; sleep 300; echo never"]
"""

SLEEPY = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
print("sleeping", flush=True)
time.sleep(300)
"""


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = set(), [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


@pytest.fixture
def project(tmp_path):
    """A project outside the checkout: its own jobs/ package and workflow, an empty templates dir."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "sleepy.py").write_text(SLEEPY)
    (tmp_path / "templates").mkdir()
    (tmp_path / "sleepers.yaml").write_text(WORKFLOW)
    (tmp_path / "pids").mkdir()
    return tmp_path


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_every_process_of_the_run(project, subprocess_env, sig, code):
    subprocess_env.pop("BERTOLOGY_FORK_SERVER")  # the run's own server, which must die with it too
    pids = project / "pids"
    cli = subprocess.Popen(
        [sys.executable, "-m", "bertology.cli", "run", str(project / "sleepers.yaml"), "--parallelism", "2",
         "--templates", str(project / "templates"), "-p", f"pids={pids}", "--store", str(project / "store")],
        cwd=project, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240  # the fork server imports torch and transformers first
        while not ((pids / "forked").exists() and (pids / "host").exists()):
            assert cli.poll() is None, cli.communicate()
            assert time.time() < deadline, "the steps never started"
            time.sleep(0.2)
        step, step_child = map(int, (pids / "forked").read_text().split())
        # the zygote, a waiter, the step and its child; sh and its sleep (which sh starts after its pid file)
        deadline = time.time() + 30
        while not ({step, step_child, int((pids / "host").read_text())} <= (tree := _descendants(cli.pid))
                   and len(tree) >= 6):
            assert time.time() < deadline, tree
            time.sleep(0.1)
        cli.send_signal(sig)
        out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == code, err
    assert "Traceback" not in err + out
    assert f"stopped by {signal.Signals(sig).name}" in err
    deadline = time.time() + 10
    while any(process_alive(p) for p in tree) and time.time() < deadline:
        time.sleep(0.1)
    assert not [p for p in tree if process_alive(p)], "processes of the run survived"
