"""Schema revisions: applied on open, only when behind, once under races, never backwards."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from trainfleet.domain.conditions import Code
from trainfleet.domain.records import JobRecord, TaskRecord, TeamRole
from trainfleet.store.connection import Connection
from trainfleet.store.database import Store
from trainfleet.store.errors import StoreError
from trainfleet.store.migrate import HEAD, MIGRATIONS, REVISIONS, current_revision, upgrade
from trainfleet.store.migrate import sqlalchemy_url as alembic_url
from trainfleet.store.targets import parse_target

MakeJob = Callable[..., JobRecord]

# The tables as trainfleet wrote them before Alembic, versioned by PRAGMA user_version.
SCHEMA_BEFORE_ALEMBIC = """
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, framework TEXT NOT NULL, state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '', spec TEXT NOT NULL, source TEXT NOT NULL,
    workdir TEXT NOT NULL, user TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL,
    started_at REAL, finished_at REAL);
CREATE INDEX ix_jobs_created_at ON jobs (created_at);
CREATE TABLE tasks (
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE, role TEXT NOT NULL,
    "index" INTEGER NOT NULL, state TEXT NOT NULL, address TEXT NOT NULL DEFAULT '',
    gpus TEXT NOT NULL DEFAULT '', pid INTEGER, restarts INTEGER NOT NULL DEFAULT 0,
    exit_code INTEGER, reason TEXT NOT NULL DEFAULT '', started_at REAL, finished_at REAL,
    PRIMARY KEY (job_id, role, "index"));
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE, time REAL NOT NULL,
    task TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, message TEXT NOT NULL DEFAULT '');
CREATE INDEX ix_events_job_id ON events (job_id, id);
INSERT INTO jobs VALUES ('old-1', 'old', 'generic', 'succeeded', '', '{}', 'trainfleet',
    '/tmp', 'ada', 10.0, 11.0, 12.0);
