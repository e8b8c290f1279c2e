"""A job's own services behind the server's sign-in: its TensorBoard at
``/jobs/<id>/tensorboard/...`` and its notebook at ``/notebooks/<id>/...`` (HTTP and
WebSocket: Jupyter's kernels).

The proxy reaches one place only: the port of that job's own service task, on this
machine's loopback (its address as the store has it; never a host or URL from the
request). A TensorBoard opens to whoever may read its job (``Action.READ_JOB``); a
notebook to its owner and administrators (``Action.OPEN_NOTEBOOK``): another team's job
is not found. A path with ``..``, an encoded slash or dot, or a job's id that is not the
one authorised, is not found. Neither the caller's token nor its session cookie reaches
the service, and no cookie of the service reaches the browser.

A notebook wants Jupyter's token, which the proxy adds (``Jobs.service``) and which never
reaches the browser: JupyterLab writes it into its pages, the proxy takes it out. Jupyter
runs whatever its owner makes it run, so its pages may act in the name of whoever opens
them: a page served to anyone but its owner is sandboxed (a unique origin, no session).
A change (a non-GET request, a WebSocket) from a browser must come from this server's own
pages (its ``Origin``). A service that does not run answers 503 (404 once its job has
ended) with its state, at once: never a gateway error to retry in a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from starlette.background import BackgroundTask
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from trainfleet.control.access import Action
from trainfleet.control.services.bundle import Services
from trainfleet.control.services.jobs import ServiceDoor
from trainfleet.control.services.tokens import Principal
from trainfleet.domain.errors import Forbidden, NotFound
from trainfleet.domain.records import State
from trainfleet.server.auth import TokenRefused, Tokens
from trainfleet.server.sessions import CSRF_HEADER, SAFE_METHODS
from trainfleet.spec.notebook import PREFIX as NOTEBOOK_PREFIX


@dataclass(frozen=True)
class Kind:
    """One kind of service the proxy opens: its role, the action it needs, its paths."""

    name: str
    """Its role (``tensorboard``, ``notebook``)."""
    title: str
    action: Action
    head: Callable[[str], str]
    """A job's id -> where its service is served (no trailing slash)."""
    max_body: int
    """The largest request body it takes (a notebook's saves and uploads are larger)."""
    route: str


TENSORBOARD = Kind(
    "tensorboard",
    "TensorBoard",
    Action.READ_JOB,
    lambda job_id: f"/jobs/{job_id}/tensorboard",
    1024 * 1024,
    "/jobs/{job_id}/tensorboard{rest:path}",
)
NOTEBOOK = Kind(
    "notebook",
    "notebook",
    Action.OPEN_NOTEBOOK,
    lambda job_id: f"{NOTEBOOK_PREFIX}{job_id}",
    64 * 1024 * 1024,
    NOTEBOOK_PREFIX + "{job_id}{rest:path}",
)
PREFIXES = ("/jobs/", NOTEBOOK_PREFIX)
"""Where every job's services are served (the request guard covers them)."""
LARGER = {NOTEBOOK_PREFIX: NOTEBOOK.max_body}
"""Bodies the request guard lets through there, over its own limit."""

TIMEOUT = httpx.Timeout(60.0, connect=2.0)
LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=16)
MAX_PAGE = 8 * 1024 * 1024
"""A notebook's HTML page is read whole (to take its token out): larger is refused."""
MAX_MESSAGE = 64 * 1024 * 1024
"""The largest WebSocket message (a kernel's output: a plot, a table)."""
MAX_SOCKETS = 256
"""WebSockets open at once through one server: more are closed at once (1013)."""
ACCESS_CHECK = 1.0
"""Seconds between two checks of an open WebSocket's caller (a revoked token ends it)."""
SANDBOX = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"
"""A notebook's pages for anyone but its owner: scripts, but a unique origin (no session)."""

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
NOT_FORWARDED = HOP_BY_HOP | {"host", "authorization", "cookie", "origin", CSRF_HEADER.lower()}
"""What the caller sends that the service never sees: its credentials above all."""
NOT_RETURNED = HOP_BY_HOP | {"set-cookie"}

