"""Optional experiment tracking: a fine-tune's training loss and evaluation metrics, live, in W&B,
MLflow or TensorBoard.

Why optional: the results Parquet is the record every report is built from; a tracker only mirrors what
the finetune step records, while it trains, for people who watch runs in those tools. It is off by
default (study parameter `tracker`, `bertology run --tracker NAME`), and an execution setting
(`Regime.EXECUTION`): never part of a run id, so a tracked run and an untracked one share results.

One interface, three adapters, each importing its library only when chosen. What is sent mirrors the
`curves` table: the training-loss series as `train/loss` (and `lr`), each evaluation point's metrics as
`<split>/<metric>`, all against the training step, plus the run's spec and labels as its config.

Where it goes: the libraries' own settings (MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME, WANDB_MODE,
WANDB_DIR, WANDB_PROJECT, …); by default, files under $BERTOLOGY_TRACKING_DIR, else under the store's
`tracking/` (a local store; TensorBoard's event files are copied there at the end from an S3 store).
A tracker that fails while training is logged and switched off: it never fails a fine-tune.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bertology.errors import BadInput

log = logging.getLogger("bertology")

# tracker name -> the module it imports (and the pip extra that installs it: bertology[NAME])
TRACKERS = {"wandb": "wandb", "mlflow": "mlflow", "tensorboard": "tensorboard"}
DIR_ENV = "BERTOLOGY_TRACKING_DIR"


def check_name(name: str) -> str:
    """A known tracker name ("" or None: none), without importing anything."""
    if name in (None, ""):
        return ""
    if name not in TRACKERS:
        raise BadInput(f"unknown tracker {name!r} (known: {', '.join(TRACKERS)}; empty: none)")
    return name


def check(name: str) -> None:
    """A known tracker whose library is installed; otherwise one line naming it and the extra to install."""
    if check_name(name) and importlib.util.find_spec(TRACKERS[name]) is None:
        raise BadInput(f"tracker '{name}' needs the {TRACKERS[name]} package: pip install 'bertology[{name}]'")


def tracking_dir(store) -> Path:
    """Local files of a tracker: $BERTOLOGY_TRACKING_DIR, else the local store's tracking/, else a temp dir."""
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    root = getattr(store, "root", None)  # a LocalStore
    return Path(root) / "tracking" if root is not None else Path(tempfile.gettempdir()) / "bertology-tracking"


