"""``/api/v1/queues``: list, describe and create or change the queues jobs wait in."""

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from pydantic import ValidationError

from trainfleet.domain.records import Audited
from trainfleet.server.audit import Change, audit
from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import ERROR_RESPONSES, ApiError, responses
from trainfleet.server.params import known_query_only
from trainfleet.server.state import QueuesDep
from trainfleet.spec.models import Resources
from trainfleet.spec.names import JOB_NAME
from trainfleet.wire import QueueBody, QueueState, WouldStart

QueueName = Annotated[str, Path(pattern=JOB_NAME.pattern, description="The queue's name.")]


router = APIRouter(
    prefix="/queues",
    tags=["queues"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)
"""The queue endpoints: a team's members read its queues, its team-admins change them
(each change audited)."""


@router.get("")
def list_queues(who: Who, queues: QueuesDep) -> list[QueueState]:
    """The queues of the caller's teams (every queue, for an administrator), by name."""
    return queues.visible(who.caller)


@router.get("/{name}")
def describe_queue(name: QueueName, who: Who, queues: QueuesDep) -> QueueState:
    """One queue, with its running and waiting jobs."""
    return queues.describe(who.caller, name)


@router.get("/{name}/would-start")
def would_start(
    name: QueueName,
    who: Who,
    queues: QueuesDep,
    gpu: Annotated[float, Query(ge=0, le=100_000, description="GPUs of its one task.")] = 0,
    cpu: Annotated[
        str | None, Query(max_length=32, pattern=r"^[0-9.]+m?$", description="CPUs: 2, 500m.")
    ] = None,
    memory: Annotated[
        str | None,
        Query(max_length=32, pattern=r"^[0-9.]+[A-Za-z]*$", description="Memory: 8Gi."),
    ] = None,
) -> WouldStart:
    """Whether a job of one task needing these would start in the queue now, or why it
    would wait (its code and message); nothing is submitted."""
    try:
        resources = Resources.model_validate({"gpu": gpu, "cpu": cpu, "memory": memory})
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise ApiError(422, f"query.{field}: {first['msg']}") from None
    return queues.would_start(who.caller, name, resources)


@router.put(
    "/{name}",
    responses=responses(
        _403="The caller is not a team-admin of the queue's team.",
        _409="The name is another team's queue, or the body moves the queue to a team.",
    ),
)
def put_queue(
    name: QueueName,
    body: QueueBody,
    who: Who,
    change: Annotated[Change, audit(Audited.QUEUE_PUT, "name")],
    queues: QueuesDep,
) -> QueueState:
    """Create a queue (in ``team``, by default the caller's only team) or replace its
    configuration; waiting jobs are looked at again."""
    stored = queues.teams()
    change.team = stored.get(name, body.team or "")
    config = body.model_dump_json(exclude={"team"}, exclude_none=True)
    change.detail = f"{'changed' if name in stored else 'created'}: {config}"
    team = change.team = queues.owner(who.caller, name, body.team)
    return queues.put(who.caller, name, body, team)
