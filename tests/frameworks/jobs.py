"""Small jobs and their placements for the framework tests, built with the real models."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from trainfleet.frameworks import task_environment
from trainfleet.frameworks.base import TaskContext
from trainfleet.scheduling.placement import TaskKey, assign_gpus, build_placement, task_keys
from trainfleet.spec.models import JobSpec

HOST = "10.0.0.1"
JOB_ID = "job-7"


def job(framework: str, roles: Mapping[str, int | Mapping[str, Any]], **fields: Any) -> JobSpec:
    """A job of ``framework``; a role is a replica count or a full role mapping.

    Roles given as a count run ``python train.py``.
    """
    return JobSpec.model_validate(
        {
            "name": "test-job",
            "framework": framework,
            "roles": {
                name: {"replicas": role, "command": "python train.py"}
                if isinstance(role, int)
                else {"command": "python train.py", **role}
                for name, role in roles.items()
            },
            **fields,
        }
    )


def contexts(
    spec: JobSpec,
    host: str = HOST,
    base_port: int = 2000,
    gpus: tuple[int, ...] = (),
    ports: Mapping[TaskKey, int] | None = None,
) -> dict[TaskKey, TaskContext]:
    """Every task's context: ports ``base_port + n`` in task order, ``gpus`` as the inventory."""
    keys = task_keys(spec)
    if ports is None:
        ports = {key: base_port + n for n, key in enumerate(keys)}
    placement = build_placement(spec, host, ports, assign_gpus(spec, gpus))
    return {key: TaskContext(JOB_ID, spec, placement, *key) for key in keys}


def environments(spec: JobSpec, **kwargs: Any) -> dict[TaskKey, dict[str, str]]:
    """``task_environment`` of every task of ``spec``."""
    return {key: task_environment(ctx) for key, ctx in contexts(spec, **kwargs).items()}


def common(role: str, index: int, port: int, cluster: str, gpus: str = "") -> dict[str, str]:
    """The variables every task gets, for a task on ``HOST`` of job ``JOB_ID``."""
    return {
        "TRAINFLEET_JOB": JOB_ID,
        "TRAINFLEET_ROLE": role,
        "TRAINFLEET_INDEX": str(index),
        "TRAINFLEET_CLUSTER": cluster,
        "TRAINFLEET_ADDRESS": f"{HOST}:{port}",
        "TRAINFLEET_PORT": str(port),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": gpus,
        "TRAINFLEET_GPUS": gpus,
    }


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
