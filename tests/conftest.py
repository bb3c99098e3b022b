"""Shared fixtures: a real S3 server on loopback (moto's threaded server) and the repo layout."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# tests/images/ builds the container images and runs studies in them: `make test-images`, not `make test`;
# tests/cluster/ runs bertology on the local Kubernetes cluster: `make test-cluster`.
collect_ignore = [directory for directory, wanted in (("images", "BERTOLOGY_IMAGE_TESTS"),
                                                       ("cluster", "BERTOLOGY_CLUSTER_TESTS"))
                  if not os.environ.get(wanted)]


# The modules whose tests run whole studies or many processes (the most seconds, from `--durations=0`),
# longest first. pytest-xdist hands tests out in collection order, so these go first and the short unit
# tests fill the end: otherwise one worker ran a long study alone while the other had finished.
LONG_FIRST = ("test_e2e", "test_integrity", "test_docs", "test_resume", "test_chaos", "test_s3_faults",
              "test_step_imports", "test_zygote", "test_gpu_speed")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: each module's own order kept


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def two_pods_at_once():
    """Every `bertology run` a test starts runs two pods at a time (docs/runner.md's setting for a 2-core
    machine), each step on one intra-op thread: a tiny study takes 19 s instead of 29 s, and no OpenMP
    threads oversubscribe the cores. The runner's own tests set their limits explicitly."""
    saved = {k: os.environ.get(k) for k in ("BERTOLOGY_PARALLELISM", "BERTOLOGY_SEMAPHORES", "OMP_NUM_THREADS")}
    os.environ.update(BERTOLOGY_PARALLELISM="2", BERTOLOGY_SEMAPHORES="bertology-semaphores/gpu=2",
                      OMP_NUM_THREADS="1")
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session", autouse=True)
def own_semaphores(tmp_path_factory):
    """Every `bertology run` shares its semaphores with every other run on the machine (a directory per
    user, bertology.argo.semaphores); a test process takes a directory of its own, so two pytest-xdist
    workers (and any other run on the machine) do not queue for each other's GPU slots. Tests of the
    sharing itself give their runs a directory of their own too."""
    from bertology.argo.semaphores import DIR_ENV

    saved = os.environ.get(DIR_ENV)
    os.environ[DIR_ENV] = str(tmp_path_factory.mktemp("semaphores"))
    yield
    if saved is None:
        os.environ.pop(DIR_ENV, None)
    else:
        os.environ[DIR_ENV] = saved


@pytest.fixture(scope="session", autouse=True)
def shared_fork_server(two_pods_at_once):
    """One warm fork server per test process, which every `bertology run` a test starts (in this process
    or a child, which inherits $BERTOLOGY_FORK_SERVER) forks its steps from: each run would otherwise start
    its own and pay the imports of torch, transformers and the steps again (4.8 s of CPU, 55 runs). It
    imports in the background while the first tests run. Tests of a run's own server (its processes, its
    death) take the variable out of their environment: tests/test_cli_signals.py, tests/test_zygote.py."""
    import time

    from bertology.argo import zygote

    # the server's environment is what the libraries read when it imports them: huggingface_hub's offline
    # mode, as subprocess_env gives every run (and as each run's own server had it)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HUB_OFFLINE", "1")
        server = zygote.Zygote(REPO)
    deadline = time.monotonic() + 60
    while not os.path.exists(server.path):  # it listens before it imports: connections wait in its backlog
        assert time.monotonic() < deadline and server._server.poll() is None, "the fork server did not start"
        time.sleep(0.02)
    os.environ[zygote.SHARED_ENV] = server.path
    yield server.path
    os.environ.pop(zygote.SHARED_ENV, None)
    server.close()


class ForkedStep:
    """`python -m MODULE ARGS` forked from this test process's shared fork server: a process of its own
    (its pid, SIGKILL, exit code; stdout and stderr together, as a step's log) that skips the ~5 s of
    imports a fresh interpreter pays. For tests of a job's own behaviour; tests of what a fresh
    interpreter imports (tests/test_step_imports.py) start one."""

    def __init__(self, module: str, args: list[str], env: dict[str, str], cwd: Path = REPO):
        import threading

        from bertology.argo.zygote import SHARED_ENV, SharedZygote

        self._process = SharedZygote(os.environ[SHARED_ENV]).spawn(module, list(args), dict(env), cwd)
        self.pid = self._process.pid
        self.returncode: int | None = None
        self.output = ""
        self._done = threading.Thread(target=self._drain, daemon=True)  # a full pipe would stall the step
        self._done.start()

    def _drain(self) -> None:
        self.output = self._process.stdout.read()
        self.returncode = self._process.wait()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._done.join(timeout)
        if self._done.is_alive():
            os.kill(self.pid, signal.SIGKILL)
            self._done.join()
            raise TimeoutError(f"the forked step {self.pid} ran over {timeout} s")
        return self.returncode


