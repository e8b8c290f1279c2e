"""Slurm's own SIGTERMs, on the real cluster: the warning ahead of a job's time limit
(``--signal=TERM@<grace_period>``) and a preemption by a job of a higher-priority partition
(``urgent`` over ``preemptible``, both tf-node3 only: see scripts/slurm.sh). Either way the
task reads why in ``$TRAINFLEET_STOP_FILE`` (written by its bootstrap, which asks Slurm),
saves a checkpoint and ends; trainfleet starts the job again, and the new attempt is told
the step saved (``TRAINFLEET_RESUME_FROM``): nothing is lost.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import trainfleet, wait_for
from slurm_cluster import SlurmUser

pytestmark = pytest.mark.slow

TRAIN = """\
import os, signal, sys, time
from trainfleet import checkpoint

restart = int(os.environ["TRAINFLEET_RESTART"])
found = checkpoint.latest()
step = found.step if found else 0
print(f"attempt {restart} at {time.time():.3f} resumes from", os.environ.get(
    "TRAINFLEET_RESUME_FROM"), flush=True)
if restart:
    sys.exit(0)  # resumed: enough for the test


def stop(*_):
    why = open(os.environ["TRAINFLEET_STOP_FILE"]).read().strip()
    with checkpoint.save(step) as folder:
        (folder / "state").write_text(str(step))
    print(f"stopped: {why} at step {step} at {time.time():.3f}", flush=True)
    sys.exit(int(sys.argv[1]))


signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.05)
    step += 1
"""


def _configure(user: SlurmUser, slurm: str) -> None:
    """The user's config file, with these ``slurm`` keys (a YAML flow mapping's inside)."""
    config = Path(user.env["XDG_CONFIG_HOME"]) / "trainfleet" / "config.yaml"
    config.write_text(
        f"backend: slurm\nslurm: {{poll_interval: 0.2, memory_per_task: 256Mi, {slurm}}}\n"
    )


def _submit(user: SlurmUser, folder: Path, name: str, exit_code: int, grace: int) -> str:
    (folder / "train.py").write_text(TRAIN)
    (folder / "job.yaml").write_text(
        textwrap.dedent(
            f"""
            name: {name}
            grace_period: {grace}
            restart: {{backoff: {{initial: 0}}}}
            roles:
              worker: {{command: "{sys.executable} train.py {exit_code}"}}
            """
        )
    )
    return user.submit(folder / "job.yaml")


def _logs(user: SlurmUser, job_id: str) -> str:
    done = subprocess.run(
        trainfleet("logs", job_id), env=user.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _ended(user: SlurmUser, job_id: str) -> dict[str, Any] | None:
    details = user.describe(job_id)
    job = details["job"]
    assert isinstance(job, dict)
    return details if job["state"] in ("succeeded", "failed", "cancelled") else None


def _check_resumed(
    user: SlurmUser, job_id: str, why: str, code: str, said: str
) -> tuple[float, float]:
    """The job ended well after one restart coded ``code`` whose message says ``said``;
    its first attempt read ``why``, saved step N, and the second resumed from step N.
    Returns when the first attempt was stopped and when the second started."""
    details = wait_for(lambda: _ended(user, job_id), timeout=120, what="the job to end")
    assert isinstance(details, dict)
    assert details["job"]["state"] == "succeeded", details
    restarts = [e for e in details["events"] if e["state"] == "restarting" and e["task"]]
    assert [e["code"] for e in restarts] == [code], details["events"]
    assert said in restarts[0]["message"], restarts
    logs = _logs(user, job_id)
    stopped = re.search(rf"stopped: {why} at step (\d+) at ([\d.]+)", logs)
    assert stopped, f"the first attempt did not read {why!r} in its stop file:\n{logs}"
    resumed = re.search(r"attempt 1 at ([\d.]+) resumes from (\S+)", logs)
    assert resumed, logs
    folder = user.data_dir / "jobs" / job_id / "tasks" / "checkpoints"
    assert resumed[2] == str(folder / f"step-{stopped[1]}"), "a step was lost:\n" + logs
    return float(stopped[2]), float(resumed[1])


def test_a_task_warned_of_its_time_limit_saves_and_the_job_resumes(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    """slurm.time_limit 1 minute and grace_period 20: Slurm (not trainfleet) sends SIGTERM
    ahead of the limit; the task reads ``time-limit``, saves and exits 143; the job is
    started again (an infrastructure failure: node-lost, "warned of its time limit") and
    the new attempt resumes from the step saved."""
    _configure(slurm_user, 'time_limit: "1"')
    job_id = _submit(slurm_user, tmp_path, "time-limit", 143, grace=20)
    stopped, resumed = _check_resumed(
        slurm_user, job_id, "time-limit", "node-lost", "was warned of its time limit"
    )
    print(f"warned: requeued attempt running {resumed - stopped:.1f}s after the SIGTERM")


def test_a_job_preempted_by_slurm_saves_and_resumes_from_its_checkpoint(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    """A plain sbatch job of partition ``urgent`` needs the CPUs of the trainfleet job's
    node: Slurm preempts it (GraceTime 15 s). The task reads ``preempted``, saves and exits
    0, which Slurm calls COMPLETED; trainfleet still sees a preemption (code preempted),
    submits the job again, and it resumes from the step saved once the preemptor is done."""
    _configure(slurm_user, "partition: preemptible")
    job_id = _submit(slurm_user, tmp_path, "victim", 0, grace=10)
    wait_for(
        lambda: "attempt 0 at" in _logs(slurm_user, job_id),
        timeout=120,
        what="the job's first attempt to run",
    )
    urgent = ["sbatch", "--parsable", "--partition=urgent", "--ntasks=4", "--wrap=sleep 2"]
    preemptor = subprocess.run(
        [*urgent, f"--output={tmp_path / 'urgent.out'}"],
        env=slurm_user.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        stopped, resumed = _check_resumed(
            slurm_user, job_id, "preempted", "preempted", "Slurm preempted job"
        )
        shown = subprocess.run(
            ["scontrol", "-o", "show", "job", preemptor],
            env=slurm_user.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "JobState=COMPLETED" in shown and "NodeList=tf-node3" in shown, shown
    finally:
        subprocess.run(["scancel", preemptor], env=slurm_user.env, check=False)
    print(f"preempted: resubmitted attempt running {resumed - stopped:.1f}s after the SIGTERM")
