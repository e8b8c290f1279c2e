"""The audit trail as the server writes it: each change made through the API, each
refused attempt at one, and each failed authentication.

A changing endpoint takes a ``Change`` from ``audit(Audited.JOB_STOP, "job_id")`` and
fills in what it learns (the job's team, a detail). The record is written as the endpoint
ends, before the answer goes out: ``ok``, or the status and reason of whatever it raised
(a refusal, a body that does not validate), which is then answered as always. Failed
authentications come from the token checks (``Auditor.refused``), a few a minute per
source: a flood of bad tokens cannot fill the disk.
"""

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.types import Scope

from trainfleet.domain.errors import TrainfleetError
from trainfleet.domain.records import Audited, AuditRecord
from trainfleet.server.audit_writer import AuditWriter
from trainfleet.server.auth import Authenticate, Principal, TokenRefused
from trainfleet.server.errors import validation_message
from trainfleet.server.throttle import Skipped, Throttle
from trainfleet.store.audit import AuditTrail

OK = "ok"
REASON_LENGTH = 160
"""The most characters of an error's message that an outcome keeps."""


@dataclass
class Change:
    """What the record of one change says of it, filled in by its endpoint."""

    target: str = ""
    team: str = ""
    detail: str = ""


class Audit(Protocol):
    """``audit(action, target_param)``: the dependency (a ``Depends``) whose ``Change`` a
    changing endpoint fills in; ``target_param``: the path parameter naming the target."""

    def __call__(self, action: Audited, target_param: str = "") -> Any: ...


class Auditor:
    """Writes one server's audit records into ``trail``."""

    def __init__(self, trail: AuditTrail, throttle: Throttle | None = None) -> None:
        self.trail = trail
        self.writer = AuditWriter(trail)
        self.throttle = throttle or Throttle()

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
        detail = f"{scope.get('method', '')} {path}{_left_out(skipped)}"
        change = Change(target=path, detail=detail)
        outcome = f"401 {error.reason}"
        await self.record(scope, None, Audited.AUTH_FAILED, change, outcome)

    def dependency(self, auth: Authenticate) -> Audit:
        """``audit(action, target_param)`` for the endpoints behind ``auth``."""

        def audit(action: Audited, target_param: str = "") -> Any:
            async def change(
                request: Request, who: Annotated[Principal, Depends(auth)]
            ) -> AsyncIterator[Change]:
                noted = Change(target=str(request.path_params.get(target_param, "")))
                try:
                    yield noted
                except Exception as error:
                    outcome = outcome_of(error)
                    await self.record(request.scope, who, action, noted, outcome)
                    raise
                await self.record(request.scope, who, action, noted, OK)

            # "function": recorded when the endpoint ends, before the answer is sent.
            return Depends(change, scope="function")

        return audit


def outcome_of(error: Exception) -> str:
    """``403 <why>``: the status ``error`` is answered with, and its message cut short."""
    if isinstance(error, TrainfleetError):
        status, why = error.status, str(error)
    elif isinstance(error, HTTPException):
        status, why = error.status_code, str(error.detail)
    elif isinstance(error, RequestValidationError):
        status, why = 422, validation_message(error.errors())
    else:
        status, why = 500, "internal server error"
    why = " ".join(why.split())
    if len(why) > REASON_LENGTH:
        why = why[: REASON_LENGTH - 3] + "..."
    return f"{status} {why}".rstrip()


def source_of(scope: Scope) -> str:
    """The client's address (as the proxy in front says it, where uvicorn trusts one)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def _left_out(skipped: Skipped) -> str:
    notes = [
        f"{count} more from {where} not recorded (throttled)"
        for count, where in ((skipped.here, "this source"), (skipped.elsewhere, "other sources"))
        if count
    ]
    return "".join(f"; {note}" for note in notes)