@pytest.fixture(scope="session", autouse=True)
def tiny_pretrained(tmp_path_factory):
    """The tiny preset's pre-trained BERT, built once: every study a test runs (in this process or in a
    `bertology run` child, which inherits the environment) copies it into its store instead of
    pre-training again (bertology.tiny_pretrain.ensure; about 20 s each on 2 cores). It is kept in the user's
    cache between sessions: the artifact is content-addressed by its recipe and verified when copied. The
    pytest-xdist workers (`make test`) build it once: the first takes a lock, the others wait for it."""
    import fcntl

    from bertology import tiny_pretrain
    from bertology.store import LocalStore

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bertology" / "tiny-pretrained"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        root = cache
    except OSError:  # no writable home: this session only
        base = tmp_path_factory.getbasetemp()
        root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "tiny-pretrained"
        root.mkdir(exist_ok=True)  # under xdist, in the workers' common parent
    with (root.parent / f".{root.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tiny_pretrain.ensure(LocalStore(root))
    os.environ["BERTOLOGY_TINY_PRETRAINED"] = str(root)
    yield root
    os.environ.pop("BERTOLOGY_TINY_PRETRAINED", None)


@pytest.fixture(scope="session")
def s3_server():
    """An S3 endpoint on 127.0.0.1; yields the environment a client (or a subprocess) needs."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    yield env
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch, tmp_path):
    """A fresh bucket on the loopback server, with this process's environment pointed at it."""
    import uuid

    import boto3

    for k, v in s3_server.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    name = f"b-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return name


@pytest.fixture
def subprocess_env(tmp_path):
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env["BERTOLOGY_CACHE"] = str(tmp_path / "cache")
    return env


@pytest.fixture(scope="module")
def one_thread():
    """A 32-wide model gains nothing from intra-op threads, and on a busy 2-core machine OpenMP threads
    contending with other processes make it 20x slower. Modules that train use it for every test."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Killed(Exception):
    """What MemorySink raises to 'kill' a training run."""


class MemorySink:
    """A StateSink in memory that can 'kill' the run right after its n-th save."""

    def __init__(self, kill_after: int | None = None):
        self.states: list[bytes] = []
        self.kill_after = kill_after

    def load(self):
        from bertology.train.state import from_bytes

        return from_bytes(self.states[-1]) if self.states else None

    def save(self, state):
        from bertology.train.state import to_bytes

        self.states.append(to_bytes(state))
        if len(self.states) == self.kill_after:
            raise Killed


class ReplayByCalling:
    """CUDA graphs' stand-in on CPU: capture keeps the function (it does not run it, as on a GPU), replay calls
    it again over the same static buffers; warm-up runs on no side stream; the RNG is the CPU generator."""

    def __init__(self):
        self.warmed = self.captured = self.replays = 0

    def warm(self, fn):
        self.warmed += 1
        fn()

    def capture(self, fn, pool):
        self.captured += 1

        def replay():
            self.replays += 1
            fn()

        return replay, pool or object()

    def get_rng_state(self):
        return __import__("torch").get_rng_state()

    def set_rng_state(self, state):
        __import__("torch").set_rng_state(state)


def synthetic_sst2():
    """Synthetic SST-2's train and validation splits and a word-level tokenizer of exactly their words."""
    from transformers import BertTokenizerFast

    from bertology.tasks import get_task, load_split

    task = get_task("sst2")
    train, val = load_split(task, "synthetic", "train"), load_split(task, "synthetic", "validation")
    words = sorted({w for text in [*train["text_a"], *val["text_a"]] for w in text.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    return train, val, BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})


def small_sst2_splits(train, val, tokenizer):
    """40 training and 32 validation examples of synthetic SST-2 (label-stratified), tokenized to 32: the
    data of the loop tests that train several tiny runs."""
    from bertology.data import subset_indices, tokenize_split
    from bertology.tasks import get_task

    task = get_task("sst2")
    return (tokenize_split(train.select(subset_indices(train["label"], count=40, seed=0)), task, tokenizer,
                           max_length=32),
            {"validation": tokenize_split(val.select(subset_indices(val["label"], count=32, seed=0)), task,
                                          tokenizer, max_length=32)})


ARGO_FIXTURES = Path(__file__).parent / "fixtures" / "argo"


def errors_after(tmp_path: Path, change, fixture: str = "toy.yaml") -> list[str]:
    """The validator's errors for an Argo fixture after `change` edits its (first) document."""
    import yaml

    from bertology.argo.documents import load_documents
    from bertology.argo.validate import validate_file

    templates = ARGO_FIXTURES / "templates"
    doc = load_documents(ARGO_FIXTURES / fixture if (ARGO_FIXTURES / fixture).exists() else templates / fixture)[0]
    change(doc)
    path = tmp_path / fixture
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return validate_file(path, templates)


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session (bertology.browser), or None when BERTOLOGY_NO_BROWSER=1 says
    to leave the real-browser checks out. Without that, a missing Chromium fails the tests that use it:
    `make test` installs it (`make chromium`), so CI always runs them."""
    if os.environ.get("BERTOLOGY_NO_BROWSER") == "1":
        yield None
        return
    from bertology.browser import BrowserMissing, Chromium

    try:
        chromium = Chromium()
    except BrowserMissing as e:
        pytest.fail(f"{e} (or set BERTOLOGY_NO_BROWSER=1 to leave the browser checks out)")
    with chromium:
        yield chromium


def process_alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone: it holds no memory)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
