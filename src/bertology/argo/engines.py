"""`bertology run --engine podman|docker`: every pod runs in its image, as its template says.

The runner (execute.py, containers.py) stays what it is: the DAG, retries, outputs and limits. Only the
launch of a pod's process changes: instead of `command + args` on the host, `podman run` (or `docker run`)
of the container the template describes, which a kubelet would start:

- image: the template's reference mapped by its name, as the chart maps it (charts/bertology/templates/
  _helpers.tpl: `bertology-cpu` -> values images.cpu), to the local image built from this very tree
  (bertology.images: the tag NAME:tree-HASH); none yet: `make images`, before anything runs;
- the substituted command and args, as `--dry-run` prints them (the container's own /tmp/outputs);
- env: the template's values; a secretKeyRef / configMapKeyRef variable takes this machine's same-named
  variable, as the local runner does (the value never enters the command line), else stays unset;
- securityContext (the container's over the pod's): runAsUser/runAsGroup, fsGroup and supplementalGroups
  as groups, readOnlyRootFilesystem (no tmpfs added anywhere: podman's --read-only would add /run, /var/tmp),
  capabilities drop/add, allowPrivilegeEscalation: false as no-new-privileges; runAsNonRoot with uid 0 is
  refused as the kubelet refuses it;
- volumes: emptyDir only, a fresh host directory per attempt (a retry is a new pod), mode 0777 as the
  kubelet makes it (pkg/volume/emptydir), group fsGroup; a sizeLimit is enforced as the kubelet's eviction
  manager does (localStorageEviction: the pod is killed at once and fails with "Usage of EmptyDir volume ...
  exceeds the limit ..."); the output parameters are read from it after the container exits, as Argo's wait
  container reads them from the main container (workflow/executor/executor.go SaveParameters);
- resources.limits.memory (and cpu) as the container's limits, with no swap; requests only schedule, and GPU
  limits are not passed on (the steps run on this machine's CPU, as with the local engine);
- /dev/shm of 64 MiB (a pod's default); the host's network, so a store on loopback is reachable;
- labels: io.bertology.workflow (the workflow file's name) and io.bertology.run (this run's own id). A killed
  engine client leaves its container running, so the runner's reaper (reaper.py) is given `sweep()`: when the
  runner dies without cleaning up (SIGKILL, an OOM kill), it removes every container with this run's label,
  as a lost node's pods go; another run's containers, with another id, stay.

An OOM kill: the container exits 137, and the node fails with Argo's message for it, "main: OOMKilled (exit
code 137)" (workflow/controller/operator.go inferFailedReason: "%s (exit code %d)" of the main container's
terminated reason, prefixed with its name; the node's exit code is that container's, getExitCode), so
lastRetry.exitCode is 137 and the template's retryStrategy decides, as on a cluster. The engine says a
container was OOM-killed (cgroup v2); on cgroup v1 hosts, where podman does not, the kernel's log naming the
container's memory cgroup does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import uuid
from pathlib import Path

from bertology import images
from bertology.argo.parent_death import die_with_parent
from bertology.argo.termination import TERMINATION_LOG
from bertology.errors import BadInput

LOCAL_ONLY = "local"
OUTPUTS = "/tmp/outputs"  # where the templates write output parameters (containers.py rewrites it locally)
SHM = "64m"  # a pod's /dev/shm when none is configured
EVICTION_CHECK_S = 1.0
WORKFLOW_LABEL = "io.bertology.workflow"  # the workflow file's name
RUN_LABEL = "io.bertology.run"  # one run's own id: what the reaper removes when the runner dies
_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": 1e-3}
_QUANTITY = re.compile(r"^([0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")


def quantity(text: str) -> float:
    """A Kubernetes resource quantity (apimachinery resource.Quantity): 8Gi, 512M, 1e9, 500m."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise BadInput(f"resource quantity {text!r} is not a Kubernetes quantity (e.g. 8Gi, 512Mi, 500m)")
    return float(match.group(1)) * _UNITS[match.group(2) or ""]


def image_key(reference: str) -> str:
    """The chart's mapping of an image reference to its values key: ghcr.io/x/bertology-cpu:0.1.0 -> cpu."""
    return re.sub(r"[:@].*$", "", reference.rsplit("/", 1)[-1]).removeprefix("bertology-")


