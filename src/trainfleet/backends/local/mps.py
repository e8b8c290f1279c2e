"""Fractions of a GPU that hold: one NVIDIA MPS control daemon per shared GPU (and account).

A task of ``gpu: 0.5`` is started as a client of the GPU's MPS daemon with
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (its share of the device's memory, from NVML) and
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (its share of the SMs): a client that asks for more
memory gets CUDA's out-of-memory error, and two halves each run at about half the GPU's rate
(both measured on an H200). Where MPS is missing, a fraction is refused unless the operator
chose ``counted`` sharing (shared, not enforced: ``--gpu-sharing counted``).

The daemon of GPU ``n`` lives in ``<data dir>/mps/gpu<n>`` (``pipe/``, ``log/``); tasks of a
team's own account (``--isolate-teams``) get a daemon of their own, ``gpu<n>-<account>``,
whose folders that account owns (0700: only it and trainfleet reach them). The decision,
for a hostile member: MPS's ``control`` socket takes commands from whoever reaches it
(``quit`` included, and MPS serves one account's clients at a time, queueing the others'),
so no account ever reaches another's daemon. The limits are the client's own environment:
they hold against a program that takes what it is not given by accident (the issue's 84
GiB), not against one that removes them from its environment or starts CUDA without MPS;
that needs the GPU in EXCLUSIVE_PROCESS compute mode, an operator's choice.

Who uses a daemon is kept on disk, one lease per task attempt (``mps/leases/<daemon>/``,
holding the pid of the task's supervisor), so that every trainfleet process of one data
directory (a server and embedded runs) shares it, one that restarts adopts it (its pid file,
alive), and the last to leave stops it (``quit``). A lock file serialises the changes.
"""

from __future__ import annotations

import fcntl
import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from trainfleet.domain.errors import Misconfigured

MPS_CONTROL = "nvidia-cuda-mps-control"
DRIVER_BIN = Path("/usr/local/nvidia/bin")
"""Where a driver installed from NVIDIA's containers keeps its programs (beside nvidia-smi)."""
PID_FILE = "nvidia-cuda-mps-control.pid"
"""What the control daemon writes into its pipe directory (recorded on an H200)."""
START_SECONDS = 10.0
QUIT_SECONDS = 10.0
SOCKET_PATH_MAX = 107
"""The longest path a Unix socket may have (``sun_path``, 108 bytes with its NUL)."""
LONGEST_SOCKET = "control_privileged"
SHARING_VARIABLE = "TRAINFLEET_GPU_SHARING"
"""Tells a fractional task how its share holds: ``mps`` or ``counted``."""


class GpuSharing(StrEnum):
    """How fractions of one GPU share it."""

    MPS = "mps"
    """Enforced by an MPS daemon: memory limit and SM percentage per task."""
    COUNTED = "counted"
    """Shared, not enforced: counted by the scheduler only (the operator's choice)."""


class GpuSharingError(Misconfigured, ValueError):
    """``--gpu-sharing`` (TRAINFLEET_GPU_SHARING) is neither ``mps`` nor ``counted``."""


def sharing_setting(value: str | None, source: str = "--gpu-sharing") -> GpuSharing | None:
    """The sharing ``value`` asks for; None where not given (``mps`` where MPS is found)."""
    if value is None or value == "":
        return None
    try:
        return GpuSharing(value.strip().lower())
    except ValueError:
        raise GpuSharingError(
            f"{source}: {value!r}: expected mps (fractions enforced by NVIDIA MPS) or "
            "counted (shared, not enforced)"
        ) from None


def find_mps_control(path: str | None = None) -> str | None:
    """``nvidia-cuda-mps-control`` on ``path`` (PATH), else beside the driver; None."""
    found = shutil.which(MPS_CONTROL, path=path)
    if found:
        return found
    beside = DRIVER_BIN / MPS_CONTROL
    return str(beside) if os.access(beside, os.X_OK) else None


class GpuInfo(Protocol):
    """What trainfleet reads of a GPU (NVML's; a fake in tests)."""

    def memory_total(self, gpu: int) -> int | None:
        """Bytes of memory of the GPU of host index ``gpu``; None where unknown."""
        ...


