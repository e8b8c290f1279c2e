"""The local backend: every task is a process group on this machine, logging to a file."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from trainfleet.backends.api import (
    Address,
    NotStarted,
    Outside,
    Preview,
    TaskHandle,
    TaskReports,
    TaskStatus,
)
from trainfleet.backends.gpu_readings import GpuReading
from trainfleet.backends.launch import JobLaunch, Mount, TaskLaunch
from trainfleet.backends.local.fdlimit import raise_open_files, tasks_open_files
from trainfleet.backends.local.gpus import gpu_inventory
from trainfleet.backends.local.groups import end_attempt, signal_group
from trainfleet.backends.local.machine import local_node
from trainfleet.backends.local.mps import (
    MPS_CONTROL,
    GpuInfo,
    GpuSharing,
    MpsDaemons,
    MpsError,
    NvmlGpuInfo,
    Share,
    find_mps_control,
    sharing_setting,
)
from trainfleet.backends.local.nvml_events import XidEvents
from trainfleet.backends.local.nvml_read import load_nvml, read_gpus
from trainfleet.backends.local.watcher import ExitWatcher, Watch
from trainfleet.backends.supervision import SHIM
from trainfleet.backends.supervision.containers import Containers
from trainfleet.backends.supervision.ports import PooledAddresses, in_use
from trainfleet.backends.supervision.shim import (
    ATTEMPT_VARIABLE,
    FROM_STDIN,
    Container,
    write_record,
)
from trainfleet.backends.supervision.shim import options as shim_options
from trainfleet.backends.supervision.usage_options import USAGE_INTERVAL
from trainfleet.backends.supervision.usage_options import shim_options as usage_options
from trainfleet.datadir import records
from trainfleet.datadir.layout import DataDir, create_private
from trainfleet.datadir.space import DiskFull, is_disk_full, require_free
from trainfleet.domain.conditions import Code
from trainfleet.domain.errors import Misconfigured
from trainfleet.domain.records import Reason
from trainfleet.scheduling.cluster import Node
from trainfleet.scheduling.placement import TaskKey, Unschedulable
from trainfleet.spec.models import JobSpec
from trainfleet.spec.quantity import size_setting

ExitCallback = Callable[[TaskKey, int, Outside | None], None]
LOG_CAP = 1 << 30
"""Bytes a task's log keeps by default (the first and the last half of its output)."""
LOG_CAP_VARIABLE = "TRAINFLEET_LOG_CAP"
log = logging.getLogger("trainfleet.containers")


class LogCapError(Misconfigured, ValueError):
    """TRAINFLEET_LOG_CAP (or ``--log-cap``) is not a size, or is too small."""


def log_cap_setting(value: str | None, source: str = LOG_CAP_VARIABLE) -> int:
    """Bytes in ``value`` (``512Mi``, ``2G``, bytes), LOG_CAP when None or empty;
    LogCapError naming ``source``."""
    try:
        return size_setting(value, source, LOG_CAP, minimum=4096)
    except ValueError as error:
        raise LogCapError(str(error)) from None


@dataclass
class _Running:
    """A started task until its whole process group is gone."""

    pid: int
    record: Path
    """The attempt's record prefix (``TRAINFLEET_ATTEMPT`` in every process of it)."""
    where: str
    """For people: ``pid 4242``, or ``container trainfleet-... (pid 4242)``."""
    terminating: threading.Event = field(default_factory=threading.Event)
    killed: threading.Event = field(default_factory=threading.Event)
    shared: _Leased | None = None
    """The MPS daemon it is a client of, released when it ends."""
    container: Container | None = None
    """The container that is the task, removed when it ends where its shim did not."""

    def lingers(self) -> bool:
        """Whether the rest of its group keeps its grace once the shim has ended: the task
        is being stopped, and not yet killed."""
        return self.terminating.is_set() and not self.killed.is_set()