INSERT INTO tasks (job_id, role, "index", state) VALUES ('old-1', 'worker', 0, 'succeeded');
INSERT INTO tasks (job_id, role, "index", state) VALUES ('old-1', 'ps', 0, 'succeeded');
INSERT INTO events (job_id, time, state) VALUES ('old-1', 10.0, 'queued');
PRAGMA user_version = 1;
"""


def _revision(target: str) -> str | None:
    connection = Connection(parse_target(target))
    try:
        return current_revision(connection)
    finally:
        connection.close()


def _execute(target: str, *statements: str) -> None:
    connection = Connection(parse_target(target))
    try:
        with connection.transaction() as db:
            for statement in statements:
                db.execute(statement)
    finally:
        connection.close()


def _alembic_config(target: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["url"] = alembic_url(parse_target(target))
    return config


def test_the_known_revisions_are_alembics_history() -> None:
    script = ScriptDirectory.from_config(_alembic_config("unused.db"))
    assert [r.revision for r in reversed(list(script.walk_revisions()))] == list(REVISIONS)
    assert script.get_heads() == [HEAD]


def test_an_empty_database_is_migrated_to_head_on_open(target: str) -> None:
    assert _revision(target) is None
    with Store.open(target) as store:
        assert store.list_jobs() == [] and store.list_tokens() == []
    assert _revision(target) == HEAD


def test_a_database_at_revision_0001_is_upgraded_and_keeps_its_jobs(target: str) -> None:
    upgrade(parse_target(target), "0001")
    assert _revision(target) == "0001"
    _execute(
        target,
        'INSERT INTO jobs (id, name, framework, state, spec, source, workdir, "user", '
        "created_at) VALUES ('old-1', 'old', 'generic', 'queued', '{}', 'trainfleet', '/tmp', "
        "'ada', 10.0)",
        "INSERT INTO tasks (job_id, role, \"index\", state) VALUES ('old-1', 'w', 0, 'queued')",
        "INSERT INTO events (job_id, time, state) VALUES ('old-1', 10.0, 'queued')",
    )
    with Store.open(target) as store:
        assert _revision(target) == HEAD
        job = store.get_job("old-1")
        assert job is not None and job.user == "ada" and job.labels == {}
        assert [t.name for t in store.list_tasks("old-1")] == ["w/0"]
        assert [e.state for e in store.list_events("old-1")] == ["queued"]
        assert [j.id for j in store.find_jobs(user="ada").jobs] == ["old-1"]
        assert store.delete_job("old-1") is True


def test_tokens_and_jobs_from_before_users_are_adopted(target: str) -> None:
    """Revision 0004: admin tokens become the built-in admin's, others users of their own
    name in team default; a non-admin token named 'admin' is revoked; jobs keep users."""
    upgrade(parse_target(target), "0003")
    _execute(
        target,
        "INSERT INTO tokens (id, name, digest, admin, created_at) VALUES "
        "('t1', 'admin', 'd1', TRUE, 1.0), ('t2', 'ops', 'd2', TRUE, 2.0), "
        "('t3', 'alice', 'd3', FALSE, 3.0), ('t4', 'admin', 'd4', FALSE, 4.0)",
        'INSERT INTO jobs (id, name, framework, state, spec, source, workdir, "user", '
        "created_at) VALUES ('a-1', 'a', 'generic', 'queued', '{}', 'trainfleet', '/tmp', "
        "'alice', 10.0), ('o-1', 'o', 'generic', 'queued', '{}', 'trainfleet', '/tmp', "
        "'ops', 11.0)",
        "INSERT INTO queues (name, config, updated_at) VALUES ('gpu', '{\"name\": \"gpu\"}', 1.0)",
    )
    with Store.open(target) as store:
        tokens = {token.id: token for token in store.list_tokens()}
        assert {i: t.user for i, t in tokens.items()} == {
            "t1": "admin", "t2": "admin", "t3": "alice", "t4": "admin"
        }  # fmt: skip
        assert tokens["t4"].revoked and not tokens["t1"].revoked and not tokens["t3"].revoked
        users = {user.name: user for user in store.accounts.list_users()}
        assert users.keys() == {"admin", "alice"} and users["admin"].admin
        assert not users["alice"].admin
        assert store.accounts.memberships("alice") == {"default": TeamRole.MEMBER}
        assert [team.name for team in store.accounts.list_teams()] == ["default"]
        jobs = {job.id: job for job in store.list_jobs()}
        assert (jobs["a-1"].user, jobs["o-1"].user) == ("alice", "admin")
        assert {job.team for job in jobs.values()} == {"default"}
        assert store.accounts.queue_teams() == {"gpu": "default"}


def test_old_rows_are_coded_from_their_reasons(target: str) -> None:
    """Revision 0007: codes from the first words trainfleet wrote, else from the state; a
    queued job's waiting reason moves apart from the reason of its state."""
    upgrade(parse_target(target), "0006")
    job = (
        'INSERT INTO jobs (id, name, framework, state, reason, spec, source, workdir, "user", '
        "created_at) VALUES ('{}', 'old', 'generic', '{}', '{}', '{{}}', 'trainfleet', '/tmp', "
        "'ada', {})"
    )
    rows = {
        "lost-1": ("failed", "lost: the trainfleet process running it ended (pid 7)"),
        "done-1": ("succeeded", "worker/0 succeeded"),
        "wait-1": ("queued", "waiting for quota: queue 'a' has a nominal quota of cpu 1"),
        "pre-1": ("queued", "preempted by b-1 (priority 5)"),
        "port-1": ("failed", "could not reserve ports: [Errno 98] in use"),
    }
    _execute(
        target,
        *(
            job.format(job_id, state, reason.replace("'", "''"), n)
            for n, (job_id, (state, reason)) in enumerate(rows.items())
        ),
        'INSERT INTO tasks (job_id, role, "index", state, reason) VALUES '
        "('lost-1', 'w', 0, 'failed', 'lost: the trainfleet process running it ended (pid 7)'), "
        "('done-1', 'w', 0, 'succeeded', 'exit code 0'), "
        "('done-1', 'ps', 0, 'succeeded', 'stopped: training finished'), "
        "('pre-1', 'w', 0, 'queued', 'exit code 143 (SIGTERM); preempted by b-1 (priority 5)'), "
        "('wait-1', 'w', 0, 'queued', '')",
        "INSERT INTO events (job_id, time, task, state, message) VALUES "
        "('done-1', 1.0, '', 'queued', 'submitted by ada'), "
        "('done-1', 2.0, 'w/0', 'restarting', 'exit code 1; restarting in 1s'), "
        "('done-1', 3.0, '', 'succeeded', 'worker/0 succeeded'), "
        "('pre-1', 4.0, 'w/0', 'queued', 'exit code 143 (SIGTERM); preempted by b-1')",
    )
    with Store.open(target) as store:
        jobs = {job.id: job for job in store.list_jobs()}
        assert {i: (j.code, j.reason, j.waiting_code) for i, j in jobs.items()} == {
            "lost-1": (Code.LOST, rows["lost-1"][1], ""),
            "done-1": (Code.SUCCEEDED, "worker/0 succeeded", ""),
            "wait-1": (Code.SUBMITTED, "", Code.WAITING_FOR_QUOTA),
            "pre-1": (Code.PREEMPTED, rows["pre-1"][1], ""),
            "port-1": (Code.NO_FREE_PORT, rows["port-1"][1], ""),
        }
        assert jobs["wait-1"].waiting == rows["wait-1"][1]
        assert [t.code for t in store.list_tasks("lost-1")] == [Code.LOST]
        assert [t.code for t in store.list_tasks("pre-1")] == [Code.PREEMPTED]
        assert [e.code for e in store.list_events("pre-1")] == [Code.PREEMPTED]
        assert [t.code for t in store.list_tasks("wait-1")] == [Code.SUBMITTED]
        assert [t.code for t in store.list_tasks("done-1")] == [Code.STOPPED, Code.EXITED]  # ps, w
        assert [e.code for e in store.list_events("done-1")] == [
            Code.SUBMITTED, Code.RESTARTING, Code.SUCCEEDED
        ]  # fmt: skip
    command.downgrade(_alembic_config(target), "0006")
    with Store.open(target) as store:  # down and up again: the waiting reason is kept
        assert store.get_job("wait-1").waiting == rows["wait-1"][1]  # type: ignore[union-attr]


