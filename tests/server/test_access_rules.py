"""Every endpoint x every role x an object of the caller's own, of its team and of another
team, against a real server on SQLite and on PostgreSQL, through the API and the SDK (and
the CLI, on SQLite: the same API underneath); what each answer should be comes from
``access.RULES``, the table the server checks with. A test of the table itself says what
the policy is, so that the table cannot drift unnoticed either.
"""

from __future__ import annotations

import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from helpers import fresh_postgres_database, wait_for

from trainfleet.cli.main import cli
from trainfleet.client import BadRequest, Client, Conflict, Forbidden, NotFound, Unauthorized
from trainfleet.control.access import RULES, Action, Caller
from trainfleet.control.assembly import engine_at
from trainfleet.domain.records import TeamRole
from trainfleet.spec.loading import load_job_text
from trainfleet.store.database import Store
from trainfleet.wire import API_PREFIX as API
from trainfleet.wire import QueueBody, UserBody
from trainfleet.workflows.firing import new_run

from .harness import LiveServer, add_user

VISION, AUDIO = "vision", "audio"
ROLES = {
    "lead": TeamRole.TEAM_ADMIN,
    "member": TeamRole.MEMBER,
    "viewer": TeamRole.VIEWER,
}
JOB = (
    "name: {name}\nqueue: {queue}\nroles:\n"
    "  worker: {{command: 'echo done > \"$TRAINFLEET_OUTPUT_DIR/result.txt\"'}}\n"
)
"""A job whose task leaves an output, ``result.txt``."""
FLOW = (
    "kind: Workflow\nname: {name}\nschedule: {{cron: '0 0 1 1 *', paused: true}}\n"
    "steps:\n  a: {{job: {{roles: {{worker: {{command: 'true'}}}}}}}}\n"
)
"""A workflow of one quick step, scheduled once a year, paused."""


def test_the_rules_say_what_the_policy_is() -> None:
    """admin: everything; team-admin: its team; member: submit, see the team's jobs, stop
    and delete its own; viewer: read its team's jobs."""
    member = Caller("m", teams={VISION: TeamRole.MEMBER})
    viewer = Caller("v", teams={VISION: TeamRole.VIEWER})
    lead = Caller("l", teams={VISION: TeamRole.TEAM_ADMIN})
    admin = Caller("a", admin=True)
    assert all(admin.decide(action).allowed for action in Action)
    assert member.decide(Action.SUBMIT_JOB, VISION).allowed
    assert not viewer.decide(Action.SUBMIT_JOB, VISION).allowed
    assert viewer.decide(Action.READ_JOB, VISION).allowed
    assert member.decide(Action.STOP_JOB, VISION, owner="m").allowed
    assert not member.decide(Action.STOP_JOB, VISION, owner="x").allowed
    assert not member.decide(Action.DELETE_JOB, VISION, owner="x").allowed
    assert not viewer.decide(Action.STOP_JOB, VISION, owner="v").allowed
    assert lead.decide(Action.DELETE_JOB, VISION, owner="x").allowed
    assert lead.decide(Action.CHANGE_MEMBERS, VISION).allowed
    assert not member.decide(Action.CHANGE_QUEUE, VISION).allowed
    assert not lead.decide(Action.READ_JOB, AUDIO).visible
    assert lead.decide(Action.READ_AUDIT, VISION).allowed
    assert not member.decide(Action.READ_AUDIT, VISION).allowed
    for only_admins in (Action.MANAGE_USERS, Action.MANAGE_TEAMS, Action.READ_METRICS):
        assert not lead.decide(only_admins).allowed
    # A notebook runs as its owner's: opened by its owner (and administrators) alone.
    assert member.decide(Action.OPEN_NOTEBOOK, VISION, owner="m").allowed
    assert not viewer.decide(Action.OPEN_NOTEBOOK, VISION, owner="v").allowed
    assert not lead.decide(Action.OPEN_NOTEBOOK, VISION, owner="x").allowed
    assert lead.decide(Action.OPEN_NOTEBOOK, VISION, owner="x").visible
    assert not lead.decide(Action.OPEN_NOTEBOOK, AUDIO, owner="x").visible


