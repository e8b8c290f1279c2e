"""A task's whole trainfleet environment: framework variables, common ones, then the user's."""

from __future__ import annotations

from collections.abc import Mapping

from trainfleet.frameworks import jax, mxnet, pytorch, tensorflow, xgboost
from trainfleet.frameworks.base import TaskContext
from trainfleet.frameworks.common import EnvBuilder, common_environment, generic_environment
from trainfleet.spec.models import Framework

FRAMEWORKS: Mapping[Framework, EnvBuilder] = {
    Framework.TENSORFLOW: tensorflow.environment,
    Framework.PYTORCH: pytorch.environment,
    Framework.JAX: jax.environment,
    Framework.XGBOOST: xgboost.environment,
    Framework.MXNET: mxnet.environment,
    Framework.GENERIC: generic_environment,
}
"""The cluster-spec builder of each framework."""


def task_environment(ctx: TaskContext) -> dict[str, str]:
    """Every variable trainfleet sets for one task (not ``os.environ``).

    In order, later ones winning: the framework's cluster-spec variables, the common
    ``TRAINFLEET_*``/GPU ones, the job's ``env``, the role's ``env``.
    """
    env = FRAMEWORKS[ctx.spec.framework](ctx)
    env.update(common_environment(ctx))
    env.update(ctx.spec.env)
    env.update(ctx.spec.roles[ctx.role].env)
    return env