class NvmlGpuInfo:
    """Each GPU's memory from NVML, read once per device."""

    def __init__(self) -> None:
        self._totals: dict[int, int | None] = {}
        self._lock = threading.Lock()

    def memory_total(self, gpu: int) -> int | None:
        with self._lock:
            if gpu not in self._totals:
                self._totals[gpu] = _nvml_memory_total(gpu)
            return self._totals[gpu]


def _nvml_memory_total(gpu: int) -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVML library or no driver
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()


@dataclass(frozen=True)
class Share:
    """What one fractional task gets of its GPU, and how that holds."""

    gpu: int
    """The host index of the GPU."""
    fraction: float
    sharing: GpuSharing
    daemon: str = ""
    """The daemon's folder name (``gpu0``), with MPS."""
    pipe: Path | None = None
    log: Path | None = None
    memory: int | None = None
    """Bytes of the GPU's memory the task may pin (None: the total is unknown)."""

    @property
    def percentage(self) -> int:
        """Its share of the SMs, in percent, rounded up."""
        return min(100, math.ceil(round(self.fraction * 100, 6)))

    def environment(self) -> dict[str, str]:
        """The variables that make the task an MPS client within its share."""
        env = {SHARING_VARIABLE: self.sharing.value}
        if self.sharing is GpuSharing.MPS and self.pipe is not None and self.log is not None:
            # The daemon sees its one GPU only, and MPS remaps a client's devices to the
            # daemon's: the client's GPU is its device 0, whatever its index here.
            env["CUDA_VISIBLE_DEVICES"] = "0"
            env["CUDA_MPS_PIPE_DIRECTORY"] = str(self.pipe)
            env["CUDA_MPS_LOG_DIRECTORY"] = str(self.log)
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(self.percentage)
            if self.memory is not None:
                env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={self.memory >> 20}M"
        return env

    def describe(self) -> str:
        """For people (``describe``): ``GPU 0: 0.5 through MPS (20480 MiB, 50% of SMs)``."""
        if self.sharing is GpuSharing.COUNTED:
            return f"GPU {self.gpu}: {self.fraction:g}, counted (not enforced)"
        memory = f"{self.memory >> 20} MiB" if self.memory is not None else "memory unknown"
        held = f"{memory}, {self.percentage}% of SMs"
        return f"GPU {self.gpu}: {self.fraction:g} through MPS ({held})"


class MpsError(OSError):
    """An MPS daemon could not be started; the message says why."""