def test_downgrade_to_0001_and_back_up(target: str, make_job: MakeJob) -> None:
    with Store.open(target) as store:
        store.add_job(make_job(), [TaskRecord(job_id="demo-1", role="w", index=0)])
    command.downgrade(_alembic_config(target), "0001")
    assert _revision(target) == "0001"
    with Store.open(target) as store:
        assert _revision(target) == HEAD
        assert [t.name for t in store.list_tasks("demo-1")] == ["w/0"]


def test_a_newer_revision_is_refused_and_left_alone(target: str, make_job: MakeJob) -> None:
    with Store.open(target) as store:
        store.add_job(make_job(), [])
    _execute(target, "UPDATE alembic_version SET version_num = '0099'")
    with pytest.raises(StoreError, match=r"revision '0099', newer than this trainfleet knows"):
        Store.open(target)
    assert _revision(target) == "0099"
    _execute(target, f"UPDATE alembic_version SET version_num = '{HEAD}'")
    with Store.open(target) as store:
        assert [job.id for job in store.list_jobs()] == ["demo-1"]


def test_a_sqlite_file_from_before_alembic_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "trainfleet.db"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA_BEFORE_ALEMBIC)
    with Store.open(path) as store:
        job = store.get_job("old-1")
        assert job is not None and job.finished_at == 12.0 and job.labels == {}
        assert [t.name for t in store.list_tasks("old-1")] == ["worker/0", "ps/0"]  # as stored
        assert [e.state for e in store.list_events("old-1")] == ["queued"]
    assert _revision(str(path)) == HEAD


HEAVY = ("sqlalchemy", "alembic", "psycopg")
OPEN_AND_WRITE = """
import json, sys, time
from trainfleet.store.database import Store
from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobRecord, State, TaskRecord, TokenRecord
started = time.perf_counter()
store = Store.open(sys.argv[1])
opened = time.perf_counter() - started
job = JobRecord(id="fast-1", name="fast", framework="generic", spec="{}", workdir="/tmp",
                created_at=time.time(), labels={"a": "b"})
store.add_job(job, [TaskRecord(job_id="fast-1", role="w", index=0)])
store.transition("fast-1", State.RUNNING, Condition(Code.STARTED), task=("w", 0))
store.transition("fast-1", State.RUNNING, Condition(Code.STARTED))
store.find_jobs(labels={"a": "b"})
token = str(time.time_ns())
store.add_token(TokenRecord(id=token, name=token, digest=token, created_at=1.0))
store.delete_job("fast-1")
heavy = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in HEAVY})
print(json.dumps({"heavy": heavy, "open_s": opened}))
"""


def _open_in_fresh_interpreter(target: Path) -> dict[str, object]:
    script = f"HEAVY = {HEAVY!r}\n{OPEN_AND_WRITE}"
    result = subprocess.run(
        [sys.executable, "-c", script, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dict(json.loads(result.stdout))


def test_a_current_sqlite_store_opens_and_writes_without_sqlalchemy(tmp_path: Path) -> None:
    path = tmp_path / "trainfleet.db"
    first = _open_in_fresh_interpreter(path)
    assert "alembic" in first["heavy"] and "sqlalchemy" in first["heavy"]  # type: ignore[operator]
    assert _open_in_fresh_interpreter(path)["heavy"] == []


RACE = """
import sys, time
import alembic.command, sqlalchemy  # imported up front, so the opens really collide
from trainfleet.store.database import Store
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
Store.open(sys.argv[1]).close()
"""


def test_stores_opening_a_new_database_at_once_migrate_it_once(target: str) -> None:
    start = time.time() + 2
    racers = [
        subprocess.Popen([sys.executable, "-c", RACE, target, str(start)], stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    errors = [racer.communicate(timeout=120)[1].decode() for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0, 0], errors
    assert _revision(target) == HEAD


def test_store_error_on_a_target_it_cannot_use(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unsupported database URL scheme 'mysql'"):
        Store.open("mysql://u:p@h/db")
    with pytest.raises(StoreError, match="needs a file path"):
        Store.open("sqlite:///:memory:")


def test_a_read_only_store_never_upgrades_and_says_why_it_cannot_open(target: str) -> None:
    upgrade(parse_target(target), REVISIONS[-2])
    with pytest.raises(StoreError, match=f"at schema {REVISIONS[-2]}, not {HEAD}"):
        Store.open(target, read_only=True)
    with Store.open(target) as writer:  # an upgrade, by a store that may write
        assert writer.get_job("none") is None
    with Store.open(target, read_only=True) as reader:
        assert reader.get_job("none") is None
