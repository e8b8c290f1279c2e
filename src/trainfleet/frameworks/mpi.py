"""Open MPI: Kubeflow MPIJob's launcher and workers, without ssh.

The ``launcher`` runs ``mpirun``; its environment names the workers' hosts and slots
(``OMPI_MCA_orte_default_dash_host``, as ``host:slots`` joined by commas, one entry per
host), so a plain ``mpirun -n N prog`` (or ``mpirun prog``: one rank per slot) places the
ranks there. The workers hold their places (their resources, their ports) for the job's
lifetime; ``mpirun`` starts the ranks itself, on this machine by fork, so nothing needs ssh.
Like Kubeflow's operator, trainfleet also sets ``OMPI_MCA_orte_keep_fqdn_hostnames``, and
``K_MPI_JOB_ROLE`` on every task; and it allows Open MPI to run as root
(``OMPI_ALLOW_RUN_AS_ROOT``), since tasks run as whoever runs trainfleet (root in most
containers), which Open MPI otherwise refuses.

>>> from trainfleet.frameworks.base import TaskContext
>>> from trainfleet.scheduling.placement import build_placement
>>> from trainfleet.spec.models import JobSpec
>>> job = JobSpec.model_validate({"name": "pi", "framework": "mpi", "mpi": {"slots_per_worker": 2},
...     "roles": {"launcher": {"command": "mpirun python pi.py"}, "worker": {"replicas": 2}}})
>>> ports = {("launcher", 0): 1, ("worker", 0): 2, ("worker", 1): 3}
>>> env = environment(TaskContext("pi-1", job, build_placement(job, "10.0.0.5", ports, {}),
...     "launcher", 0))
>>> env["OMPI_MCA_orte_default_dash_host"], env["K_MPI_JOB_ROLE"]
('10.0.0.5:4', 'launcher')
"""

from __future__ import annotations

from trainfleet.frameworks.base import TaskContext
from trainfleet.frameworks.common import WORKER_ROLE
from trainfleet.spec.models import MpiOptions

LAUNCHER_ROLE = "launcher"


def environment(ctx: TaskContext) -> dict[str, str]:
    """The Open MPI variables of one task: the workers' hosts for the launcher."""
    env = {"K_MPI_JOB_ROLE": ctx.role}
    if ctx.role != LAUNCHER_ROLE:
        return env
    slots: dict[str, int] = {}
    per_worker = (ctx.spec.mpi or MpiOptions()).slots_per_worker
    for slot in ctx.placement:
        if slot.role == WORKER_ROLE:
            slots[slot.host] = slots.get(slot.host, 0) + per_worker
    if slots:
        hosts = ",".join(f"{host}:{count}" for host, count in slots.items())
        env["OMPI_MCA_orte_default_dash_host"] = hosts
    env["OMPI_MCA_orte_keep_fqdn_hostnames"] = "true"
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env
