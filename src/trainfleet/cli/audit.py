"""``trainfleet audit``: the server's audit trail, newest first, as the caller may read it
(an administrator: every record; a team-admin: its teams')."""

from __future__ import annotations

import datetime
import re
import time
from typing import TYPE_CHECKING

from trainfleet.cli.accounts import server_of
from trainfleet.cli.commands import _dump, user_errors
from trainfleet.cli.errors import UserError
from trainfleet.cli.options import Options
from trainfleet.cli.tables import print_rows

if TYPE_CHECKING:
    from trainfleet.domain.records import AuditRecord

DURATION = re.compile(r"(\d+)\s*([smhdw])")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since_of(text: str, now: float | None = None) -> float:
    """The Unix time ``--since`` means: a duration back from now (``30m``, ``1h``, ``2d``)
    or an ISO time (without a zone: this machine's); UserError naming the flag."""
    match = DURATION.fullmatch(text.strip())
    if match:
        count, unit = match.groups()
        return (time.time() if now is None else now) - int(count) * SECONDS[unit]
    try:
        return datetime.datetime.fromisoformat(text.strip()).timestamp()
    except (ValueError, OverflowError, OSError):
        raise UserError(
            f"--since {text!r}: give a duration back from now (30m, 1h, 2d, 1w) or an ISO "
            "time (2025-01-31 or 2025-01-31T12:00)"
        ) from None


def audit(
    options: Options,
    user: str | None,
    since: str | None,
    action: str | None,
    team: str | None,
    limit: int,
    output: str,
) -> int:
    with user_errors():
        start = since_of(since) if since is not None else None
    with server_of(options, "the audit trail lives") as server:
        records = server.call(
            lambda: list(
                server.client.audit(user=user, action=action, since=start, team=team, limit=limit)
            )
        )
    if output != "table":
        _dump([record.to_dict() for record in records], output)
    else:
        _show(records)
    return 0


def _show(records: list[AuditRecord]) -> None:
    rows = [("ID", "TIME", "USER", "ACTION", "TARGET", "TEAM", "SOURCE", "OUTCOME", "DETAIL")]
    rows += [
        (
            str(r.id),
            datetime.datetime.fromtimestamp(r.time).strftime("%Y-%m-%d %H:%M:%S"),
            r.user or "-",
            r.action,
            r.target or "-",
            r.team or "-",
            r.source or "-",
            r.outcome,
            r.detail,
        )
        for r in records
    ]
    print_rows(rows)
