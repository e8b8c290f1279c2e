"""``/api/v1/jobs``: submit, find, describe, cancel, delete a job; read and follow its events."""

import asyncio
import re
from functools import partial
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from trainfleet.control.access import Action
from trainfleet.control.services.links import service_links
from trainfleet.control.services.ownership import tree_owner
from trainfleet.domain.records import Audited, EventRecord, JobPage, JobRecord, State
from trainfleet.server import body, sse
from trainfleet.server.audit import Change, audit
from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import (
    ERROR_RESPONSES,
    ApiError,
    responses,
)
from trainfleet.server.feeds import EventFeed
from trainfleet.server.params import JobId, known_query_only
from trainfleet.server.state import (
    AccountsDep,
    JobsDep,
    MetricsDep,
    Readable,
    SettingsDep,
    WorkdirsDep,
    WorkflowsDep,
)
from trainfleet.spec.loading import load_job_text
from trainfleet.wire import API_PREFIX, JobDetails, Submitted
from trainfleet.workdirs.store import DIGEST, WorkdirStore, whose

MAX_PAGE = 1000
INLINE_TEXT = 16 << 10
"""Job texts up to this many characters are read on the event loop and stored by the
engine's submission writer, longer ones read and stored in a worker thread."""
INLINE_TASKS = 64
"""Jobs of up to this many tasks are stored by the submission writer, larger ones in a
worker thread."""
LABEL = re.compile(r"^[^=]+=.*$", re.DOTALL)

SUBMIT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "A job file as it is: trainfleet YAML or JSON, or a Kubeflow "
        "TFJob/PyTorchJob manifest.",
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}},
            "text/plain": {"schema": {"type": "string"}},
        },
    }
}


router = APIRouter(
    prefix="/jobs",
    tags=["jobs"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)
"""The job endpoints, each behind a token and checked by ``access.RULES``; each change
audited."""


@router.post(
    "",
    status_code=201,
    openapi_extra=SUBMIT_BODY,
    responses=responses(
        _413="The job text is larger than the server accepts.",
        _415="The body is not YAML, JSON or plain text.",
        _422="The job cannot be read or placed: `detail` and `problems` say where and why.",
    ),
)
async def submit_job(
    request: Request,
    response: Response,
    who: Who,
    change: Annotated[Change, audit(Audited.JOB_SUBMIT)],
    jobs: JobsDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    workdirs: WorkdirsDep,
    workdir: Annotated[
        str | None,
        Query(
            max_length=4096,
            description="Directory on the server the job runs in, as it is (a shared file system).",
        ),
    ] = None,
    tree: Annotated[
        str | None,
        Query(
            pattern=DIGEST.pattern,
            description="A job directory sent before (PUT /workdirs/{tree}): the job runs "
            "in its own copy of it.",
        ),
    ] = None,
    filename: Annotated[
        str, Query(max_length=255, description="The job file's name, for error messages.")
    ] = "<request>",
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            max_length=255,
            pattern=r"^[\x21-\x7e]+$",
            description="A key of the caller's choosing, new for each job (a UUID): a "
            "submission sent again with it (its answer was lost) is answered with the job "
            "the first one stored, not stored twice. 422 where the key came with another job.",
        ),
    ] = None,
) -> Submitted:
    """Store a job and queue it for admission; answers at once with the queued job."""
    media_type = body.check_media_type(request)
    text = body.decode(await body.read_limited(request, settings.max_body), filename)
    if tree is not None and workdir is not None:
        raise ApiError(422, "give workdir (in place) or tree (a copy), not both")
    directory = _workdir(workdir, settings.workdir)
    read = partial(
        load_job_text,
        text,
        filename,
        limits=settings.limits,
        json_only=media_type == "application/json",
    )
    # Small jobs are read on the event loop, like the quick reads (cheaper than a trip to a
    # worker thread), and stored by the engine's submission writer, many per transaction,
    # while the loop serves on. Large ones in a worker thread, so that other requests go on.
    large = len(text) > INLINE_TEXT
    loaded = await run_in_threadpool(read) if large else read()
    change.team = jobs.team_of_queue(loaded.spec.queue)
    change.detail = f"{loaded.spec.name} in queue {loaded.spec.queue}"
    spec, team = jobs.placed(who.caller, loaded.spec)
    whom = tree_owner(who.caller, team)
    fill = _tree(workdirs, tree, whom)
    runs_in = workdirs.path(whom, tree) if tree is not None else directory
    settings.host_paths.check(spec, runs_in, in_place=workdir is not None)
    change.team, change.detail = team, f"{spec.name} in queue {spec.queue}"
    in_place = directory if workdir is not None else None  # None: an empty folder of its own
    tasks = sum(role.replicas for role in loaded.spec.roles.values())
    if large or tasks > INLINE_TASKS or fill is not None:
        submit = partial(
            jobs.submit,
            who.caller,
            spec,
            team,
            in_place,
            loaded.source,
            fill_workdir=fill,
            key=idempotency_key,
        )
        job = await run_in_threadpool(submit)
    else:
        stored = jobs.submit_soon(
            who.caller, spec, team, in_place, loaded.source, key=idempotency_key
        )
        # Shielded: a caller that hangs up does not unmake a job that may be stored already.
        job = await asyncio.shield(asyncio.wrap_future(stored))
    change.target = job.id
    metrics.submissions.labels(job.source).inc()
    response.headers["Location"] = f"{API_PREFIX}/jobs/{job.id}"
    return Submitted(job=job, warnings=loaded.warnings)