@dataclass(frozen=True)
class _Leased:
    """A task's hold on the MPS daemon of its GPU (see ``backends.local.mps``)."""

    daemons: MpsDaemons
    daemon: str
    lease: str
    gpu: int

    def end(self) -> Outside | None:
        """Release the daemon; why the task ended where the daemon had died under it."""
        lost = self.daemons.alive(self.daemon) is None
        with suppress(OSError):  # the next start of a task on that GPU checks it again
            self.daemons.release(self.daemon, self.lease)
        if not lost:
            return None
        what = f"the MPS daemon sharing GPU {self.gpu} died"
        return Outside(what, cause=Code.GPU_SHARING_LOST)


class LocalBackend(PooledAddresses):
    """Runs tasks as process groups here; one thread learns how they all end (``watcher``).

    A task ends when its whole group is gone, not just its first process: a shell that
    dies on SIGTERM leaves its children their grace period, and whatever a task leaves
    running when it exits on its own is killed with it.

    Each task starts under a small shim that moves its output into its log, keeping at
    most ``log_cap`` bytes (LOG_CAP by default), and records its exit. ``gpus``: the GPUs'
    indices as configured (``TRAINFLEET_GPUS``; None: NVML's); ``resources``: this
    machine's named resources (``licence=2,fpga=1``). The shim samples what its task uses
    every ``usage_interval`` seconds (0: never) into a history beside its log.
    ``gpu_sharing``: how fractions of a GPU hold (``mps``, ``counted``; None: ``mps``
    where ``mps_control``, NVIDIA's ``nvidia-cuda-mps-control``, is found), each GPU's
    memory read through ``gpu_info`` (NVML's by default). ``nvml``: the ``pynvml`` module
    that ``read_gpus`` asks (by default the installed one, where a driver shows).
    ``supervised`` (the server's mode): the shim outlives this process, so a restarted
    server can ``adopt`` the task, and this process may open as many files as it is allowed
    (one descriptor per running task). Otherwise the shim is tethered to this process: the
    task ends with it. ``close`` ends the backend's threads.
    """

    restarts_whole_jobs = False
    queues_tasks = False
    address_host = "127.0.0.1"

    def __init__(
        self,
        supervised: bool = False,
        log_cap: int | None = None,
        container_runtime: str | None = None,
        gpus: str | None = None,
        resources: str = "",
        usage_interval: float = USAGE_INTERVAL,
        gpu_sharing: str | None = None,
        mps_control: str | None = None,
        gpu_info: GpuInfo | None = None,
        gpu_sharing_source: str = "--gpu-sharing",
        nvml: object | None = None,
    ) -> None:
        self._nvml = nvml
        self.supervised = supervised
        self.gpu_sharing = sharing_setting(gpu_sharing, gpu_sharing_source)
        self._mps_control = mps_control
        self.gpu_info = gpu_info or NvmlGpuInfo()
        self._daemons: dict[Path, MpsDaemons] = {}
        self.usage_interval = usage_interval
        self.log_cap = LOG_CAP if log_cap is None else log_cap
        self.configured_gpus = gpus
        self.resources = resources
        self.containers = Containers(container_runtime)
        self._running: dict[int, _Running] = {}  # by pid: unique while the task lives
        self._lock = threading.Lock()
        self._exits = ExitWatcher()
        if supervised:
            raise_open_files()

    def close(self) -> None:
        """End the threads that follow tasks (before this process ends). The tasks still
        running run on, unreported: a supervised one for a later server to adopt."""
        self._exits.close()

    @cached_property
    def _gpus(self) -> list[int]:
        """Read once, on first use: NVML takes a while to start, and GPUs stay put."""
        return gpu_inventory(self.configured_gpus)

    def nodes(self) -> list[Node]:
        return [local_node(self._gpus, self.resources)]

    def gpu_memory(self) -> int | None:
        totals = [self.gpu_info.memory_total(gpu) for gpu in self._gpus]
        known = [total for total in totals if total]
        return min(known) if known and len(known) == len(totals) else None

    def read_gpus(self) -> list[GpuReading]:
        """Each GPU tasks may use here, as NVML reports it now (see ``nvml_read``), with the
        critical Xids it reported since the last reading (``nvml_events``)."""
        if not self._gpus:
            return []
        readings = read_gpus(self._nvml_module, self._gpus)
        events = self._xid_events.drain() if self._xid_events is not None else {}
        return [replace(r, events=tuple(events.get(r.index, ()))) for r in readings]

    @cached_property
    def _nvml_module(self) -> Any:
        return self._nvml if self._nvml is not None else load_nvml()

    @cached_property
    def _xid_events(self) -> XidEvents | None:
        """This process's NVML event set on the GPUs (None without NVML)."""
        nvml = self._nvml_module
        return XidEvents(nvml, self._gpus) if nvml is not None else None

    @cached_property
    def mps_control(self) -> str | None:
        """NVIDIA's MPS control program: the one given, else found (None: missing)."""
        return self._mps_control or find_mps_control()

    @cached_property
    def sharing(self) -> GpuSharing | None:
        """How fractions of a GPU hold here; None: they cannot (MPS is missing and the
        operator did not choose ``counted``)."""
        if self.gpu_sharing is GpuSharing.COUNTED:
            return GpuSharing.COUNTED
        return GpuSharing.MPS if self.mps_control else None

    def check(self, spec: JobSpec) -> None:
        # The scheduler's check covers this machine's size; fractions need MPS here.
        if not self._gpus or self.sharing is not None:
            return
        for name, role in spec.roles.items():
            if 0 < role.resources.gpu < 1:
                raise Unschedulable(self._no_sharing(name, role.resources.gpu))

    def _no_sharing(self, role: str, fraction: float) -> str:
        asked = " (--gpu-sharing mps)" if self.gpu_sharing is GpuSharing.MPS else ""
        return (
            f"roles.{role}.resources.gpu: {fraction:g} is a fraction of a GPU, which this "
            f"machine cannot enforce{asked}: NVIDIA MPS ({MPS_CONTROL}) is not installed "
            "beside the driver; install it, or ask the operator for --gpu-sharing counted "
            "(shared, not enforced)"
        )

    def taken(self, address: Address) -> bool:
        """Whether a program of this machine, where the tasks run, holds the port now."""
        return in_use(address.port)

    def dryrun(self, job: JobLaunch) -> Preview:
        return Preview([self._launch(job, key)[0] for key in job.attempts])

    def _launch(self, job: JobLaunch, key: TaskKey) -> tuple[TaskLaunch, Share | None]:
        """The task's launch, and its share of a GPU (with MPS: as that daemon's client)."""
        launch = job.task(key)
        fraction = launch.resources.gpu
        if not 0 < fraction < 1 or len(launch.gpus) != 1:
            return launch, None
        (gpu,) = launch.gpus
        sharing = self.sharing
        if sharing is None:
            raise MpsError(self._no_sharing(key[0], fraction))
        if sharing is GpuSharing.COUNTED:
            share = Share(gpu, fraction, sharing)
        else:
            daemons = self._daemons_of(job.data_dir)
            daemon = daemons.folder(gpu, launch.account.name if launch.account else None)
            total = self.gpu_info.memory_total(gpu)
            memory = int(total * fraction) if total is not None else None
            pipe, log = daemons.pipe(daemon), daemons.log(daemon)
            share = Share(gpu, fraction, sharing, daemon, pipe, log, memory)
        env = {**launch.env, **share.environment()}
        mounts = launch.mounts
        if share.pipe is not None and launch.image is not None:  # the client's way in
            mounts += (Mount(share.pipe, share.pipe),)
        return replace(launch, env=env, mounts=mounts), share

    def _daemons_of(self, data_dir: DataDir) -> MpsDaemons:
        assert self.mps_control is not None
        with self._lock:
            daemons = self._daemons.get(data_dir.root)
            if daemons is None:
                daemons = MpsDaemons(data_dir.root / "mps", self.mps_control)
                self._daemons[data_dir.root] = daemons
            return daemons

    def start(self, job: JobLaunch, reports: TaskReports) -> dict[TaskKey, TaskHandle | NotStarted]:
        started: dict[TaskKey, TaskHandle | NotStarted] = {}
        for key in job.attempts:
            try:
                launch, share = self._launch(job, key)
                leased = self._lease(job.data_dir, launch, share)
                pid = self._start(launch, reports.exited, job.spec.grace_period, share, leased)
                started[key] = TaskHandle(str(pid))
            except (OSError, ValueError) as error:
                started[key] = NotStarted(str(error))
        return started

    def _lease(self, data_dir: DataDir, launch: TaskLaunch, share: Share | None) -> _Leased | None:
        """Hold the MPS daemon of the task's GPU (started now where it is not running)."""
        if share is None or share.sharing is not GpuSharing.MPS:
            return None
        daemons = self._daemons_of(data_dir)
        owner = (launch.account.uid, launch.account.gid) if launch.account else None
        lease = _lease_name(launch.record)
        daemons.acquire(share.daemon, share.gpu, lease, owner)
        return _Leased(daemons, share.daemon, lease, share.gpu)

    def _start(
        self,
        launch: TaskLaunch,
        on_exit: ExitCallback,
        grace: float,
        share: Share | None = None,
        leased: _Leased | None = None,
    ) -> int:
        try:
            self._make_room(launch)
            process, where, container = self._spawn(launch, grace)
        except BaseException:
            if leased is not None:
                leased.end()
            raise
        if leased is not None:
            leased.daemons.bind(leased.daemon, leased.lease, process.pid)
        if share is not None:
            where = f"{where}; {share.describe()}"
            _write_share(launch.record, share, where)
        running = _Running(process.pid, launch.record, where, shared=leased, container=container)
        self._follow(launch.key, running, process.poll, on_exit)
        return process.pid

    def _spawn(
        self, launch: TaskLaunch, grace: float
    ) -> tuple[subprocess.Popen[bytes], str, Container | None]:
        tether = [] if self.supervised else ["--tether", f"{os.getpid()}:{grace}"]
        options = [str(launch.record), *tether]
        open_files = tasks_open_files()
        if open_files is not None:
            options += ["--open-files", str(open_files)]
        options += ["--log", str(launch.log_path), "--log-cap", str(self.log_cap)]
        options += usage_options(launch.log_path, self.usage_interval, launch.gpus)
        container = None
        if launch.image is None:
            account = launch.account
            command = account.command(launch.argv) if account else list(launch.argv)
        else:  # the container is the task, in the foreground under the shim
            self.containers.make_ready(launch)
            name = _container_name(launch.record)
            command = self.containers.argv(launch, name)
            # Removed by name when its client ends: by the shim, else by whoever finds
            # the attempt ended without a word from the shim (see _ended, adopt, abandon).
            container = Container(self.containers.runtime, name)
            _write_container(launch.record, container)
            options += ["--container", name]
        # The shim's command line is every account's to read: its options (paths, secret
        # values to mask) go through its standard input, and no file ever holds them.
        # Its own output (a traceback, if ever) goes to the log too.
        with open(create_private(launch.log_path), "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(SHIM), FROM_STDIN],
                env=dict(launch.env),
                cwd=launch.host_cwd or launch.cwd,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group, out of reach of our Ctrl-C and death
            )
        _send(process, shim_options([*options, "--", *command], launch.mask))
        where = f"pid {process.pid}"
        if container is not None:
            where = f"container {container.name} ({where})"
        return process, where, container

    @staticmethod
    def _make_room(launch: TaskLaunch) -> None:
        """Make the task's log and record folders; DiskFull when the disk has no room."""
        try:
            launch.log_path.parent.mkdir(parents=True, exist_ok=True)
            launch.record.parent.mkdir(parents=True, exist_ok=True)
            require_free(launch.log_path.parent)
            launch.log_path.touch(mode=0o600)  # private, as the whole data directory
        except DiskFull:
            raise
        except OSError as error:
            if is_disk_full(error):
                why = f"cannot open the log {launch.log_path}"
                raise DiskFull(Reason.DISK_FULL.because(why)) from None
            raise

    def log_path(self, data_dir: DataDir, job_id: str, key: TaskKey) -> Path:
        return data_dir.log_path(job_id, *key)

    def last_attempt(self, data_dir: DataDir, job_id: str, key: TaskKey) -> int | None:
        return records.last_attempt(data_dir.run_dir(job_id), *key, suffixes=(".pid",))

    def adopt(
        self, data_dir: DataDir, job_id: str, key: TaskKey, attempt: int, reports: TaskReports
    ) -> TaskHandle | None:
        record = data_dir.record(job_id, *key, attempt)
        pid = records.supervisor_pid(record)
        shared = self._adopt_share(data_dir, record)
        container = _read_container(record)
        if pid is None or not _is_shim_of(pid, record):
            # The shim is gone (kill -9): what it ran may not be. End it before a new attempt.
            end_attempt(_marker(record))
            if container is not None:
                _remove(container)
            outside = shared[0].end() if shared is not None else None
            reports.exited(key, _recorded_exit(record), outside)
            return None
        leased, where = shared if shared is not None else (None, f"pid {pid}")
        running = _Running(pid, record, where, shared=leased, container=container)
        self._follow(key, running, _foreign_poll(pid, record), reports.exited)
        return TaskHandle(str(pid))

    def _adopt_share(self, data_dir: DataDir, record: Path) -> tuple[_Leased, str] | None:
        """The MPS daemon an attempt of an earlier process holds (its ``.share`` record),
        started again where it died; None for a task without one."""
        found = _read_share(record)
        if found is None or self.mps_control is None:
            return None
        daemon, gpu, where = found
        daemons = self._daemons_of(data_dir)
        leased = _Leased(daemons, daemon, _lease_name(record), gpu)
        with suppress(OSError):  # the task fails without it (gpu-sharing-lost)
            daemons.ensure(daemon, gpu, _owner_of(daemon))
        return leased, where

    def abandon(self, data_dir: DataDir, job_id: str, key: TaskKey) -> None:
        attempt = self.last_attempt(data_dir, job_id, key)
        if attempt is not None:
            record = data_dir.record(job_id, *key, attempt)
            end_attempt(_marker(record))
            container = _read_container(record)
            if container is not None:
                _remove(container)
            shared = self._adopt_share(data_dir, record)
            if shared is not None:
                shared[0].end()

    def describe(self, handle: TaskHandle) -> TaskStatus:
        running = self._get(int(handle))
        return TaskStatus(handle, running.where if running else f"pid {handle}", int(handle))

    def stop(self, handle: TaskHandle, force: bool = False) -> None:
        running = self._get(int(handle))
        if running is not None:
            (running.killed if force else running.terminating).set()
            signal_group(running.pid, signal.SIGKILL if force else signal.SIGTERM)

    def _get(self, pid: int) -> _Running | None:
        with self._lock:
            return self._running.get(pid)

    def _follow(
        self,
        key: TaskKey,
        running: _Running,
        poll: Callable[[], int | None],
        on_exit: ExitCallback,
    ) -> None:
        """Have the watcher follow ``running`` (``poll``: its exit code once it ended)."""
        with self._lock:
            self._running[running.pid] = running
        ended = partial(self._ended, key, running, on_exit)
        self._exits.watch(Watch(running.pid, poll, running.lingers, ended))

    def _ended(self, key: TaskKey, running: _Running, on_exit: ExitCallback, code: int) -> None:
        """The task is over (on a cleanup thread): end what is left of it, then report."""
        outside = None
        try:
            end_attempt(_marker(running.record), running.pid)
            if running.container is not None and records.exit_status(running.record) is None:
                _remove(running.container)  # the shim was killed before it could
            outside = running.shared.end() if running.shared is not None else None
        finally:  # reported even where a cleanup failed (its thread logs why)
            with self._lock:
                del self._running[running.pid]
            on_exit(key, code, outside)


