"""What the controller asks of a backend: places, starting, signalling. No policy here.

A backend reports what it sees (a task's process exited with a code, the node under it
was lost, the cluster engine cancelled it); the controller decides what that means
(restart, succeed, fail). Its verbs follow TorchX's scheduler API: ``dryrun``, ``start``
(schedule), ``describe``, ``stop`` (cancel), ``log_path`` (logs), plus ``adopt`` and
``abandon`` for the tasks an earlier trainfleet process left running. Handles are opaque
strings; each backend keeps its own recovery state (records beside the data directory's
attempt prefixes) and reads it back itself. What a task runs is data, built by
``backends.launch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, NewType, Protocol

from trainfleet.domain.conditions import Code
from trainfleet.domain.errors import USAGE_ERROR, Unavailable

if TYPE_CHECKING:
    from trainfleet.backends.launch import JobLaunch, TaskLaunch
    from trainfleet.datadir.layout import DataDir
    from trainfleet.scheduling.cluster import Node
    from trainfleet.scheduling.placement import TaskKey
    from trainfleet.spec.models import JobSpec

TaskHandle = NewType("TaskHandle", str)
"""A started task, as its backend knows it (a process id, a Slurm job and task, a pod)."""


@dataclass(frozen=True)
class Outside:
    """Why a task ended beyond its exit status: something outside it stopped it."""

    what: str
    """Said in the task's reason, e.g. ``node tf-node2 failed (Slurm: NODE_FAIL)``."""
    cancelled: bool = False
    """Cancelled in the cluster engine itself (``scancel``): the job ends cancelled."""
    cause: Code = Code.NODE_LOST
    """Which infrastructure failure: a lost node (or allocation), a preemption, or
    the loss of what shared its GPU (``gpu-sharing-lost``, restarted by policy)."""


class TaskReports(Protocol):
    """How a backend tells the controller what its tasks do; called from any thread."""

    def exited(self, key: TaskKey, returncode: int, outside: Outside | None = None) -> None:
        """The task ended with its raw exit status (negative: a signal); once per start."""
        ...

    def placed(self, key: TaskKey, address: str, note: str) -> None:
        """The task now runs at ``address`` (``host:port``); ``note`` says where, for people."""
        ...


@dataclass(frozen=True)
class NotStarted:
    """Why a task could not be started (said in its reason)."""

    reason: str
    retry: bool = False
    """The backend is away for now (its engine does not answer), not the task at fault:
    the controller starts the same attempt again after a pause, and counts no failure (so
    the backend keeps nothing of an attempt it says this of)."""


class Address(NamedTuple):
    """Where a task listens: ``host`` is "" until the task learns it (a cluster's node)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Preview:
    """What ``start`` would do, with nothing started: each task's launch, and the submission a
    cluster engine would be given (None where tasks start directly)."""

    tasks: list[TaskLaunch]
    submission: str | None = None


class BackendError(Unavailable, OSError):
    """A cluster engine could not be reached, or refused a command; the message says which."""

    exit_code = USAGE_ERROR


@dataclass(frozen=True)
class TaskStatus:
    """A started task as its backend describes it."""

    handle: TaskHandle
    where: str
    """For people: ``pid 4242``, ``Slurm job 17, step 17.0``."""
    pid: int | None = None
    """Its process id on this machine, where it has one (a signal reaches it)."""


class Backend(Protocol):
    """Where the processes of tasks really run."""

    restarts_whole_jobs: bool
    """True where a task started again alone may land on another host, where the peers
    that were given its address would not find it: the controller then restarts every task
    of the job together, unless the job's members meet in trainfleet's rendezvous store."""
    queues_tasks: bool
    """True where a started task may wait in a cluster engine's queue: it is ``starting``
    until ``placed`` reports its address."""

    def nodes(self) -> list[Node]:
        """What jobs are admitted onto: this machine, or a cluster's nodes. A node's
        ``devices`` are the GPUs trainfleet hands out itself (this machine's).

        Raises BackendError where the cluster engine cannot be reached."""
        ...

    def gpu_memory(self) -> int | None:
        """Bytes of memory of the smallest GPU it hands out, which sizes a share asked by
        memory (``resources.gpu_memory``); None where it does not know."""
        ...

    def check(self, spec: JobSpec) -> None:
        """Raise Unschedulable (naming the field) for a job this backend can never run."""
        ...

    def reserve(self, job_id: str, spec: JobSpec) -> dict[TaskKey, Address]:
        """An address for every task of ``spec``: its fixed port where the role gives one,
        else a free one, held for ``job_id`` until ``release``.

        Raises OSError (NoFreePort) when no port is free; then none is held."""
        ...

    def hold(self, job_id: str, addresses: Mapping[TaskKey, Address]) -> None:
        """Count ``addresses`` as ``job_id``'s again (a job adopted after a restart)."""
        ...

    def release(self, job_id: str) -> None:
        """The job has ended: its addresses may be given to other jobs."""
        ...

    def taken(self, address: Address) -> bool:
        """Whether another program holds ``address`` now, so that a task started there
        could not bind it; False where the backend cannot tell (the task's node is not
        this machine)."""
        ...

    def dryrun(self, job: JobLaunch) -> Preview:
        """What ``start`` would do with ``job``, without starting or writing anything."""
        ...

    def start(self, job: JobLaunch, reports: TaskReports) -> dict[TaskKey, TaskHandle | NotStarted]:
        """Start the tasks of ``job.attempts`` together.

        Returns each task's handle, or why it could not start. ``reports.exited``
        follows once for every task that started.
        """
        ...

    def describe(self, handle: TaskHandle) -> TaskStatus:
        """Where the task runs, for people, and its process id where it has one here."""
        ...

    def stop(self, handle: TaskHandle, force: bool = False) -> None:
        """Ask the task to stop (SIGTERM to all its processes); ``force``: now (SIGKILL).
        A task that has ended already is left alone; its exit is reported as usual."""
        ...

    def log_path(self, data_dir: DataDir, job_id: str, key: TaskKey) -> Path:
        """The file that holds the task's output, readable from this machine."""
        ...

    def last_attempt(self, data_dir: DataDir, job_id: str, key: TaskKey) -> int | None:
        """The last attempt of the task that this backend started (read from its records),
        or None when it never started one."""
        ...

    def adopt(
        self, data_dir: DataDir, job_id: str, key: TaskKey, attempt: int, reports: TaskReports
    ) -> TaskHandle | None:
        """Follow an attempt that an earlier trainfleet process started, from its records.

        Returns its handle, or None when it is no longer running (``exited`` then follows).
        """
        ...

    def abandon(self, data_dir: DataDir, job_id: str, key: TaskKey) -> None:
        """End whatever is left of the task's last attempt, with nobody to report to (the
        process that ran its job is gone)."""
        ...
