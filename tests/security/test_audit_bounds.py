"""The audit trail cannot be flooded, and can be kept short: refusals to a valid token are
recorded at most 10 a minute per user and 100 a minute in all (the next record counts
those left out), and ``--audit-retention DAYS`` prunes older records at start and then
daily, recording each pruning; on SQLite and on PostgreSQL, against real servers.

Needs no root: unlike the rest of this suite, these servers isolate no teams.
"""

from __future__ import annotations

import re
import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from helpers import fresh_postgres_database, run_cli, wait_for
from server.harness import LiveServer, ServerProcess, add_user

from trainfleet.client import Client
from trainfleet.control.assembly import engine_at
from trainfleet.control.services.audit import AuditPruner
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.records import AuditRecord, TeamRole
from trainfleet.server.throttle import Throttle
from trainfleet.store.audit import PRUNE_BATCH
from trainfleet.store.database import Store
from trainfleet.wire import API_PREFIX as API

TEAM = "vision"
JOB = f"name: nope\nqueue: {TEAM}\nroles:\n  worker: {{command: 'true'}}\n"
YAML = {"Content-Type": "application/yaml"}
DAY = 86_400.0
CROWD = 12
"""Viewers of the overall bound's test: more than 100 records' worth at 10 each."""


@dataclass
class Served:
    """A server with team vision and viewers of it (``viewer``, ``watcher``, ``v0``...)."""

    server: LiveServer
    tokens: dict[str, str]

    def refuse(self, user: str, times: int) -> None:
        """``times`` submissions by ``user``, each answered 403."""
        headers = {**YAML, "Authorization": f"Bearer {self.tokens[user]}"}
        with httpx.Client(base_url=self.server.url, headers=headers, timeout=30) as http:
            for _ in range(times):
                assert http.post(f"{API}/jobs", content=JOB).status_code == 403

    def records(self, since: float, user: str) -> list[AuditRecord]:
        """``user``'s records since ``since``, newest first (what is queued written first)."""
        with Client(self.server.url, self.server.token, timeout=30) as admin:
            return list(admin.audit(since=since, user=user, limit=None))

    def fresh_window(self) -> Throttle:
        """A new minute for the refusals' throttle, of the bounds the server has."""
        auditor = self.server.app.state.auditor
        bounds = (auditor.refusals.per_source, auditor.refusals.overall, auditor.refusals.seconds)
        assert bounds == (10, 100, 60.0)
        auditor.refusals = Throttle()
        return auditor.refusals  # type: ignore[no-any-return]


def next_minute(throttle: Throttle) -> None:
    """Let the throttle's clock run a minute ahead: its next event opens a new window."""
    throttle.clock = lambda: time.monotonic() + 61


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    database = fresh_postgres_database() if request.param == "postgresql" else nullcontext(None)
    with database as url:
        root = tmp_path_factory.mktemp("bounds") / "data"
        server = LiveServer(root, engine=engine_at(root, url, vault=True)).start()
        try:
            with Client(server.url, server.token) as admin:
                admin.create_team(TEAM)
            names = ["viewer", "watcher", *(f"v{n}" for n in range(CROWD))]
            store = server.engine.store
            tokens = {name: add_user(store, name, TEAM, TeamRole.VIEWER)[0] for name in names}
            yield Served(server, tokens)
        finally:
            server.stop()


def test_a_viewer_hammering_a_forbidden_change_writes_the_bound_then_a_count(
    served: Served,
) -> None:
    throttle = served.fresh_window()
    start = time.time()
    served.refuse("viewer", 2000)
    recorded = served.records(start, "viewer")
    assert len(recorded) == 10
    for record in recorded:
        assert record.action == "job.submit" and record.team == TEAM
        assert record.outcome.startswith("403 ") and record.detail == f"nope in queue {TEAM}"
    next_minute(throttle)
    served.refuse("viewer", 1)
    count, *rest = served.records(start, "viewer")
    assert rest == recorded and count.outcome.startswith("403 ")
    assert count.detail == (
        f"nope in queue {TEAM}; 1990 more from this user not recorded (throttled)"
    )


def test_two_users_are_bounded_separately(served: Served) -> None:
    throttle = served.fresh_window()
    start = time.time()
    for _ in range(3):
        served.refuse("viewer", 10)
        served.refuse("watcher", 10)
    assert len(served.records(start, "viewer")) == len(served.records(start, "watcher")) == 10
    next_minute(throttle)
    served.refuse("watcher", 1)
    assert len(served.records(start, "viewer")) == 10  # the watcher's minute is not the viewer's
    newest = served.records(start, "watcher")[0]
    assert newest.detail.endswith("; 20 more from this user not recorded (throttled)")


