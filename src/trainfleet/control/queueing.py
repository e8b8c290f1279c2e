"""Between jobs and the scheduler: what a job asks for, and what this machine has.

The scheduler (``scheduling/admission.py``) is pure; this module turns a stored job into
the ``GangJob`` it admits, and an admission into the host GPU indices a task is given.
"""

from __future__ import annotations

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
    from trainfleet.wire import QueueState


def gang_job(job_id: str, spec: JobSpec, order: float) -> GangJob:
    return GangJob(job_id, task_demands(spec), spec.queue, spec.priority, order)


def host_gpus(allocation: TaskAllocation, nodes: Sequence[Node]) -> tuple[int, ...]:
    """The host indices of the devices of one task's allocation, where trainfleet hands
    them out (on a cluster's node, its engine chooses them)."""
    for node in nodes:
        if node.name == allocation.node:
            return node.host_gpus(allocation.gpus)
    return ()


def allocation_of(gpus: Sequence[int], fraction: int, nodes: Sequence[Node]) -> TaskAllocation:
    """The allocation of a task already running on host GPUs ``gpus`` (after a restart):
    on the node that hands those devices out (devices no longer there are left out)."""
    node = next((n for n in nodes if n.devices and set(gpus) <= set(n.devices)), nodes[0])
    positions = tuple(node.devices.index(gpu) for gpu in gpus if gpu in node.devices)
    return TaskAllocation(node.name, positions, fraction)


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

    def state(self, team: str = "default") -> QueueState:
        """As the API shows it, for the team that owns the queue."""
        from trainfleet.wire import QueueState  # the REST models: not on `trainfleet run`'s path

        return QueueState(
            queue=self.config,
            team=team,
            used=self.used,
            running=self.admitted,
            waiting=self.waiting,
        )


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