@dataclass
class World:
    """A server with two teams, a user of each role in ``vision`` and one in ``audio``."""

    server: LiveServer
    tokens: dict[str, str]
    callers: dict[str, Caller]

    @property
    def store(self) -> Store:
        return self.server.engine.store

    def secret(self, owner: str, team: str) -> str:
        """A secret of ``owner`` in ``team``, stored by the server's own service."""
        name = f"s{secrets.token_hex(3)}"
        assert self.server.engine.secrets is not None
        self.server.engine.secrets.create(team, name, {"key": "value-long"}, owner)
        return name

    def notebook(self, owner: str, team: str) -> str:
        """A notebook job of ``owner`` in ``team``, stored and left queued (never started):
        its proxy answers 503 to whoever may open it."""
        text = f"name: nb\nqueue: {team}\nnotebook: true\n"
        spec = load_job_text(text, "job.yaml").spec
        engine = self.server.engine
        return engine.submit(spec, engine.data_dir.root, user=owner, team=team).id

    def workflow(self, owner: str, team: str) -> str:
        """A workflow of ``owner`` in ``team`` with a paused yearly schedule, stored by the
        server's own service; its name."""
        name = f"w{secrets.token_hex(3)}"
        caller = Caller(owner, admin=owner == "admin", teams={team: TeamRole.MEMBER})
        workflows = self.server.services.workflows
        workflows.submit(caller, team, FLOW.format(name=name), "flow.yaml", None, {}, run=False)
        return name

    def failed_run(self, owner: str, team: str) -> str:
        """A run of a workflow of ``owner`` in ``team`` that failed, as stored; its id."""
        workflows = self.server.services.workflows
        found = workflows.store.find(team, self.workflow(owner, team))
        assert found is not None
        run = workflows.store.add_run(new_run(found, {}, time.time()), ["a"])
        assert run is not None
        workflows.store.update_steps(run.id, {"a": {"state": "failed"}})
        workflows.store.update_run(run.id, state="failed", finished_at=time.time())
        return run.id

    def job(self, owner: str, team: str) -> str:
        """An ended job of ``owner`` in ``team``'s queue, stored by the engine itself."""
        text = JOB.format(name=f"j{secrets.token_hex(3)}", queue=team)
        spec = load_job_text(text, "job.yaml").spec
        engine = self.server.engine
        job = engine.submit(spec, engine.data_dir.root, user=owner, team=team, start=True)
        engine.wait_ended(job.id, 60)
        return job.id


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    with _database(request.param) as database:
        root = tmp_path_factory.mktemp("rules") / "data"
        engine = engine_at(root, database, vault=True)
        server = LiveServer(root, engine=engine).start()
        try:
            with Client(server.url, server.token) as admin:
                admin.create_team(VISION)
                admin.create_team(AUDIO)
            store = engine.store
            tokens = {"admin": server.token}
            for name, role in ROLES.items():
                tokens[name], _ = add_user(store, name, VISION, role)
            tokens["mate"], _ = add_user(store, "mate", VISION)
            tokens["stranger"], _ = add_user(store, "stranger", AUDIO)
            add_user(store, "extra", None)
            callers = {name: Caller(name, teams={VISION: role}) for name, role in ROLES.items()} | {
                "admin": Caller("admin", admin=True)
            }
            yield World(server, tokens, callers)
        finally:
            server.stop()


def _database(kind: str) -> AbstractContextManager[str | None]:
    return fresh_postgres_database() if kind == "postgresql" else nullcontext(None)


Made = tuple[str, str, Any, str | None, str | None]
"""A case's request, made ready: method, path, body, the object's team and owner."""


