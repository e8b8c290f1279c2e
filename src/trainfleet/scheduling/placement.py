"""Where each task of a job runs: host, port and GPUs. Pure data, no I/O."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from trainfleet.domain.errors import BadInput
from trainfleet.scheduling.cluster import Cluster, Node, TaskDemand
from trainfleet.scheduling.resources import GPU_UNIT, Resources
from trainfleet.spec.models import JobSpec

TaskKey = tuple[str, int]
"""A task is named by its role and its index within the role."""


class Unschedulable(BadInput):
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

    def at(self, addresses: Mapping[TaskKey, tuple[str, int]]) -> Placement:
        """The same tasks, each at its new ``(host, port)``."""
        return Placement(
            tuple(replace(t, host=addresses[t.key][0], port=addresses[t.key][1]) for t in self)
        )

    def addresses(self) -> dict[str, list[str]]:
        """``{role: ["host:port", ...]}`` for every role, in index order."""
        return {
            role: [t.address for t in self.role(role)]
            for role in dict.fromkeys(t.role for t in self.tasks)
        }


def task_keys(spec: JobSpec) -> list[TaskKey]:
    """Every task of ``spec``: roles in file order, replicas in index order."""
    return [(name, index) for name, role in spec.roles.items() for index in range(role.replicas)]


def task_demands(spec: JobSpec) -> tuple[TaskDemand, ...]:
    """What each task of ``spec`` needs, in task order."""
    demands = {}
    for name, role in spec.roles.items():
        wanted = role.resources
        demands[name] = TaskDemand(
            Resources(
                cpu=wanted.cpu or 0,
                memory=wanted.memory or 0,
                gpu=round(wanted.gpu * GPU_UNIT),
                custom=dict(wanted.custom),
            )
        )
    return tuple(demands[role] for role, _ in task_keys(spec))


def assign_gpus(spec: JobSpec, inventory: Sequence[int]) -> dict[TaskKey, tuple[int, ...]]:
    """Give every task its GPUs from ``inventory`` (host GPU indices), as admission would
    on an idle machine: whole GPUs exclusively, fractions sharing a device.

    Raises Unschedulable, naming what was asked and what exists, when they do not fit.

    >>> from trainfleet.spec.models import JobSpec
    >>> job = JobSpec.model_validate({"name": "j", "roles": {"worker": {"replicas": 2,
    ...     "command": "x", "resources": {"gpu": 1}}}})
    >>> assign_gpus(job, [3, 5])
    {('worker', 0): (3,), ('worker', 1): (5,)}
    """
    gpus_only = [TaskDemand(Resources(gpu=demand.resources.gpu)) for demand in task_demands(spec)]
    machine = Cluster([Node("local", Resources(gpu=len(inventory) * GPU_UNIT))])
    allocations = machine.place("job", gpus_only)
    if allocations is None:
        asking = ", ".join(
            f"{name}: {role.replicas} x {role.resources.gpu:g}"
            for name, role in spec.roles.items()
            if role.resources.gpu
        )
        raise Unschedulable(f"job asks for GPUs ({asking}) but this machine has {len(inventory)}")
    return {
        key: tuple(inventory[device] for device in allocation.gpus)
        for key, allocation in zip(task_keys(spec), allocations, strict=True)
    }


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
