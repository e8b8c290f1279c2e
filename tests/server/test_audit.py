"""The audit trail against a real server on SQLite and on PostgreSQL: each change and
each refused attempt recorded with who, what, team, source and outcome; failed
authentications recorded, a few a minute per source; administrators read every record,
team-admins their teams', others none; nothing in the API changes or deletes a record,
and no record holds a token's secret."""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from helpers import fresh_postgres_database, run_cli

from trainfleet.cli.audit import since_of
from trainfleet.cli.errors import UserError
from trainfleet.client import Client, Forbidden, NotFound
from trainfleet.control.assembly import engine_at
from trainfleet.control.services.tokens import digest
from trainfleet.domain.records import AuditRecord, TeamRole
from trainfleet.server.throttle import Throttle
from trainfleet.spec.loading import load_job_text
from trainfleet.store.errors import StoreUnavailable
from trainfleet.wire import API_PREFIX as API
from trainfleet.wire import QueueBody, UserBody

from .harness import LiveServer, add_user

VISION, AUDIO = "vision", "audio"
JOB = "name: {name}\nqueue: {queue}\nroles:\n  worker: {{command: '{command}'}}\n"
USERS = {
    "lead": (VISION, TeamRole.TEAM_ADMIN),
    "member": (VISION, TeamRole.MEMBER),
    "mate": (VISION, TeamRole.MEMBER),
    "viewer": (VISION, TeamRole.VIEWER),
    "stranger": (AUDIO, TeamRole.MEMBER),
}
LOCAL = "127.0.0.1"


@dataclass
class Trail:
    """A server with teams vision and audio, and users of each role."""

    server: LiveServer
    tokens: dict[str, str]
    token_ids: dict[str, str]
    secrets: list[str] = field(default_factory=list)
    """Every token secret handed out, to look for in the records."""

    def client(self, user: str) -> Client:
        return Client(self.server.url, self.tokens[user], timeout=30)

    def records(self, since: float, **filters: object) -> list[AuditRecord]:
        """Every record since ``since`` that an administrator reads, newest first."""
        with self.client("admin") as admin:
            return list(admin.audit(since=since, limit=None, **filters))  # type: ignore[arg-type]

    def job(self, owner: str, team: str) -> str:
        """An ended job of ``owner`` in ``team``'s queue, stored by the engine (unrecorded)."""
        text = JOB.format(name=f"j{secrets.token_hex(3)}", queue=team, command="true")
        engine = self.server.engine
        job = engine.submit(
            load_job_text(text, "job.yaml").spec,
            engine.data_dir.root,
            user=owner,
            team=team,
            start=True,
        )
        engine.wait_ended(job.id, 60)
        return job.id


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def trail(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Trail]:
    database = fresh_postgres_database() if request.param == "postgresql" else nullcontext(None)
    with database as url:
        root = tmp_path_factory.mktemp("audit") / "data"
        server = LiveServer(root, engine=engine_at(root, url, vault=True)).start()
        try:
            store = server.engine.store
            with Client(server.url, server.token) as admin:
                admin.create_team(VISION)
                admin.create_team(AUDIO)
            tokens = {"admin": server.token}
            ids = {"admin": store.list_tokens(user="admin")[0].id}
            for name, (team, role) in USERS.items():
                tokens[name], record = add_user(store, name, team, role)
                ids[name] = record.id
            add_user(store, "extra", None)
            yield Trail(server, tokens, ids, secrets=list(tokens.values()))
        finally:
            server.stop()


def test_each_change_is_recorded_with_who_what_team_source_and_outcome(trail: Trail) -> None:
    start = time.time()
    team, user = f"t{secrets.token_hex(3)}", f"u{secrets.token_hex(3)}"
    with trail.client("member") as member:
        job = member.submit(JOB.format(name="audited", queue=VISION, command="sleep 30"))
        member.cancel(job.id)
        trail.server.engine.wait_ended(job.id, 60)
        member.delete(job.id)
        spare = member.create_token("spare")
        trail.secrets.append(spare.secret)
        member.revoke_token(spare.token.id)
    with trail.client("lead") as lead:
        lead.set_member(VISION, "extra", "viewer")
        lead.remove_member(VISION, "extra")
        lead.put_queue(VISION, QueueBody(cohort="research"))
    with trail.client("admin") as admin:
        admin.create_team(team)
        made = admin.create_user(UserBody(name=user, team=VISION, role=TeamRole.VIEWER))
        trail.secrets.append(made.token)
        admin.disable_user(user)

    records = trail.records(start)
    assert [(r.action, r.user, r.target, r.team) for r in reversed(records)] == [
        ("job.submit", "member", job.id, VISION),
        ("job.stop", "member", job.id, VISION),
        ("job.delete", "member", job.id, VISION),
        ("token.create", "member", spare.token.id, ""),
        ("token.revoke", "member", spare.token.id, ""),
        ("team.member.set", "lead", "extra", VISION),
        ("team.member.remove", "lead", "extra", VISION),
        ("queue.put", "lead", VISION, VISION),
        ("team.create", "admin", team, team),
        ("user.create", "admin", user, VISION),
        ("user.disable", "admin", user, ""),
    ]
    for record in records:
        assert record.outcome == "ok" and record.source == LOCAL, record
        assert record.token == trail.token_ids[record.user], record
        assert start <= record.time <= time.time()
    details = {r.action: r.detail for r in records}
    assert details["job.submit"] == f"audited in queue {VISION}"
    assert details["team.member.set"] == "viewer"
    assert details["queue.put"].startswith("changed: ") and "research" in details["queue.put"]
    assert details["user.create"].startswith("viewer of team vision, first token ")


