"""A job's Slurm batch script: one component per shape of task, one job step each. Pure.

Tasks that need the same CPUs, memory and GPUs share one component of a heterogeneous
job (a plain job when there is only one shape), and one ``srun`` starts them all, as a
hand-written script would: the n-th task of the step (``SLURM_PROCID``) is the n-th task of
its component. (A step per task made slurmd start several at once on a node, which
Debian's slurmd 22.05 does not always survive.)

A fraction of a GPU is a number of the GPU's shards (Slurm's ``gres/shard``): the fraction
of the shards each GPU of the cluster is cut into, rounded up. Slurm counts ``--gres`` per
node, not per task, so each task with a fraction is a component of its own: tasks sharing a
step on one node would share its shards.

>>> from trainfleet.spec.models import JobSpec
>>> spec = JobSpec.model_validate({"name": "mnist", "roles": {
...     "ps": {"command": "trainfleet tf-server", "resources": {"cpu": 1}},
...     "worker": {"replicas": 2, "command": "python train.py",
...                "resources": {"cpu": 2, "memory": "2Gi", "gpu": 1}},
...     "eval": {"replicas": 2, "command": "python eval.py", "resources": {"gpu": 0.3}}}})
>>> keys = [("ps", 0), ("worker", 0), ("worker", 1), ("eval", 0), ("eval", 1)]
>>> for shape, tasks in components(spec, keys, SlurmConfig(), shards_per_gpu=4):
...     print(" ".join(shape.options()), tasks)
--cpus-per-task=1 --mem-per-cpu=1024M [('ps', 0)]
--cpus-per-task=2 --mem-per-cpu=1024M --gpus-per-task=1 [('worker', 0), ('worker', 1)]
--cpus-per-task=1 --mem-per-cpu=1024M --gres=shard:2 [('eval', 0)]
--cpus-per-task=1 --mem-per-cpu=1024M --gres=shard:2 [('eval', 1)]
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainfleet.domain.errors import BadInput
from trainfleet.scheduling.placement import TaskKey
from trainfleet.spec.backends import SlurmConfig
from trainfleet.spec.models import JobSpec

MIB = 1024**2


@dataclass(frozen=True)
class Shape:
    """What one task asks Slurm for."""

    cpus: int
    memory_mb: int
    gpus: int
    fraction: float = 0.0
    """A fraction of one GPU (below 1), as GPU shards; 0 for none."""
    shards: int | None = None
    """The shards of one GPU that make ``fraction`` (None: not known, Slurm was not asked)."""

    def options(self) -> list[str]:
        """Per-task options, the same for the allocation and for the task's step."""
        options = [f"--cpus-per-task={self.cpus}", f"--mem-per-cpu={self._per_cpu_mb()}M"]
        if self.gpus:
            options.append(f"--gpus-per-task={self.gpus}")
        if self.fraction:  # per node: a component with a fraction has a single task
            count = self.shards or f"<{self.fraction:g} x the shards per GPU, from Slurm>"
            options.append(f"--gres=shard:{count}")
        return options

    def _per_cpu_mb(self) -> int:
        return math.ceil(self.memory_mb / self.cpus)


class NotForSlurm(BadInput, ValueError):
    """The job asks for something Slurm cannot give (a fraction of a GPU, without shards)."""


def shards_of(fraction: float, shards_per_gpu: int) -> int:
    """The shards of a GPU cut into ``shards_per_gpu`` that hold ``fraction`` of it, rounded
    up (a product such as 0.3 x 10 = 3.0000000000000004 is 3 shards, not 4).

    >>> shards_of(0.5, 4), shards_of(0.3, 4), shards_of(0.3, 10), shards_of(0.001, 4)
    (2, 2, 3, 1)
    """
    return max(1, math.ceil(round(fraction * shards_per_gpu, 9)))


