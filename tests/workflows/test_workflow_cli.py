"""``trainfleet workflow submit|start|list|describe|runs|show|retry|stop|pause|resume|delete``
against a real server (in this process's thread), and ``workflow run FILE``'s check of
every step's job before any starts."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import run_cli, wait_for
from server.harness import LiveServer, add_user

from trainfleet.client import Client
from trainfleet.domain.records import State, TeamRole
from trainfleet.domain.workflow_records import RunDetails, RunState

FLOW = """\
kind: Workflow
name: pipeline
parameters: {word: hello}
steps:
  write: {file: write.yaml}
  check:
    job: {roles: {worker: {command: 'cd "$TRAINFLEET_RUN_DIR" && test -f ready && cat word.txt'}}}
    needs: [write]
  after:
    job: {roles: {worker: {command: 'true'}}}
    needs: [check]
"""
"""A file step and an inline step that share the run's folder; ``check`` fails until a
file ``ready`` is in it."""
WRITE = (
    "name: ignored\nroles:\n  worker: {command: 'echo %word% > \"$TRAINFLEET_RUN_DIR/word.txt\"'}\n"
)
YEARLY = """\
kind: Workflow
name: yearly
schedule: {cron: '0 0 1 1 *'}
steps:
  only: {job: {roles: {worker: {command: 'true'}}}}