@dataclass(frozen=True)
class Case:
    """One request and the action it is checked as: ``make`` prepares the object and
    returns (method, path, json body, the object's team, its owner)."""

    name: str
    action: Action | None
    ok: int
    make: Callable[[World, str, str], Made]
    hidden: int = 404


def _job_case(name: str, action: Action, ok: int, method: str, suffix: str) -> Case:
    def make(world: World, caller: str, relation: str) -> Made:
        owner = {"own": caller, "team": "mate", "other": "stranger"}[relation]
        team = AUDIO if relation == "other" else VISION
        job = world.job(owner, team)
        return method, f"/jobs/{job}{suffix}", None, team, owner

    return Case(name, action, ok, make)


def _workflow_case(name: str, action: Action, ok: int, method: str, suffix: str) -> Case:
    def make(world: World, caller: str, relation: str) -> Made:
        owner = {"own": caller, "team": "mate", "other": "stranger"}[relation]
        team = AUDIO if relation == "other" else VISION
        return method, f"/workflows/{team}/{world.workflow(owner, team)}{suffix}", None, team, owner

    return Case(name, action, ok, make)


def _run_case(name: str, action: Action, ok: int, method: str, suffix: str) -> Case:
    def make(world: World, caller: str, relation: str) -> Made:
        owner = {"own": caller, "team": "mate", "other": "stranger"}[relation]
        team = AUDIO if relation == "other" else VISION
        return method, f"/workflow-runs/{world.failed_run(owner, team)}{suffix}", None, team, owner

    return Case(name, action, ok, make)


def _submit_workflow(world: World, caller: str, relation: str) -> Made:
    team = AUDIO if relation == "other" else VISION
    text = FLOW.format(name=f"w{secrets.token_hex(3)}")
    return "POST", f"/workflows?team={team}", text, team, None


def _notebook(world: World, caller: str, relation: str) -> Made:
    owner = {"own": caller, "team": "mate", "other": "stranger"}[relation]
    team = AUDIO if relation == "other" else VISION
    return "GET", f"/notebooks/{world.notebook(owner, team)}/api/status", None, team, owner


def _team_case(
    name: str, action: Action, ok: int, method: str, path: str, body: object = None, **kw: int
) -> Case:
    def make(world: World, caller: str, relation: str) -> Made:
        team = AUDIO if relation == "other" else VISION
        world.store.accounts.set_member(team, "extra", TeamRole.VIEWER)
        return method, path.format(team=team), body, team, None

    return Case(name, action, ok, make, **kw)


def _plain(
    name: str, action: Action | None, ok: int, method: str, path: str, body: Any = None
) -> Case:
    def make(world: World, caller: str, relation: str) -> Made:
        filled = path
        if "{user}" in path:
            target = f"u{secrets.token_hex(3)}"
            add_user(world.store, target, None)
            filled = path.format(user=target)
        return method, filled, body() if callable(body) else body, None, None

    return Case(name, action, ok, make)


def _create_secret(world: World, caller: str, relation: str) -> Made:
    team = AUDIO if relation == "other" else VISION
    body = {"team": team, "data": {"key": "value-long"}, **_named("s")}
    return "POST", "/secrets", body, team, None


def _delete_secret(world: World, caller: str, relation: str) -> Made:
    owner = {"own": caller, "team": "mate", "other": "stranger"}[relation]
    team = AUDIO if relation == "other" else VISION
    return "DELETE", f"/secrets/{team}/{world.secret(owner, team)}", None, team, owner


def _submit(world: World, caller: str, relation: str) -> Made:
    team = AUDIO if relation == "other" else VISION
    return "POST", "/jobs", JOB.format(name="s", queue=team), team, None


def _named(prefix: str) -> dict[str, str]:
    return {"name": f"{prefix}{secrets.token_hex(3)}"}


