"""``/api/v1/audit``: the audit trail, to read. Nothing in the API changes or deletes a
record: the records are written by the server itself (see ``server/audit.py``)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import responses
from trainfleet.server.params import known_query_only
from trainfleet.server.state import AuditLogDep
from trainfleet.wire import NAME_PATTERN, AuditPage

MAX_PAGE = 1000
ACTION = r"^[a-z][a-z.-]{0,63}$"

router = APIRouter(
    prefix="/audit",
    tags=["audit"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=responses(_403="The caller is neither an administrator nor a team-admin."),
)
"""The audit endpoint: administrators read every record, team-admins their teams'."""


@router.get("")
def read_audit(
    who: Who,
    log: AuditLogDep,
    user: Annotated[
        str | None,
        Query(max_length=200, description="Only this user's records (empty: of no user)."),
    ] = None,
    action: Annotated[
        str | None,
        Query(
            pattern=ACTION,
            description="Only this action, or those under it (`job`: `job.submit`, ...).",
        ),
    ] = None,
    since: Annotated[
        float | None, Query(ge=0, le=1e11, description="Only records at or after (Unix time).")
    ] = None,
    team: Annotated[
        str | None, Query(pattern=NAME_PATTERN, description="Only this team's records.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    before: Annotated[
        int | None,
        Query(ge=1, le=2**62, description="Only records older than this one (its id)."),
    ] = None,
) -> AuditPage:
    """Records newest first, one page at a time: every one for an administrator, those
    of the teams where the caller is a team-admin for a team-admin."""
    return log.read(
        who.caller, user=user, action=action, since=since, team=team, limit=limit, before=before
    )
