"""Elastic PyTorch jobs on the real Slurm cluster: their agents, on several nodes, meet in
the rendezvous store trainfleet runs as one more task of the job, and a lost member starts
again alone, in a Slurm job of its own, while the others train on."""

from __future__ import annotations

import re
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


LOSING = """\
import os, signal, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"rank {rank} of {world}", flush=True)
total = torch.ones(1)
for step in range(250):
    dist.all_reduce(total)
    time.sleep(0.1)
    first = os.environ["TRAINFLEET_RESTART"] == "0"
    if step == 20 and os.environ["TRAINFLEET_INDEX"] == "0" and first:
        os.kill(os.getppid(), signal.SIGKILL)  # the task's agent: the whole member is lost
        os.kill(os.getpid(), signal.SIGKILL)
print(f"done rank {rank} of {world}", flush=True)
"""


def test_a_lost_member_starts_again_alone_in_a_slurm_job_of_its_own(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    """Worker 0 (rank 0) dies mid-training: the two others re-form at world size 2 and go on
    in their Slurm job; worker 0 alone is submitted again, finds the store on the node where
    it runs, and the group grows back to 3 (events 3, 2, 3); nothing else restarts. (Its
    backoff outlasts the survivors' wait for their lost peer's keep-alive: ~9 s.)"""
    (tmp_path / "train.py").write_text(LOSING)
    (tmp_path / "job.yaml").write_text(
        textwrap.dedent(
            f"""
            name: elastic-loss
            framework: pytorch
            pytorch: {{elastic: {{min_replicas: 2, max_replicas: 3, max_restarts: 5}}}}
            restart: {{policy: on-failure, backoff: {{initial: 15}}}}
            roles:
              worker:
                replicas: 3
                command: [{sys.executable}, -m, torch.distributed.run, train.py]
            """
        )
    )
    done = subprocess.run(
        trainfleet("run", tmp_path / "job.yaml"),
        env=slurm_user.env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    job_id = re.search(r"job (\S+-[0-9a-f]{8}): ", said)[1]  # type: ignore[index]
    details = slurm_user.describe(job_id)
    tasks = details["tasks"]
    assert isinstance(tasks, list)
    restarts = {f"{t['role']}/{t['index']}": t["restarts"] for t in tasks}
    assert restarts == {"worker/0": 1, "worker/1": 0, "worker/2": 0, "rendezvous/0": 0}, said
    events = details["events"]
    assert isinstance(events, list)
    sizes = [
        int(re.match(r"world size (\d+)", e["message"])[1])  # type: ignore[index]
        for e in events
        if e["code"] == "regrouped"
    ]
    assert [n for i, n in enumerate(sizes) if i == 0 or sizes[i - 1] != n] == [3, 2, 3], events
    assert not any("restarting the job" in e["message"] for e in events), events
    run = slurm_user.data_dir / "jobs" / job_id / "run"
    submitted = {path.read_text().strip() for path in run.glob("worker-0-*.slurm")}
    kept = {path.read_text().strip() for path in run.glob("worker-1-*.slurm")}
    assert len(submitted) == 2 and kept < submitted, (submitted, kept)  # its own, then new
    assert re.search(r"worker/[12]\s*\| done rank \d of 3", said), said
