"""How big one job may be: roles and tasks, checked before anything is built for it.

A few bytes of YAML (``replicas: 10000`` in 100 roles) would otherwise make a million
task records. The server takes its limits from its flags; ``trainfleet run`` uses the
defaults.

>>> from trainfleet.spec.models import JobSpec
>>> job = JobSpec.model_validate({"name": "big", "roles": {"worker": {
...     "replicas": 2000, "command": "train"}}})
>>> check_limits(job, JobLimits())
Traceback (most recent call last):
...
trainfleet.spec.errors.SpecError: roles.worker.replicas: the job has 2000 tasks, more than ...
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # this module stays light: the CLI reads its defaults at start
    from trainfleet.spec.errors import Path, SourceMap
    from trainfleet.spec.models import JobSpec

DEFAULT_MAX_ROLES = 64
DEFAULT_MAX_TASKS = 1000


@dataclass(frozen=True)
class JobLimits:
    """The most roles, and tasks (replicas summed over roles), one job may have."""

    roles: int = DEFAULT_MAX_ROLES
    tasks: int = DEFAULT_MAX_TASKS


def check_roles(data: Mapping[Hashable, Any], limits: JobLimits, source: SourceMap) -> None:
    """SpecError if the raw document has too many roles: cheap, before validating them."""
    from trainfleet.spec.errors import SpecError

    roles = data.get("roles")
    if isinstance(roles, Mapping) and len(roles) > limits.roles:
        raise SpecError([source.problem(("roles",), _too_many_roles(len(roles), limits))])


def check_limits(
    spec: JobSpec,
    limits: JobLimits,
    source: SourceMap | None = None,
    origin: Mapping[Path, Path] | None = None,
) -> None:
    """SpecError naming the field if ``spec`` has more roles or tasks than ``limits``;
    ``origin`` maps a JobSpec path to what the user wrote (a flag, a manifest field)."""
    from trainfleet.spec.errors import SourceMap, SpecError

    source = source or SourceMap()
    where = origin or {}
    if len(spec.roles) > limits.roles:
        path = where.get(("roles",), ("roles",))
        raise SpecError([source.problem(path, _too_many_roles(len(spec.roles), limits))])
    tasks = sum(role.replicas for role in spec.roles.values())
    if tasks > limits.tasks:
        largest = max(spec.roles, key=lambda name: spec.roles[name].replicas)
        message = f"the job has {tasks} tasks, more than the limit of {limits.tasks} per job"
        if len(spec.roles) > 1:
            message += f" (this role has {spec.roles[largest].replicas})"
        path = ("roles", largest, "replicas")
        raise SpecError([source.problem(where.get(path, path), message)])


def _too_many_roles(count: int, limits: JobLimits) -> str:
    return f"the job has {count} roles, more than the limit of {limits.roles} per job"
