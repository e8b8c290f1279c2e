"""MXNet (ps-lite): Kubeflow MXJob's ``DMLC_*`` variables and ``MX_CONFIG``.

Every task gets ``DMLC_PS_ROOT_URI``/``DMLC_PS_ROOT_PORT`` (the ``scheduler`` task's host and
port; left out when the job has no scheduler), ``DMLC_NUM_SERVER`` and ``DMLC_NUM_WORKER``, and
``MX_CONFIG`` as Kubeflow writes it::

    {"cluster":{role:[{"url":host,"port":port},...]},"labels":{role:""},
     "task":{"type":role,"index":i}}

Tasks of the ps-lite roles get ``DMLC_ROLE`` (``scheduler``, ``server`` or ``worker``; role
``ps`` is a ``server`` everywhere, in ``MX_CONFIG`` too), and workers ``DMLC_WORKER_ID`` (their
index, which BytePS needs; Kubeflow sets it too).

``DMLC_USE_KUBERNETES=0`` (Kubeflow sets ``1``): in ps-lite its only effect is that the
scheduler binds ``0.0.0.0`` instead of its own address, needed when that address is a
Kubernetes Service name that no local interface carries. trainfleet's addresses are the task's
own host, so the scheduler binds just that (secure by default); a backend whose addresses are
Service names can set ``DMLC_USE_KUBERNETES=1`` in the role's env.
"""

from __future__ import annotations

from trainfleet.frameworks.base import TaskContext
from trainfleet.frameworks.common import compact_json
from trainfleet.scheduling.placement import Placement, TaskSlot

PS_LITE_ROLES = frozenset({"scheduler", "server", "worker"})


def dmlc_role(role: str) -> str:
    """The ps-lite name of a role: ``ps`` is a ``server``, the rest keep their name.

    >>> dmlc_role("ps"), dmlc_role("worker")
    ('server', 'worker')
    """
    return "server" if role == "ps" else role


def dmlc_cluster(placement: Placement) -> dict[str, list[TaskSlot]]:
    """The tasks under their ps-lite role names, in placement order."""
    cluster: dict[str, list[TaskSlot]] = {}
    for slot in placement:
        cluster.setdefault(dmlc_role(slot.role), []).append(slot)
    return cluster


def mx_config(ctx: TaskContext) -> str:
    """The ``MX_CONFIG`` value of one task (roles sorted, as Go writes maps)."""
    cluster = dmlc_cluster(ctx.placement)
    mine = dmlc_role(ctx.role)
    return compact_json(
        {
            "cluster": {
                role: [{"url": slot.host, "port": slot.port} for slot in cluster[role]]
                for role in sorted(cluster)
            },
            "labels": {role: "" for role in sorted(cluster)},
            "task": {"type": mine, "index": cluster[mine].index(ctx.slot)},
        }
    )


def environment(ctx: TaskContext) -> dict[str, str]:
    """The ps-lite variables of one task."""
    cluster = dmlc_cluster(ctx.placement)
    env = {"MX_CONFIG": mx_config(ctx)}
    if "scheduler" in cluster:
        scheduler = cluster["scheduler"][0]
        env["DMLC_PS_ROOT_PORT"] = str(scheduler.port)
        env["DMLC_PS_ROOT_URI"] = scheduler.host
    env["DMLC_NUM_SERVER"] = str(len(cluster.get("server", [])))
    env["DMLC_NUM_WORKER"] = str(len(cluster.get("worker", [])))
    role = dmlc_role(ctx.role)
    if role in PS_LITE_ROLES:
        env["DMLC_ROLE"] = role
    env["DMLC_USE_KUBERNETES"] = "0"
    if role == "worker":
        env["DMLC_WORKER_ID"] = str(ctx.index)
    return env
