"""Fractions of a GPU on the real Slurm cluster, as GPU shards (``gres/shard``).

The test cluster cuts each of its fake GPUs into 4 shards (scripts/slurm.sh), so a task of
``gpu: 0.5`` asks for ``--gres=shard:2``. Partition ``small`` is tf-node1 alone (2 GPUs, 8
shards), so the jobs of these tests meet on one node. Nothing opens the fake GPUs: what is
proven is what Slurm allocates and tells the tasks, not that a GPU is shared well.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import trainfleet, wait_for
from slurm_cluster import SlurmUser

pytestmark = pytest.mark.slow

TIMEOUT = 180

# Each task says what Slurm gave it (its node, its GPU by index as `scontrol -d` shows the
# job's shards, the variables of its step), then waits for the other job's task to have
# started too: it can only end if both run at once.
MEET = """\
import json, os, pathlib, re, subprocess, sys, time

marks, me, other = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
shown = subprocess.run(
    ["scontrol", "-d", "show", "job", os.environ["SLURM_JOB_ID"]],
    capture_output=True, text=True, check=True,
).stdout
said = {
    "node": os.environ["SLURMD_NODENAME"],
    "gres": re.search(r" GRES=(\\S+)", shown)[1],
    "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "gpus": os.environ.get("TRAINFLEET_GPUS"),
    "shards": os.environ.get("SLURM_SHARDS_ON_NODE"),
    "fraction": os.environ.get("TRAINFLEET_GPU_FRACTION"),
    "start": time.time(),
}
(marks / f"{me}.start").write_text(json.dumps(said))
deadline = time.monotonic() + 120
while not (marks / f"{other}.start").exists():
    if time.monotonic() > deadline:
        sys.exit(f"{other} never started while {me} ran")
    time.sleep(0.05)