class Tracker:
    """One fine-tune's tracker. `update(losses, curves)` sends the points not sent yet (the training loop
    calls it after each step; the step once more at the end), `finish` closes the run."""

    def __init__(self, name: str):
        self.name = name
        self._sent = (0, 0)
        self._broken = False

    def update(self, losses: list[dict], curves: list[dict]) -> None:
        sent_losses, sent_curves = self._sent
        if self._broken or (len(losses), len(curves)) == self._sent:
            return
        points = [(p["step"], {"train/loss": p["train_loss"], "lr": p["lr"]}) for p in losses[sent_losses:]]
        points += [(row["step"], {k: float(v) for k, v in row.items() if "/" in k}) for row in curves[sent_curves:]]
        self._sent = (len(losses), len(curves))
        for step, metrics in sorted(points, key=lambda p: p[0]):  # W&B needs steps in order
            self._guard(lambda m=metrics, s=step: self._log(m, s))

    def finish(self, ok: bool) -> None:
        self._guard(lambda: self._finish(ok))
        self._broken = True

    def _guard(self, call: Callable[[], None]) -> None:
        if self._broken:
            return
        try:
            call()
        except Exception as e:  # noqa: BLE001 -- a tracker outage never fails the fine-tune
            log.warning("tracker %s failed, tracking stopped for this run: %s", self.name, str(e).splitlines()[0])
            self._broken = True

    def _log(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def _finish(self, ok: bool) -> None:
        raise NotImplementedError


class WandbTracker(Tracker):
    def __init__(self, run_name: str, config: dict, directory: Path):
        super().__init__("wandb")
        import wandb

        self._wandb = wandb
        directory.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(project=os.environ.get("WANDB_PROJECT") or config["study"], group=config["variant"],
                               name=run_name, config=config, job_type="finetune",
                               dir=os.environ.get("WANDB_DIR") or str(directory))

    def _log(self, metrics, step):
        self._run.log(metrics, step=step)

    def _finish(self, ok):
        self._run.finish(exit_code=0 if ok else 1)
        self._wandb.teardown()  # steps end with os._exit: flush and stop wandb's service process now


class MlflowTracker(Tracker):
    def __init__(self, run_name: str, config: dict, directory: Path):
        super().__init__("mlflow")
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # our default: a file store (MLflow 3 asks for an opt-in to it)
            directory.mkdir(parents=True, exist_ok=True)
            uri = (directory / "mlruns").absolute().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or config["study"]
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            try:
                experiment_id = client.create_experiment(name)
            except MlflowException:  # another pod created it first
                experiment_id = client.get_experiment_by_name(name).experiment_id
        else:
            experiment_id = experiment.experiment_id
        tags = {f"bertology.{k}": str(config[k]) for k in ("run_id", "study", "variant", "model", "task", "seed")}
        self._run_id = client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id
        client.log_batch(self._run_id, params=[Param(k, v) for k, v in _flat(config["spec"], "spec").items()])

    def _log(self, metrics, step):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self._run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def _finish(self, ok):
        self._client.set_terminated(self._run_id, "FINISHED" if ok else "FAILED")


class TensorboardTracker(Tracker):
    """Event files in `directory`; `publish` copies them into the store at the end (an S3 store)."""

    def __init__(self, run_name: str, config: dict, directory: Path, publish: Callable[[Path], None] | None):
        super().__init__("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self._dir, self._publish = directory, publish
        self._writer = SummaryWriter(log_dir=str(directory))
        self._writer.add_text("config", f"{run_name}\n\n    " + json.dumps(config, indent=2).replace("\n", "\n    "))

    def _log(self, metrics, step):
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)

    def _finish(self, ok):
        self._writer.close()
        if self._publish is not None:
            self._publish(self._dir)


def _flat(d: dict, prefix: str) -> dict[str, str]:
    """Nested config -> MLflow params (`spec.regime.lr`: "2e-05")."""
    out = {}
    for key, value in d.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name))
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, bool)) or value is None else str(value)
    return out


def start(name: str, store, cell) -> Tracker | None:
    """The tracker `name` for one cell's fine-tune (None when off); a missing library is bad input."""
    if not name:
        return None
    check(name)
    run = cell.run
    config = {"run_id": run.id, "study": cell.study, "variant": cell.variant, "model": cell.model,
              "task": run.dataset.task, "seed": run.seed, "spec": run.to_dict(execution=False)}
    run_name = f"{cell.variant} {run.dataset.task} seed {run.seed} ({run.id})"
    base = tracking_dir(store)
    try:
        if name == "wandb":
            return WandbTracker(run_name, config, base)
        if name == "mlflow":
            return MlflowTracker(run_name, config, base)
        local = getattr(store, "root", None) is not None or os.environ.get(DIR_ENV)
        where = f"tensorboard/{cell.study}/{run.id}"
        directory = base / where if local else Path(tempfile.mkdtemp(prefix="bertology-tensorboard-"))
        publish = None if local else (lambda d: [store.write_bytes(f"tracking/{where}/{f.name}", f.read_bytes())
                                                 for f in d.iterdir() if f.is_file()])
        return TensorboardTracker(run_name, config, directory, publish)
    except BadInput:
        raise
    except Exception as e:  # noqa: BLE001 -- an unreachable server, a bad URI: train anyway, untracked
        log.warning("tracker %s could not start, this run is not tracked: %s", name, str(e).splitlines()[0])
        return None


@contextlib.contextmanager
def running(tracker: Tracker | None) -> Iterator[None]:
    """Finish the tracker's run when the block ends: FINISHED, or FAILED on an exception."""
    try:
        yield
    except BaseException:
        if tracker is not None:
            tracker.finish(ok=False)
        raise
    if tracker is not None:
        tracker.finish(ok=True)