def _send(process: subprocess.Popen[bytes], options: bytes) -> None:
    """Give a shim its options; one that died first has read none, and ran nothing (its
    exit is reported as any other)."""
    assert process.stdin is not None
    try:
        with process.stdin:
            process.stdin.write(options)
    except BrokenPipeError:
        pass


SHARE_SUFFIX = ".share"
"""An attempt's record of its MPS daemon: ``<daemon> <gpu> <where>``, read on adoption."""


def _lease_name(record: Path) -> str:
    """``<job>.<role>-<index>-<attempt>``: the attempt's lease on its MPS daemon."""
    return f"{record.parent.parent.name}.{record.name}"


def _write_share(record: Path, share: Share, where: str) -> None:
    if share.sharing is GpuSharing.MPS:
        path = record.with_name(record.name + SHARE_SUFFIX)
        path.write_text(f"{share.daemon} {share.gpu} {where}\n")


def _read_share(record: Path) -> tuple[str, int, str] | None:
    try:
        daemon, gpu, where = record.with_name(record.name + SHARE_SUFFIX).read_text().split(" ", 2)
        return daemon, int(gpu), where.strip()
    except (OSError, ValueError):
        return None


def _owner_of(daemon: str) -> tuple[int, int] | None:
    """The (uid, gid) of the account a daemon serves (``gpu0-tf-vision``), None: ours."""
    import pwd

    _, _, account = daemon.partition("-")
    if not account:
        return None
    try:
        entry = pwd.getpwnam(account)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


