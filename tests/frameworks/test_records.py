"""One record per framework: a framework added without one fails here, not in a job."""

from __future__ import annotations

import pytest

from trainfleet.frameworks import task_environment
from trainfleet.frameworks.base import TaskContext
from trainfleet.frameworks.environment import FRAMEWORKS
from trainfleet.scheduling.placement import build_placement
from trainfleet.spec.frameworks import TRAITS, Framework
from trainfleet.spec.models import JobSpec


@pytest.mark.parametrize("framework", list(Framework))
def test_every_framework_has_a_complete_record(framework: Framework) -> None:
    assert FRAMEWORKS[framework].framework is framework
    assert FRAMEWORKS[framework].traits is TRAITS[framework]
    traits = TRAITS[framework]
    assert traits.master_roles and traits.restart_scope in ("task", "job")
    master = traits.master_roles[0]
    spec = JobSpec.model_validate(
        {
            "name": "every",
            "framework": framework,
            "roles": {
                master: {"command": "python train.py"},
                "worker": {"replicas": 2, "command": "python train.py"},
                **{role: {"command": "sleep 60"} for role in traits.untracked_roles},
            },
        }
    )
    assert spec.master_role() == master
    assert not set(spec.tracked_roles()) & traits.untracked_roles
    assert spec.restart_scope() == traits.restart_scope
    keys = [(role, index) for role, r in spec.roles.items() for index in range(r.replicas)]
    placement = build_placement(spec, "10.0.0.1", {k: 2000 + n for n, k in enumerate(keys)}, {})
    for role, index in keys:
        env = task_environment(TaskContext("every-1", spec, placement, role, index))
        assert env["TRAINFLEET_ROLE"] == role


def test_two_master_roles_collide_whatever_the_framework() -> None:
    with pytest.raises(ValueError, match="roles 'chief' and 'master' collide"):
        JobSpec.model_validate(
            {"name": "x", "roles": {"chief": {"command": "a"}, "master": {"command": "b"}}}
        )
