"""What each framework means for a job, as data: one record per framework.

Validation and the controller read these facts here instead of branching on the framework;
the cluster-spec variables of each live beside it in ``trainfleet.frameworks`` (their
``FrameworkRecord`` adds its environment builder to these traits).

>>> TRAITS[Framework.PYTORCH].restart_scope, TRAITS[Framework.TENSORFLOW].restart_scope
('job', 'task')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

Scope = Literal["task", "job"]


class Framework(StrEnum):
    """Which cluster-spec environment the tasks receive."""

    TENSORFLOW = "tensorflow"
    PYTORCH = "pytorch"
    JAX = "jax"
    XGBOOST = "xgboost"
    MXNET = "mxnet"
    MPI = "mpi"
    GENERIC = "generic"


@dataclass(frozen=True)
class FrameworkTraits:
    """How a framework's job behaves, whatever its variables."""

    master_roles: tuple[str, ...] = ("chief", "master")
    """Roles that coordinate the job: at most one of them, with one replica."""
    untracked_roles: frozenset[str] = frozenset({"ps", "tensorboard"})
    """Roles that serve others and never finish on their own: stopped when training ends."""
    restart_scope: Scope = "task"
    """Whether one failed task restarts alone or with the whole job, unless the job says."""
    elastic_restarts_alone: bool = False
    """An elastic job of this framework restarts one task alone (torchrun rejoins it)."""
    limits_gpu_memory: bool = False
    """On a share of a GPU, its tasks are told to grow GPU memory as needed, not take all."""


TRAITS: Mapping[Framework, FrameworkTraits] = {
    Framework.TENSORFLOW: FrameworkTraits(limits_gpu_memory=True),
    # A static torch group cannot take back one lost rank: every rank starts again.
    Framework.PYTORCH: FrameworkTraits(restart_scope="job", elastic_restarts_alone=True),
    Framework.JAX: FrameworkTraits(restart_scope="job"),  # jax.distributed has no rejoin
    Framework.XGBOOST: FrameworkTraits(),
    Framework.MXNET: FrameworkTraits(),
    # mpirun in the launcher starts every rank; the workers hold their places, and a lost
    # rank ends MPI_COMM_WORLD, so the whole job starts again.
    Framework.MPI: FrameworkTraits(
        master_roles=("launcher",), untracked_roles=frozenset({"worker"}), restart_scope="job"
    ),
    Framework.GENERIC: FrameworkTraits(),
}
"""Every framework's traits (a test checks that none is missing)."""