_ENCODED = re.compile(r"%(2f|5c|2e|00)", re.IGNORECASE)


class ServiceProxy:
    """Forwards a job's service requests to its task; one connection pool per server."""

    def __init__(self, services: Services, tokens: Tokens) -> None:
        self.services = services
        self.tokens = tokens
        self.client = httpx.AsyncClient(timeout=TIMEOUT, limits=LIMITS, follow_redirects=False)
        self.sockets = asyncio.Semaphore(MAX_SOCKETS)

    async def close(self) -> None:
        await self.client.aclose()

    async def handle(self, request: Request, kind: Kind) -> Response:
        job_id: str = request.path_params["job_id"]
        raw = _raw_path(request)
        if not _plain(raw, kind.head(job_id)):
            return _answer(404, "no such page")
        if request.method not in SAFE_METHODS and not _same_origin(request):
            return _answer(403, "a change through the proxy must come from this server's pages")
        try:  # a read whatever the method (TensorBoard's POSTs are queries; no CSRF token)
            principal = self.tokens.check_scope({**request.scope, "method": "GET"})
        except TokenRefused as error:
            return _answer(error.status, error.detail, headers=error.headers)
        door = await self._door(principal, job_id, kind)
        if isinstance(door, Response):
            return door
        port = _running_port(door)
        if port is None:
            return _not_running(job_id, kind, door)
        return await self._forward(request, raw, port, job_id, kind, door)

    async def _door(self, principal: Principal, job_id: str, kind: Kind) -> ServiceDoor | Response:
        """The service as ``principal`` may open it, or the answer saying why not."""
        try:
            door = await run_in_threadpool(
                self.services.jobs.service, principal.caller, job_id, kind.name, kind.action
            )
        except NotFound as error:
            return _answer(404, str(error))
        except Forbidden as error:
            return _answer(403, str(error))
        if door.link is None:
            return _answer(404, f"job {job_id} has no {kind.title} (`{kind.name}:` in its file)")
        return door

    async def _forward(
        self, request: Request, raw: str, port: int, job_id: str, kind: Kind, door: ServiceDoor
    ) -> Response:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > kind.max_body:
            return _answer(
                413, f"a request to a {kind.title} carries {kind.max_body} bytes at most"
            )
        query = request.scope.get("query_string", b"").decode("latin-1")
        url = f"http://127.0.0.1:{port}{raw}" + (f"?{query}" if query else "")
        headers = _forwarded(request.headers, door.token)
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        body = _bounded(request, kind.max_body) if has_body else None
        upstream_request = self.client.build_request(
            request.method, url, headers=headers, content=body
        )
        try:
            upstream = await self.client.send(upstream_request, stream=True)
        except BodyTooLarge:
            return _answer(
                413, f"a request to a {kind.title} carries {kind.max_body} bytes at most"
            )
        except httpx.TimeoutException:
            return _answer(504, f"the {kind.title} of job {job_id} did not answer in time")
        except httpx.TransportError:
            return _answer(
                503,
                f"the {kind.title} of job {job_id} does not answer yet (starting?)",
                state=door.link.state if door.link else None,
                headers={"Retry-After": "2"},
            )
        kept = {
            name.lower(): value
            for name, value in upstream.headers.items()
            if name.lower() not in NOT_RETURNED and name.lower() not in _named(upstream.headers)
        }
        if door.token:
            if not door.owned:
                own = kept.get("content-security-policy")
                kept["content-security-policy"] = f"{SANDBOX}; {own}" if own else SANDBOX
            if upstream.headers.get("content-type", "").startswith("text/html"):
                return await _page_without(upstream, door.token, kept)
        return StreamingResponse(
            upstream.aiter_raw(),
            status_code=upstream.status_code,
            headers=kept,
            background=BackgroundTask(upstream.aclose),
        )

    async def websocket(self, websocket: WebSocket, kind: Kind) -> None:
        """A WebSocket of the job's service (a Jupyter kernel's channels), both ways."""
        job_id: str = websocket.path_params["job_id"]
        raw = _raw_path(websocket)
        if not _plain(raw, kind.head(job_id)) or not _same_origin(websocket):
            await websocket.close(code=1008)
            return
        try:
            principal = self.tokens.check_scope({**websocket.scope, "method": "GET"})
        except TokenRefused:
            await websocket.close(code=1008)
            return
        door = await self._door(principal, job_id, kind)
        port = None if isinstance(door, Response) else _running_port(door)
        if isinstance(door, Response) or port is None:
            await websocket.close(code=1008)
            return
        if self.sockets.locked():
            await websocket.close(code=1013, reason="too many WebSockets open: try again")
            return
        async with self.sockets:
            await self._bridge(websocket, principal, raw, port, job_id, kind, door)

    async def _bridge(
        self,
        websocket: WebSocket,
        principal: Principal,
        raw: str,
        port: int,
        job_id: str,
        kind: Kind,
        door: ServiceDoor,
    ) -> None:
        query = websocket.scope.get("query_string", b"").decode("latin-1")
        url = f"ws://127.0.0.1:{port}{raw}" + (f"?{query}" if query else "")
        wanted = websocket.scope.get("subprotocols") or None
        headers = {"Authorization": f"token {door.token}"} if door.token else {}
        try:
            upstream = await connect(
                url,
                additional_headers=headers,
                subprotocols=wanted,
                max_size=MAX_MESSAGE,
                open_timeout=5,
                compression=None,
                proxy=None,
            )
        except (OSError, InvalidHandshake, TimeoutError):
            await websocket.close(code=1011, reason=f"the {kind.title} of job {job_id} refused")
            return
        async with upstream:
            await websocket.accept(subprotocol=upstream.subprotocol)
            pumps = [
                asyncio.create_task(_to_upstream(websocket, upstream)),
                asyncio.create_task(_to_browser(upstream, websocket)),
                asyncio.create_task(self._while_allowed(principal, job_id, kind)),
            ]
            _, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for pump in pending:
                pump.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        with contextlib.suppress(RuntimeError):  # closed by the browser already
            await websocket.close()

    async def _while_allowed(self, principal: Principal, job_id: str, kind: Kind) -> None:
        """Returns once the caller may no longer open the service (its token revoked, its
        account disabled, its job ended): the WebSocket is then cut."""
        caller = principal.caller
        while True:
            await asyncio.sleep(ACCESS_CHECK)
            try:
                await run_in_threadpool(self.tokens.check_digest, principal.token.digest)
                door = await run_in_threadpool(
                    self.services.jobs.service, caller, job_id, kind.name, kind.action
                )
            except (TokenRefused, NotFound, Forbidden):
                return
            if _running_port(door) is None:
                return