def test_refused_changes_are_recorded_with_their_status(trail: Trail) -> None:
    start = time.time()
    theirs = trail.job("mate", VISION)
    with trail.client("stranger") as stranger:
        with pytest.raises(NotFound):
            stranger.cancel(theirs)
        with pytest.raises(NotFound):
            stranger.delete(theirs)
    with trail.client("member") as member:
        with pytest.raises(Forbidden):
            member.cancel(theirs)
        with pytest.raises(Forbidden):
            member.create_team("nope")
    with trail.client("viewer") as viewer, pytest.raises(Forbidden):
        viewer.submit(JOB.format(name="nope", queue=VISION, command="true"))
    lead = {"Authorization": f"Bearer {trail.tokens['lead']}"}
    bad = httpx.put(f"{trail.server.url}{API}/queues/{VISION}", json={"nominal": 5}, headers=lead)
    assert bad.status_code == 422

    found = {(r.action, r.user): r for r in trail.records(start)}
    assert len(found) == 6
    stop, delete = found["job.stop", "stranger"], found["job.delete", "stranger"]
    assert stop.outcome == delete.outcome == f"404 no job {theirs!r}"
    assert stop.team == delete.team == VISION and stop.target == delete.target == theirs
    refused = found["job.stop", "member"]
    assert refused.outcome.startswith("403 ") and "team-admin" in refused.outcome
    assert refused.team == VISION and refused.detail == "was succeeded"
    team = found["team.create", "member"]
    assert team.outcome.startswith("403 ") and "administrator" in team.outcome
    assert team.target == "nope"
    submit = found["job.submit", "viewer"]
    assert submit.outcome.startswith("403 ") and submit.team == VISION
    assert submit.detail == f"nope in queue {VISION}" and submit.target == ""
    malformed = found["queue.put", "lead"]
    assert malformed.outcome.startswith("422 body.nominal") and malformed.target == VISION


def test_failed_authentications_are_recorded_a_few_a_minute_per_source(trail: Trail) -> None:
    auditor = trail.server.app.state.auditor
    auditor.throttle = Throttle(per_source=3, overall=100, seconds=1.0)
    wrong = f"wrong-{secrets.token_urlsafe(16)}"
    trail.secrets.append(wrong)
    start = time.time()
    try:
        for _ in range(8):
            answer = httpx.get(
                f"{trail.server.url}{API}/jobs", headers={"Authorization": f"Bearer {wrong}"}
            )
            assert answer.status_code == 401
        time.sleep(1.1)
        assert httpx.post(f"{trail.server.url}{API}/jobs", content="x").status_code == 401
    finally:
        auditor.throttle = Throttle()
    newest, *first = trail.records(start, action="auth.failed")
    assert len(first) == 3
    for record in first:
        assert (record.user, record.token, record.team) == ("", "", "")
        assert record.outcome == "401 unknown token" and record.source == LOCAL
        assert record.target == f"{API}/jobs" and record.detail == f"GET {API}/jobs"
    assert newest.outcome == "401 no token"
    assert newest.detail == f"POST {API}/jobs; 5 more from this source not recorded (throttled)"


def test_a_change_goes_on_when_its_record_cannot_be_stored(
    trail: Trail, caplog: pytest.LogCaptureFixture
) -> None:
    class Down:
        def write(self, body: object) -> None:
            raise StoreUnavailable("the store is unavailable: connection refused")

    audit = trail.server.app.state.auditor.trail
    connection, audit._db = audit._db, Down()
    try:
        with (
            caplog.at_level(logging.WARNING, logger="trainfleet.audit"),
            trail.client("member") as member,
        ):
            made = member.create_token(f"k{secrets.token_hex(3)}")
            trail.server.app.state.auditor.writer.flush()  # written behind the answer
    finally:
        audit._db = connection
    trail.secrets.append(made.secret)
    assert "audit record not stored" in caplog.text and made.token.id in caplog.text
    assert made.secret not in caplog.text


