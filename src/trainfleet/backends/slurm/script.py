"""A job's Slurm batch script: one component per shape of task, one job step each. Pure.

Tasks that need the same CPUs, memory and GPUs share one component of a heterogeneous
job (a plain job when there is only one shape), and one ``srun`` starts them all, as a
hand-written script would: the n-th task of the step (``SLURM_PROCID``) is the n-th task of
its component. (A step per task made slurmd start several at once on a node, which
Debian's slurmd 22.05 does not always survive.)

>>> from trainfleet.spec.models import JobSpec
>>> spec = JobSpec.model_validate({"name": "mnist", "roles": {
...     "ps": {"command": "trainfleet tf-server", "resources": {"cpu": 1}},
...     "worker": {"replicas": 2, "command": "python train.py",
...                "resources": {"cpu": 2, "memory": "2Gi", "gpu": 1}}}})
>>> components(spec, [("ps", 0), ("worker", 0), ("worker", 1)], SlurmConfig())
... # doctest: +NORMALIZE_WHITESPACE
[(Shape(cpus=1, memory_mb=1024, gpus=0), [('ps', 0)]),
 (Shape(cpus=2, memory_mb=2048, gpus=1), [('worker', 0), ('worker', 1)])]
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

    def options(self) -> list[str]:
        """Per-task options, the same for the allocation and for the task's step."""
        options = [f"--cpus-per-task={self.cpus}", f"--mem-per-cpu={self._per_cpu_mb()}M"]
        if self.gpus:
            options.append(f"--gpus-per-task={self.gpus}")
        return options

    def _per_cpu_mb(self) -> int:
        return math.ceil(self.memory_mb / self.cpus)


class NotForSlurm(BadInput, ValueError):
    """The job asks for something Slurm cannot give (a fraction of a GPU)."""


def task_shape(spec: JobSpec, role: str, config: SlurmConfig) -> Shape:
    """Whole CPUs (at least one), memory in MiB, whole GPUs."""
    wanted = spec.roles[role].resources
    if wanted.gpu and wanted.gpu != int(wanted.gpu):
        raise NotForSlurm(
            f"roles.{role}.resources.gpu: {wanted.gpu:g} is a fraction of a GPU; "
            "the Slurm backend gives whole GPUs only"
        )
    memory = wanted.memory or config.memory_per_task
    return Shape(
        cpus=max(1, math.ceil((wanted.cpu or 1000) / 1000)),
        memory_mb=max(1, math.ceil(memory / MIB)),
        gpus=int(wanted.gpu),
    )


def components(
    spec: JobSpec, keys: Iterable[TaskKey], config: SlurmConfig
) -> list[tuple[Shape, list[TaskKey]]]:
    """The tasks grouped by shape, in the order the shapes first appear."""
    groups: dict[Shape, list[TaskKey]] = {}
    for key in keys:
        groups.setdefault(task_shape(spec, key[0], config), []).append(key)
    return list(groups.items())


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
    for option, value in (
        ("partition", config.partition),
        ("account", config.account_of(team)),
        ("time", config.time_limit),
    ):
        if value:
            lines.append(f"#SBATCH --{option}={value}")
    if warned is not None and warn_before > 0:  # to the batch shell only (B:)
        lines.append(f"#SBATCH --signal=B:TERM@{math.ceil(warn_before)}")
    lines += [f"#SBATCH {option}" for option in config.sbatch_args]
    for number, (shape, tasks) in enumerate(groups):
        if number:
            lines.append("#SBATCH hetjob")
        options = [f"--ntasks={len(tasks)}", *shape.options()]
        if config.spread:
            options.append("--spread-job")
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
