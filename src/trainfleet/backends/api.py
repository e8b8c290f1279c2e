"""What the controller asks of a backend: places, starting, signalling. No policy here.

A backend reports what it sees (a task's process exited with a code, the node under it
was lost, the cluster engine cancelled it); the controller decides what that means
(restart, succeed, fail).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from trainfleet.backends.task_environment import SERVERS, TaskBase
from trainfleet.domain.errors import USAGE_ERROR, Unavailable
from trainfleet.frameworks import task_argv, task_environment
from trainfleet.frameworks.base import TaskContext
from trainfleet.scheduling.cluster import Node
from trainfleet.scheduling.placement import Placement, TaskKey
from trainfleet.spec.models import JobSpec
from trainfleet.store.layout import DataDir

ATTEMPT_VARIABLE = "TRAINFLEET_ATTEMPT"
"""Set in every task's environment to its attempt's record prefix: the kernel shows it in
``/proc/PID/environ``, which finds the attempt's processes when pids have been reused."""


@dataclass(frozen=True)
class Outside:
    """Why a task ended beyond its exit status: something outside it stopped it."""

    what: str
    """Said in the task's reason, e.g. ``node tf-node2 failed (Slurm: NODE_FAIL)``."""
    cancelled: bool = False
    """Cancelled in the cluster engine itself (``scancel``): the job ends cancelled."""


class TaskReports(Protocol):
    """How a backend tells the controller what its tasks do; called from any thread."""

    def exited(self, key: TaskKey, returncode: int, outside: Outside | None = None) -> None:
        """The task ended with its raw exit status (negative: a signal); once per start."""
        ...

    def placed(self, key: TaskKey, address: str, note: str) -> None:
        """The task now runs at ``address`` (``host:port``); ``note`` says where, for people."""
        ...


@dataclass(frozen=True)
class TaskLaunch:
    """Everything needed to start one task's process."""

    key: TaskKey
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    log_path: Path
    record: Path
    """Prefix of this attempt's supervision records (``.pid``, ``.exit``)."""


@dataclass(frozen=True)
class JobLaunch:
    """A start of some of a job's tasks: enough to build each task's launch, anywhere.

    A backend that learns the tasks' addresses only where they land (a cluster engine)
    builds the launches there, from a placement with the real addresses.
    """

    job_id: str
    spec: JobSpec
    placement: Placement
    workdir: Path
    data_dir: DataDir
    attempts: Mapping[TaskKey, int]
    """The tasks to start, each with the number of its attempt (0: the first start)."""
    base: TaskBase = SERVERS
    """Where each task's environment starts (see ``task_environment``)."""
    python_dirs: Mapping[str, Path] = field(default_factory=dict)
    """Per role with a Python environment of its own: its ``bin`` folder (``python``)."""

    def task(self, key: TaskKey, placement: Placement | None = None) -> TaskLaunch:
        """The argv, environment, directory, log file and records of one task's attempt."""
        context = TaskContext(self.job_id, self.spec, placement or self.placement, *key)
        role = self.spec.roles[key[0]]
        env = self.base.environment()
        python_dir = self.python_dirs.get(key[0])
        if python_dir is not None:  # the job's own environment: its python and pip first
            env["PATH"] = os.pathsep.join([str(python_dir), env.get("PATH", "")])
            env["VIRTUAL_ENV"] = str(python_dir.parent)
        env.update(task_environment(context))
        record = self.data_dir.record(self.job_id, *key, self.attempts.get(key, 0))
        # Every process of the attempt inherits it, even one that leaves the task's group.
        env[ATTEMPT_VARIABLE] = str(record)
        return TaskLaunch(
            key=key,
            argv=task_argv(context),
            env=env,
            cwd=self.workdir / role.working_dir if role.working_dir else self.workdir,
            log_path=self.data_dir.log_path(self.job_id, *key),
            record=record,
        )


@dataclass(frozen=True)
class Preview:
    """What ``start`` would do, with nothing started: each task's launch, and the submission a
    cluster engine would be given (None where tasks start directly)."""

    tasks: list[TaskLaunch]
    submission: str | None = None


class BackendError(Unavailable, OSError):
    """A cluster engine could not be reached, or refused a command; the message says which."""

    exit_code = USAGE_ERROR


class Backend(Protocol):
    """Where the processes of tasks really run."""

    restarts_whole_jobs: bool
    """True where a task cannot start again alone (its allocation was the whole job's):
    the controller then restarts every task of the job together."""
    queues_tasks: bool
    """True where a started task may wait in a cluster engine's queue: it is ``starting``
    until ``placed`` reports its address. Its handles are then not process ids."""

    def host(self) -> str:
        """The host name tasks reach each other at; "" where only the task learns it."""
        ...

    def gpu_inventory(self) -> list[int]:
        """Host indices of this machine's GPUs that tasks may be given."""
        ...

    def nodes(self) -> list[Node]:
        """What jobs are admitted onto: this machine, or a cluster's nodes.

        Raises BackendError where the cluster engine cannot be reached."""
        ...

    def check(self, spec: JobSpec) -> None:
        """Raise Unschedulable (naming the field) for a job this backend can never run."""
        ...

    def reserve_ports(self, job_id: str, fixed: Mapping[TaskKey, int | None]) -> dict[TaskKey, int]:
        """A port for every task: the fixed one where given, else a free one, held for
        ``job_id`` until ``release_ports``. All fixed: holds them again (an adopted job).

        Raises OSError (NoFreePort) when no port is free; then none is held."""
        ...

    def release_ports(self, job_id: str) -> None:
        """The job has ended: its ports may be given to other jobs."""
        ...

    def preview(self, job: JobLaunch) -> Preview:
        """What ``start`` would do with ``job``, without starting or writing anything."""
        ...

    def start(self, job: JobLaunch, reports: TaskReports) -> dict[TaskKey, int | str]:
        """Start the tasks of ``job.attempts`` together.

        Returns each task's handle (the pid the other calls take), or the reason it could
        not start. ``reports.exited`` follows once for every task that started.
        """
        ...

    def describe(self, pid: int) -> str:
        """The task with handle ``pid`` for people, e.g. ``pid 4242``."""
        ...

    def terminate(self, pid: int) -> None:
        """Ask the task with handle ``pid`` to stop (SIGTERM to all its processes)."""
        ...

    def kill(self, pid: int) -> None:
        """Stop the task with handle ``pid`` now (SIGKILL to all its processes)."""
        ...

    def adopt(self, key: TaskKey, record: Path, reports: TaskReports) -> int | None:
        """Follow a task that an earlier trainfleet process started, from its records.

        Returns its handle, or None when it is no longer running (``exited`` then follows).
        """
        ...