def test_all_users_together_get_100_a_minute(served: Served) -> None:
    throttle = served.fresh_window()
    start = time.time()
    crowd = [f"v{n}" for n in range(CROWD)]
    for user in crowd:
        served.refuse(user, 10)
    counts = [len(served.records(start, user)) for user in crowd]
    assert counts == [10] * 10 + [0] * (CROWD - 10)
    next_minute(throttle)
    served.refuse(crowd[-1], 1)
    (late,) = served.records(start, crowd[-1])
    assert late.detail.endswith("; 10 more from this user not recorded (throttled)")


def _record(when: float, target: str) -> AuditRecord:
    return AuditRecord(time=when, user="someone", action="job.submit", target=target)


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str | None]]:
    """A data directory and the server's database URL (None: SQLite in the directory)."""
    with fresh_postgres_database() if request.param == "postgresql" else nullcontext(None) as url:
        yield tmp_path / "data", url


def _open(root: Path, url: str | None) -> Store:
    root.mkdir(exist_ok=True)
    return Store.open(url or DataDir(root).database)


def test_retention_prunes_old_records_at_start_and_audits_it(
    database: tuple[Path, str | None],
) -> None:
    root, url = database
    now = time.time()
    old = [_record(now - 40 * DAY - n, f"old-{n}") for n in range(PRUNE_BATCH + 3)]
    kept = [_record(now - 29 * DAY, "recent"), _record(now, "new")]
    store = _open(root, url)
    try:
        assert store.audit.record_many([*old, *kept])
    finally:
        store.close()

    token = f"admin-{secrets.token_urlsafe(16)}"
    env = {"TRAINFLEET_ADMIN_TOKEN": token, **({"TRAINFLEET_DATABASE_URL": url} if url else {})}
    server = ServerProcess(root, env=env, args=["--audit-retention", "30"])
    try:
        with Client(server.url, token, timeout=30) as admin:
            wait_for(lambda: list(admin.audit(action="audit.prune")), 30, "a pruning")
            (pruned,) = admin.audit(action="audit.prune")
            targets = {r.target for r in admin.audit(limit=None, user="someone")}
    finally:
        assert server.stop() == -signal.SIGTERM
    assert targets == {"recent", "new"}
    assert (pruned.user, pruned.token, pruned.team, pruned.outcome) == ("", "", "", "ok")
    match = re.fullmatch(
        r"removed (\d+) record\(s\) older than (\S+) \(retention 30 days\)", pruned.detail
    )
    assert match, pruned.detail
    assert int(match[1]) == len(old)
    up_to = datetime.fromisoformat(match[2]).timestamp()
    assert abs(up_to - (pruned.time - 30 * DAY)) < 1 and abs(pruned.time - time.time()) < 120


def test_the_pruner_prunes_again_each_interval_and_stops(
    database: tuple[Path, str | None],
) -> None:
    root, url = database
    store = _open(root, url)
    try:
        pruner = AuditPruner(store.audit, days=1, interval=0.2)
        with pruner:

            def prunings() -> list[AuditRecord]:
                return store.audit.find(action="audit.prune")

            wait_for(prunings, 30, "the first pruning")
            store.audit.record(_record(time.time() - 2 * DAY, "late"))
            wait_for(lambda: "removed 1 " in prunings()[0].detail, 30, "a second pruning")
        assert not pruner._thread.is_alive()
        assert all(r.target != "late" for r in store.audit.find(limit=1000))
        stopped = len(prunings())
        time.sleep(0.5)
        assert len(prunings()) == stopped
    finally:
        store.close()


@pytest.mark.parametrize(
    ("bad", "given"), [("0", "flag"), ("-3", "flag"), ("abc", "flag"), ("nan", "flag"),
                       ("1e9", "flag"), ("two", "variable")]
)  # fmt: skip
def test_a_bad_retention_is_refused_at_start_naming_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str, given: str
) -> None:
    args: list[str | Path] = ["--data-dir", tmp_path / "data", "server", "--port", "0"]
    if given == "flag":
        args += ["--audit-retention", bad]
    else:
        monkeypatch.setenv("TRAINFLEET_AUDIT_RETENTION", bad)
    done = run_cli(*args, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: --audit-retention {bad!r}: expected a number of days")
    assert "Traceback" not in done.stderr and "Uvicorn running" not in done.stdout
