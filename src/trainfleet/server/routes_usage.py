"""``/api/v1/jobs/{job_id}/usage``: what a job's tasks use (CPU, memory, GPUs), now and
over the last day, from each task's history beside its log."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import ERROR_RESPONSES
from trainfleet.server.params import JobId, known_query_only
from trainfleet.server.state import UsageDep
from trainfleet.wire import JobUsage

router = APIRouter(
    prefix="/jobs",
    tags=["jobs"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)
"""Read like the job itself (``Action.READ_JOB``): another team's job is not found."""


@router.get("/{job_id}/usage")
def job_usage(
    job_id: JobId,
    who: Who,
    usage: UsageDep,
    history: Annotated[
        bool, Query(description="Also each task's history: minute averages, then samples.")
    ] = False,
    since: Annotated[
        float, Query(ge=0, le=1e11, description="History from this time (seconds since epoch).")
    ] = 0.0,
) -> JobUsage:
    """The newest sample of each running task of the job (CPU in percent of a core, RSS,
    GPU utilisation and the task's own GPU memory), and with ``history`` each task's
    history: the last hour's samples, and minute averages of the day before."""
    return usage.job(who.caller, job_id, history=history, since=since)
