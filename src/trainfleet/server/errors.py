"""How every failure becomes an HTTP answer: a status and ``{"detail": ...}``, never a traceback.

``detail`` is the message the CLI prints after ``error:`` for the same failure.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from trainfleet.domain.errors import Misconfigured, StorageFull, TrainfleetError, Unavailable
from trainfleet.spec.errors import SpecError
from trainfleet.wire import ErrorBody, Problem

log = logging.getLogger("trainfleet.server")


class QuietLog:
    """Warns of an answer the server gave for its own trouble once per ``every`` seconds
    for each cause (status and kind of error): a database outage answers thousands of
    requests 503 a minute, and the log says so in a line, with how many were left out."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._causes: dict[tuple[int, str], tuple[float, int]] = {}

    def warn(self, status: int, error: Exception, message: str) -> None:
        cause = (status, type(error).__name__)
        now = time.monotonic()
        said_at, held = self._causes.get(cause, (-math.inf, 0))
        if now - said_at < self.every:
            self._causes[cause] = (said_at, held + 1)
            return
        self._causes[cause] = (now, 0)
        more = f" (and {held} more like it since the last such line)" if held else ""
        log.warning("%s%s", message, more)


_server_trouble = QuietLog()

RETRY_AFTER = 2
"""Seconds a client is told to wait (``Retry-After``) when the store cannot answer."""


class ApiError(TrainfleetError):
    """A request that cannot be served, with the status and message to answer it with."""

    def __init__(self, status: int, detail: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})


def server_detail(error: TrainfleetError) -> str:
    """The message, said as the server's own trouble where it is one (5xx)."""
    if isinstance(error, StorageFull):
        return f"the server cannot store more work now: {error}"
    if isinstance(error, Misconfigured):
        return f"the server is misconfigured: {error}"
    if isinstance(error, Unavailable):
        return f"the server cannot answer now, try again later: {error}"
    return str(error)


def problems_of(error: TrainfleetError) -> list[Problem]:
    """Each problem found in a job that cannot be read (none for other errors)."""
    if not isinstance(error, SpecError):
        return []
    return [
        Problem(file=p.file, line=p.line, field=p.field, message=p.message) for p in error.problems
    ]


def answer(description: str, *, malformed: bool = False) -> dict[str, Any]:
    """An error answer in the OpenAPI document: an ErrorBody, or with ``malformed`` also the
    plain text with which the HTTP server itself refuses a request it cannot parse."""
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": ERROR_BODY_REF}}}
    if malformed:
        content["text/plain"] = {"schema": {"type": "string"}}
    return {"description": description, "content": content}


ERROR_BODY_REF = "#/components/schemas/ErrorBody"

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "400": answer("The request is malformed (a bad cursor, a bad header).", malformed=True),
    "401": answer("No token, or one that is unknown or revoked."),
    "404": answer("No such job or task."),
    "422": answer("A parameter is out of range or malformed."),
    "503": answer("The store cannot answer now: try again after Retry-After seconds."),
}
"""The errors any authenticated endpoint may answer, for the OpenAPI document."""


def responses(**extra: str) -> dict[int | str, dict[str, Any]]:
    """ERROR_RESPONSES and more, given as ``_409="why"``."""
    more: dict[int | str, dict[str, Any]] = {
        code.lstrip("_"): answer(why) for code, why in extra.items()
    }
    return {**ERROR_RESPONSES, **more}


def error_response(
    status: int,
    detail: str,
    problems: Sequence[Problem] = (),
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = ErrorBody(detail=detail, problems=list(problems))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers that turn exceptions into answers."""

    @app.exception_handler(TrainfleetError)
    async def known(request: Request, error: TrainfleetError) -> JSONResponse:
        headers = dict(error.headers) if isinstance(error, ApiError) else {}
        if error.status >= 500:  # the server's trouble, not the request's: one line, no traceback
            line = f"{error.status} for {request.method} {request.url.path}: {error}"
            _server_trouble.warn(error.status, error, line)
        if error.status == 503:
            headers.setdefault("Retry-After", str(RETRY_AFTER))
        return error_response(error.status, server_detail(error), problems_of(error), headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(422, validation_message(error.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, error: HTTPException) -> JSONResponse:
        return error_response(error.status_code, str(error.detail), headers=error.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        # The server logs the traceback (Starlette raises the error on after this answer).
        log.error("unexpected error in %s %s: %r", request.method, request.url.path, error)
        return error_response(500, "internal server error (the server's log has the details)")


def validation_message(errors: Sequence[Any]) -> str:
    """``query.limit: Input should be less than or equal to 1000; ...``, one per problem."""
    parts = []
    for error in errors:
        where = ".".join(str(item) for item in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(str(part) for part in parts) or "invalid request"
