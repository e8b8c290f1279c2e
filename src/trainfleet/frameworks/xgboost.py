"""XGBoost and LightGBM: Kubeflow XGBoostJob's variables.

Ranks follow :func:`~trainfleet.frameworks.common.process_group` (master or chief first, then
the workers); the master runs the Rabit tracker. Every task of the group gets ``MASTER_ADDR``
(host only), ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK``; when the group has more than the
master, also LightGBM's ``WORKER_ADDRS`` (the other tasks' hosts, comma-joined) and
``WORKER_PORT``. Kubeflow gives every worker one port; on one machine trainfleet's workers have
different ports, so ``WORKER_PORT`` is the first worker's and every task's own port is in
``TRAINFLEET_PORT`` (all of them in ``TRAINFLEET_CLUSTER``).
"""

from __future__ import annotations

from trainfleet.frameworks.base import TaskContext
from trainfleet.frameworks.common import group_rank, process_group


def environment(ctx: TaskContext) -> dict[str, str]:
    """The XGBoost variables of one task; empty for roles outside the process group."""
    group = process_group(ctx)
    rank = group_rank(group, ctx)
    if rank is None:
        return {}
    master, others = group[0], group[1:]
    env = {
        "MASTER_PORT": str(master.port),
        "MASTER_ADDR": master.host,
        "WORLD_SIZE": str(len(group)),
        "RANK": str(rank),
    }
    if others:
        env["WORKER_PORT"] = str(others[0].port)
        env["WORKER_ADDRS"] = ",".join(slot.host for slot in others)
    return env