async def _to_upstream(websocket: WebSocket, upstream: ClientConnection) -> None:
    with contextlib.suppress(WebSocketDisconnect, ConnectionClosed):
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("text")
            await upstream.send(data if data is not None else message.get("bytes") or b"")


async def _to_browser(upstream: ClientConnection, websocket: WebSocket) -> None:
    with contextlib.suppress(WebSocketDisconnect, ConnectionClosed, RuntimeError):
        async for message in upstream:
            if isinstance(message, str):
                await websocket.send_text(message)
            else:
                await websocket.send_bytes(message)


def install(app: FastAPI, proxy: ServiceProxy) -> None:
    """The proxy's routes on ``app`` (left out of the OpenAPI document: not the API)."""
    for kind in (TENSORBOARD, NOTEBOOK):

        async def handle(request: Request, kind: Kind = kind) -> Response:
            return await proxy.handle(request, kind)

        app.add_route(kind.route, handle, methods=_methods(kind), include_in_schema=False)

    async def bridge(websocket: WebSocket) -> None:
        await proxy.websocket(websocket, NOTEBOOK)

    app.add_api_websocket_route(NOTEBOOK.route, bridge)


def _methods(kind: Kind) -> list[str]:
    if kind is NOTEBOOK:  # Jupyter's REST API
        return ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    return ["GET", "HEAD", "POST"]


