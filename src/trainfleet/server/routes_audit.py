"""``/api/v1/audit``: the audit trail, to read. Nothing in the API changes or deletes a
record: the records are written by the server itself (see ``server/audit.py``)."""

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from trainfleet.control.access import Action
from trainfleet.server.auth import Authenticate, Principal
from trainfleet.server.errors import responses
from trainfleet.server.params import known_query_only
from trainfleet.store.audit import AuditTrail
from trainfleet.wire import NAME_PATTERN, AuditPage

MAX_PAGE = 1000
ACTION = r"^[a-z][a-z.-]{0,63}$"


def router(trail: AuditTrail, auth: Authenticate, flush: Callable[[], None]) -> APIRouter:
    """The audit endpoint: administrators read every record, team-admins their teams';
    ``flush`` first writes what is queued (``AuditWriter``)."""
    api = APIRouter(
        prefix="/audit",
        tags=["audit"],
        dependencies=[Depends(auth), Depends(known_query_only)],
        responses=responses(_403="The caller is neither an administrator nor a team-admin."),
    )

    @api.get("")
    def read_audit(
        who: Annotated[Principal, Depends(auth)],
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
        if team is not None:
            who.caller.require(Action.READ_AUDIT, team, missing=f"no team {team!r}")
            teams: list[str] | None = [team]
        else:
            teams = who.caller.teams_allowed(Action.READ_AUDIT)
        flush()
        found = trail.find(
            user=user, action=action, since=since, teams=teams, limit=limit + 1, before_id=before
        )
        records = found[:limit]
        more = len(found) > limit
        return AuditPage(records=records, next_before=records[-1].id if more else None)

    return api
