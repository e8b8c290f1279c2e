"""A task's whole trainfleet environment: framework variables, common ones, then the user's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainfleet.frameworks.base import TaskContext
from trainfleet.frameworks.common import EnvBuilder, common_environment, generic_environment
from trainfleet.frameworks.jax import environment as jax_environment
from trainfleet.frameworks.mpi import environment as mpi_environment
from trainfleet.frameworks.mxnet import environment as mxnet_environment
from trainfleet.frameworks.pytorch import environment as pytorch_environment
from trainfleet.frameworks.tensorflow import environment as tensorflow_environment
from trainfleet.frameworks.xgboost import environment as xgboost_environment
from trainfleet.spec.frameworks import TRAITS, Framework, FrameworkTraits


@dataclass(frozen=True)
class FrameworkRecord:
    """One framework: its traits (roles, restart scope) and its cluster-spec variables."""

    framework: Framework
    environment: EnvBuilder

    @property
    def traits(self) -> FrameworkTraits:
        return TRAITS[self.framework]


FRAMEWORKS: Mapping[Framework, FrameworkRecord] = {
    record.framework: record
    for record in (
        FrameworkRecord(Framework.TENSORFLOW, tensorflow_environment),
        FrameworkRecord(Framework.PYTORCH, pytorch_environment),
        FrameworkRecord(Framework.JAX, jax_environment),
        FrameworkRecord(Framework.XGBOOST, xgboost_environment),
        FrameworkRecord(Framework.MXNET, mxnet_environment),
        FrameworkRecord(Framework.MPI, mpi_environment),
        FrameworkRecord(Framework.GENERIC, generic_environment),
    )
}
"""Every framework's record (a test checks that none is missing)."""


def task_environment(ctx: TaskContext) -> dict[str, str]:
    """Every variable trainfleet sets for one task (not ``os.environ``).

    In order, later ones winning: the framework's cluster-spec variables, the common
    ``TRAINFLEET_*``/GPU ones, the job's ``env``, the role's ``env`` (their secrets are
    ``JobLaunch``'s).
    """
    env = FRAMEWORKS[ctx.spec.framework].environment(ctx)
    env.update(common_environment(ctx))
    env.update(
        (name, value) for name, value in ctx.spec.env_of(ctx.role).items() if isinstance(value, str)
    )
    return env
