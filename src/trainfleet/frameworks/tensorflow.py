"""TensorFlow: ``TF_CONFIG`` exactly as Kubeflow's TFJob operator writes it.

``{"cluster":{role:["host:port",...]},"task":{"type":role,"index":i},"environment":"cloud"}``,
compact, keys in that order and roles sorted (Go's ``json.Marshal`` sorts map keys).

The cluster leaves out ``evaluator`` (as Kubeflow does), ``client`` and ``tensorboard``: they
run no TF server, and a master doing device discovery would wait forever for them. Their tasks
still get ``TF_CONFIG``, with their own task type. Like Kubeflow, a job of one single task gets
no ``TF_CONFIG`` at all: a lone process is local training, not a cluster.
"""

from __future__ import annotations

from trainfleet.frameworks.base import TaskContext
from trainfleet.frameworks.common import compact_json
from trainfleet.scheduling.placement import Placement

OUTSIDE_CLUSTER = frozenset({"evaluator", "client", "tensorboard"})
"""Roles whose tasks are not part of the TF cluster spec."""


def cluster_spec(placement: Placement) -> dict[str, list[str]]:
    """``{role: ["host:port", ...]}`` of the roles that run a TF server, roles sorted.

    >>> from trainfleet.scheduling.placement import TaskSlot
    >>> cluster_spec(Placement((TaskSlot("worker", 0, "h", 2), TaskSlot("ps", 0, "h", 1),
    ...                         TaskSlot("evaluator", 0, "h", 3))))
    {'ps': ['h:1'], 'worker': ['h:2']}
    """
    addresses = placement.addresses()
    return {role: addresses[role] for role in sorted(addresses) if role not in OUTSIDE_CLUSTER}


def tf_config(ctx: TaskContext) -> str:
    """The ``TF_CONFIG`` value of one task."""
    return compact_json(
        {
            "cluster": cluster_spec(ctx.placement),
            "task": {"type": ctx.role, "index": ctx.index},
            "environment": "cloud",
        }
    )


def environment(ctx: TaskContext) -> dict[str, str]:
    """``TF_CONFIG``, unless the job is a single task."""
    if len(ctx.placement.tasks) == 1:
        return {}
    return {"TF_CONFIG": tf_config(ctx)}
