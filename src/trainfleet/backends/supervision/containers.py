"""A task in a container: the ``podman run`` (or ``docker run``) that runs a TaskLaunch.

The container is the task: it runs in the foreground under the task's shim, which captures
its output and records its exit; SIGTERM reaches it through the runtime's signal proxy;
every process in it carries the attempt's mark in its environment, so ending the attempt
(a forced stop, a lost shim) ends the container too. A stop while the container is being
created reaches no process of it (podman's client ends, and leaves it created, its monitor
waiting): once the client has ended, the shim removes the container by its name, and where
the shim was killed first, the backend does (see the shim's ``Container``).

Host networking keeps the addresses in TF_CONFIG and the torch variables valid; each mount
is bound at its target (the job's folder at its own path, or at the job file's
``workdir_mount``); the environment is passed by name only (``-e NAME``, the value from the
runtime's own environment, which is the task's), so no value shows in ``ps``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import subprocess
import threading
from pathlib import Path

from trainfleet.backends.launch import TaskLaunch

RUNTIMES = ("podman", "docker")
CHECK_SECONDS = 60.0
PULL_SECONDS = 1800.0
RUNTIME_PULL = {"if-missing": "missing", "always": "always", "never": "never"}
"""A launch's pull policy in the runtime's words (``--pull``)."""
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "TRAINFLEET_GPUS")
GPUS_FROM_SLURM = "<trainfleet:gpus-from-slurm>"
"""Stands in an argv for one ``--device`` per GPU that Slurm gives the step: the Slurm
bootstrap (``backends/slurm/bootstrap.py``, which has the same text) puts them in place."""


class ImageUnavailable(ValueError):
    """The task's image is neither here nor to be pulled, or no container runtime is."""


