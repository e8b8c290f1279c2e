"""What every task gets, whatever its framework, and helpers the framework modules share.

Every task learns who it is (``TRAINFLEET_JOB``, ``TRAINFLEET_ROLE``, ``TRAINFLEET_INDEX``),
where it and the rest of the job are (``TRAINFLEET_ADDRESS``, ``TRAINFLEET_PORT``,
``TRAINFLEET_CLUSTER``), the job's paths, and which GPUs it may use.

GPUs are named by their host index (``nvidia-smi``/NVML order): ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
makes CUDA number them the same way (its default, fastest first, may not), and a task that
asked for no GPU gets ``CUDA_VISIBLE_DEVICES=""`` so it sees none.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from trainfleet.frameworks.base import TaskContext
from trainfleet.scheduling.placement import TaskSlot
from trainfleet.spec.tensorboard import LOGDIR_VARIABLE

EnvBuilder = Callable[[TaskContext], dict[str, str]]
"""A framework's part of a task's environment."""

WORKER_ROLE = "worker"


def compact_json(value: object) -> str:
    """JSON without spaces, as Go's ``json.Marshal`` writes it (Kubeflow's operators are Go).

    >>> compact_json({"worker": ["h:1", "h:2"]})
    '{"worker":["h:1","h:2"]}'
    """
    return json.dumps(value, separators=(",", ":"))


def gpu_list(slot: TaskSlot) -> str:
    """The slot's host GPU indices, comma-joined; ``""`` when it has none.

    >>> gpu_list(TaskSlot("worker", 0, "h", 1, gpus=(2, 3))), gpu_list(TaskSlot("ps", 0, "h", 2))
    ('2,3', '')
    """
    return ",".join(str(gpu) for gpu in slot.gpus)


def common_environment(ctx: TaskContext) -> dict[str, str]:
    """The ``TRAINFLEET_*`` and GPU variables of one task, the same for every framework."""
    slot = ctx.slot
    env = {
        "TRAINFLEET_JOB": ctx.job_id,
        "TRAINFLEET_ROLE": ctx.role,
        "TRAINFLEET_INDEX": str(ctx.index),
        "TRAINFLEET_CLUSTER": compact_json(ctx.placement.addresses()),
        "TRAINFLEET_ADDRESS": slot.address,
        "TRAINFLEET_PORT": str(slot.port),
    }
    if ctx.spec.input_path is not None:
        env["TRAINFLEET_INPUT_PATH"] = ctx.spec.input_path
    if ctx.spec.checkpoint_path is not None:
        env["TRAINFLEET_CHECKPOINT_PATH"] = ctx.spec.checkpoint_path
    logdir = ctx.spec.tensorboard_logdir()
    if logdir is not None:  # relative: the launch makes it the job directory's
        env[LOGDIR_VARIABLE] = logdir
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["CUDA_VISIBLE_DEVICES"] = gpu_list(slot)
    env["TRAINFLEET_GPUS"] = gpu_list(slot)
    fraction = ctx.spec.roles[ctx.role].resources.gpu
    if 0 < fraction < 1:  # a share of one GPU: the program must not take all its memory
        env["TRAINFLEET_GPU_FRACTION"] = f"{fraction:g}"
        # Frameworks' own caps, where they have one: JAX (XLA) and CuPy take no more.
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{fraction:g}"
        env["CUPY_GPU_MEMORY_LIMIT"] = f"{fraction * 100:g}%"
        if ctx.spec.traits.limits_gpu_memory:
            env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    return env


def generic_environment(ctx: TaskContext) -> dict[str, str]:
    """Framework ``generic``: no cluster-spec variables, only the common ones."""
    return {}


def process_group(ctx: TaskContext) -> list[TaskSlot]:
    """The tasks that form one process group (torch, JAX, XGBoost), in rank order.

    Kubeflow's rule: the master (role ``master`` or ``chief``) is rank 0 and worker ``i`` is
    rank ``i + 1``; without a master, worker ``i`` is rank ``i``. Other roles (parameter
    servers, TensorBoard, clients) take no part. Empty when the job has neither role.
    """
    master = ctx.spec.master_role()
    masters = ctx.placement.role(master) if master is not None else []
    return masters + ctx.placement.role(WORKER_ROLE)


def group_rank(group: list[TaskSlot], ctx: TaskContext) -> int | None:
    """This task's rank in ``group``, or None when it takes no part."""
    for rank, slot in enumerate(group):
        if slot.key == (ctx.role, ctx.index):
            return rank
    return None