class BodyTooLarge(Exception):
    """A request's body went over its service's limit while it was forwarded."""


async def _bounded(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The request's body as it comes, cut (BodyTooLarge) past ``limit`` bytes."""
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise BodyTooLarge(f"over {limit} bytes")
        yield chunk


def _raw_path(connection: HTTPConnection) -> str:
    raw: bytes = connection.scope.get("raw_path") or connection.url.path.encode()
    return raw.decode("latin-1")


def _plain(raw: str, head: str) -> bool:
    """Whether the raw path names this job's service plainly: no dot segment, no encoded
    slash, backslash, dot or NUL, nothing after the service's head but ``/...``."""
    if _ENCODED.search(raw) or "\\" in raw:
        return False
    rest = raw[len(head) :]
    if not raw.startswith(head) or (rest and not rest.startswith("/")):
        return False
    return not any(part in (".", "..") for part in raw.split("/"))


def _same_origin(connection: HTTPConnection) -> bool:
    """No ``Origin`` (not a browser's page), or this server's own (``Host``)."""
    origin = connection.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin.lower()).netloc == connection.headers.get("host", "").lower()


def _forwarded(headers: Any, token: str) -> list[tuple[str, str]]:
    kept = [
        (name, value)
        for name, value in headers.items()
        if name.lower() not in NOT_FORWARDED and name.lower() not in _named(headers)
    ]
    return [*kept, ("authorization", f"token {token}")] if token else kept


async def _page_without(upstream: httpx.Response, token: str, headers: dict[str, str]) -> Response:
    """The page, read whole, with the service's token taken out (JupyterLab writes it into
    its page's configuration; its scripts then send none, and the proxy adds it)."""
    try:
        body = b""
        async for chunk in upstream.aiter_bytes():
            body += chunk
            if len(body) > MAX_PAGE:
                return _answer(502, f"the service's page is over {MAX_PAGE} bytes")
    finally:
        await upstream.aclose()
    headers.pop("content-length", None)
    headers.pop("content-encoding", None)  # aiter_bytes decoded it
    headers.pop("etag", None)
    return Response(body.replace(token.encode(), b""), upstream.status_code, headers)


def _too_large(kind: Kind) -> Response:
    return _answer(413, f"a request to a {kind.title} may carry {kind.max_body} bytes at most")


def _running_port(door: ServiceDoor) -> int | None:
    """Its task's port where it runs and listens on this machine's loopback; else None."""
    link = door.link
    if link is None or link.state is not State.RUNNING:
        return None
    host = link.address.rpartition(":")[0]
    return link.port if host in ("127.0.0.1", "localhost") else None


def _not_running(job_id: str, kind: Kind, door: ServiceDoor) -> Response:
    """404 once the job and its service have ended for good; 503 while the job is alive
    (a service that failed under a running job is down, not gone)."""
    link = door.link
    assert link is not None
    if link.state is State.RUNNING:
        detail = (
            f"the {kind.title} of job {job_id} runs at {link.address}, which this server does "
            "not reach: it serves services of its own machine only"
        )
    else:
        why = f": {link.reason}" if link.reason else ""
        detail = f"the {kind.title} of job {job_id} is {link.state}{why}"
    status = 404 if link.state.is_final and door.job_ended else 503
    return _answer(status, detail, state=link.state)


def _named(headers: Any) -> set[str]:
    """Headers the ``Connection`` header names: hop-by-hop too."""
    return {word.strip().lower() for word in headers.get("connection", "").split(",")}


def _answer(
    status: int, detail: str, state: State | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body: dict[str, str] = {"detail": detail}
    if state is not None:
        body["state"] = str(state)
    return JSONResponse(body, status_code=status, headers=headers)
