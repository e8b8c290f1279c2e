"""JAX: the coordinator of ``jax.distributed.initialize`` and Kubeflow JAXJob's variables.

Process ids follow :func:`~trainfleet.frameworks.common.process_group` (master or chief first,
then the workers); process 0 runs the coordinator on its own address. Every process gets

- ``JAX_COORDINATOR_ADDRESS`` (``host:port``, read by JAX itself), ``JAX_NUM_PROCESSES``,
  ``JAX_PROCESS_ID``;
- Kubeflow JAXJob's ``COORDINATOR_ADDRESS`` (host only), ``COORDINATOR_PORT``,
  ``NUM_PROCESSES``, ``PROCESS_ID``.

JAX reads only the coordinator address from the environment, so a program passes the rest::

    jax.distributed.initialize(os.environ["JAX_COORDINATOR_ADDRESS"],
                               int(os.environ["JAX_NUM_PROCESSES"]),
                               int(os.environ["JAX_PROCESS_ID"]))
"""

from __future__ import annotations

from trainfleet.frameworks.base import TaskContext
from trainfleet.frameworks.common import group_rank, process_group


def environment(ctx: TaskContext) -> dict[str, str]:
    """The JAX variables of one task; empty for roles outside the process group."""
    group = process_group(ctx)
    process_id = group_rank(group, ctx)
    if process_id is None:
        return {}
    coordinator = group[0]
    return {
        "JAX_COORDINATOR_ADDRESS": coordinator.address,
        "JAX_NUM_PROCESSES": str(len(group)),
        "JAX_PROCESS_ID": str(process_id),
        "COORDINATOR_ADDRESS": coordinator.host,
        "COORDINATOR_PORT": str(coordinator.port),
        "NUM_PROCESSES": str(len(group)),
        "PROCESS_ID": str(process_id),
    }