CONTAINER_SUFFIX = ".container"
"""An attempt's record of the container that is its task: its name, then its runtime."""


def _write_container(record: Path, container: Container) -> None:
    path = record.with_name(record.name + CONTAINER_SUFFIX)
    write_record(str(path), f"{container.name}\n{container.runtime}\n")


def _read_container(record: Path) -> Container | None:
    try:
        name, runtime = record.with_name(record.name + CONTAINER_SUFFIX).read_text().splitlines()
    except (OSError, ValueError):
        return None
    return Container(runtime, name)


def _remove(container: Container) -> None:
    """Remove what is left of a task's container (see ``Container``), whatever its state."""
    problem = container.remove()
    if problem is not None:
        log.warning("%s", problem)


def _container_name(record: Path) -> str:
    """``trainfleet-<job>-<role>-<index>-<attempt>``: one per attempt, found again by name."""
    return f"trainfleet-{record.parent.parent.name}-{record.name}"


def _marker(record: Path) -> str:
    return f"{ATTEMPT_VARIABLE}={record}"


def _is_shim_of(pid: int, record: Path) -> bool:
    """Whether ``pid`` is still the shim that wrote ``record`` (pids get reused): a shim
    with the attempt's mark in its environment (its command line names nothing)."""
    import psutil

    try:
        command = psutil.Process(pid).cmdline()
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except (psutil.Error, OSError):
        return False
    marker = b"\0" + _marker(record).encode() + b"\0"
    return str(SHIM) in command and marker in b"\0" + environ + b"\0"


def _foreign_poll(pid: int, record: Path) -> Callable[[], int | None]:
    """How a process that is not our child ended (from its record), None while it runs."""
    import psutil

    try:
        process = psutil.Process(pid)  # its start time tells it from a later one of its pid
    except psutil.Error:
        return lambda: _recorded_exit(record)

    def poll() -> int | None:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                return None
        except psutil.Error:
            pass
        return _recorded_exit(record)

    return poll


def _recorded_exit(record: Path) -> int:
    # No record means the shim itself was killed (SIGKILL), and its task with it.
    status = records.exit_status(record)
    return -signal.SIGKILL if status is None else status
