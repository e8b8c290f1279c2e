"""``/api/v1/queues``: list, describe and create or change the queues jobs wait in."""

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from trainfleet.control.access import Action, Caller
from trainfleet.control.engine import Engine
from trainfleet.domain.records import Audited
from trainfleet.server.audit import Audit, Change
from trainfleet.server.auth import Authenticate, Principal
from trainfleet.server.errors import ERROR_RESPONSES, ApiError, responses
from trainfleet.server.ownership import QueueTeams
from trainfleet.server.params import known_query_only
from trainfleet.spec.names import JOB_NAME
from trainfleet.spec.queues import queue_config
from trainfleet.wire import QueueBody, QueueState

QueueName = Annotated[str, Path(pattern=JOB_NAME.pattern, description="The queue's name.")]


def router(engine: Engine, auth: Authenticate, audit: Audit, queue_teams: QueueTeams) -> APIRouter:
    """The queue endpoints: a team's members read its queues, its team-admins change them
    (each change recorded by ``audit``)."""
    api = APIRouter(
        prefix="/queues",
        tags=["queues"],
        dependencies=[Depends(auth), Depends(known_query_only)],
        responses=ERROR_RESPONSES,
    )

    def visible(caller: Caller) -> list[QueueState]:
        states = (
            status.state(queue_teams.team_of(status.config.name)) for status in engine.queues()
        )
        return [state for state in states if caller.sees(Action.READ_QUEUE, state.team)]

    @api.get("")
    def list_queues(who: Annotated[Principal, Depends(auth)]) -> list[QueueState]:
        """The queues of the caller's teams (every queue, for an administrator), by name."""
        return visible(who.caller)

    @api.get("/{name}")
    def describe_queue(name: QueueName, who: Annotated[Principal, Depends(auth)]) -> QueueState:
        """One queue, with its running and waiting jobs."""
        for state in visible(who.caller):
            if state.queue.name == name:
                return state
        raise ApiError(404, f"no queue {name!r}")

    @api.put(
        "/{name}",
        responses=responses(
            _403="The caller is not a team-admin of the queue's team.",
            _409="The name is another team's queue, or the body moves the queue to a team.",
        ),
    )
    def put_queue(
        name: QueueName,
        body: QueueBody,
        who: Annotated[Principal, Depends(auth)],
        change: Annotated[Change, audit(Audited.QUEUE_PUT, "name")],
    ) -> QueueState:
        """Create a queue (in ``team``, by default the caller's only team) or replace its
        configuration; waiting jobs are looked at again."""
        stored = queue_teams.stored()
        change.team = stored.get(name, body.team or "")
        config = body.model_dump_json(exclude={"team"}, exclude_none=True)
        change.detail = f"{'changed' if name in stored else 'created'}: {config}"
        team = change.team = _owner(queue_teams, who.caller, name, body.team)
        who.caller.require(Action.CHANGE_QUEUE, team, missing=f"team: no team {team!r}")
        engine.set_queue(queue_config(name, body.model_dump(exclude={"team"})), team)
        queue_teams.forget()
        return describe_queue(name, who)

    return api


def _owner(queue_teams: QueueTeams, caller: Caller, name: str, asked: str | None) -> str:
    """The team of the queue ``name``: its own if it exists (409 if ``asked`` differs or
    the caller cannot see it), else ``asked``, else the caller's only team."""
    stored = queue_teams.stored()
    if name in stored:
        team = stored[name]
        if not caller.sees(Action.READ_QUEUE, team):
            raise ApiError(409, f"the queue name {name!r} is taken")
        if asked is not None and asked != team:
            raise ApiError(409, f"queue {name!r} belongs to team {team!r}: it cannot move")
        return team
    return asked or caller.only_team or "default"
