"""``/api/v1/queues``: list, describe and create or change the queues jobs wait in."""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Path

from trainfleet.control.engine import Engine
from trainfleet.control.queueing import QueueStatus
from trainfleet.domain.records import TokenRecord
from trainfleet.server.errors import ERROR_RESPONSES, ApiError, responses
from trainfleet.server.params import known_query_only
from trainfleet.spec.models import JOB_NAME
from trainfleet.spec.queues import queue_config
from trainfleet.wire import QueueBody, QueueState

QueueName = Annotated[str, Path(pattern=JOB_NAME.pattern, description="The queue's name.")]


def router(engine: Engine, auth: Callable[..., Awaitable[TokenRecord]]) -> APIRouter:
    """The queue endpoints: any token reads them, only an admin token changes them."""
    api = APIRouter(
        prefix="/queues",
        tags=["queues"],
        dependencies=[Depends(auth), Depends(known_query_only)],
        responses=ERROR_RESPONSES,
    )

    @api.get("")
    def list_queues() -> list[QueueState]:
        """Every queue, by name."""
        return [QueueState.of(status) for status in engine.queues()]

    @api.get("/{name}")
    def describe_queue(name: QueueName) -> QueueState:
        """One queue, with its running and waiting jobs."""
        return QueueState.of(_find(engine, name))

    @api.put("/{name}", responses=responses(_403="Only an admin token changes queues."))
    def put_queue(
        name: QueueName, body: QueueBody, token: Annotated[TokenRecord, Depends(auth)]
    ) -> QueueState:
        """Create a queue or replace its configuration; waiting jobs are looked at again."""
        if not token.admin:
            raise ApiError(403, f"token {token.name!r} may not change queues: use an admin token")
        engine.set_queue(queue_config(name, body.model_dump()))
        return QueueState.of(_find(engine, name))

    return api


def _find(engine: Engine, name: str) -> QueueStatus:
    for status in engine.queues():
        if status.config.name == name:
            return status
    raise ApiError(404, f"no queue {name!r}")