def task_shape(
    spec: JobSpec, role: str, config: SlurmConfig, shards_per_gpu: int | None = None
) -> Shape:
    """Whole CPUs (at least one), memory in MiB, whole GPUs or a fraction of one as GPU
    shards; ``shards_per_gpu``: how many shards each GPU of the cluster has (0: none, the
    fraction is refused; None: not known, the shape says so)."""
    wanted = spec.roles[role].resources
    fraction = wanted.gpu if 0 < wanted.gpu < 1 else 0.0
    if fraction and shards_per_gpu == 0:
        where = f"partition {config.partition}" if config.partition else "the default partition"
        raise NotForSlurm(
            f"roles.{role}.resources.gpu: {wanted.gpu:g} is a fraction of a GPU, which Slurm "
            f"gives as GPU shards, and {where} has no shards configured (gres/shard: "
            "GresTypes=gpu,shard in slurm.conf, Name=shard in gres.conf); ask for whole GPUs"
        )
    memory = wanted.memory or config.memory_per_task
    return Shape(
        cpus=max(1, math.ceil((wanted.cpu or 1000) / 1000)),
        memory_mb=max(1, math.ceil(memory / MIB)),
        gpus=int(wanted.gpu),
        fraction=fraction,
        shards=shards_of(fraction, shards_per_gpu) if fraction and shards_per_gpu else None,
    )


def components(
    spec: JobSpec,
    keys: Iterable[TaskKey],
    config: SlurmConfig,
    shards_per_gpu: int | None = None,
) -> list[tuple[Shape, list[TaskKey]]]:
    """The tasks grouped by shape, in the order the shapes first appear; a task with a
    fraction of a GPU alone (Slurm counts shards per node: see the module's text)."""
    groups: dict[tuple[Shape, TaskKey | None], tuple[Shape, list[TaskKey]]] = {}
    for key in keys:
        shape = task_shape(spec, key[0], config, shards_per_gpu)
        group = groups.setdefault((shape, key if shape.fraction else None), (shape, []))
        group[1].append(key)
    return list(groups.values())


def batch_script(
    name: str,
    groups: Sequence[tuple[Shape, Sequence[TaskKey]]],
    config: SlurmConfig,
    output: Path,
    step_argv: Sequence[str],
    team: str = "default",
    warn_before: float = 0.0,
    warned: Path | None = None,
) -> str:
    """The script for ``sbatch``: the allocation, then one background step per component.

    ``step_argv`` is the command each task runs, followed there by its component's number;
    the job is charged to its ``team``'s account (``SlurmConfig.account_of``). Under a time
    limit the batch shell gets SIGTERM ``warn_before`` seconds before it (Slurm sends it up
    to a minute early), and so does it at a preemption where the cluster says
    ``PreemptParameters=send_user_signal``: it creates the file ``warned``, and each task's
    bootstrap, seeing it, writes why in the task's stop file and only then sends the task
    SIGTERM, time to save a checkpoint; the job is started again as an infrastructure
    failure and resumes from it.
    """
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --output={output}"]
    lines += ["#SBATCH --open-mode=append", "#SBATCH --no-requeue"]
    # Each component's own: Slurm carries few options over to the next (not the partition).
    every = [
        f"--{option}={value}"
        for option, value in (
            ("partition", config.partition),
            ("account", config.account_of(team)),
            ("time", config.time_limit),
        )
        if value
    ]
    if warned is not None and warn_before > 0:  # to the batch shell only (B:)
        lines.append(f"#SBATCH --signal=B:TERM@{math.ceil(warn_before)}")
    lines += [f"#SBATCH {option}" for option in config.sbatch_args]
    for number, (shape, tasks) in enumerate(groups):
        if number:
            lines.append("#SBATCH hetjob")
        options = [f"--ntasks={len(tasks)}", *shape.options()]
        if config.spread:
            options.append("--spread-job")
        options += every
        lines.append(f"#SBATCH {' '.join(options)}")
    if warned is not None:  # see above; the tasks are told through their bootstraps
        lines.append(f"trap {shlex.quote(f'touch {shlex.quote(str(warned))}')} TERM")
    lines.append("# One step per component; each task writes its own log and records.")
    heterogeneous = len(groups) > 1
    for number, (shape, tasks) in enumerate(groups):
        srun = ["srun", *([f"--het-group={number}"] if heterogeneous else [])]
        srun += [f"--ntasks={len(tasks)}", *shape.options(), *step_argv, str(number)]
        lines.append(f"{shlex.join(srun)} &")
    lines.append("until wait; do :; done  # a trapped signal ends a wait early")
    return "\n".join(lines) + "\n"