CASES = [
    Case("submit", Action.SUBMIT_JOB, 201, _submit, hidden=422),
    _job_case("describe", Action.READ_JOB, 200, "GET", ""),
    _job_case("events", Action.READ_JOB, 200, "GET", "/events"),
    _job_case("follow events", Action.READ_JOB, 200, "GET", "/events/follow"),
    _job_case("log", Action.READ_JOB, 200, "GET", "/tasks/worker/0/log"),
    _job_case("follow log", Action.READ_JOB, 200, "GET", "/tasks/worker/0/log/follow"),
    _job_case("search log", Action.READ_JOB, 200, "GET", "/tasks/worker/0/log/search?q=x"),
    _job_case("download log", Action.READ_JOB, 200, "GET", "/tasks/worker/0/log/download"),
    _job_case("setup log", Action.READ_JOB, 200, "GET", "/setup/log"),
    _job_case("outputs", Action.READ_JOB, 200, "GET", "/outputs"),
    _job_case("output", Action.READ_JOB, 200, "GET", "/outputs/result.txt"),
    _job_case("usage", Action.READ_JOB, 200, "GET", "/usage"),
    _job_case("cancel", Action.STOP_JOB, 200, "POST", "/cancel"),
    _job_case("delete", Action.DELETE_JOB, 204, "DELETE", ""),
    Case("open notebook", Action.OPEN_NOTEBOOK, 503, _notebook),
    Case("submit workflow", Action.SUBMIT_WORKFLOW, 201, _submit_workflow),
    _workflow_case("describe workflow", Action.READ_WORKFLOW, 200, "GET", ""),
    _workflow_case("workflow runs", Action.READ_WORKFLOW, 200, "GET", "/runs"),
    _workflow_case("run workflow", Action.CHANGE_WORKFLOW, 201, "POST", "/runs"),
    _workflow_case("pause workflow", Action.CHANGE_WORKFLOW, 200, "POST", "/pause"),
    _workflow_case("resume workflow", Action.CHANGE_WORKFLOW, 200, "POST", "/resume"),
    _workflow_case("delete workflow", Action.DELETE_WORKFLOW, 204, "DELETE", ""),
    _run_case("describe run", Action.READ_WORKFLOW, 200, "GET", ""),
    _run_case("stop run", Action.CHANGE_WORKFLOW, 200, "POST", "/stop"),
    _run_case("retry run", Action.CHANGE_WORKFLOW, 200, "POST", "/retry"),
    _team_case("queue", Action.READ_QUEUE, 200, "GET", "/queues/{team}"),
    _team_case("would start", Action.READ_QUEUE, 200, "GET", "/queues/{team}/would-start"),
    _team_case("put queue", Action.CHANGE_QUEUE, 200, "PUT", "/queues/{team}", {}, hidden=409),
    _team_case("team", Action.READ_TEAM, 200, "GET", "/teams/{team}"),
    _team_case("audit", Action.READ_AUDIT, 200, "GET", "/audit?team={team}"),
    _team_case("add member", Action.CHANGE_MEMBERS, 200, "PUT", "/teams/{team}/members/extra", {}),
    _team_case(
        "remove member", Action.CHANGE_MEMBERS, 204, "DELETE", "/teams/{team}/members/extra"
    ),
    _plain(
        "create team",
        Action.MANAGE_TEAMS,
        201,
        "POST",
        "/teams",
        lambda: {"name": f"t{secrets.token_hex(3)}"},
    ),
    _plain("users", Action.MANAGE_USERS, 200, "GET", "/users"),
    _plain(
        "create user",
        Action.MANAGE_USERS,
        201,
        "POST",
        "/users",
        lambda: {"name": f"u{secrets.token_hex(3)}"},
    ),
    _plain("disable user", Action.MANAGE_USERS, 200, "POST", "/users/{user}/disable"),
    _plain("metrics", Action.READ_METRICS, 200, "GET", "/metrics"),
    # This server has no GPU: the administrator passes the check and finds no GPU 0.
    _plain("clear gpu", Action.CLEAR_GPU, 404, "POST", "/gpus/0/clear"),
    Case("create secret", Action.CREATE_SECRET, 201, _create_secret),
    Case("delete secret", Action.DELETE_SECRET, 204, _delete_secret),
    _plain("secrets", None, 200, "GET", "/secrets"),
    _plain("whoami", None, 200, "GET", "/whoami"),
    _plain("tokens", None, 200, "GET", "/tokens"),
    _plain(
        "create token", None, 201, "POST", "/tokens", lambda: {"name": f"k{secrets.token_hex(3)}"}
    ),
    _plain("jobs", None, 200, "GET", "/jobs"),
    _plain("queues", None, 200, "GET", "/queues"),
    _plain("gpus", None, 200, "GET", "/gpus"),
    _plain("teams", None, 200, "GET", "/teams"),
    _plain("workflows", None, 200, "GET", "/workflows"),
]


