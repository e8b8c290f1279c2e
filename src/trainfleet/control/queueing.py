"""Between jobs and the scheduler: what a job asks for, and what this machine has.

The scheduler (``scheduling/admission.py``) is pure; this module turns a stored job into
the ``GangJob`` it admits, this machine into its one ``Node``, and an admission into the
host GPU indices a task is given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainfleet.scheduling.admission import GangJob, Scheduler
from trainfleet.scheduling.cluster import Node, TaskAllocation
from trainfleet.scheduling.placement import task_demands
from trainfleet.scheduling.queues import QueueSpec
from trainfleet.scheduling.resources import GPU_UNIT, Resources
from trainfleet.spec.models import JobSpec

if TYPE_CHECKING:
    from trainfleet.spec.queues import QueueConfig, Quota

LOCAL_NODE = "local"


class ResourceConfigError(ValueError):
    """TRAINFLEET_RESOURCES is not a list of name=count."""


def local_node(gpus: Sequence[int]) -> Node:
    """This machine: its CPUs, memory, the GPUs given, and named resources from the
    environment (``TRAINFLEET_RESOURCES=licence=2,fpga=1``)."""
    capacity = Resources(
        cpu=(os.cpu_count() or 1) * 1000,
        memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        gpu=len(gpus) * GPU_UNIT,
        custom=_custom_resources(os.environ.get("TRAINFLEET_RESOURCES", "")),
    )
    return Node(LOCAL_NODE, capacity)


def _custom_resources(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, _, count = (item.strip() for item in part.partition("="))
        if not name or not count.isdigit():
            raise ResourceConfigError(
                f"TRAINFLEET_RESOURCES: {part!r}: expected name=count, e.g. licence=2"
            )
        found[name] = int(count)
    return found


def gang_job(job_id: str, spec: JobSpec, order: float) -> GangJob:
    return GangJob(job_id, task_demands(spec), spec.queue, spec.priority, order)


def host_gpus(allocation: TaskAllocation, inventory: Sequence[int]) -> tuple[int, ...]:
    """The host indices of the devices of one task's allocation."""
    return tuple(inventory[position] for position in allocation.gpus)


def allocation_of(gpus: Sequence[int], fraction: int, inventory: Sequence[int]) -> TaskAllocation:
    """The allocation of a task already running on host GPUs ``gpus`` (after a restart)."""
    return TaskAllocation(LOCAL_NODE, tuple(inventory.index(gpu) for gpu in gpus), fraction)


def quota_amounts(quota: Quota) -> dict[str, int]:
    """``{"cpu": millicores, "memory": bytes, "gpu": thousandths, <custom>: count}``, for the
    resources the quota names."""
    found = {}
    if quota.cpu is not None:
        found["cpu"] = quota.cpu
    if quota.memory is not None:
        found["memory"] = quota.memory
    if quota.gpu is not None:
        found["gpu"] = round(quota.gpu * GPU_UNIT)
    return found | quota.custom


def queue_spec(config: QueueConfig) -> QueueSpec:
    limit = config.borrowing_limit
    return QueueSpec(
        config.name,
        quota_amounts(config.nominal),
        config.cohort,
        None if limit is None else quota_amounts(limit),
    )


@dataclass(frozen=True)
class QueueStatus:
    """A queue as ``trainfleet queue list/describe`` shows it."""

    config: QueueConfig
    used: dict[str, int]
    admitted: list[str]
    waiting: list[str]


def queue_statuses(scheduler: Scheduler, configs: dict[str, QueueConfig]) -> list[QueueStatus]:
    """Every queue the scheduler knows, with what it uses and its jobs."""
    admitted = scheduler.admitted_by_queue()
    waiting = scheduler.pending_by_queue()
    return [
        QueueStatus(
            configs.get(name) or _unconfigured(name),
            dict(scheduler.quotas.usage.get(name, Resources()).items()),
            admitted.get(name, []),
            waiting.get(name, []),
        )
        for name in sorted(scheduler.quotas.queues)
    ]


def _unconfigured(name: str) -> QueueConfig:
    """A queue without a stored configuration (``default``): no quota, no cohort."""
    from trainfleet.spec.queues import QueueConfig

    return QueueConfig(name=name)
