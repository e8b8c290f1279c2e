"""An elastic PyTorch job on the real Slurm cluster: its agents, on several nodes, meet in
the rendezvous store trainfleet runs as one more task of the job."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import trainfleet
from slurm_cluster import SlurmUser

pytest.importorskip("torch")

TRAIN = """\
import torch.distributed as dist
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} of {dist.get_world_size()}", flush=True)
"""


def test_elastic_agents_on_several_nodes_meet_in_the_hosted_store(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    torchrun = Path(sys.executable).with_name("torchrun")
    (tmp_path / "job.yaml").write_text(
        textwrap.dedent(
            f"""
            name: elastic
            framework: pytorch
            pytorch: {{elastic: {{min_replicas: 3, max_replicas: 3}}}}
            roles:
              worker: {{replicas: 3, command: [{torchrun}, train.py]}}
            """
        )
    )
    done = subprocess.run(
        trainfleet("run", tmp_path / "job.yaml"),
        env=slurm_user.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout
    assert "rendezvous/0 running: running on tf-node" in said, said
    assert "job running: world size 3 of 3 (round 0: " in said, said
    ranks = sorted(line.split("| ")[1] for line in said.splitlines() if "| rank " in line)
    assert ranks == ["rank 0 of 3", "rank 1 of 3", "rank 2 of 3"], said
