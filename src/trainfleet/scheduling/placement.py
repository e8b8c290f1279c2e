"""Where each task of a job runs: host, port and GPUs. Pure data, no I/O."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from trainfleet.spec.models import JobSpec

TaskKey = tuple[str, int]
"""A task is named by its role and its index within the role."""


class Unschedulable(Exception):
    """The job can never fit: it asks for more than exists."""


@dataclass(frozen=True)
class TaskSlot:
    """The place of one task: ``host:port`` is its address in the cluster spec."""

    role: str
    index: int
    host: str
    port: int
    gpus: tuple[int, ...] = ()

    @property
    def key(self) -> TaskKey:
        return (self.role, self.index)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Placement:
    """Every task of one job, in role order then index order."""

    tasks: tuple[TaskSlot, ...]

    def __iter__(self) -> Iterator[TaskSlot]:
        return iter(self.tasks)

    def slot(self, role: str, index: int) -> TaskSlot:
        for task in self.tasks:
            if task.role == role and task.index == index:
                return task
        raise KeyError(f"{role}/{index}")

    def role(self, role: str) -> list[TaskSlot]:
        """The tasks of ``role`` ordered by index."""
        return sorted((t for t in self.tasks if t.role == role), key=lambda t: t.index)

    def addresses(self) -> dict[str, list[str]]:
        """``{role: ["host:port", ...]}`` for every role, in index order."""
        return {
            role: [t.address for t in self.role(role)]
            for role in dict.fromkeys(t.role for t in self.tasks)
        }


def task_keys(spec: JobSpec) -> list[TaskKey]:
    """Every task of ``spec``: roles in file order, replicas in index order."""
    return [(name, index) for name, role in spec.roles.items() for index in range(role.replicas)]


def assign_gpus(spec: JobSpec, inventory: Sequence[int]) -> dict[TaskKey, tuple[int, ...]]:
    """Give every task its whole GPUs, exclusively, from ``inventory`` (host GPU indices).

    Raises Unschedulable, naming what was asked and what exists, when they do not fit.

    >>> from trainfleet.spec.models import JobSpec
    >>> job = JobSpec.model_validate({"name": "j", "roles": {"worker": {"replicas": 2,
    ...     "command": "x", "resources": {"gpu": 1}}}})
    >>> assign_gpus(job, [3, 5])
    {('worker', 0): (3,), ('worker', 1): (5,)}
    """
    wanted = {key: int(spec.roles[key[0]].resources.gpu) for key in task_keys(spec)}
    total = sum(wanted.values())
    if total > len(inventory):
        asking = ", ".join(
            f"{name}: {role.replicas} x {int(role.resources.gpu)}"
            for name, role in spec.roles.items()
            if role.resources.gpu
        )
        raise Unschedulable(
            f"job asks for {total} GPU(s) ({asking}) but this machine has {len(inventory)}"
        )
    free = list(inventory)
    assigned: dict[TaskKey, tuple[int, ...]] = {}
    for key, count in wanted.items():
        assigned[key], free = tuple(free[:count]), free[count:]
    return assigned


def build_placement(
    spec: JobSpec,
    host: str,
    ports: Mapping[TaskKey, int],
    gpus: Mapping[TaskKey, tuple[int, ...]],
) -> Placement:
    """The placement of every task of ``spec`` on one ``host``."""
    return Placement(
        tuple(
            TaskSlot(role, index, host, ports[(role, index)], gpus.get((role, index), ()))
            for role, index in task_keys(spec)
        )
    )
