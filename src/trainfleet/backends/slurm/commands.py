"""Slurm's commands, run as subprocesses: submit, look, signal. Errors name the command."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from trainfleet.backends.api import BackendError
from trainfleet.environments.task_base import BASE_VARIABLES

TIMEOUT_SECONDS = 60

ENDED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


UNREACHABLE = "Unable to contact slurm controller (connect failure)"
"""What a Slurm client says when no connection to the controller could be made at all."""


class SlurmError(BackendError):
    """A Slurm command failed or could not be run."""


class SlurmUnreachable(SlurmError):
    """The controller could not be reached (stopped, restarting): the command sent it
    nothing, so asking again later is safe. A timeout is not this: the controller may have
    taken what was sent."""


@dataclass(frozen=True)
class SlurmJob:
    """One job (or component of a heterogeneous job) as ``squeue`` shows it."""

    id: str
    state: str
    reason: str
    nodes: str

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def _run(
    argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_SECONDS
) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"Slurm: {argv[0]}: {error}") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        kind = SlurmUnreachable if UNREACHABLE in done.stderr else SlurmError
        raise kind(f"Slurm: {argv[0]} failed: {message[-1] if message else done.returncode}")
    return done.stdout


def sbatch(script: Path) -> str:
    """Submit a batch script; returns the job id.

    sbatch passes its own environment on to the job's steps: it gets only what the Slurm
    client needs (the base variables, ``SLURM_*`` and ``SBATCH_*``), never the server's
    own (its tokens, its database URL). Each task's environment travels in its launch file.
    """
    env = {
        name: value
        for name, value in os.environ.items()
        if name in BASE_VARIABLES or name.startswith(("SLURM_", "SBATCH_"))
    }
    return _run(["sbatch", "--parsable", str(script)], env).strip().split(";")[0]


def jobs(ids: Iterable[str]) -> dict[str, list[SlurmJob]]:
    """The jobs Slurm still knows among ``ids``, each with its components."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    try:
        out = _run(["squeue", "-h", "-t", "all", "-j", ",".join(wanted), "-o", "%i|%T|%r|%N"])
    except SlurmError as error:
        if "Invalid job id" in str(error):  # all of them forgotten already
            return {}
        raise
    found: dict[str, list[SlurmJob]] = {}
    for line in out.splitlines():
        job_id, state, reason, nodes = line.split("|", 3)
        found.setdefault(job_id.split("+")[0], []).append(SlurmJob(job_id, state, reason, nodes))
    return found


def steps(ids: Iterable[str]) -> set[str]:
    """Which of the steps ``ids`` (``job.step``) still run."""
    wanted = sorted(set(ids))
    if not wanted:
        return set()
    out = _run(["squeue", "-h", f"--steps={','.join(wanted)}", "-o", "%i"])
    return {line.strip() for line in out.splitlines() if line.strip()}


def scancel(target: str, signal: str | None = None) -> None:
    """Cancel a job or a step, or only send it ``signal`` (``TERM``, ``KILL``)."""
    argv = ["scancel", *([f"--signal={signal}"] if signal else []), target]
    _run(argv)


def nodes(partition: str | None) -> list[tuple[str, int, int, int]]:
    """``(name, cpus, memory MiB, gpus)`` of every node of ``partition``, or of the default
    partition where None; none where there is no such partition."""
    only = ["-p", partition] if partition else []
    out = _run(["sinfo", "-h", "-N", "-o", "%N|%c|%m|%G|%P", *only])
    found = {}
    for line in out.splitlines():
        name, cpus, memory, gres, of = line.split("|", 4)
        if partition or of.endswith("*"):  # sinfo marks the default partition with a star
            found[name] = (name, int(cpus), int(memory.rstrip("+")), _gpus(gres))
    return list(found.values())


def down_nodes(nodelist: str) -> list[str]:
    """The nodes of ``nodelist`` (``tf-node[1-3]``) that are down, failed or not answering."""
    out = _run(["sinfo", "-h", "-N", "-n", nodelist, "-t", "down,fail,no_respond", "-o", "%N"])
    return sorted(set(out.split()))


def partitions() -> list[str]:
    """The names of the cluster's partitions (the default one marked ``*``)."""
    return _run(["sinfo", "-h", "-o", "%P"]).split()


class Shards(NamedTuple):
    """What a partition has of GPU shards (``gres/shard``)."""

    per_gpu: int
    """How many each GPU is cut into: the fewest of any node with shards; 0 where none."""
    total: int
    """How many its nodes have together."""


def gpu_shards(partition: str | None, timeout: float = TIMEOUT_SECONDS) -> Shards:
    """The GPU shards of ``partition`` (the default one where None)."""
    only = ["-p", partition] if partition else []
    out = _run(["sinfo", "-h", "-N", "-o", "%N|%G|%P", *only], timeout=timeout)
    per_gpu, total = [], {}
    for line in out.splitlines():
        node, gres, of = line.split("|", 2)
        if not partition and not of.endswith("*"):
            continue
        gpus, shards = _gpus(gres), _gpus(gres, "shard")
        if gpus and shards:
            per_gpu.append(shards // gpus)
            total[node] = shards  # a node in several partitions is listed once for each
    return Shards(min(per_gpu, default=0), sum(total.values()))


def _gpus(gres: str, name: str = "gpu") -> int:
    """The GPU count in a ``Gres`` field such as ``gpu:2`` or ``gpu:a100:4(S:0-1)``; with
    ``name="shard"``, the count of GPU shards (``gpu:2,shard:8``)."""
    count = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == name and parts[-1].isdigit():
            count += int(parts[-1])
    return count