class Containers:
    """Runs launches with an image through one container runtime (found on first use)."""

    def __init__(self, runtime: str | None = None, pulls_here: bool = True) -> None:
        self._runtime = runtime
        self.pulls_here = pulls_here
        """True: ``make_ready`` pulls images on this machine before a start, and the runtime
        is told never to; False (the tasks run on other nodes): each node's runtime pulls
        as the launch's policy says."""
        self._present: set[str] = set()
        self._workdirs: dict[str, bool] = {}
        """Whether each image asked about declares a WORKDIR (see ``declares_workdir``)."""
        self._locks: dict[str, threading.Lock] = {}
        """One per image: a long pull holds up the tasks of that image only."""
        self._lock = threading.Lock()

    @property
    def runtime(self) -> str:
        """The runtime's program: the one given, else podman, else docker."""
        if self._runtime is None:
            found = next((path for name in RUNTIMES if (path := shutil.which(name))), None)
            if found is None:
                raise ImageUnavailable("no container runtime: install podman (or docker)")
            self._runtime = found
        return self._runtime

    def make_ready(self, launch: TaskLaunch) -> None:
        """Raise ImageUnavailable (saying why) unless every mount's source exists and the
        launch's image is here, pulled as its policy says (``if-missing``, ``always``,
        ``never``)."""
        for mount in launch.mounts:
            if not mount.source.exists():
                raise ImageUnavailable(f"mount source {mount.source} does not exist")
        image = launch.image
        assert image is not None
        with self._lock:
            lock = self._locks.setdefault(image, threading.Lock())
        with lock:  # one pull of an image at a time, however many tasks want it
            if launch.pull == "always":
                self._pull(image)
            elif image not in self._present and not self.has(image):
                if launch.pull == "never":
                    raise ImageUnavailable(f"image {image!r} not found locally (pull: never)")
                self._pull(image)
            self._present.add(image)

    def declares_workdir(self, image: str) -> bool:
        """Whether ``image`` (here) names a WORKDIR of its own (not ``/``), as upstream
        examples' images do for their program."""
        with self._lock:
            known = self._workdirs.get(image)
        if known is None:
            shown = self._run("image", "inspect", "--format", "{{.Config.WorkingDir}}", image)
            known = shown.returncode == 0 and shown.stdout.strip() not in ("", "/")
            with self._lock:
                self._workdirs[image] = known
        return known

    def has(self, image: str) -> bool:
        """Whether ``image`` is here."""
        return self._run("image", "inspect", image).returncode == 0

    def _pull(self, image: str) -> None:
        pulled = self._run("pull", "--quiet", image, timeout=PULL_SECONDS)
        if pulled.returncode != 0:
            why = (pulled.stderr.strip().splitlines() or ["no reason given"])[-1]
            raise ImageUnavailable(f"image {image!r} not found locally and pull failed: {why}")

    def _run(self, *args: str, timeout: float = CHECK_SECONDS) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.runtime, *args], capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise ImageUnavailable(
                f"{Path(self.runtime).name} {' '.join(args)} took over {timeout:g}s"
            ) from None

    def argv(self, launch: TaskLaunch, name: str, gpus_from_slurm: bool = False) -> list[str]:
        """The runtime's command line that runs ``launch`` as the container ``name``;
        ``gpus_from_slurm``: its GPUs are the step's, known on the node only."""
        argv = [self.runtime, "run", "--name", name, "--network", "host"]
        if Path(self.runtime).name == "podman":
            # Kept once it ends, until its client's shim has read how (see the shim's
            # ``finish``) and removed it; --replace: one that an ended attempt left behind.
            argv += ["--replace"]
            argv += _names(launch)  # docker refuses a host name of its own on the host's network
        else:
            argv += ["--rm"]  # docker's client removes its own (it has no --replace)
        # An init as PID 1 passes SIGTERM on: a task that is PID 1 would ignore it.
        argv += ["--init"]
        pull = "never" if self.pulls_here else RUNTIME_PULL[launch.pull]
        argv += ["--pull", pull]
        in_image = launch.image_workdir and self.pulls_here  # else the image is not here
        if not (in_image and self.declares_workdir(launch.image or "")):
            argv += ["--workdir", str(launch.cwd)]
        if launch.account is not None:  # the team's account, not the image's user
            argv += ["--user", f"{launch.account.uid}:{launch.account.gid}"]
        for mount in launch.mounts:
            options = ":ro" if mount.read_only else ""
            argv += ["--volume", f"{mount.source}:{mount.target}{options}"]
        resources = launch.resources
        if resources.cpu:
            argv += ["--cpus", f"{resources.cpu / 1000:g}"]
        if resources.memory:
            argv += ["--memory", str(resources.memory)]
        for gpu in launch.gpus:  # the task sees its GPUs from 0: see container_environment
            argv += ["--device", f"nvidia.com/gpu={gpu}"]
        env = container_environment(launch)
        if gpus_from_slurm:  # the bootstrap sets their values, renumbered from 0
            argv.append(GPUS_FROM_SLURM)
            env |= {variable: launch.env.get(variable, "") for variable in GPU_VARIABLES}
        for variable, value in env.items():
            # By name: the runtime passes on its own value, the task's (not shown in ps).
            same = launch.env.get(variable) == value
            argv.append(f"--env={variable}" if same else f"--env={variable}={value}")
        # "--": the image and what follows are never read as the runtime's options.
        if launch.entrypoint:  # the image's ENTRYPOINT runs, given argv as its arguments
            return [*argv, "--", launch.image or "", *launch.argv]
        # The command replaces the ENTRYPOINT, as a container's command does on Kubernetes.
        program, *arguments = launch.argv
        entrypoint = f"--entrypoint={json.dumps([program])}"
        return [*argv, entrypoint, "--", launch.image or "", *arguments]


def _names(launch: TaskLaunch) -> list[str]:
    """The container's own host name, as a pod has one (two torch agents of one job must
    not take each other for one node), and the job's other tasks' names, where their
    address is known here (on a cluster engine it is a placeholder until the node's)."""
    options = ["--hostname", launch.hostname] if launch.hostname else []
    for name, address in launch.hosts:
        with contextlib.suppress(ValueError):
            options += ["--add-host", f"{name}:{ipaddress.ip_address(address)}"]
    return options


def container_environment(launch: TaskLaunch) -> dict[str, str]:
    """The task's environment as the container sees it: its GPUs renumbered from 0, as
    the container holds only those devices."""
    env = dict(launch.env)
    if launch.gpus:
        visible = ",".join(str(n) for n in range(len(launch.gpus)))
        for name in GPU_VARIABLES:
            if name in env:
                env[name] = visible
    return env