def _relations(case: Case) -> list[str]:
    owned = ("_job_case", "_workflow_case", "_run_case")
    if case.make in (_delete_secret, _notebook) or case.make.__qualname__.startswith(owned):
        return ["own", "team", "other"]
    teams = (_submit, _create_secret, _submit_workflow)
    if case.make in teams or case.make.__qualname__.startswith("_team_case"):
        return ["team", "other"]
    return ["none"]


WALK = [
    (case, caller, relation)
    for case in CASES
    for caller in ("admin", *ROLES)
    for relation in _relations(case)
]


@pytest.mark.parametrize(
    ("case", "caller", "relation"), WALK, ids=[f"{c.name}-{u}-{r}" for c, u, r in WALK]
)
def test_every_endpoint_answers_as_the_rules_say(
    world: World, case: Case, caller: str, relation: str
) -> None:
    method, path, body, team, owner = case.make(world, caller, relation)
    expected = _expected(world.callers[caller], case, team, owner)
    outside_api = path == "/metrics" or path.startswith("/notebooks/")
    url = f"{world.server.url}{'' if outside_api else API}{path}"
    headers = {"Authorization": f"Bearer {world.tokens[caller]}"}
    streamed = path.endswith("/follow")  # an ended job's stream: its status is enough
    content = body if isinstance(body, str) else None
    json = None if isinstance(body, str) else body
    with httpx.stream(
        method, url, headers=headers, timeout=30, content=content, json=json
    ) as response:
        text = "" if streamed else response.read().decode()[:300]
        assert response.status_code == expected, (
            f"{method} {path} as {caller}: {response.status_code} (expected {expected}): {text}"
        )
        if expected == 403:
            assert case.action is not None
            needed = world.callers[caller].decide(case.action, team, owner).needed
            assert (needed.value if needed else "administrator") in response.json()["detail"]


def _job_of(path: str) -> str:
    return path.split("/")[2]


def _team_of(path: str) -> str:
    return path.split("/")[2]


def _query_team(path: str) -> str:
    return path.split("?team=")[1]


def _workflow_of(path: str) -> tuple[str, str]:
    return path.split("/")[2], path.split("/")[3]


def _run_of(path: str) -> str:
    return path.split("/")[2]


def _flow_file(text: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="flow-"))
    (folder / "flow.yaml").write_text(text)
    return folder / "flow.yaml"