(marks / f"{me}.end").write_text(str(time.time()))
"""


def _on_partition_small(user: SlurmUser) -> None:
    config = Path(user.env["XDG_CONFIG_HOME"]) / "trainfleet" / "config.yaml"
    config.write_text(
        "backend: slurm\nslurm: {partition: small, poll_interval: 0.2, memory_per_task: 256Mi}\n"
    )


def _submit(user: SlurmUser, folder: Path, job: str) -> str:
    folder.mkdir()
    job_file = folder / "job.yaml"
    job_file.write_text(textwrap.dedent(job))
    return user.submit(job_file)


def _ended(user: SlurmUser, job_id: str) -> bool:
    return user.state(job_id) in ("succeeded", "failed", "cancelled")


def test_two_half_gpu_jobs_share_one_gpu_at_once(slurm_user: SlurmUser, tmp_path: Path) -> None:
    _on_partition_small(slurm_user)
    marks = tmp_path / "marks"
    marks.mkdir()
    program = tmp_path / "meet.py"
    program.write_text(MEET)
    jobs = {}
    for me, other in (("a", "b"), ("b", "a")):
        command = [sys.executable, str(program), str(marks), me, other]
        jobs[me] = _submit(
            slurm_user,
            tmp_path / me,
            f"""
            name: half-{me}
            roles:
              worker: {{command: {json.dumps(command)}, resources: {{gpu: 0.5}}}}
            """,
        )
    for job_id in jobs.values():
        wait_for(lambda job_id=job_id: _ended(slurm_user, job_id), TIMEOUT, f"{job_id} to end")
    assert {me: slurm_user.state(job_id) for me, job_id in jobs.items()} == {
        "a": "succeeded",
        "b": "succeeded",
    }, [slurm_user.describe(job_id) for job_id in jobs.values()]
    said = {me: json.loads((marks / f"{me}.start").read_text()) for me in jobs}
    ends = {me: float((marks / f"{me}.end").read_text()) for me in jobs}
    # Both on the one node's same GPU, each with 2 of its 4 shards, at the same time.
    gres = said["a"]["gres"]
    assert re.fullmatch(r"shard:2\(IDX:\d\)", gres), said
    for me in jobs:
        assert said[me]["node"] == "tf-node1", said
        assert said[me]["gres"] == gres, said
        assert said[me]["cuda"] == said[me]["gpus"] == gres[-2], said
        assert (said[me]["shards"], said[me]["fraction"]) == ("2", "0.5"), said
    last_start = max(float(s["start"]) for s in said.values())
    assert last_start < min(ends.values()), (said, ends)
    print(f"both on GPU {gres[-2]} of tf-node1, at once for {min(ends.values()) - last_start:.3f}s")


def test_a_job_waits_in_slurm_while_the_shards_are_taken(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    """Every shard of tf-node1 held by jobs outside trainfleet (one per GPU: Slurm gives a
    job the shards of one GPU): a job of `gpu: 0.5` is submitted (trainfleet does not count
    other users' jobs), waits in Slurm's queue for shards, saying so, and runs once there
    are some."""
    _on_partition_small(slurm_user)
    blockers = [
        subprocess.run(
            [
                *("sbatch", "--parsable", "--partition=small", "--job-name=shards-blocker"),
                *("--gres=shard:4", "--mem-per-cpu=100M", f"--output={tmp_path}/blocker.out"),
                *("--wrap", "exec sleep 600"),
            ],
            env=slurm_user.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(2)
    ]
    try:
        wait_for(
            lambda: (
                slurm_user.squeue("-j", ",".join(blockers), "-o", "%T").split()
                == ["RUNNING", "RUNNING"]
            ),
            what="the jobs holding every shard to run",
        )
        job_id = _submit(
            slurm_user,
            tmp_path / "half",
            """
            name: half-waits
            roles:
              worker: {command: "bash -c 'echo got $SLURM_SHARDS_ON_NODE shards'",
                       resources: {gpu: 0.5}}
            """,
        )

        def waiting() -> str | None:
            events = slurm_user.describe(job_id)["events"]
            assert isinstance(events, list)
            return next(
                (
                    e["message"]
                    for e in events
                    if e["code"] == "waiting-for-resources" and e["message"].endswith(": Resources")
                ),
                None,
            )

        message = wait_for(waiting, TIMEOUT, "the job to wait for shards")
        assert re.fullmatch(r"pending in Slurm \(job \d+\): Resources", str(message))
        assert slurm_user.state(job_id) == "starting"
    finally:
        subprocess.run(["scancel", *blockers], env=slurm_user.env, check=False)
    wait_for(lambda: _ended(slurm_user, job_id), TIMEOUT, "the job to run once shards are free")
    assert slurm_user.state(job_id) == "succeeded"
    log = subprocess.run(
        trainfleet("logs", job_id), env=slurm_user.env, capture_output=True, text=True
    )
    assert "got 2 shards" in log.stdout, log.stdout + log.stderr


def test_more_fractional_tasks_than_nodes_are_refused_not_left_waiting(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    """Each task with a fraction of a GPU is a Slurm component of its own, and Slurm starts a
    heterogeneous job only where each component could have a node: two `gpu: 0.3` tasks on
    partition small (one node) would wait for ever. Refused at submission, naming the field
    and both counts; on the three nodes of the default partition, three run."""
    _on_partition_small(slurm_user)
    job = tmp_path / "job.yaml"
    text = "name: thin\nroles:\n  eval: {replicas: 2, command: 'true', resources: {gpu: 0.3}}\n"
    job.write_text(text)
    done = subprocess.run(
        trainfleet("submit", job), env=slurm_user.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stderr
    assert "roles: the job is 2 Slurm components" in said and "small has 1 node" in said, said
    assert "Traceback" not in said and not slurm_user.squeue()
    config = Path(slurm_user.env["XDG_CONFIG_HOME"]) / "trainfleet" / "config.yaml"
    config.write_text("backend: slurm\nslurm: {poll_interval: 0.2, memory_per_task: 256Mi}\n")
    job.write_text(text.replace("replicas: 2", "replicas: 3"))
    job_id = slurm_user.submit(job)
    wait_for(lambda: _ended(slurm_user, job_id), TIMEOUT, "three fractions to run")
    assert slurm_user.state(job_id) == "succeeded"
