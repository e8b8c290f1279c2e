"""A job's checkpoint contract with a real restarted task: every attempt finds its folder
(the job's own under the data directory, or its checkpoint_path), its attempt number and,
once a step is committed, the newest committed step to resume from; a failed attempt's
half-written step is never offered."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli

from trainfleet import checkpoint
from trainfleet.backends.accounts import TeamAccounts
from trainfleet.control.assembly import engine_at
from trainfleet.control.engine import Engine
from trainfleet.domain.records import State
from trainfleet.spec.errors import SpecError
from trainfleet.spec.models import JobSpec

pytestmark = pytest.mark.usefixtures("reap", "data_dir")

TRAIN = """\
import os, sys
from trainfleet import checkpoint
restart = int(os.environ["TRAINFLEET_RESTART"])
print("restart", restart, "resume", os.environ.get("TRAINFLEET_RESUME_FROM"), flush=True)
found = checkpoint.latest()
for step in range(found.step + 1 if found else 0, 6):
    if step == 3 and restart == 0:
        with checkpoint.save(step) as folder:
            (folder / "state").write_text("half")
            os._exit(3)  # dies mid-save: step 3 is never offered
    with checkpoint.save(step) as folder:
        (folder / "state").write_text(str(step))
print("done at", step, "keep", os.environ["TRAINFLEET_CHECKPOINT_KEEP"], flush=True)
"""


def _newest_job_id() -> str:
    return str(json.loads(run_cli("list", "-o", "json").stdout)[0]["id"])


def _details(job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(run_cli("describe", job_id, "-o", "json").stdout)
    return found


@pytest.mark.parametrize("own_folder", [False, True])
def test_a_restarted_task_resumes_from_the_newest_committed_step(
    tmp_path: Path, data_dir: Path, own_folder: bool
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    where = "checkpoint: {path: ck, keep: 2}\n" if own_folder else "checkpoint: {keep: 2}\n"
    (tmp_path / "job.yaml").write_text(
        f"name: resume\n{where}restart: {{policy: on-failure, backoff: {{initial: 0}}}}\n"
        f"roles:\n  worker: {{command: '{sys.executable} train.py'}}\n"
    )
    done = run_cli("run", tmp_path / "job.yaml", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = _newest_job_id()
    folder = tmp_path / "ck" if own_folder else data_dir / "jobs" / job_id / "tasks" / "checkpoints"
    lines = [line for line in done.stdout.splitlines() if line.startswith("worker/0 | ")]
    assert lines[0].endswith("restart 0 resume None")
    assert lines[1].endswith(f"restart 1 resume {folder / 'step-2'}")
    assert lines[2].endswith("done at 5 keep 2")
    assert sorted(path.name for path in folder.iterdir()) == ["step-4", "step-5"]
    listed = json.loads(run_cli("checkpoints", job_id, "-o", "json").stdout)
    assert [(s["step"], s["path"]) for s in listed] == [
        (4, str(folder / "step-4")),
        (5, str(folder / "step-5")),
    ]
    details = _details(job_id)
    assert details["checkpoints"] == listed
    shown = run_cli("describe", job_id).stdout
    assert "checkpoint: step 5 (" in shown and f"2 kept, {folder / 'step-5'}" in shown, shown
    if own_folder:  # a member's link in the folder's place is never followed
        folder.rename(tmp_path / "elsewhere")
        folder.symlink_to(tmp_path / "elsewhere")
        assert json.loads(run_cli("checkpoints", job_id, "-o", "json").stdout) == []
        (tmp_path / "peek.yaml").write_text(
            f"name: peek\n{where}roles:\n"
            "  worker: {command: 'echo resume=$TRAINFLEET_RESUME_FROM'}\n"
        )
        peeked = run_cli("run", tmp_path / "peek.yaml", timeout=60)
        assert "worker/0 | resume=\n" in peeked.stdout, peeked.stdout


REQUEUE = """\
import os, sys
from trainfleet import checkpoint
restart = int(os.environ["TRAINFLEET_RESTART"])
found = checkpoint.latest()
step = found.step + 1 if found else 0
with checkpoint.save(step) as folder:
    (folder / "state").write_text(str(step))