SDK: dict[str, Callable[[Client, str, Any], object]] = {
    "submit": lambda c, p, b: c.submit(str(b)),
    "describe": lambda c, p, b: c.describe(_job_of(p)),
    "events": lambda c, p, b: c.events(_job_of(p)),
    "log": lambda c, p, b: c.read_log(_job_of(p), "worker", 0),
    "setup log": lambda c, p, b: c.read_setup_log(_job_of(p)),
    "outputs": lambda c, p, b: c.job_outputs(_job_of(p)),
    "output": lambda c, p, b: c.job_output(_job_of(p), "result.txt"),
    "usage": lambda c, p, b: c.usage(_job_of(p)),
    "cancel": lambda c, p, b: c.cancel(_job_of(p)),
    "delete": lambda c, p, b: c.delete(_job_of(p)),
    "queue": lambda c, p, b: c.queue(_team_of(p)),
    "put queue": lambda c, p, b: c.put_queue(_team_of(p), QueueBody()),
    "team": lambda c, p, b: c.team(_team_of(p)),
    "audit": lambda c, p, b: list(c.audit(team=_query_team(p))),
    "add member": lambda c, p, b: c.set_member(_team_of(p), "extra", "viewer"),
    "remove member": lambda c, p, b: c.remove_member(_team_of(p), "extra"),
    "create team": lambda c, p, b: c.create_team(b["name"]),
    "users": lambda c, p, b: c.users(),
    "create user": lambda c, p, b: c.create_user(UserBody(name=b["name"])),
    "disable user": lambda c, p, b: c.disable_user(p.split("/")[2]),
    "whoami": lambda c, p, b: c.whoami(),
    "tokens": lambda c, p, b: c.tokens(),
    "create token": lambda c, p, b: c.create_token(b["name"]),
    "secrets": lambda c, p, b: c.secrets(),
    "create secret": lambda c, p, b: c.create_secret(b["name"], b["data"], b["team"]),
    "delete secret": lambda c, p, b: c.delete_secret(p.split("/")[2], p.split("/")[3]),
    "submit workflow": lambda c, p, b: c.submit_workflow(
        _flow_file(str(b)), team=_query_team(p), run=False, send_folder=False
    ),
    "describe workflow": lambda c, p, b: c.workflow(*_workflow_of(p)),
    "workflow runs": lambda c, p, b: c.workflow_runs(*_workflow_of(p)),
    "run workflow": lambda c, p, b: c.run_workflow(*_workflow_of(p)),
    "pause workflow": lambda c, p, b: c.pause_workflow(*_workflow_of(p)),
    "resume workflow": lambda c, p, b: c.resume_workflow(*_workflow_of(p)),
    "delete workflow": lambda c, p, b: c.delete_workflow(*_workflow_of(p)),
    "describe run": lambda c, p, b: c.workflow_run(_run_of(p)),
    "stop run": lambda c, p, b: c.stop_run(_run_of(p)),
    "retry run": lambda c, p, b: c.retry_run(_run_of(p)),
    "workflows": lambda c, p, b: c.workflows(),
}
"""Each case as the Python SDK calls it."""