def test_admins_read_every_record_team_admins_their_teams_others_none(trail: Trail) -> None:
    start = time.time()
    with trail.client("stranger") as stranger:
        stranger.cancel(stranger.submit(JOB.format(name="a", queue=AUDIO, command="true")).id)
    with trail.client("member") as member:
        member.cancel(member.submit(JOB.format(name="v", queue=VISION, command="true")).id)
    httpx.get(f"{trail.server.url}{API}/jobs")  # a failed authentication: of no team
    assert {r.team for r in trail.records(start)} == {VISION, AUDIO, ""}
    with trail.client("lead") as lead:
        seen = list(lead.audit(since=start))
        assert seen and {r.team for r in seen} == {VISION}
        assert list(lead.audit(since=start, team=VISION)) == seen
        with pytest.raises(NotFound, match="no team 'audio'"):
            list(lead.audit(team=AUDIO))
    for name in ("member", "viewer", "stranger"):
        with trail.client(name) as client, pytest.raises(Forbidden, match="team-admin"):
            list(client.audit())


def test_pages_neither_repeat_nor_skip(trail: Trail) -> None:
    with trail.client("admin") as admin:
        whole = [r.id for r in admin.audit(limit=None)]
        assert whole == sorted(whole, reverse=True) and len(set(whole)) == len(whole)
        assert [r.id for r in admin.audit(limit=None, page_size=3)] == whole
        assert [r.id for r in admin.audit(limit=5, page_size=2)] == whole[:5]
        page = admin.audit_page(limit=2)
        assert page.next_before == page.records[-1].id == whole[1]
        assert {r.action for r in admin.audit(action="job.stop")} == {"job.stop"}
        assert {r.action.split(".")[0] for r in admin.audit(action="job")} == {"job"}


def test_the_cli_shows_the_trail(trail: Trail, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINFLEET_SERVER", trail.server.url)
    monkeypatch.setenv("TRAINFLEET_TOKEN", trail.tokens["lead"])
    done = run_cli("audit", "--action", "job", "--since", "1h", "-o", "json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown and all(r["team"] == VISION and r["action"].startswith("job.") for r in shown)
    table = run_cli("audit", "--user", "member", "--limit", "3")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == [
        "ID", "TIME", "USER", "ACTION", "TARGET", "TEAM", "SOURCE", "OUTCOME", "DETAIL"
    ]  # fmt: skip
    assert len(rows) == 3 and all(" member " in row for row in rows)
    bad = run_cli("audit", "--since", "last tuesday")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --since 'last tuesday'")
    monkeypatch.setenv("TRAINFLEET_TOKEN", trail.tokens["member"])
    refused = run_cli("audit")
    assert refused.returncode == 2 and "needs the role team-admin" in refused.stderr


def test_nothing_in_the_api_changes_or_deletes_a_record(trail: Trail) -> None:
    url = trail.server.url
    document = httpx.get(f"{url}{API}/openapi.json").json()
    audit = {path: set(ops) for path, ops in document["paths"].items() if "/audit" in path}
    assert audit == {f"{API}/audit": {"get"}}
    admin = {"Authorization": f"Bearer {trail.tokens['admin']}"}
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert httpx.request(method, f"{url}{API}/audit", headers=admin).status_code == 405
        assert httpx.request(method, f"{url}{API}/audit/1", headers=admin).status_code == 404


def test_no_record_holds_a_token_secret_or_its_digest(trail: Trail) -> None:
    """Last in this module: every secret the tests handed out, looked for everywhere."""
    text = json.dumps([r.to_dict() for r in trail.records(0)])
    assert len(trail.secrets) > len(USERS)
    for secret in trail.secrets:
        assert secret not in text and digest(secret) not in text


def test_since_takes_a_duration_or_an_iso_time() -> None:
    assert since_of("90m", now=10_000.0) == 10_000.0 - 5400
    assert since_of("2d", now=200_000.0) == 200_000.0 - 2 * 86400
    assert since_of("2025-01-31T12:00:00+00:00") == 1738324800.0
    for bad in ("yesterday", "1y", "-1h", ""):
        with pytest.raises(UserError, match="--since"):
            since_of(bad)


def test_the_cli_needs_a_server_for_the_trail(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINFLEET_SERVER")}
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "trainfleet", "audit"],
        capture_output=True,
        text=True,
        env={**env, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
        timeout=60,
    )
    assert done.returncode == 2 and "the audit trail lives on a server" in done.stderr
