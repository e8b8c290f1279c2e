"""Tasks of each team as its own Unix account (``trainfleet server --isolate-teams``), on
SQLite and on PostgreSQL: a member's job tries to read the server's database and secret
key, another team's log and working directory, and the server's environment
(``/proc/<server pid>/environ``), and fails on each; it gets none of the server's
environment, and works in its own folder. Needs root (the server switches accounts):
skipped elsewhere, failed under CI.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest
from container_images import base_image
from helpers import fresh_postgres_database, run_cli

from trainfleet.backends.accounts import TeamAccounts, account_name
from trainfleet.client import Client
from trainfleet.domain.errors import Misconfigured
from trainfleet.wire import UserBody

from .harness import ServerProcess

MARKER = "server-only-marker-7f3a"
PROBE = """\
try() { if $2 > /dev/null 2>&1; then echo "READ $1"; else echo "denied $1"; fi; }
try database "cat $DATA/trainfleet.db"
try database-wal "cat $DATA/trainfleet.db-wal"
try key "cat $DATA/secret.key"
try listing "ls $DATA/jobs"
try their-log "cat $DATA/jobs/$THEIRS/logs/worker-0.log"
try their-folder "ls $DATA/jobs/$THEIRS/workdir"
try their-file "cat $DATA/jobs/$THEIRS/workdir/notes.txt"
try server-environ "cat /proc/$SERVER/environ"
echo "marker=${TRAINFLEET_TEST_MARKER:-absent} uid=$(id -u) home=$HOME"
echo mine > own.txt && cat own.txt
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    with fresh_postgres_database() as url:
        yield url


def _run(server: ServerProcess, token: str, project: Path) -> tuple[int, str]:
    env = {**os.environ, "TRAINFLEET_SERVER": server.url, "TRAINFLEET_TOKEN": token}
    os.environ.update(env)
    try:
        done = run_cli("run", project / "job.yaml", cwd=project)
    finally:
        for name in ("TRAINFLEET_SERVER", "TRAINFLEET_TOKEN"):
            os.environ.pop(name, None)
    return done.returncode, done.stdout + done.stderr


def test_a_task_reads_nothing_of_the_server_or_of_another_team(
    passable: Path, database: str | None
) -> None:
    data, job_id, log = _probe(passable, database, image=None)
    account = pwd.getpwnam("tf-vision")
    lines = log.splitlines()
    assert [line for line in lines if line.startswith("READ")] == [], log
    probes = ("database", "database-wal", "key", "listing", "their-log", "their-folder")
    for probe in (*probes, "their-file", "server-environ"):
        assert f"denied {probe}" in lines, log
    workdir = data / "jobs" / job_id / "workdir"
    assert f"marker=absent uid={account.pw_uid} home={workdir}" in lines, log
    assert lines[-1] == "mine", log
    assert (workdir / "own.txt").stat().st_uid == account.pw_uid
    assert (data / "jobs" / job_id / "logs" / "worker-0.log").stat().st_uid == 0


def test_a_container_task_runs_as_its_teams_account_too(passable: Path) -> None:
    """With an image, the container runs as the team's account (podman --user), sees only
    its own folders, and writes its files as that account."""
    data, job_id, log = _probe(passable, None, image=base_image())
    account = pwd.getpwnam("tf-vision")
    lines = log.splitlines()
    # The runtime made the folders above the job's own inside the container: listing
    # them shows that one job alone.
    assert [line for line in lines if line.startswith("READ")] == ["READ listing"], log
    for probe in ("database", "key", "their-log", "their-folder", "their-file"):
        assert f"denied {probe}" in lines, log
    workdir = data / "jobs" / job_id / "workdir"
    assert f"marker=absent uid={account.pw_uid} home={workdir}" in lines, log
    assert (workdir / "own.txt").stat().st_uid == account.pw_uid


def _probe(passable: Path, database: str | None, image: str | None) -> tuple[Path, str, str]:
    """A server isolating teams; bo's job of team audio, then ana's probe of team vision
    (in ``image``, if given): the data directory, the probe's job id and its log."""
    data = passable / "data"
    env = {"TRAINFLEET_TEST_MARKER": MARKER}
    if database:
        env["TRAINFLEET_DATABASE_URL"] = database
    server = ServerProcess(data, env=env, args=["--isolate-teams"])
    try:
        assert server.admin_token
        with Client(server.url, server.admin_token) as admin:
            admin.create_team("vision")
            admin.create_team("audio")
            ana = admin.create_user(UserBody(name="ana", team="vision")).token
            bo = admin.create_user(UserBody(name="bo", team="audio")).token

        theirs = passable / "theirs"
        theirs.mkdir()
        (theirs / "notes.txt").write_text("audio's notes\n")
        (theirs / "job.yaml").write_text(
            "name: theirs\nqueue: audio\nroles:\n  worker: {command: 'cat notes.txt'}\n"
        )
        code, out = _run(server, bo, theirs)
        assert code == 0, out
        with Client(server.url, bo) as client:
            (their_job,) = list(client.list_jobs())
            assert client.read_log(their_job.id, "worker", 0) == b"audio's notes\n"

        mine = passable / "mine"
        mine.mkdir()
        (mine / "probe.sh").write_text(PROBE)
        (mine / "job.yaml").write_text(
            "name: probe\nqueue: vision\nenv:\n"
            f"  DATA: {data}\n  THEIRS: {their_job.id}\n  SERVER: '{server.process.pid}'\n"
            + (f"image: {image}\n" if image else "")
            + "roles:\n  worker: {command: sh probe.sh}\n"
        )
        code, out = _run(server, ana, mine)
        assert code == 0, out
        with Client(server.url, ana) as client:
            job = next(j for j in client.list_jobs() if j.name == "probe")
            return data, job.id, client.read_log(job.id, "worker", 0).decode()
    finally:
        server.stop()


def test_isolation_needs_root_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without root the server refuses --isolate-teams at start, naming the flag (the
    effective uid is faked: the server's python lies under root's home here, out of an
    unprivileged account's reach)."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(Misconfigured, match=r"--isolate-teams: .* running as root"):
        TeamAccounts.check()
    assert account_name("x" * 40) == f"tf-{'x' * 20}-{account_name('x' * 40)[-8:]}"
    assert len(account_name("x" * 63)) <= 32 and account_name("vision") == "tf-vision"
