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

    backend: kubernetes
    kubernetes:
      kubeconfig: ~/.kube/config   # default: $KUBECONFIG, else ~/.kube/config
      namespace: training
      network: host            # pods on their nodes' network, ports chosen by trainfleet
      host_paths: true         # every node sees this machine's job folders at their paths
      images:                  # for jobs that name no image, by framework
        pytorch: localhost/trainfleet/torch:2.13.0
        default: localhost/trainfleet/python:3.11
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from trainfleet.spec.models import Bytes, Image, _Model

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


K8S_NAME = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class KubernetesConfig(_Model):
    """How jobs become Pods on a Kubernetes cluster."""

    kubeconfig: Annotated[str, Field(min_length=1)] | None = Field(
        default=None,
        description="The kubeconfig file (default: $KUBECONFIG's first, else ~/.kube/config).",
    )
    context: Annotated[str, Field(min_length=1)] | None = Field(
        default=None, description="The kubeconfig's context (default: its current one)."
    )
    namespace: Annotated[str, Field(pattern=K8S_NAME)] = Field(
        default="default", description="Where the jobs' Pods, Secrets and ConfigMaps go."
    )
    network: Literal["host"] = Field(
        default="host",
        description="'host': each Pod on its node's network (hostNetwork), at the ports "
        "trainfleet chooses, as on this machine; for clusters without a pod network.",
    )
    address_type: Literal["InternalIP", "Hostname", "ExternalIP"] = Field(
        default="InternalIP",
        description="Which of a node's addresses the job's tasks are given for its tasks.",
    )
    images: dict[Annotated[str, Field(pattern=r"^[a-z]+$")], Image] = Field(
        default_factory=dict,
        description="The image of jobs that name none, by framework (tensorflow, pytorch, "
        "jax, mpi, generic) or 'default': every Pod runs in an image.",
    )
    host_paths: bool = Field(
        default=False,
        description="Every node sees this machine's job folders and data directory at the "
        "same paths (one node, or a shared file system): they are mounted as hostPath. "
        "Without, each Pod fetches its job's folder from the server (server_url).",
    )
    server_url: Annotated[str, Field(pattern=r"^https?://[^/\s?#]+(/[^\s?#]*)?$")] | None = Field(
        default=None,
        description="Where Pods reach the trainfleet server (http://host:port): without "
        "host_paths, each Pod's init container fetches its job's folder from there.",
    )
    claims: dict[
        Annotated[str, Field(pattern=r"^/.*[^/]$")], Annotated[str, Field(pattern=K8S_NAME)]
    ] = Field(
        default_factory=dict,
        description="PersistentVolumeClaims by the absolute path they stand for: a role's "
        "mount of that path, or of a folder under it, mounts the claim (that folder of it) "
        "instead of the node's path (/mnt/shared: shared-data).",
    )
    fetch_image: Image | None = Field(
        default=None,
        description="The image whose python3 fetches a job's folder into its Pods "
        "(default: each task's own).",
    )
    node_lost_seconds: Annotated[int, Field(ge=1, le=86_400)] = Field(
        default=60,
        description="Seconds a Pod stays on a node that stopped answering before it is "
        "evicted, and its task counted as lost (Kubernetes' own default is 300).",
    )
    request_timeout: Annotated[float, Field(gt=0, le=600)] = Field(
        default=15, description="Seconds a request to the cluster's API may take."
    )


class BackendConfig(_Model):
    """The ``backend``, ``slurm`` and ``kubernetes`` keys of the config file."""

    backend: Literal["local", "slurm", "kubernetes"] = "local"
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    container_runtime: Literal["podman", "docker"] | None = Field(
        default=None,
        description="What runs the tasks of roles with an image (on Slurm: on each node); "
        "default: podman where it is installed, else docker.",
    )