CLI: dict[str, Callable[[str, Any, Path], list[str]]] = {
    "submit": lambda p, b, folder: ["submit", str(_written(folder, str(b)))],
    "describe": lambda p, b, folder: ["describe", _job_of(p)],
    "events": lambda p, b, folder: ["events", _job_of(p)],
    "log": lambda p, b, folder: ["logs", _job_of(p)],
    "outputs": lambda p, b, folder: ["logs", _job_of(p), "--output"],
    "output": lambda p, b, folder: ["logs", _job_of(p), "--output", "result.txt"],
    "usage": lambda p, b, folder: ["top", _job_of(p)],
    "cancel": lambda p, b, folder: ["stop", _job_of(p)],
    "delete": lambda p, b, folder: ["delete", _job_of(p)],
    "queue": lambda p, b, folder: ["queue", "describe", _team_of(p)],
    "put queue": lambda p, b, folder: ["queue", "create", _team_of(p)],
    "add member": lambda p, b, folder: ["team", "add", _team_of(p), "extra", "--role", "viewer"],
    "audit": lambda p, b, folder: ["audit", "--team", _query_team(p)],
    "remove member": lambda p, b, folder: ["team", "remove", _team_of(p), "extra"],
    "create team": lambda p, b, folder: ["team", "create", b["name"]],
    "users": lambda p, b, folder: ["user", "list"],
    "create user": lambda p, b, folder: ["user", "create", b["name"]],
    "disable user": lambda p, b, folder: ["user", "disable", p.split("/")[2]],
    "whoami": lambda p, b, folder: ["whoami"],
    "secrets": lambda p, b, folder: ["secret", "list"],
    "create secret": lambda p, b, folder: [
        "secret",
        "create",
        b["name"],
        "--team",
        b["team"],
        "--from-literal",
        "key=value-long",
    ],
    "delete secret": lambda p, b, folder: [
        "secret",
        "delete",
        p.split("/")[3],
        "--team",
        p.split("/")[2],
    ],
    # No folder is sent: a viewer may not send one, and the case's steps are inline.
    "submit workflow": lambda p, b, folder: [
        "workflow",
        "submit",
        str(_written(folder, str(b))),
        "--team",
        _query_team(p),
        "--no-folder",
        "--no-run",
    ],
    "describe workflow": lambda p, b, folder: [
        "workflow",
        "describe",
        p.split("/")[3],
        "--team",
        p.split("/")[2],
    ],
    "workflow runs": lambda p, b, folder: [
        "workflow",
        "runs",
        p.split("/")[3],
        "--team",
        p.split("/")[2],
    ],
    "pause workflow": lambda p, b, folder: [
        "workflow",
        "pause",
        p.split("/")[3],
        "--team",
        p.split("/")[2],
    ],
    "resume workflow": lambda p, b, folder: [
        "workflow",
        "resume",
        p.split("/")[3],
        "--team",
        p.split("/")[2],
    ],
    "delete workflow": lambda p, b, folder: [
        "workflow",
        "delete",
        p.split("/")[3],
        "--team",
        p.split("/")[2],
    ],
    "describe run": lambda p, b, folder: ["workflow", "show", _run_of(p)],
    "stop run": lambda p, b, folder: ["workflow", "stop", _run_of(p)],
    "retry run": lambda p, b, folder: ["workflow", "retry", _run_of(p)],
}
"""Each case as the CLI runs it (those it has a command for)."""

REFUSED = {403: Forbidden, 404: NotFound, 409: Conflict, 422: BadRequest}


def _written(folder: Path, text: str) -> Path:
    path = folder / "job.yaml"
    path.write_text(text)
    return path


SDK_WALK = [(case, caller, relation) for case, caller, relation in WALK if case.name in SDK]
CLI_WALK = [(case, caller, relation) for case, caller, relation in WALK if case.name in CLI]


@pytest.mark.parametrize(
    ("case", "caller", "relation"), SDK_WALK, ids=[f"{c.name}-{u}-{r}" for c, u, r in SDK_WALK]
)
def test_the_sdk_answers_as_the_rules_say(
    world: World, case: Case, caller: str, relation: str
) -> None:
    _, path, body, team, owner = case.make(world, caller, relation)
    expected = _expected(world.callers[caller], case, team, owner)
    with Client(world.server.url, world.tokens[caller], timeout=30) as client:
        if expected < 400:
            SDK[case.name](client, path, body)
        else:
            with pytest.raises(REFUSED[expected]):
                SDK[case.name](client, path, body)


