"""The door of every request: the token is checked, and the body's size bounded, before
any of the body is read.

FastAPI reads (and validates) a body before an endpoint's dependencies run, so a check in
a dependency comes too late: a client without a token could make the server buffer
hundreds of megabytes. This pure ASGI middleware answers first.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainfleet.server.auth import OnRefusal, TokenRefused, Tokens
from trainfleet.server.errors import error_response


class RequestGuard:
    """401 without a valid token on ``guarded`` paths, 413 for a body over ``max_body``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: Tokens,
        max_body: int,
        guarded: tuple[str, ...],
        public: Collection[str] = (),
        larger: Mapping[str, int] | None = None,
        refused: OnRefusal | None = None,
        reads: tuple[str, ...] = (),
        own_tokens: re.Pattern[str] | None = None,
    ) -> None:
        """``larger``: paths (prefixes) whose bodies may be larger, with their limits;
        ``refused``: called with each request refused for its token (to record it);
        ``reads``: paths (prefixes) whose requests only read, whatever their method (a
        job's TensorBoard), so that a session needs no CSRF token there; ``own_tokens``: paths
        whose endpoints take tokens of their own, no member's (a job's Pods')."""
        self.app = app
        self.tokens = tokens
        self.max_body = max_body
        self.larger = dict(larger or {})
        self.guarded = guarded
        self.public = frozenset(public)
        self.refused = refused
        self.reads = reads
        self.own_tokens = own_tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path: str = scope["path"]
        if (
            path.startswith(self.guarded)
            and path not in self.public
            and not (self.own_tokens and self.own_tokens.fullmatch(path))
        ):
            try:
                read = path.startswith(self.reads) if self.reads else False
                self.tokens.check_scope({**scope, "method": "GET"} if read else scope)
            except TokenRefused as error:
                if self.refused is not None:
                    await self.refused(scope, error)
                await self._answer(scope, receive, send, error.status, error.detail, error.headers)
                return
            except Exception:
                # The store cannot answer: the endpoint's own token check meets the same
                # error, and the app's handlers answer it (the body stays bounded below).
                pass
        limit = next(
            (size for prefix, size in self.larger.items() if path.startswith(prefix)),
            self.max_body,
        )
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self._answer(scope, receive, send, 413, _too_large(limit))
            return
        await self.app(scope, _limited(receive, limit), send)

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        status: int,
        detail: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        # Connection: close, so that the server drops the unread body instead of reading it.
        response = error_response(
            status, detail, headers={**(headers or {}), "Connection": "close"}
        )
        await response(scope, receive, send)


def _limited(receive: Receive, limit: int) -> Receive:
    """``receive`` that raises 413 (answered by the app's handler) once over ``limit``."""
    seen = 0

    async def limited() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, _too_large(limit))
        return message

    return limited


def _too_large(limit: int) -> str:
    return f"the request body is larger than the server's limit of {limit} bytes"
