"""``/api/v1/events/follow``: the change feed, every job and task change the caller may see."""

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool

from trainfleet.server import sse
from trainfleet.server.auth import Who, authenticate
from trainfleet.server.changes import ChangeFeed, ChangeHub
from trainfleet.server.errors import ERROR_RESPONSES, ApiError, responses
from trainfleet.server.params import known_query_only
from trainfleet.server.state import AccountsDep, JobsDep, SettingsDep
from trainfleet.wire import FeedNotice, NoticeCode

MAX_ID = 2**62

router = APIRouter(
    prefix="/events",
    tags=["events"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)


async def _hub(request: Request) -> ChangeHub:
    return request.app.state.change_hub  # type: ignore[no-any-return]


HubDep = Annotated[ChangeHub, Depends(_hub)]


@router.get(
    "/follow",
    status_code=200,
    response_class=sse.EventStream,
    responses={
        **sse.STREAM_RESPONSES,
        **responses(_429="The caller has too many change feeds open (see Retry-After)."),
    },
)
async def follow_changes(
    who: Who,
    jobs: JobsDep,
    accounts: AccountsDep,
    settings: SettingsDep,
    hub: HubDep,
    after: Annotated[
        int | None,
        Query(ge=0, le=MAX_ID, description="Start after this event id (default: from now)."),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(max_length=40, description="Resume after this event id (wins over `after`)."),
    ] = None,
) -> sse.EventStream:
    """Server-Sent Events: `change` for every job or task change the caller may see (id:
    the event's id; data: the event with its job's team; a job's deletion has the code
    `deleted`), and `notice` about the stream itself (events lost by a slow client, an
    unknown id, the store unavailable and back). Never ends by itself; cut off within about
    a second of the caller losing access (token revoked, user disabled)."""
    start = _event_id(last_event_id) if last_event_id is not None else after
    newest = await run_in_threadpool(jobs.newest_change)
    notices = []
    if start is None:
        start = newest
    elif start > newest:
        notices.append(
            FeedNotice(
                code=NoticeCode.UNKNOWN_ID,
                message=f"event {start} is newer than the newest event ({newest}): the "
                "server's database was replaced or restored; reload what you show",
                after=newest,
                resync=True,
            )
        )
        start = newest
    if not hub.admit(who.caller.user):
        raise ApiError(
            429,
            f"user {who.caller.user!r} has {hub.per_user} change feeds open already",
            {"Retry-After": "5"},
        )
    feed = ChangeFeed(hub, accounts, who, start, notices)
    return sse.EventStream(sse.follow(feed, settings.poll_interval, feed.allowed))


def _event_id(text: str) -> int:
    """The id a ``Last-Event-ID`` header gives; 400 naming the header for anything else."""
    value = text.strip()
    if not value.isascii() or not value.isdigit() or int(value) > MAX_ID:
        raise ApiError(
            400, f"Last-Event-ID: expected an event id (a whole number from 0), got {text!r}"
        )
    return int(value)