print("restart", restart, "saved", step, flush=True)
sys.exit(85 if restart < int(sys.argv[1]) else 0)
"""


@pytest.mark.parametrize(("requeues", "succeeds"), [(2, True), (3, False)])
def test_a_program_asking_to_be_requeued_restarts_whatever_the_policy_up_to_its_bound(
    tmp_path: Path, requeues: int, succeeds: bool
) -> None:
    """restart.policy stays `never`: exit code 85 (requeue_exit_code) restarts the task as
    an infrastructure failure, coded `requeued`, up to max_infrastructure (2); a third
    request fails the job with that code."""
    (tmp_path / "train.py").write_text(REQUEUE)
    (tmp_path / "job.yaml").write_text(
        "name: requeue\n"
        "restart: {requeue_exit_code: 85, max_infrastructure: 2, backoff: {initial: 0}}\n"
        f"roles:\n  worker: {{command: '{sys.executable} train.py {requeues}'}}\n"
    )
    done = run_cli("run", tmp_path / "job.yaml", timeout=120)
    assert done.returncode == (0 if succeeds else 1), done.stdout + done.stderr
    job_id = _newest_job_id()
    said = [line for line in done.stdout.splitlines() if line.startswith("worker/0 | ")]
    assert [line.split("| ")[1] for line in said] == [f"restart {n} saved {n}" for n in range(3)], (
        done.stdout
    )
    details = _details(job_id)
    restarts = [e for e in details["events"] if e["state"] == "restarting"]
    assert [e["code"] for e in restarts] == ["requeued", "requeued"], restarts
    if not succeeds:
        job = details["job"]
        assert (job["state"], job["code"]) == ("failed", "requeued"), job
        assert job["reason"] == "worker/0 exited with exit code 85 after 2 restart(s)", job


SILENT = """\
import os, sys, time
from trainfleet import checkpoint
restart = int(os.environ["TRAINFLEET_RESTART"])
print("restart", restart, flush=True)
if restart == 0:
    time.sleep(120)  # silent: no line, no heartbeat
else:
    for _ in range(12):  # no line for 3 s, but a heartbeat every 0.25 s
        checkpoint.beat()
        time.sleep(0.25)
print("done", flush=True)
"""


def test_a_silent_task_is_restarted_as_stalled_and_a_beating_one_is_not(tmp_path: Path) -> None:
    """progress.timeout 2 s: the first attempt, silent, is stopped and restarted (code
    stalled, whatever the policy); the second, silent in its log but touching its
    heartbeat, runs to its end."""
    (tmp_path / "train.py").write_text(SILENT)
    (tmp_path / "job.yaml").write_text(
        "name: stall\nprogress: {timeout: 2}\ngrace_period: 1\n"
        "restart: {backoff: {initial: 0}}\n"
        f"roles:\n  worker: {{command: '{sys.executable} train.py'}}\n"
    )
    done = run_cli("run", tmp_path / "job.yaml", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = _newest_job_id()
    details = _details(job_id)
    restarts = [e for e in details["events"] if e["state"] == "restarting"]
    assert [e["code"] for e in restarts] == ["stalled"], details["events"]
    assert "silent for over 2s" in restarts[0]["message"], restarts
    first = next(e for e in details["events"] if e["task"] and e["code"] == "started")
    assert restarts[0]["time"] - first["time"] < 2 + 5  # the bound: timeout + 5 s


TOLD = """\
import os, signal, sys, time
def stopped(*_):
    print("stopped:", open(os.environ["TRAINFLEET_STOP_FILE"]).read().strip(), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stopped)
