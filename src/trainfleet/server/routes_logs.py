"""``/api/v1/jobs/{id}/tasks/{role}/{index}/log``: a task's log by byte range, or followed live."""

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.responses import FileResponse

from trainfleet.datadir import log_search
from trainfleet.datadir.logs import read_range
from trainfleet.server import sse
from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import (
    ERROR_RESPONSES,
    ApiError,
    responses,
)
from trainfleet.server.feeds import LogFeed
from trainfleet.server.params import Index, Role, known_query_only
from trainfleet.server.state import AccountsDep, JobsDep, LogHubDep, Readable, SettingsDep
from trainfleet.wire import LogHit, LogHits

MAX_RANGE = 8 << 20
"""Most bytes one read returns; ``X-Log-End`` tells where to go on from."""

Offset = Annotated[int, Query(ge=0, le=2**62)]

RANGE_RESPONSES = {
    200: {
        "description": "The bytes; `X-Log-End` is the offset after them, `X-Log-Size` the "
        "log's size now.",
        "content": {"application/octet-stream": {"schema": {"type": "string"}}},
    },
    **responses(_416="`end` is before `start`."),
}


router = APIRouter(
    prefix="/jobs/{job_id}",
    tags=["logs"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)
"""The log endpoints, each behind a token: logs are read as their job is."""


async def log_path(job: Readable, role: Role, index: Index, jobs: JobsDep) -> Path:
    """The task's log file; 404 for an unknown job or task, before any stream starts."""
    return jobs.task_log(job, role, index)


LogPath = Annotated[Path, Depends(log_path)]


@router.get("/tasks/{role}/{index}/log", response_class=Response, responses=RANGE_RESPONSES)
def read_log(path: LogPath, start: Offset = 0, end: Offset | None = None) -> Response:
    """Bytes ``start`` up to ``end`` (exclusive; the end of the log when left out)."""
    return _range(path, start, end)


@router.get("/setup/log", response_class=Response, responses=RANGE_RESPONSES)
def read_setup_log(
    job: Readable, jobs: JobsDep, start: Offset = 0, end: Offset | None = None
) -> Response:
    """The job's ``setup`` phase, as ``read_log``: the builds of its Python environments."""
    return _range(jobs.setup_log(job.id), start, end)


@router.get(
    "/tasks/{role}/{index}/log/follow",
    status_code=200,
    response_class=sse.EventStream,
    responses=sse.STREAM_RESPONSES,
)
async def follow_log(
    job: Readable,
    path: LogPath,
    who: Who,
    jobs: JobsDep,
    accounts: AccountsDep,
    settings: SettingsDep,
    hub: LogHubDep,
    start: Offset = 0,
    last_event_id: Annotated[int | None, Header(ge=0, le=2**62)] = None,
) -> sse.EventStream:
    """Server-Sent Events: `log` with new complete lines (id: the byte offset after
    them), then `end` once the job has ended and its log is read to its end; cut off
    within about a second of the caller losing access to the job."""
    offset = start if last_event_id is None else last_event_id
    feed = LogFeed(jobs, job.id, hub, path, offset, settings.log_read)
    holds = sse.still_allowed(accounts, who, job.team)
    return sse.EventStream(sse.follow(feed, settings.poll_interval, holds))


@router.get("/tasks/{role}/{index}/log/search")
def search_log(
    path: LogPath,
    q: Annotated[str, Query(min_length=1, max_length=200, description="The text to find.")],
    start: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> LogHits:
    """The first `limit` lines from byte `start` holding `q` (ASCII letters in either
    case); at most 256 MiB are read per call: `next` says where to go on."""
    found = log_search.search(path, q, start, limit)
    hits = [LogHit(offset=hit.offset, line=hit.line) for hit in found.hits]
    return LogHits(hits=hits, next=found.next)


@router.get(
    "/tasks/{role}/{index}/log/download",
    response_class=FileResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def download_log(path: LogPath, job: Readable, role: Role, index: Index) -> Response:
    """The whole log as a file (`Range` requests answered)."""
    name = f"{job.id}-{role}-{index}.log"
    if not path.is_file():  # the task has written nothing yet
        disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
        return Response(b"", media_type="text/plain; charset=utf-8", headers=disposition)
    return FileResponse(path, media_type="text/plain; charset=utf-8", filename=name)


def _range(path: Path, start: int, end: int | None) -> Response:
    """Bytes ``start`` up to ``end`` of a log (at most MAX_RANGE), with where they end."""
    if end is not None and end < start:
        raise ApiError(416, f"the range {start}-{end} ends before it starts")
    stop = start + MAX_RANGE if end is None else min(end, start + MAX_RANGE)
    data = read_range(path, start, stop)
    headers = {
        "X-Log-Start": str(start),
        "X-Log-End": str(start + len(data)),
        "X-Log-Size": str(_size(path)),
    }
    return Response(data, media_type="application/octet-stream", headers=headers)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