@pytest.mark.parametrize("world", ["sqlite"], indirect=True)  # the same API on either store
@pytest.mark.parametrize(
    ("case", "caller", "relation"), CLI_WALK, ids=[f"{c.name}-{u}-{r}" for c, u, r in CLI_WALK]
)
def test_the_cli_answers_as_the_rules_say(
    world: World,
    case: Case,
    caller: str,
    relation: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, path, body, team, owner = case.make(world, caller, relation)
    expected = _expected(world.callers[caller], case, team, owner)
    monkeypatch.setenv("TRAINFLEET_SERVER", world.server.url)
    monkeypatch.setenv("TRAINFLEET_TOKEN", world.tokens[caller])
    monkeypatch.chdir(tmp_path)
    # In this process (the same commands as a shell runs, without starting Python 152 times).
    done = CliRunner().invoke(cli, CLI[case.name](path, body, tmp_path), prog_name="trainfleet")
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exc_info
    if expected < 400:
        assert done.exit_code == 0, done.stderr
    else:
        assert done.exit_code == 2 and done.stderr.startswith("error: "), done.stderr
        if expected == 403:
            assert "needs" in done.stderr, done.stderr


def _expected(caller: Caller, case: Case, team: str | None, owner: str | None) -> int:
    if case.action is None:
        return case.ok
    decision = caller.decide(case.action, team, owner)
    if not decision.visible:
        return case.hidden
    return case.ok if decision.allowed else 403


def test_lists_show_only_what_each_caller_sees(world: World) -> None:
    """Jobs, queues and teams of another team are absent from lists, as if they did not
    exist; an administrator sees them all."""
    theirs = world.job("stranger", AUDIO)
    ours = world.job("mate", VISION)
    world.secret("stranger", AUDIO)
    world.secret("mate", VISION)
    for name, caller in world.callers.items():
        with Client(world.server.url, world.tokens[name]) as client:
            jobs = {job.id for job in client.list_jobs()}
            queues = {queue.queue.name for queue in client.queues()}
            teams = {team.name for team in client.teams()}
            secret_teams = {secret.team for secret in client.secrets()}
        assert ours in jobs
        assert (theirs in jobs) == caller.admin, name
        assert (AUDIO in queues) == caller.admin and VISION in queues, name
        assert (AUDIO in teams) == caller.admin and VISION in teams, name
        assert (AUDIO in secret_teams) == caller.admin, name
        assert (VISION in secret_teams) == caller.decide(Action.READ_SECRETS, VISION).allowed


def test_every_route_and_every_rule_is_walked(world: World) -> None:
    """A new endpoint or rule without a case here fails this test."""
    walked = {case.action for case in CASES if case.action is not None}
    walked.add(Action.READ_SECRETS)  # it filters a list: test_lists_show_only_what_each_caller_sees
    assert set(RULES) == walked
    document = httpx.get(f"{world.server.url}{API}/openapi.json").json()
    operations = {
        (method.upper(), path) for path, methods in document["paths"].items() for method in methods
    }
    covered = {(m, p) for m, p in operations if "workdirs" in p or p in PUBLIC}
    covered.add(("DELETE", f"{API}/tokens/{{token_id}}"))  # test_tokens_are_their_users_own
    covered.add(("GET", f"{API}/events/follow"))  # each change as RULES say: test_changes.py
    covered.add(("GET", f"{API}/jobs/{{job_id}}/workdir"))  # its Pods' token: test_pod_workdir.py
    covered |= {(m, f"{API}/session") for m in ("GET", "POST", "DELETE")}  # test_sessions.py
    for case in CASES:
        for relation in _relations(case):
            method, path, *_ = case.make(world, "admin", relation)
            covered |= {(m, p) for m, p in operations if m == method and _matches(p, path)}
    assert operations - covered == set()


PUBLIC = ("/healthz", "/readyz")


def test_tokens_are_their_users_own(world: World) -> None:
    """Each user lists, makes and revokes its own tokens; another user's token does not
    exist for it (an administrator revokes anyone's)."""
    _, theirs = add_user(world.store, "stranger", AUDIO)
    for name in ("lead", "member", "viewer"):
        with Client(world.server.url, world.tokens[name]) as client:
            made = client.create_token(f"spare-{name}")
            assert made.token.user == name
            assert {token.user for token in client.tokens()} == {name}
            with pytest.raises(NotFound):
                client.revoke_token(theirs.id)
            client.revoke_token(made.token.id)
            with Client(world.server.url, made.secret) as spare:
                wait_for(lambda: _refused(spare), what="the revoked token refused")
    with Client(world.server.url, world.tokens["admin"]) as admin:
        admin.revoke_token(theirs.id)


def _refused(client: Client) -> bool:
    try:
        client.whoami()
    except Unauthorized:
        return True
    return False


def _matches(template: str, path: str) -> bool:
    import re

    pattern = re.sub(r"\{[^}]+\}", "[^/]+", template.removeprefix(API))
    return re.fullmatch(pattern, path.partition("?")[0]) is not None
