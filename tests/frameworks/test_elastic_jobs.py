"""Elastic PyTorch jobs under `trainfleet run`: real torchrun agents meeting in the store that
trainfleet hosts, and a member killed mid-training."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

TRAIN = textwrap.dedent(
    """
    import os, sys, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of {world}", flush=True)
    total = torch.ones(1)
    for step in range(int(os.environ["STEPS"])):
        dist.all_reduce(total)
        time.sleep(0.1)
        if step == 20:
            print("training", flush=True)
    print(f"done rank {rank} of {world}", flush=True)
    """
)


def _job(tmp_path: Path, replicas: int, steps: int, backoff: float) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    job = tmp_path / "job.yaml"
    job.write_text(
        textwrap.dedent(
            f"""
            name: elastic
            framework: pytorch
            pytorch: {{elastic: {{min_replicas: 2, max_replicas: {replicas}, max_restarts: 5}}}}
            restart: {{policy: on-failure, backoff: {{initial: {backoff}}}}}
            env: {{STEPS: "{steps}"}}
            roles:
              worker:
                replicas: {replicas}
                command: [{sys.executable}, -m, torch.distributed.run, train.py]
            """
        )
    )
    return job


def _trainfleet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainfleet", *args], env=env, capture_output=True, text=True
    )


def _details(env: dict[str, str], job_id: str) -> dict[str, Any]:
    described = _trainfleet(env, "describe", "-o", "json", job_id)
    assert described.returncode == 0, described.stderr
    return json.loads(described.stdout)  # type: ignore[no-any-return]


def _worlds(details: dict[str, Any]) -> list[int]:
    """The world sizes of the group's rounds, as its events tell them, repeats merged."""
    sizes = [
        int(re.match(r"world size (\d+)", e["message"])[1])  # type: ignore[index]
        for e in details["events"]
        if e["code"] == "regrouped"
    ]
    return [size for i, size in enumerate(sizes) if i == 0 or sizes[i - 1] != size]


def _run_until_training(
    env: dict[str, str], job: Path
) -> tuple[subprocess.Popen[str], list[str], str]:
    """`trainfleet run JOB` started, read until its group trains: the run, its lines so far,
    and the job's id."""
    run = subprocess.Popen(
        [sys.executable, "-m", "trainfleet", "run", str(job)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert run.stdout is not None
    lines = []
    for line in run.stdout:
        lines.append(line)
        if re.search(r"worker/\d\s*\| training", line):
            break
    job_id = re.search(r"job (\S+-[0-9a-f]{8}): ", "".join(lines))[1]  # type: ignore[index]
    return run, lines, job_id


def test_an_elastic_group_loses_rank_0_and_grows_back_without_a_job_restart(
    tmp_path: Path,
) -> None:
    """kill -9 of worker 0 (rank 0, whose agent would have held torch's store) mid-training:
    the two others re-form at once at world size 2 and go on, nothing else restarts, the
    killed task comes back after its backoff and the group grows back to 3; `describe` shows
    the world size over time (3, 2, 3) and the job succeeds."""
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}
    run, lines, job_id = _run_until_training(env, _job(tmp_path, 3, 250, 12))
    (victim,) = [
        t for t in _details(env, job_id)["tasks"] if t["index"] == 0 and t["role"] == "worker"
    ]
    os.killpg(victim["pid"], signal.SIGKILL)
    rest, _ = run.communicate(timeout=300)
    said = "".join(lines) + rest
    assert run.returncode == 0, said

    details = _details(env, job_id)
    restarts = {f"{t['role']}/{t['index']}": t["restarts"] for t in details["tasks"]}
    assert restarts == {"worker/0": 1, "worker/1": 0, "worker/2": 0, "rendezvous/0": 0}, restarts
    assert _worlds(details) == [3, 2, 3], details["events"]
    assert re.search(r"worker/[12]\s*\| done rank \d of 3", said), said
    assert "exit barrier" not in said.lower(), said


def test_eight_ddp_runs_print_no_exit_barrier_error(tmp_path: Path) -> None:
    """torchrun's agents used to fail their exit barrier when rank 0's agent (holding the
    store) left first (pytorch#69520): with the store outside every agent, 8 runs end clean.
    (It was 20 runs: 264 s of CI time.)"""
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}
    job = _job(tmp_path, 2, 3, 1)
    for run in range(8):
        done = _trainfleet(env, "run", str(job))
        assert done.returncode == 0, done.stdout + done.stderr
        printed = (done.stdout + done.stderr).lower()
        assert "exit barrier" not in printed and "traceback" not in printed, (run, printed)


def test_a_store_that_cannot_run_fails_the_job_saying_why(tmp_path: Path) -> None:
    """The store runs under the agents' python (here one without torch): it cannot serve,
    and the job fails naming the store and what it lacks, not on an agent's timeout."""
    python = "/usr/bin/python3"
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{python} has torch")
    job = tmp_path / "job.yaml"
    job.write_text(
        textwrap.dedent(
            f"""
            name: no-torch
            framework: pytorch
            pytorch: {{elastic: {{min_replicas: 1, max_replicas: 2}}}}
            restart: {{max_restarts: 0}}
            roles:
              worker: {{replicas: 2, command: [{python}, -c, "import time; time.sleep(60)"]}}
            """
        )
    )
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}
    done = _trainfleet(env, "run", str(job))
    assert done.returncode != 0, done.stdout
    assert "job failed: rendezvous/0 exited with exit code 2" in done.stdout, done.stdout
    assert f"rendezvous/0 | trainfleet rendezvous-store: {python} has no torch" in done.stdout


def test_a_killed_store_restarts_the_job_whole_as_an_infrastructure_failure(
    tmp_path: Path,
) -> None:
    """kill -9 of the rendezvous store mid-training (its rounds gone with it): under
    `restart.policy: never` the job still restarts whole, coded rendezvous-lost, the members
    stopped for it (not failed), a new store, the group of 3 again, and it succeeds."""
    job = _job(tmp_path, 3, 120, 1)
    job.write_text(job.read_text().replace("policy: on-failure", "policy: never"))
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}
    run, lines, job_id = _run_until_training(env, job)
    (store,) = [t for t in _details(env, job_id)["tasks"] if t["role"] == "rendezvous"]
    os.kill(store["pid"], signal.SIGKILL)
    rest, _ = run.communicate(timeout=300)
    said = "".join(lines) + rest
    assert run.returncode == 0, said

    details = _details(env, job_id)
    assert {t["restarts"] for t in details["tasks"]} == {1}, details["tasks"]
    codes = [e["code"] for e in details["events"]]
    assert "rendezvous-lost" in codes and "program-failed" not in codes, details["events"]
    assert _worlds(details) == [3], details["events"]  # each store saw a group of 3
    assert len(re.findall(r"worker/\d\s*\| done rank \d of 3", said)) == 3, said