class ContainerEngine:
    """Runs pods as containers of the images built from `project_root`, with `engine` (podman | docker)."""

    def __init__(self, engine: str, project_root: Path, workflow: str):
        self.engine = engine
        self.command = images.engine_command(self.engine)
        self.root = Path(project_root)
        self.workflow = workflow
        self.run_id = uuid.uuid4().hex[:16]  # every container of this run carries it (label io.bertology.run)
        self.images: dict[str, str] = {}  # image key -> local NAME:TAG
        self.running: set[str] = set()  # containers started and not yet removed
        self._lock = threading.Lock()

    # -- before anything runs

    def check(self, templates: list[dict]) -> None:
        """BadInput for the first container template this engine cannot run as written, or whose image
        was not built from this tree."""
        for template in templates:
            container = template.get("container")
            if container is None:
                continue
            where = f"template '{template['name']}'"
            key = image_key(str(container.get("image") or ""))
            if key not in images.IMAGES:
                raise BadInput(f"{where}: image {container.get('image')!r} is not one this repository builds "
                               f"(allowed names: {', '.join(images.IMAGES.values())})")
            self._volumes(template, container, where)
            sc = {**(template.get("securityContext") or {}), **(container.get("securityContext") or {})}
            if sc.get("runAsNonRoot") and sc.get("runAsUser") == 0:
                raise BadInput(f"{where}: runAsNonRoot with runAsUser 0 (the kubelet refuses to start it)")
            for name in ("memory", "cpu"):
                value = ((container.get("resources") or {}).get("limits") or {}).get(name)
                if value is not None:
                    quantity(value)
            if key not in self.images:
                tree = images.tree_hash(self.root, key)
                found = images.find_image(self.engine, images.IMAGES[key], tree)
                if found is None:
                    raise BadInput(f"no {images.IMAGES[key]} image for this tree (hash {tree}) in {self.engine}: "
                                   f"run `make images` (or `make images BASE=local`) first")
                self.images[key] = found

    @staticmethod
    def _volumes(template: dict, container: dict, where: str) -> dict[str, dict]:
        declared = {v.get("name"): v for v in template.get("volumes") or []}
        for volume in declared.values():
            kinds = sorted(set(volume) - {"name"})
            if kinds != ["emptyDir"]:
                raise BadInput(f"{where}: volume '{volume.get('name')}' is {', '.join(kinds) or 'empty'}; "
                               f"--engine {LOCAL_ONLY} aside, only emptyDir volumes are emulated")
            medium = (volume.get("emptyDir") or {}).get("medium") or ""
            if medium:
                raise BadInput(f"{where}: emptyDir medium {medium!r} of volume '{volume['name']}' is not "
                               f"emulated (only the node's disk, medium \"\")")
            limit = (volume.get("emptyDir") or {}).get("sizeLimit")
            if limit is not None:
                quantity(limit)
        mounts = {}
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in declared:
                raise BadInput(f"{where}: volumeMount '{mount.get('name')}' names no volume of the template")
            if set(mount) - {"name", "mountPath", "readOnly"}:
                raise BadInput(f"{where}: volumeMount '{mount['name']}' uses "
                               f"{', '.join(sorted(set(mount) - {'name', 'mountPath', 'readOnly'}))}, not emulated")
            mounts[mount["mountPath"]] = {**declared[mount["name"]], "readOnly": bool(mount.get("readOnly"))}
        return mounts

    def probe_store(self, uri: str, env: dict[str, str]) -> None:
        """BadInput unless a container of the CPU image, on this machine's network and with the variables
        the steps get, can write to the store."""
        if not uri.startswith("s3://"):
            raise BadInput(f"store {uri!r} cannot be reached from the containers: a pod on a cluster cannot see "
                           f"this machine's files; use an S3 store (--store s3://BUCKET/PREFIX, e.g. MinIO or "
                           f"moto on loopback with AWS_ENDPOINT_URL), or --engine local")
        names = [n for n in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL") if n in env]
        image = self.images.get("cpu") or next(iter(self.images.values()))
        key = f"_probes/{uuid.uuid4().hex}"  # a real write: S3's check_writable checks nothing
        check = (f"from bertology.store import open_store; s = open_store({uri!r}); "
                 f"s.write_bytes({key!r}, b'ok'); s.delete_key({key!r})")
        probe = subprocess.run(
            [*self.command, "run", "--rm", "--network", "host", *images.ulimits(), "--read-only",
             *(["--read-only-tmpfs=false"] if self.engine == "podman" else []),
             "--tmpfs", "/tmp", *[x for n in names for x in ("-e", n)], image, "python", "-c", check],
            check=False, capture_output=True, text=True, env=env)
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            raise BadInput(f"store {uri} cannot be reached from a container ({image}, host network, "
                           f"variables {', '.join(names) or 'none'} passed on): {last}")

    def close(self) -> None:
        """Remove every container still there: a stopped run's threads never reach their Pod.wait()."""
        with self._lock:
            names = sorted(self.running)
            self.running.clear()
        if names:
            self.remove(*names)

    def remove(self, *names: str) -> None:
        """Kill (no grace: the runner has given it already) and remove these containers."""
        subprocess.run([*self._removal(), *names], check=False, capture_output=True)

    def _removal(self) -> list[str]:
        return [*self.command, "rm", "--force", *(["--time", "0"] if self.engine == "podman" else [])]

    @property
    def label(self) -> str:
        """This run's label, as `--filter label=…` takes it."""
        return f"{RUN_LABEL}={self.run_id}"

    def sweep(self) -> tuple[list[str], list[str]]:
        """For the reaper: the command that prints the ids of every container of this run (running or not),
        and the one that kills and removes the ids appended to it."""
        return [*self.command, "ps", "--all", "--quiet", "--filter", f"label={self.label}"], self._removal()

    # -- one attempt

    def launcher(self, template: dict, container: dict, node_dir: Path, out_dir: Path, attempt: int):
        """A callable that starts this attempt's container and returns it as a process (see Pod)."""
        return lambda: Pod(self, template, container, node_dir, out_dir, attempt)

    def run_command(self, template: dict, container: dict, name: str, volumes: dict[str, Path]) -> list[str]:
        pod_sc = template.get("securityContext") or {}
        sc = container.get("securityContext") or {}
        uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
        gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
        command = [*self.command, "run", "--name", name, "--label", f"{WORKFLOW_LABEL}={self.workflow}",
                   "--label", self.label, "--network", "host", "--shm-size", SHM, *images.ulimits()]
        if uid is not None:
            command += ["--user", f"{uid}:{gid}" if gid is not None else str(uid)]
        for group in [pod_sc.get("fsGroup"), *(pod_sc.get("supplementalGroups") or [])]:
            if group is not None:
                command += ["--group-add", str(group)]
        if sc.get("readOnlyRootFilesystem"):
            command += ["--read-only", *(["--read-only-tmpfs=false"] if self.engine == "podman" else [])]
        caps = sc.get("capabilities") or {}
        command += [x for cap in caps.get("drop") or [] for x in ("--cap-drop", str(cap))]
        command += [x for cap in caps.get("add") or [] for x in ("--cap-add", str(cap))]
        if sc.get("allowPrivilegeEscalation") is False:
            command += ["--security-opt", "no-new-privileges"]
        if sc.get("privileged"):
            command += ["--privileged"]
        limits = (container.get("resources") or {}).get("limits") or {}
        if limits.get("memory") is not None:
            memory = str(int(quantity(limits["memory"])))
            command += ["--memory", memory, "--memory-swap", memory]
        if limits.get("cpu") is not None:
            command += ["--cpus", f"{quantity(limits['cpu']):g}"]
        for path, host in volumes.items():
            command += ["-v", f"{host}:{path}"]
        for var in container.get("env") or []:
            if var.get("valueFrom") is None:
                command += ["-e", f"{var['name']}={var.get('value', '')}"]
            elif var["name"] in os.environ:
                command += ["-e", var["name"]]  # from this process's environment: not on the command line
        image = self.images[image_key(str(container["image"]))]
        return [*command, "--entrypoint", str(container["command"][0]), image,
                *map(str, container["command"][1:]), *map(str, container.get("args") or [])]


class Pod(subprocess.Popen):
    """One attempt's container, as a process the runner streams and signals: the engine's `run` client in its
    own process group (SIGTERM reaches the container through the client, as the kubelet's would). Its wait()
    also does what follows a pod's end: the OOM verdict, the outputs, the container and its volumes removed."""

    def __init__(self, engine: ContainerEngine, template: dict, container: dict, node_dir: Path, out_dir: Path,
                 attempt: int):
        self.engine = engine
        self.out_dir = out_dir
        self.reason = ""
        self.evicted = ""
        self._done = False
        self.name = re.sub(r"[^a-zA-Z0-9_.-]+", "-", f"{engine.workflow}-{node_dir.name}")[:180] + \
            f"-{attempt + 1}-{uuid.uuid4().hex[:6]}"
        # the engine's -v cannot take a path with ':' or ',' (a node's directory may have both)
        self.pod_dir = node_dir.parent / "pods" / self.name
        shutil.rmtree(self.pod_dir, ignore_errors=True)
        mounts = ContainerEngine._volumes(template, container, f"template '{template['name']}'")
        fs_group = (template.get("securityContext") or {}).get("fsGroup")
        self.volumes: dict[str, Path] = {}
        self.limits: dict[str, tuple[str, float, str]] = {}  # mountPath -> (volume, bytes, as written)
        for path, volume in mounts.items():
            host = self.pod_dir / volume["name"]
            host.mkdir(parents=True)
            os.chmod(host, 0o777)  # the kubelet's emptyDir mode
            if fs_group is not None and os.geteuid() == 0:
                os.chown(host, -1, int(fs_group))
                os.chmod(host, 0o2777)
            self.volumes[path] = host
            limit = (volume.get("emptyDir") or {}).get("sizeLimit")
            if limit is not None:
                self.limits[path] = (volume["name"], quantity(limit), str(limit))
        # the container's termination message: a file the kubelet mounts at terminationMessagePath and
        # reads when the container ends (bertology.argo.termination); copied to the node's own at the end
        self.node_dir = node_dir
        self.termination = self.pod_dir / "termination-log"
        self.termination.touch()
        os.chmod(self.termination, 0o666)
        command = engine.run_command(template, container, self.name,
                                     {**self.volumes, TERMINATION_LOG: self.termination})
        with engine._lock:
            engine.running.add(self.name)
        # in the pod's own directory: what the engine leaves in its working directory (conmon writes a file
        # `oom` there when the kernel kills the container for memory) goes with the pod, not into the checkout
        super().__init__(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                         start_new_session=True, preexec_fn=die_with_parent, cwd=self.pod_dir)
        if self.limits:
            threading.Thread(target=self._watch_storage, daemon=True).start()

    def _watch_storage(self) -> None:
        """The kubelet's emptyDir sizeLimit: usage above it evicts the pod at once (grace period 0)."""
        while self.poll() is None:
            for path, (volume, limit, written) in self.limits.items():
                if _usage(self.volumes[path]) > limit:
                    # pkg/kubelet/eviction/helpers.go emptyDirMessageFmt (the limit as written, not canonicalised)
                    self.evicted = f'Usage of EmptyDir volume "{volume}" exceeds the limit "{written}". '
                    subprocess.run([*self.engine.command, "kill", "--signal", "KILL", self.name],
                                   check=False, capture_output=True)
                    return
            threading.Event().wait(EVICTION_CHECK_S)

    def wait(self, timeout: float | None = None) -> int:
        code = super().wait(timeout)
        if not self._done:
            self._done = True
            self._finish(code)
        return code

    def _finish(self, code: int) -> None:
        state = subprocess.run([*self.engine.command, "inspect", "--format", "{{.Id}} {{.State.OOMKilled}}",
                                self.name], check=False, capture_output=True, text=True).stdout.split()
        self.engine.remove(self.name)
        with self.engine._lock:
            self.engine.running.discard(self.name)
        if self.evicted:
            self.reason = self.evicted
        elif state[1:] == ["true"] or (code in (137, -9) and state and _kernel_oom_killed(state[0])):
            self.reason = "main: OOMKilled (exit code 137)"
        for path, host in self.volumes.items():  # the runner reads the pod's /tmp/outputs from out_dir
            inside = Path(OUTPUTS).relative_to(path) if OUTPUTS.startswith(path.rstrip("/") + "/") else None
            if inside is not None and (host / inside).is_dir():
                for item in (host / inside).iterdir():
                    shutil.move(str(item), self.out_dir / item.name)
        shutil.copyfile(self.termination, self.node_dir / "termination-log")
        shutil.rmtree(self.pod_dir, ignore_errors=True)


def _usage(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _kernel_oom_killed(container_id: str) -> bool:
    """Whether the kernel's log records an OOM kill in this container's memory cgroup (cgroup v1, where
    podman does not report it)."""
    try:
        log = subprocess.run(["dmesg"], check=False, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return re.search(rf"oom_memcg=\S*{re.escape(container_id)}", log) is not None


def for_workflow(engine: str, workflow: Path, params: dict[str, str], templates: Path, project_root: Path,
                 store: str) -> ContainerEngine:
    """The engine for one `bertology run`, after every check that can fail before anything runs: the
    engine is installed, each container template is runnable and its image built from this tree, and the
    store is reachable from a container. Raises BadInput."""
    from bertology.argo.runner import prepare, reachable

    prepared = prepare(workflow, params=params, templates_dir=templates)
    runner = ContainerEngine(images.find_engine(engine), project_root, workflow.stem)
    runner.check([template for _, template in reachable(prepared.spec, prepared.templates, prepared.library)])
    runner.probe_store(store, dict(os.environ))
    return runner