# Quick reads run on the event loop: a trip to a worker thread costs more than they do.
@router.get("")
async def find_jobs(
    who: Who,
    jobs: JobsDep,
    state: State | None = None,
    name: Annotated[str | None, Query(max_length=100)] = None,
    user: Annotated[str | None, Query(max_length=200)] = None,
    team: Annotated[str | None, Query(max_length=200, description="Only this team's jobs.")] = None,
    queue: Annotated[
        str | None, Query(max_length=200, description="Only jobs of this queue.")
    ] = None,
    label: Annotated[
        list[Annotated[str, Field(pattern=LABEL.pattern)]],
        Query(description="`key=value`; repeat to require several."),
    ] = [],  # noqa: B006 (FastAPI copies defaults)
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> JobPage:
    """Jobs of the caller's teams (every job, for an administrator), newest first, one
    page at a time; `counts`: how many match every filter but `state`, by state. A team or
    queue the caller does not see (or that does not exist) has no jobs."""
    try:
        return jobs.find(
            who.caller,
            state=state,
            name=name,
            user=user,
            team=team,
            queue=queue,
            labels=_labels(label),
            limit=limit,
            cursor=cursor,
        )
    except ValueError as error:
        raise ApiError(400, str(error)) from None


@router.get("/{job_id}")
async def describe_job(job: Readable, jobs: JobsDep, who: Who) -> JobDetails:
    """A job with its tasks and events, and what the caller may do to it."""
    details = jobs.details(job)
    may = [
        word
        for word, action in (("stop", Action.STOP_JOB), ("delete", Action.DELETE_JOB))
        if who.caller.decide(action, job.team, job.user).allowed
    ]
    services = service_links(details.job, details.tasks)
    return JobDetails(
        job=details.job,
        tasks=details.tasks,
        events=details.events,
        checkpoints=details.checkpoints,
        may=may,
        services=services,
    )


@router.post(
    "/{job_id}/cancel",
    responses=responses(
        _403="The caller's role does not allow it.", _409="Another process runs the job."
    ),
)
def cancel_job(
    job_id: JobId,
    who: Who,
    change: Annotated[Change, audit(Audited.JOB_STOP, "job_id")],
    jobs: JobsDep,
) -> JobRecord:
    """Stop a job (its tasks get SIGTERM, then SIGKILL); an ended job stays as it is."""
    job = jobs.get(job_id)
    change.team, change.detail = job.team, f"was {job.state}"
    return jobs.cancel(who.caller, job)


@router.delete(
    "/{job_id}",
    status_code=204,
    response_class=Response,
    responses=responses(
        _403="The caller's role does not allow it.",
        _409="The job has not ended and `force` was not given.",
    ),
)
def delete_job(
    job_id: JobId,
    who: Who,
    change: Annotated[Change, audit(Audited.JOB_DELETE, "job_id")],
    jobs: JobsDep,
    workdirs: WorkdirsDep,
    workflows: WorkflowsDep,
    force: bool = False,
) -> None:
    """Forget an ended job and its logs; ``force`` stops a running job first."""
    job = jobs.get(job_id)
    change.team, change.detail = job.team, f"was {job.state}" + (", forced" if force else "")
    jobs.delete(who.caller, job, force=force)
    workdirs.sweep([*jobs.trees_in_use(), *workflows.trees_in_use()])


@router.get("/{job_id}/events")
async def list_events(
    job: Readable,
    jobs: JobsDep,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
) -> list[EventRecord]:
    """A job's events with an id above ``after``, oldest first."""
    return jobs.events(job.id, after=after)


@router.get(
    "/{job_id}/events/follow",
    status_code=200,
    response_class=sse.EventStream,
    responses=sse.STREAM_RESPONSES,
)
async def follow_events(
    job: Readable,
    who: Who,
    jobs: JobsDep,
    accounts: AccountsDep,
    settings: SettingsDep,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    last_event_id: Annotated[int | None, Header(ge=0, le=2**62)] = None,
) -> sse.EventStream:
    """Server-Sent Events: `event` for each event (id: its id), then `end`; cut off
    within about a second of the caller losing access (token revoked, user disabled,
    taken out of the job's team)."""
    feed = EventFeed(jobs, job.id, after if last_event_id is None else last_event_id)
    holds = sse.still_allowed(accounts, who, job.team)
    return sse.EventStream(sse.follow(feed, settings.poll_interval, holds))


def _workdir(given: str | None, default: Path) -> Path:
    if given is None:
        return default
    path = Path(given)
    if "\0" in given or not path.is_absolute() or not path.is_dir():
        raise ApiError(422, f"workdir {given!r} is not an absolute path to a directory")
    return path


def _tree(workdirs: WorkdirStore, tree: str | None, whom: str) -> partial[None] | None:
    """What fills the job's own folder from ``tree``, sent before by ``whom`` (the job's
    team, or the administrators); 422 naming the field where they have no such tree."""
    if tree is None:
        return None
    if not workdirs.has(whom, tree):
        raise ApiError(
            422,
            f"tree: no stored tree {tree} of {whose(whom)}: send it first "
            f"(PUT {API_PREFIX}/workdirs/{tree})",
        )
    return partial(workdirs.copy, whom, tree)


def _labels(pairs: list[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs)
