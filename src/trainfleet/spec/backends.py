"""Where jobs run, as a platform team writes it in the config file.

.. code-block:: yaml

    backend: slurm
    slurm:
      partition: gpu
      account: ml-team         # team default's jobs; other teams' carry their name
      team_accounts: {vision: cv-lab}   # or the account a team's jobs carry
      time_limit: "2-00:00:00"
      memory_per_task: 4Gi     # for roles that do not say
      spread: true             # over as many nodes as the cluster gives
      sbatch_args: ["--qos=normal"]
      containers: runtime      # or pyxis: srun --container-image, where the cluster has it
    container_runtime: podman  # or docker; the one found on PATH (podman first) by default
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from trainfleet.spec.models import Bytes, _Model

SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
SLURM_NAME = r"^[A-Za-z0-9_.-]{1,64}$"


class SlurmConfig(_Model):
    """How jobs become Slurm submissions."""

    partition: Annotated[str, Field(pattern=SLURM_NAME)] | None = None
    account: Annotated[str, Field(pattern=SLURM_NAME)] | None = Field(
        default=None, description="The --account of team default's jobs (embedded runs')."
    )
    team_accounts: dict[str, Annotated[str, Field(pattern=SLURM_NAME)]] = Field(
        default_factory=dict,
        description="The --account of each team's jobs; a team not named here: its name.",
    )
    time_limit: Annotated[str, Field(pattern=SLURM_TIME.pattern)] | None = Field(
        default=None, description="Slurm's --time: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS."
    )
    memory_per_task: Bytes = Field(
        default=1024**3, description="Memory of a task whose role does not say (default 1Gi)."
    )
    spread: bool = Field(
        default=False, description="Spread each job over as many nodes as possible."
    )
    sbatch_args: list[Annotated[str, Field(pattern=r"^--[a-z][a-z-]*(=.*)?$")]] = Field(
        default_factory=list, description="More sbatch options, e.g. --qos=high."
    )
    rendezvous_timeout: Annotated[float, Field(gt=0, le=86_400)] = Field(
        default=600,
        description="Seconds a started task waits for the job's other tasks to start.",
    )
    poll_interval: Annotated[float, Field(ge=0.05, le=60)] = Field(
        default=0.5, description="Seconds between looks at the tasks' records and the queue."
    )
    containers: Literal["runtime", "pyxis"] = Field(
        default="runtime",
        description="How tasks with an image run on the nodes: 'runtime', through each "
        "node's container_runtime (podman or docker); 'pyxis', through srun's "
        "--container-image (the cluster has NVIDIA's pyxis and enroot).",
    )

    def account_of(self, team: str) -> str | None:
        """The Slurm account a job of ``team`` is charged to."""
        if team in self.team_accounts:
            return self.team_accounts[team]
        return self.account if team == "default" else team


class BackendConfig(_Model):
    """The ``backend`` and ``slurm`` keys of the config file."""

    backend: Literal["local", "slurm"] = "local"
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    container_runtime: Literal["podman", "docker"] | None = Field(
        default=None,
        description="What runs the tasks of roles with an image (on Slurm: on each node); "
        "default: podman where it is installed, else docker.",
    )
