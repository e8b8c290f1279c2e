"""The audit trail as the server writes it: each change made through the API, each
refused attempt at one, and each failed authentication.

A changing endpoint takes a ``Change`` from ``audit(Audited.JOB_STOP, "job_id")`` and
fills in what it learns (the job's team, a detail). The record is written as the endpoint
ends, before the answer goes out: ``ok``, or the status and reason of whatever it raised
(a refusal, a body that does not validate), which is then answered as always. Failed
authentications come from the token checks (``Auditor.refused``), a few a minute per
source; refusals to a valid token (a 4xx outcome: 403, 404, 422, ...) a few a minute per
user: a flood of bad tokens or of forbidden requests cannot fill the disk. Changes made
(and the server's own failures, 5xx) are always recorded.
"""

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.types import Scope

from trainfleet.control.services.audit import AuditLog
from trainfleet.control.services.tokens import Principal
from trainfleet.domain.errors import TrainfleetError
from trainfleet.domain.records import Audited, AuditRecord
from trainfleet.server.auth import TokenRefused, Who
from trainfleet.server.errors import validation_message
from trainfleet.server.throttle import Skipped, Throttle

OK = "ok"
REASON_LENGTH = 160
"""The most characters of an error's message that an outcome keeps."""


@dataclass
class Change:
    """What the record of one change says of it, filled in by its endpoint."""

    target: str = ""
    team: str = ""
    detail: str = ""


class Auditor:
    """Writes one server's audit records into ``log``, behind the answers."""

    def __init__(
        self, log: AuditLog, throttle: Throttle | None = None, refusals: Throttle | None = None
    ) -> None:
        self.trail = log.trail
        self.writer = log.writer
        self.throttle = throttle or Throttle()
        """Failed authentications, by source address."""
        self.refusals = refusals or Throttle()
        """Refusals to valid tokens, by user."""

    async def record(
        self, scope: Scope, who: Principal | None, action: str, change: Change, outcome: str
    ) -> None:
        """Queue the record of one request for the writer; where the queue is full (the
        store has not answered for a long while), wait for room on a worker thread."""
        entry = AuditRecord(
            time=time.time(),
            user=who.caller.user if who else "",
            token=who.token.id if who else "",
            action=action,
            target=change.target,
            team=change.team,
            source=source_of(scope),
            outcome=outcome,
            detail=change.detail,
        )
        if not self.writer.put(entry):
            await run_in_threadpool(self.writer.put, entry, True)

    async def refused(self, scope: Scope, error: TokenRefused) -> None:
        """Record a request refused for its token, unless its source (or every source
        together) had its share of records this minute; the next record counts those."""
        skipped = self.throttle.admit(source_of(scope))
        if skipped is None:
            return
        path = str(scope.get("path", ""))
        detail = _with_left_out(f"{scope.get('method', '')} {path}", skipped, "source")
        change = Change(target=path, detail=detail)
        outcome = f"{error.status} {error.reason}"
        await self.record(scope, None, Audited.AUTH_FAILED, change, outcome)


def audit(action: Audited, target_param: str = "") -> Any:
    """The dependency (a ``Depends``) whose ``Change`` a changing endpoint fills in, written
    by the application's ``Auditor``; ``target_param``: the path parameter naming the target."""

    async def change(request: Request, who: Who) -> AsyncIterator[Change]:
        auditor: Auditor = request.app.state.auditor
        noted = Change(target=str(request.path_params.get(target_param, "")))
        try:
            yield noted
        except Exception as error:
            status, outcome = status_of(error), outcome_of(error)
            if 400 <= status < 500:  # refused: a few a minute per user
                skipped = auditor.refusals.admit(who.caller.user)
                if skipped is None:
                    raise
                noted.detail = _with_left_out(noted.detail, skipped, "user")
            await auditor.record(request.scope, who, action, noted, outcome)
            raise
        await auditor.record(request.scope, who, action, noted, OK)

    # "function": recorded when the endpoint ends, before the answer is sent.
    return Depends(change, scope="function")


def status_of(error: Exception) -> int:
    """The HTTP status ``error`` is answered with."""
    return _answer(error)[0]


def outcome_of(error: Exception) -> str:
    """``403 <why>``: the status ``error`` is answered with, and its message cut short."""
    status, why = _answer(error)
    why = " ".join(why.split())
    if len(why) > REASON_LENGTH:
        why = why[: REASON_LENGTH - 3] + "..."
    return f"{status} {why}".rstrip()


def _answer(error: Exception) -> tuple[int, str]:
    if isinstance(error, TrainfleetError):
        return error.status, str(error)
    if isinstance(error, HTTPException):
        return error.status_code, str(error.detail)
    if isinstance(error, RequestValidationError):
        return 422, validation_message(error.errors())
    return 500, "internal server error"


def source_of(scope: Scope) -> str:
    """The client's address (as the proxy in front says it, where uvicorn trusts one)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def _with_left_out(detail: str, skipped: Skipped, kind: str) -> str:
    """``detail``, then what the throttle left out before it: ``GET /x; 5 more from this
    source not recorded (throttled)``; ``kind``: what the throttle counts by."""
    counts = ((skipped.here, f"this {kind}"), (skipped.elsewhere, f"other {kind}s"))
    notes = [f"{n} more from {where} not recorded (throttled)" for n, where in counts if n]
    return "; ".join(part for part in (detail, *notes) if part)
