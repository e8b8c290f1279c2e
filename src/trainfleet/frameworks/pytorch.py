"""PyTorch: Kubeflow PyTorchJob's variables, for ``init_process_group`` and for torchrun.

The master (role ``master`` or ``chief``, else worker 0) is rank 0; see
:func:`~trainfleet.frameworks.common.process_group`. Every task of that group gets

- ``MASTER_ADDR``/``MASTER_PORT`` (the master's address), ``WORLD_SIZE``, ``RANK``,
  ``LOCAL_RANK=0``: ``init_process_group(init_method="env://")`` works unchanged;
- torchrun's ``PET_*`` (``PET_NNODES``, ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE``,
  ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``): ``torchrun train.py`` works with no flags.

``WORLD_SIZE`` is nodes x ``nproc_per_node`` when that is a number, else the nodes (Kubeflow
counts ``auto``/``gpu``/``cpu`` as 1; torchrun sets the real value in the processes it starts).

Elastic jobs (``pytorch.elastic``) get ``PET_NNODES="min:max"``, ``PET_RDZV_BACKEND``,
``PET_RDZV_ENDPOINT`` (the master's address), ``PET_RDZV_ID`` (the job id) and
``PET_MAX_RESTARTS``, and no ``PET_NODE_RANK`` (the rendezvous assigns ranks). With the ``c10d``
backend the endpoint is the store trainfleet hosts for the job (role ``rendezvous``, see
``spec.rendezvous``): no agent hosts it (``is_host=false``), and the workers of each round make
their own store (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``), since keys that one round left in a
store kept for the job's whole life would mislead the next round's workers.
"""

from __future__ import annotations

from trainfleet.frameworks.base import TaskContext
from trainfleet.frameworks.common import group_rank, process_group
from trainfleet.spec.models import PyTorchOptions
from trainfleet.spec.rendezvous import AGENT_SETTINGS
from trainfleet.spec.rendezvous import ROLE as RENDEZVOUS_ROLE


def environment(ctx: TaskContext) -> dict[str, str]:
    """The torch and torchrun variables of one task; empty for roles outside the group."""
    group = process_group(ctx)
    rank = group_rank(group, ctx)
    if rank is None:
        return {}
    master = group[0]
    options = ctx.spec.pytorch or PyTorchOptions()
    nproc = options.nproc_per_node
    nodes = len(group)
    env = {
        "MASTER_ADDR": master.host,
        "MASTER_PORT": str(master.port),
        "WORLD_SIZE": str(nodes * nproc if isinstance(nproc, int) else nodes),
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "PET_MASTER_ADDR": master.host,
        "PET_MASTER_PORT": str(master.port),
        "PET_NPROC_PER_NODE": str(nproc),
    }
    elastic = options.elastic
    if elastic is None:
        env["PET_NNODES"] = str(nodes)
        env["PET_NODE_RANK"] = str(rank)
        return env
    env["PET_NNODES"] = f"{elastic.min_replicas}:{elastic.max_replicas}"
    env["PET_RDZV_BACKEND"] = elastic.rdzv_backend
    env["PET_RDZV_ENDPOINT"] = master.address
    env["PET_RDZV_ID"] = ctx.job_id
    env["PET_MAX_RESTARTS"] = str(elastic.max_restarts)
    if ctx.spec.hosts_rendezvous():  # the store of role rendezvous, not the master's agent
        env["PET_RDZV_ENDPOINT"] = ctx.placement.slot(RENDEZVOUS_ROLE, 0).address
        env["PET_RDZV_CONF"] = AGENT_SETTINGS
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return env