print("running", flush=True)
time.sleep(120)
"""


def test_a_task_reads_why_it_is_stopped_before_its_sigterm(tmp_path: Path) -> None:
    """The deadline stops the job: its task reads `time-limit` in $TRAINFLEET_STOP_FILE
    from its SIGTERM handler (where a program saves its checkpoint)."""
    (tmp_path / "train.py").write_text(TOLD)
    (tmp_path / "job.yaml").write_text(
        "name: told\ndeadline: 2\ngrace_period: 5\n"
        f"roles:\n  worker: {{command: '{sys.executable} train.py'}}\n"
    )
    done = run_cli("run", tmp_path / "job.yaml", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "worker/0 | stopped: time-limit" in done.stdout, done.stdout


def test_a_second_job_on_a_checkpoint_folder_in_use_is_refused_unless_both_share_it(
    tmp_path: Path,
) -> None:
    def job(name: str, shared: bool) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            f"name: {name}\ncheckpoint: {{path: ck, shared: {str(shared).lower()}}}\n"
            "roles:\n  worker: {command: 'sleep 60'}\n"
        )
        return path

    first = run_cli("submit", job("first", shared=True)).stdout.strip()
    refused = run_cli("run", job("second", shared=False))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "checkpoint.path" in refused.stderr and f"of job {first}" in refused.stderr
    assert "Traceback" not in refused.stderr
    names = [j["name"] for j in json.loads(run_cli("list", "-o", "json").stdout)]
    assert names == ["first"]  # nothing stored of the refused one
    shared = run_cli("submit", job("third", shared=True))
    assert shared.returncode == 0, shared.stderr
    for job_id in (first, shared.stdout.strip()):
        run_cli("stop", job_id)
    again = run_cli("submit", job("fourth", shared=False))  # the folder is free again
    assert again.returncode == 0, again.stderr
    run_cli("stop", again.stdout.strip())


def test_a_checkpoint_folder_its_account_cannot_write_fails_the_job_at_start(
    passable: Path,
) -> None:
    """Tasks run as `nobody`; the folder the job names is root's (0755): the job fails
    before any task starts, naming the folder and the account. Made writable for
    `nobody`, the same job runs and its task writes there."""

    folder = passable / "ck"
    folder.mkdir(mode=0o755)
    engine = engine_at(
        passable / "data", supervised=True, team_accounts=TeamAccounts({"default": "nobody"})
    )
    spec = JobSpec.model_validate(
        {
            "name": "ck",
            "checkpoint": {"path": str(folder / "run")},
            "roles": {"worker": {"command": 'mkdir "$TRAINFLEET_CHECKPOINT_PATH"'}},
        }
    )
    try:
        job = engine.wait(engine.submit(spec, passable, start=True).id, timeout=60)
        assert (job.state, job.reason) == (
            State.FAILED,
            f"could not start: checkpoint.path {folder / 'run'}: {folder} is not writable "
            "by account nobody",
        )
        assert [task.pid for task in engine.tasks(job.id)] == [None]
        os.chown(folder, pwd.getpwnam("nobody").pw_uid, -1)
        job = engine.wait(engine.submit(spec, passable, start=True).id, timeout=60)
        assert job.state == State.SUCCEEDED, engine.describe(job.id)
        assert (folder / "run").stat().st_uid == pwd.getpwnam("nobody").pw_uid
    finally:
        engine.shutdown()


def test_the_check_of_a_checkpoint_folder_reveals_nothing_its_account_cannot_see(
    passable: Path,
) -> None:
    """Inside a folder only root may search, a folder that exists and one that does not get
    the same answer: the check looks as the tasks' account (`nobody`), not as root."""
    hidden = passable / "hidden"
    (hidden / "exists").mkdir(parents=True)
    hidden.chmod(0o700)
    engine = engine_at(
        passable / "data", supervised=True, team_accounts=TeamAccounts({"default": "nobody"})
    )

    def reason(path: Path) -> str:
        spec = JobSpec.model_validate(
            {
                "name": "probe",
                "checkpoint": {"path": str(path)},
                "roles": {"worker": {"command": "true"}},
            }
        )
        job = engine.wait(engine.submit(spec, passable, start=True).id, timeout=60)
        assert job.state == State.FAILED, job
        return job.reason.replace(str(path), "PATH")

    try:
        there, absent = reason(hidden / "exists" / "run"), reason(hidden / "absent" / "run")
        assert (
            there
            == absent
            == (
                f"could not start: checkpoint.path PATH: {hidden} is not writable by account nobody"
            )
        )
    finally:
        engine.shutdown()


def test_another_teams_job_on_the_folder_is_refused_without_its_id(
    engine: Engine, tmp_path: Path
) -> None:
    """An absolute folder another team's unfinished job writes to: refused, and the
    message names no job of that team (probing paths must not reveal its ids)."""
    folder = str(tmp_path / "shared-ck")
    spec = JobSpec.model_validate(
        {"name": "a", "checkpoint": {"path": folder}, "roles": {"worker": {"command": "true"}}}
    )
    theirs = engine.submit(spec, tmp_path, team="vision")  # stored, waiting: not ended
    with pytest.raises(SpecError) as raised:
        engine.submit(spec, tmp_path, team="audio")
    said = str(raised.value)
    assert f"{folder} is the checkpoint folder of another team's job" in said, said
    assert theirs.id not in said and "checkpoint.path" in said
    with pytest.raises(SpecError, match=f"checkpoint folder of job {theirs.id}"):
        engine.submit(spec, tmp_path, team="vision")


SAVES = """
import os, sys
from trainfleet import checkpoint
with checkpoint.save(int(os.environ["STEP"])) as folder:
    (folder / "w").write_text(checkpoint.__file__)
"""


def test_a_task_whose_python_has_no_trainfleet_still_imports_its_checkpoint_helper(
    tmp_path: Path, data_dir: Path
) -> None:
    """The system python (no trainfleet installed) saves with `trainfleet.checkpoint` from
    the job's shared folder; the server's own python keeps its installed one."""
    python = "/usr/bin/python3"
    if subprocess.run([python, "-c", "import trainfleet"], capture_output=True).returncode == 0:
        pytest.skip(f"{python} has trainfleet installed")
    (tmp_path / "saves.py").write_text(SAVES)
    (tmp_path / "job.yaml").write_text(
        "name: helper\nroles:\n"
        f"  bare: {{command: [{python}, saves.py], env: {{STEP: '1'}}}}\n"
        f"  ours: {{command: [{sys.executable}, saves.py], env: {{STEP: '2'}}}}\n"
    )
    done = run_cli("run", tmp_path / "job.yaml", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = _newest_job_id()
    tasks = data_dir / "jobs" / job_id / "tasks"
    bare, ours = ((tasks / "checkpoints" / f"step-{n}" / "w").read_text() for n in (1, 2))
    assert bare == str(tasks / "python.zip" / "trainfleet" / "checkpoint.py")
    assert ours == checkpoint.__file__