"""
SLOW = (
    "kind: Workflow\nname: slow\nsteps:\n  nap: {job: {roles: {worker: {command: 'sleep 120'}}}}\n"
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("workflow-cli") / "data").start()
    yield server
    server.stop()


@pytest.fixture
def admin(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """The CLI talks to ``live`` as its administrator (team ``default`` by default)."""
    monkeypatch.setenv("TRAINFLEET_SERVER", live.url)
    monkeypatch.setenv("TRAINFLEET_TOKEN", live.token)
    with Client(live.url, live.token) as client:
        yield client


def _folder(tmp_path: Path, text: str, **files: str) -> Path:
    """A workflow folder with ``flow.yaml`` and ``files``; the workflow file's path."""
    folder = tmp_path / "flow"
    folder.mkdir(exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(content)
    (folder / "flow.yaml").write_text(text)
    return folder / "flow.yaml"


def _ok(*args: str | Path) -> str:
    done = run_cli("workflow", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def _refused(*args: str | Path) -> str:
    """The one ``error: ...`` line of a command that exits 2."""
    done = run_cli("workflow", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr


def _ended(client: Client, run_id: str) -> RunDetails:
    def ended() -> RunDetails | None:
        details = client.workflow_run(run_id)
        return details if RunState(details.run.state).is_final else None

    found = wait_for(ended, timeout=60, what=f"run {run_id} ended")
    assert isinstance(found, RunDetails)
    return found


def _steps(details: RunDetails) -> dict[str, tuple[str, int, int]]:
    """Each step's state, its tries since the run (or its retry) started, and its jobs."""
    return {step.step: (str(step.state), step.tries, len(step.jobs)) for step in details.steps}


def _fields(text: str) -> dict[str, str]:
    """``label:   value`` lines as a mapping."""
    pairs = (re.fullmatch(r"([a-z ]+): +(.*)", line) for line in text.splitlines())
    return {found.group(1): found.group(2) for found in pairs if found}


def _row(table: str, first: str) -> list[str]:
    """The words of the row of ``table`` whose first cell is ``first``."""
    rows = [line.split() for line in table.splitlines() if line.split()[:1] == [first]]
    assert len(rows) == 1, table
    return rows[0]


def _started_run(said: str) -> str:
    found = re.fullmatch(r"workflow \S+ stored in team default\nrun (\S+) started\n", said)
    assert found, said
    return found.group(1)


def test_workflow_submit_fails_a_step_then_retry_and_retry_from_run_it_again(
    admin: Client, live: LiveServer, tmp_path: Path
) -> None:
    flow = _folder(tmp_path, FLOW, **{"write.yaml": WRITE})
    run_id = _started_run(_ok("submit", flow, "--param", "word=hi"))
    assert re.fullmatch(r"pipeline-[0-9a-f]{8}", run_id)
    failed = _ended(admin, run_id)
    assert failed.run.state == RunState.FAILED
    assert _steps(failed) == {
        "write": ("succeeded", 1, 1),
        "check": ("failed", 1, 1),
        "after": ("skipped", 0, 0),
    }

    listed = _ok("list")
    assert listed.splitlines()[0].split() == [
        *("NAME", "TEAM", "OWNER", "SCHEDULE", "STATE", "LAST", "RUN")
    ]
    assert _row(listed, "pipeline") == ["pipeline", "default", "admin", "-", "-", "#1", "failed"]
    described = _ok("describe", "pipeline")
    head, runs = described.split("\n\n")
    assert _fields(head) == {
        "name": "pipeline",
        "team": "default",
        "owner": "admin",
        "file": str(flow),
        "schedule": "-",
        "state": "-",
        "code": "-",
        "next runs": "-",
    }
    rows = runs.splitlines()
    assert rows[0].split() == ["#", "RUN", "STATE", "CODE", "REASON", "STARTED", "FINISHED"]
    assert re.fullmatch(
        rf"1 +{run_id} +failed +step-failed +.*check.* \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d +"
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
        rows[1],
    ), rows[1]
    assert len(rows) == 2
    assert _ok("runs", "pipeline", "--team", "default").splitlines() == rows
    assert json.loads(_ok("runs", "pipeline", "-o", "json"))[0]["id"] == run_id

    # The cause fixed in the run's folder, only what failed (and what it held back) runs.
    (live.engine.data_dir.root / "workflows" / "runs" / run_id / "ready").touch()
    retried = _ok("retry", run_id)
    assert retried.splitlines()[0].split() == ["run:", run_id]
    assert re.search(r"^workflow: +pipeline #1 \(team default, owner admin\)$", retried, re.M)
    assert re.search(r"^parameters: +word=hi$", retried, re.M)
    assert retried.split("\n\n")[1].splitlines()[0].split() == [
        "STEP",
        "STATE",
        "TRIES",
        "JOB",
        "REASON",
    ]
    again = _ended(admin, run_id)
    assert again.run.state == RunState.SUCCEEDED and again.run.retries == 1
    assert _steps(again) == {
        "write": ("succeeded", 1, 1),
        "check": ("succeeded", 1, 2),
        "after": ("succeeded", 1, 1),
    }
    check = next(step for step in again.steps if step.step == "check")
    assert check.job_id is not None
    assert admin.read_log(check.job_id, "worker", 0) == b"hi\n"  # the file step wrote it

    refused = _refused("retry", run_id)
    assert "succeeded: name a step to run again from (--from)" in refused
    assert "no step 'nope'" in _refused("retry", run_id, "--from", "nope")
    _ok("retry", run_id, "--from", "check")
    rerun = _ended(admin, run_id)
    assert rerun.run.state == RunState.SUCCEEDED
    assert _steps(rerun) == {
        "write": ("succeeded", 1, 1),
        "check": ("succeeded", 1, 3),
        "after": ("succeeded", 1, 2),
    }
    shown = json.loads(_ok("show", run_id, "-o", "json"))
    assert shown["run"]["id"] == run_id and shown["run"]["retries"] == 2
    assert [step["step"] for step in shown["steps"]] == ["write", "check", "after"]

    said = _ok("delete", "pipeline")
    assert said == "workflow pipeline of team default deleted, with its runs (their jobs stay)\n"
    assert "pipeline" not in [w["workflow"]["name"] for w in json.loads(_ok("list", "-o", "json"))]
    assert f"no workflow run '{run_id}'" in _refused("show", run_id)
    assert "no workflow 'pipeline' in team 'default'" in _refused("describe", "pipeline")


def test_workflow_schedule_shows_next_times_and_pauses_and_resumes(
    admin: Client, tmp_path: Path
) -> None:
    year = datetime.datetime.now(datetime.UTC).year
    first, second = f"{year + 1}-01-01T00:00:00Z", f"{year + 2}-01-01T00:00:00Z"
    yearly = _folder(tmp_path, YEARLY)
    said = _ok("submit", yearly).splitlines()
    assert (
        said[0] == "workflow yearly stored in team default, on schedule 0 0 1 1 * (UTC); next runs:"
    )
    assert said[1:3] == [f"  {first}", f"  {second}"] and len(said) == 6
    assert _row(_ok("list"), "yearly") == [
        *("yearly", "default", "admin", "0", "0", "1", "1", "*", "(UTC)", "active", "-")
    ]

    paused = _ok("pause", "yearly")
    assert paused == "workflow yearly of team default paused (paused by admin)\n"
    head, runs = _ok("describe", "yearly").split("\n\n")
    assert _fields(head) == {
        "name": "yearly",
        "team": "default",
        "owner": "admin",
        "file": str(yearly),
        "schedule": "0 0 1 1 * (UTC)",
        "state": "paused",
        "code": "paused: paused by admin",
        "next runs": "-",
    }
    assert runs == "no runs\n"
    resumed = _ok("resume", "yearly")
    assert resumed.startswith(
        f"workflow yearly of team default resumed; next runs: {first}, {second}"
    )
    details = json.loads(_ok("describe", "yearly", "-o", "json"))
    assert details["schedule"]["code"] == "active" and len(details["next_times"]) == 5
    _ok("delete", "yearly")


ECHO = """\
kind: Workflow
name: echo
parameters: {word: hello}
schedule: {cron: '0 0 1 1 *'}
steps:
  say: {job: {roles: {worker: {command: 'echo said %word%'}}}}
"""


def test_workflow_start_runs_a_stored_workflow_now_and_its_schedule_goes_on(
    admin: Client, tmp_path: Path
) -> None:
    _ok("submit", _folder(tmp_path, ECHO))
    shown = json.loads(_ok("start", "echo", "--param", "word=again", "-o", "json"))
    run = shown["run"]
    assert run["workflow"] == "echo" and run["parameters"] == {"word": "again"}, run
    details = _ended(admin, run["id"])
    assert _steps(details) == {"say": ("succeeded", 1, 1)}, details
    job = details.steps[0].jobs[0]
    assert admin.read_log(job, "worker", 0) == b"said again\n"
    table = _ok("start", "echo")  # the workflow's own parameters, the run shown as a table
    assert re.search(r"^run: +echo-[0-9a-f]{8}$", table, re.MULTILINE), table
    assert "word=hello" in table
    head, _ = _ok("describe", "echo").split("\n\n")
    assert _fields(head)["state"] == "active", head
    assert "no-such" in _refused("start", "no-such")
    assert "colour" in _refused("start", "echo", "--param", "colour=red")
    assert "NAME=VALUE" in _refused("start", "echo", "--param", "word")
    _ok("delete", "echo")


def test_workflow_stop_stops_a_long_run_and_its_job(admin: Client, tmp_path: Path) -> None:
    run_id = _started_run(_ok("submit", _folder(tmp_path, SLOW), "--no-folder"))

    def running_job() -> str | None:
        steps = admin.workflow_run(run_id).steps
        job = steps[0].job_id if steps else None
        return job if job and admin.get(job).state == State.RUNNING else None

    job = wait_for(running_job, timeout=60, what="the step's job running")
    assert isinstance(job, str)
    stopped = _ok("stop", run_id)
    assert re.search(r"^state: +cancelled \(stopped: stopped by admin\)$", stopped, re.M), stopped
    assert re.search(rf"^nap +cancelled +1 +{job} ", stopped, re.M), stopped
    assert wait_for(lambda: State(admin.get(job).state).is_final, timeout=30)
    assert admin.get(job).state == State.CANCELLED
    _ok("delete", "slow")


def test_workflow_submit_refuses_bad_files_and_flags_naming_file_line_and_field(
    admin: Client, tmp_path: Path
) -> None:
    cycle = FLOW.replace(
        "  write: {file: write.yaml}\n", "  write: {file: write.yaml, needs: [after]}\n"
    )
    flow = _folder(tmp_path, cycle, **{"write.yaml": WRITE})
    before = _ok("list", "-o", "json")
    assert re.fullmatch(
        r"error: .*flow\.yaml:5: steps\.write\.needs: a cycle: write -> after -> check -> write"
        r" \(needs\)\n",
        _refused("submit", flow),
    )
    flow.write_text(FLOW)
    assert _refused("submit", flow, "--param", "colour=red") == (
        "error: --param colour: no such parameter (parameters: word)\n"
    )
    assert _refused("submit", flow, "--param", "colour") == (
        "error: --param 'colour': expected NAME=VALUE\n"
    )
    (flow.parent / "write.yaml").write_text(
        "name: w\nroles:\n  worker: {replicas: -1, command: 'true'}\n"
    )
    assert re.fullmatch(
        r"error: .*write\.yaml:3: roles\.worker\.replicas: .*\n", _refused("submit", flow)
    )
    (flow.parent / "write.yaml").write_text(WRITE)
    assert _refused("submit", flow, "--no-folder") == (
        "error: --no-folder: step write reads write.yaml from the workflow's folder, "
        "which --no-folder does not send\n"
    )
    after = _ok("list", "-o", "json")  # nothing stored
    assert after == before and "pipeline" not in [w["workflow"]["name"] for w in json.loads(after)]

    assert "no workflow 'nope' in team 'default'" in _refused("describe", "nope")
    assert "no workflow run 'nope-1'" in _refused("show", "nope-1")


def test_workflow_names_resolve_in_the_callers_only_team_or_need_team(
    admin: Client, live: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin.create_team("audio")
    admin.create_team("video")
    token, _ = add_user(live.engine.store, "solo", "audio")
    monkeypatch.setenv("TRAINFLEET_TOKEN", token)
    flow = _folder(tmp_path, SLOW.replace("sleep 120", "true"))
    said = _ok("submit", flow, "--no-run")
    assert said == "workflow slow stored in team audio (no run started: --no-run)\n"
    assert _ok("describe", "slow").splitlines()[1].split() == ["team:", "audio"]
    assert _refused("pause", "slow") == "error: workflow 'slow' has no schedule\n"

    token, _ = add_user(live.engine.store, "duo", "audio")
    live.engine.store.accounts.set_member("video", "duo", TeamRole.MEMBER)
    monkeypatch.setenv("TRAINFLEET_TOKEN", token)
    assert _refused("describe", "slow") == (
        "error: --team: you are in several teams (audio, video): say which the workflow is in\n"
    )
    assert _ok("describe", "slow", "--team", "audio").splitlines()[1].split() == ["team:", "audio"]
    assert "needs the role team-admin" in _refused("delete", "slow", "--team", "audio")
    monkeypatch.setenv("TRAINFLEET_TOKEN", live.token)
    _ok("delete", "slow", "--team", "audio")


def test_workflow_commands_but_run_need_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAINFLEET_SERVER", raising=False)
    monkeypatch.setenv("TRAINFLEET_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    flow = _folder(tmp_path, FLOW, **{"write.yaml": WRITE})
    needs = (
        "error: stored workflows and their runs live on a server: "
        "give --server or set TRAINFLEET_SERVER\n"
    )
    for args in (("submit", flow), ("list",), ("describe", "x"), ("retry", "x-1"), ("pause", "x")):
        assert _refused(*args) == needs


def test_workflow_run_checks_every_steps_job_before_starting_any(
    tmp_path: Path, data_dir: Path, reap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad step file is named (file, line, field) before any job exists, though the
    step it belongs to would start only after another one."""
    monkeypatch.delenv("TRAINFLEET_SERVER", raising=False)
    broken = "name: broken\nroles:\n  worker: {replicas: -1, command: 'true'}\n"
    flow = _folder(
        tmp_path,
        "kind: Workflow\nname: early\nsteps:\n"
        "  first: {job: {roles: {worker: {command: 'sleep 30'}}}}\n"
        "  second: {file: broken.yaml, needs: [first]}\n",
        **{"broken.yaml": broken},
    )
    done = run_cli("workflow", "run", flow)
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.fullmatch(r"error: .*broken\.yaml:3: roles\.worker\.replicas: .*\n", done.stderr)
    assert done.stdout == ""
    assert "early-" not in run_cli("list").stdout  # no job was stored


def test_workflow_run_fails_a_step_whose_job_is_refused_at_its_start(
    tmp_path: Path, data_dir: Path, reap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What only submitting finds (here a queue that does not exist) fails that step, and
    the run goes on as after any failed step."""
    monkeypatch.delenv("TRAINFLEET_SERVER", raising=False)
    flow = _folder(
        tmp_path,
        "kind: Workflow\nname: late\nsteps:\n"
        "  first: {job: {queue: nowhere, roles: {worker: {command: 'true'}}}}\n"
        "  alert: {job: {roles: {worker: {command: 'echo alerted'}}},"
        " needs: [first], when: failure}\n",
    )
    done = run_cli("workflow", "run", flow)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"\| step first failed: its job was refused: .*nowhere", done.stdout)
    assert re.search(r"\| step alert succeeded", done.stdout), done.stdout
    assert "Traceback" not in done.stderr