class MpsDaemons:
    """The MPS control daemons of one data directory, one per shared GPU and account."""

    def __init__(self, root: Path, control: str) -> None:
        self.root = root
        """``<data dir>/mps``."""
        self.control = control
        self._lock = threading.Lock()

    def folder(self, gpu: int, account: str | None = None) -> str:
        return f"gpu{gpu}" + (f"-{account}" if account else "")

    def pipe(self, daemon: str) -> Path:
        return self.root / daemon / "pipe"

    def log(self, daemon: str) -> Path:
        return self.root / daemon / "log"

    def _leases(self, daemon: str) -> Path:
        return self.root / "leases" / daemon

    def acquire(
        self, daemon: str, gpu: int, lease: str, owner: tuple[int, int] | None = None
    ) -> None:
        """Make sure the daemon of GPU ``gpu`` runs (start it, or again where it died),
        and hold it under ``lease`` (this process's, until ``bind``). ``owner``: the
        (uid, gid) of the account whose tasks it serves. MpsError saying why it cannot."""
        with self._locked():
            self._ensure(daemon, gpu, owner)
            self._write_lease(daemon, lease, os.getpid())

    def bind(self, daemon: str, lease: str, pid: int) -> None:
        """The lease is now held by ``pid`` (the task's supervisor): alive while it is."""
        with self._locked():
            self._write_lease(daemon, lease, pid)

    def ensure(self, daemon: str, gpu: int, owner: tuple[int, int] | None = None) -> bool:
        """Start the daemon again where it died (an adopted task's); True if it had to."""
        with self._locked():
            return self._ensure(daemon, gpu, owner)

    def release(self, daemon: str, lease: str) -> bool:
        """Drop ``lease``; the last one out stops the daemon. True when it was stopped."""
        with self._locked():
            (self._leases(daemon) / lease).unlink(missing_ok=True)
            if self._live_leases(daemon):
                return False
            self._quit(daemon)
            return True

    def alive(self, daemon: str) -> int | None:
        """The pid of the daemon's control process, where it runs (its pid file)."""
        try:
            pid = int((self.pipe(daemon) / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _is_control(pid) else None

    def _ensure(self, daemon: str, gpu: int, owner: tuple[int, int] | None) -> bool:
        if self.alive(daemon) is not None:
            return False
        self._start(daemon, gpu, owner)
        return True

    def _start(self, daemon: str, gpu: int, owner: tuple[int, int] | None) -> None:
        pipe, log = self.pipe(daemon), self.log(daemon)
        if len(str(pipe / LONGEST_SOCKET)) > SOCKET_PATH_MAX:
            raise MpsError(
                f"the MPS pipe directory {pipe} is too long for a Unix socket: use a data "
                "directory with a shorter path"
            )
        _passable(self.root)
        for folder in (pipe.parent, pipe, log):
            folder.mkdir(mode=0o700, exist_ok=True)
            if owner is not None:  # the account's MPS server writes here
                os.chown(folder, *owner)
            else:
                os.chmod(folder, 0o700)
        (pipe / PID_FILE).unlink(missing_ok=True)
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "CUDA_VISIBLE_DEVICES": str(gpu),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(log),
        }
        try:
            started = subprocess.run(
                [self.control, "-d"],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=START_SECONDS,
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise MpsError(f"cannot start the MPS daemon of GPU {gpu}: {error}") from None
        if started.returncode != 0:
            why = (started.stderr or started.stdout).strip() or f"exit {started.returncode}"
            raise MpsError(f"cannot start the MPS daemon of GPU {gpu}: {why}")
        deadline = time.monotonic() + START_SECONDS
        while self.alive(daemon) is None:
            if time.monotonic() > deadline:
                raise MpsError(
                    f"the MPS daemon of GPU {gpu} wrote no pid file in {START_SECONDS:g}s "
                    f"(its log: {log}/control.log)"
                )
            time.sleep(0.02)

    def _quit(self, daemon: str) -> None:
        pid = self.alive(daemon)
        if pid is None:
            return
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe(daemon)),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log(daemon)),
        }
        with suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [self.control],
                env=env,
                input="quit\n",
                capture_output=True,
                text=True,
                timeout=QUIT_SECONDS,
            )
        deadline = time.monotonic() + QUIT_SECONDS
        while _is_control(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _is_control(pid):  # it would not quit: end it
            with suppress(ProcessLookupError):
                os.kill(pid, 15)

    def _write_lease(self, daemon: str, lease: str, pid: int) -> None:
        folder = self._leases(daemon)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = folder / f".{lease}.new"
        temporary.write_text(str(pid))
        os.replace(temporary, folder / lease)

    def _live_leases(self, daemon: str) -> list[str]:
        live = []
        folder = self._leases(daemon)
        for lease in folder.iterdir() if folder.is_dir() else ():
            if lease.name.startswith("."):
                continue
            try:
                pid = int(lease.read_text().strip())
            except (OSError, ValueError):
                continue
            if _pid_alive(pid):
                live.append(lease.name)
            else:
                lease.unlink(missing_ok=True)  # its holder is gone (a kill -9)
        return live

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's threads and every other trainfleet process, one at a time."""
        with self._lock:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
                yield
            finally:
                os.close(descriptor)


def _passable(root: Path) -> None:
    """Accounts pass through ``mps/`` to their own daemon's folder (never list it)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o711)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_control(pid: int) -> bool:
    """Whether ``pid`` is an MPS control daemon (pids get reused)."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        command = process.cmdline()
    except psutil.Error:
        return False
    return any(Path(word).name == MPS_CONTROL for word in command[:2])
