"""A job's own services behind the server's sign-in: its TensorBoard at
``/jobs/<id>/tensorboard/...``, its notebook at ``/notebooks/<id>/...`` and its quick links
at ``/jobs/<id>/links/<name>/...`` (HTTP, and WebSockets but for TensorBoard).

The proxy reaches one place only: the port of that job's own service task, on this
machine's loopback (its address as the store has it; never a host or URL from the
request). A TensorBoard or a quick link opens to whoever may read its job
(``Action.READ_JOB``); a notebook to its owner and administrators (``Action.OPEN_NOTEBOOK``):
another team's job is not found. A path with ``..``, an encoded slash or dot, or a job's
id that is not the one authorised, is not found. Neither the caller's token nor its
session cookie reaches the service, no cookie of the service reaches the browser, and the
proxy keeps none (every service is on 127.0.0.1: cookies ignore ports).

A notebook wants Jupyter's token, which the proxy adds (``Jobs.service``) and which never
reaches the browser: JupyterLab writes it into its pages, the proxy takes it out. A
notebook or a quick link serves whatever its owner makes it serve, so its pages could act
in the name of whoever opens them: a page served to anyone but the job's owner is
sandboxed (a unique origin, no session). A change (a non-GET request, a WebSocket) from a
browser must come from this server's own pages (its ``Origin``). A service that does not
run answers 503 (404 once its job has ended) with its state, at once: never a gateway
error to retry in a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit

import httpx
from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from starlette.background import BackgroundTask
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from trainfleet.control.access import Action
from trainfleet.control.services.bundle import Services
from trainfleet.control.services.jobs import ServiceDoor
from trainfleet.control.services.links import quicklink_path, service_path
from trainfleet.control.services.tokens import Principal
from trainfleet.domain.errors import Forbidden, NotFound
from trainfleet.domain.records import State
from trainfleet.server.auth import TokenRefused, Tokens
from trainfleet.server.sessions import CSRF_HEADER, SAFE_METHODS
from trainfleet.spec.notebook import PREFIX as NOTEBOOK_PREFIX


@dataclass(frozen=True)
class Kind:
    """One kind of service the proxy opens: the action it needs, its paths, its pages."""

    title: str
    """What an answer calls it (``TensorBoard``)."""
    action: Action
    route: str
    link_path: Callable[[Mapping[str, str]], str]
    """The route's path parameters -> the ``ServiceLink.path`` of the service."""
    max_body: int
    """The largest request body it takes (a notebook's saves and uploads are larger)."""
    strip: bool = False
    """Whether the task serves at ``/`` (a program of the user's, which knows nothing of
    the proxy: ``X-Forwarded-Prefix`` tells it), not under its link's path."""
    sandboxed: bool = False
    """Whether its pages are the user's own (sandboxed for anyone but the job's owner)."""


TENSORBOARD = Kind(
    "TensorBoard",
    Action.READ_JOB,
    "/jobs/{job_id}/tensorboard{rest:path}",
    lambda params: service_path(params["job_id"], "tensorboard"),
    1024 * 1024,
)
NOTEBOOK = Kind(
    "notebook",
    Action.OPEN_NOTEBOOK,
    NOTEBOOK_PREFIX + "{job_id}{rest:path}",
    lambda params: service_path(params["job_id"], "notebook"),
    64 * 1024 * 1024,
    sandboxed=True,
)
QUICKLINK = Kind(
    "quick link",
    Action.READ_JOB,
    "/jobs/{job_id}/links/{name}{rest:path}",
    lambda params: quicklink_path(params["job_id"], params["name"]),
    8 * 1024 * 1024,
    strip=True,
    sandboxed=True,
)
PREFIXES = ("/jobs/", NOTEBOOK_PREFIX)
"""Where every job's services are served (the request guard covers them)."""
LARGER = {NOTEBOOK_PREFIX: NOTEBOOK.max_body, "/jobs/": QUICKLINK.max_body}
"""Bodies the request guard lets through there, over its own limit."""

TIMEOUT = httpx.Timeout(60.0, connect=2.0)
LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=16)
MAX_PAGE = 2 * 1024 * 1024
"""A notebook's HTML page is read whole (to take its token out): larger is refused (its
pages are a few KB; 64 connections at once hold 128 MiB at most)."""
MAX_MESSAGE = 16 * 1024 * 1024
"""The largest WebSocket message (a kernel's output: a plot, a table)."""
QUEUED_MESSAGES = 2
"""Messages from the service held per socket before it is made to wait (its memory)."""
MAX_SOCKETS = 256
"""WebSockets open at once through one server: more are closed at once (1013)."""
MAX_SOCKETS_PER_USER = 32
"""WebSockets one user may hold open at once, so that one cannot take them all."""
ACCESS_CHECK = 1.0
"""Seconds between two checks of an open WebSocket's token (cached: no store read)."""
SERVICE_EVERY = 5
"""Every how many token checks the caller's right to the service is read again (a read of
the store: 256 sockets cost ~50 reads a second)."""
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
NOT_FORWARDED = HOP_BY_HOP | {
    "host",
    "authorization",
    "cookie",
    "origin",
    "x-forwarded-prefix",
    CSRF_HEADER.lower(),
}
"""What the caller sends that the service never sees: its credentials above all."""
NOT_RETURNED = HOP_BY_HOP | {"set-cookie"}

_ENCODED = re.compile(r"%(2f|5c|2e|00)", re.IGNORECASE)


@dataclass(frozen=True)
class Target:
    """One request's service: its kind, its job, its link's path, the raw path asked."""

    kind: Kind
    job_id: str
    link_path: str
    raw: str

    @classmethod
    def of(cls, connection: HTTPConnection, kind: Kind) -> Target | None:
        """The request's target; None where its raw path does not name it plainly."""
        raw = _raw_path(connection)
        link_path = kind.link_path(connection.path_params)
        target = cls(kind, connection.path_params["job_id"], link_path, raw)
        return target if _plain(raw, target.head) else None

    @property
    def head(self) -> str:
        return self.link_path.rstrip("/")

    def upstream(self, scheme: str, port: int, query: bytes) -> str:
        """The URL on the task's port: the path as asked, or below the head (``strip``)."""
        path = (self.raw[len(self.head) :] or "/") if self.kind.strip else self.raw
        text = query.decode("latin-1")
        return f"{scheme}://127.0.0.1:{port}{path}" + (f"?{text}" if text else "")

    def headers(self, door: ServiceDoor) -> dict[str, str]:
        """What the proxy itself tells the service: Jupyter's token, a stripped prefix."""
        added = {"authorization": f"token {door.token}"} if door.token else {}
        return added | ({"x-forwarded-prefix": self.head} if self.kind.strip else {})


class ServiceProxy:
    """Forwards a job's service requests to its task; one connection pool per server."""

    def __init__(self, services: Services, tokens: Tokens) -> None:
        self.services = services
        self.tokens = tokens
        self.client = httpx.AsyncClient(
            timeout=TIMEOUT, limits=LIMITS, follow_redirects=False, cookies=_no_cookies()
        )
        self.sockets = asyncio.Semaphore(MAX_SOCKETS)
        self.users: Counter[str] = Counter()

    async def close(self) -> None:
        await self.client.aclose()

    async def handle(self, request: Request, kind: Kind) -> Response:
        target = Target.of(request, kind)
        if target is None:
            return _answer(404, "no such page")
        if request.method not in SAFE_METHODS and not _same_origin(request):
            return _answer(403, "a change through the proxy must come from this server's pages")
        try:  # a read whatever the method (TensorBoard's POSTs are queries; no CSRF token)
            principal = self.tokens.check_scope({**request.scope, "method": "GET"})
        except TokenRefused as error:
            return _answer(error.status, error.detail, headers=error.headers)
        door = await self._door(principal, target)
        if isinstance(door, Response):
            return door
        port = _running_port(door)
        if port is None:
            return _not_running(target, door)
        return await self._forward(request, target, port, door)

    async def _door(self, principal: Principal, target: Target) -> ServiceDoor | Response:
        """The service as ``principal`` may open it, or the answer saying why not."""
        try:
            door = await self._look(principal, target)
        except NotFound as error:
            return _answer(404, str(error))
        except Forbidden as error:
            return _answer(403, str(error))
        if door.link is None:
            return _answer(404, f"job {target.job_id} has no {target.kind.title} there")
        return door

    async def _look(self, principal: Principal, target: Target) -> ServiceDoor:
        jobs = self.services.jobs
        return await run_in_threadpool(
            jobs.service, principal.caller, target.job_id, target.link_path, target.kind.action
        )

    async def _forward(
        self, request: Request, target: Target, port: int, door: ServiceDoor
    ) -> Response:
        kind = target.kind
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > kind.max_body:
            return _too_large(kind)
        url = target.upstream("http", port, request.scope.get("query_string", b""))
        headers = _forwarded(request.headers) + list(target.headers(door).items())
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        body = _bounded(request, kind.max_body) if has_body else None
        upstream_request = self.client.build_request(
            request.method, url, headers=headers, content=body
        )
        try:
            upstream = await self.client.send(upstream_request, stream=True)
        except BodyTooLarge:
            return _too_large(kind)
        except httpx.TimeoutException:
            return _answer(504, f"the {kind.title} of job {target.job_id} did not answer in time")
        except httpx.TransportError:
            return _answer(
                503,
                f"the {kind.title} of job {target.job_id} does not answer yet (starting?)",
                state=door.link.state if door.link else None,
                headers={"Retry-After": "2"},
            )
        kept = {
            name.lower(): value
            for name, value in upstream.headers.items()
            if name.lower() not in NOT_RETURNED and name.lower() not in _named(upstream.headers)
        }
        if kind.sandboxed and not door.owned:
            own = kept.get("content-security-policy")
            kept["content-security-policy"] = f"{SANDBOX}; {own}" if own else SANDBOX
        if door.token and upstream.headers.get("content-type", "").startswith("text/html"):
            return await _page_without(upstream, door.token, kept)
        return StreamingResponse(
            upstream.aiter_raw(),
            status_code=upstream.status_code,
            headers=kept,
            background=BackgroundTask(upstream.aclose),
        )

    async def websocket(self, websocket: WebSocket, kind: Kind) -> None:
        """A WebSocket of the job's service (a Jupyter kernel's channels), both ways."""
        target = Target.of(websocket, kind)
        if target is None or not _same_origin(websocket):
            await websocket.close(code=1008)
            return
        try:
            principal = self.tokens.check_scope({**websocket.scope, "method": "GET"})
        except TokenRefused:
            await websocket.close(code=1008)
            return
        door = await self._door(principal, target)
        port = None if isinstance(door, Response) else _running_port(door)
        if isinstance(door, Response) or port is None:
            await websocket.close(code=1008)
            return
        user = principal.caller.user
        if self.sockets.locked() or self.users[user] >= MAX_SOCKETS_PER_USER:
            await websocket.accept()  # to say why: a refusal before it is a bare 403
            await websocket.close(code=1013, reason="too many WebSockets open: try again later")
            return
        self.users[user] += 1
        try:
            async with self.sockets:
                await self._bridge(websocket, principal, target, port, door)
        finally:
            self.users[user] -= 1
            if not self.users[user]:
                del self.users[user]

    async def _bridge(
        self,
        websocket: WebSocket,
        principal: Principal,
        target: Target,
        port: int,
        door: ServiceDoor,
    ) -> None:
        url = target.upstream("ws", port, websocket.scope.get("query_string", b""))
        wanted = websocket.scope.get("subprotocols") or None
        try:
            upstream = await connect(
                url,
                additional_headers=target.headers(door),
                subprotocols=wanted,
                max_size=MAX_MESSAGE,
                max_queue=QUEUED_MESSAGES,
                open_timeout=5,
                compression=None,
                proxy=None,
            )
        except (OSError, InvalidHandshake, TimeoutError):
            refused = f"the {target.kind.title} of job {target.job_id} refused"
            await websocket.close(code=1011, reason=refused)
            return
        async with upstream:
            await websocket.accept(subprotocol=upstream.subprotocol)
            pumps = [
                asyncio.create_task(_to_upstream(websocket, upstream)),
                asyncio.create_task(_to_browser(upstream, websocket)),
                asyncio.create_task(self._while_allowed(principal, target)),
            ]
            _, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for pump in pending:
                pump.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if websocket.client_state is WebSocketState.CONNECTED:
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # gone meanwhile
                await websocket.close()

    async def _while_allowed(self, principal: Principal, target: Target) -> None:
        """Returns once the caller may no longer open the service: its token revoked or
        its account disabled (within ACCESS_CHECK), its team or the service changed
        (within SERVICE_CHECK): the WebSocket is then cut. A service that stops closes
        its own end at once."""
        key = principal.token.digest
        for beat in itertools.count(1):
            await asyncio.sleep(ACCESS_CHECK)
            try:
                now = await run_in_threadpool(self.tokens.check_digest, key)  # cached
                if beat % SERVICE_EVERY == 0:
                    door = await self._look(now, target)
                    if _running_port(door) is None:
                        return
            except (TokenRefused, NotFound, Forbidden):
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
    for kind in (TENSORBOARD, NOTEBOOK, QUICKLINK):

        async def handle(request: Request, kind: Kind = kind) -> Response:
            return await proxy.handle(request, kind)

        async def bridge(websocket: WebSocket, kind: Kind = kind) -> None:
            await proxy.websocket(websocket, kind)

        app.add_route(kind.route, handle, methods=_methods(kind), include_in_schema=False)
        if kind.sandboxed:  # Jupyter's kernels, a user's page's live parts
            app.add_api_websocket_route(kind.route, bridge)


def _methods(kind: Kind) -> list[str]:
    if kind.sandboxed:  # Jupyter's REST API, a user's program's
        return ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    return ["GET", "HEAD", "POST"]


def _no_cookies() -> CookieJar:
    """A jar that keeps nothing: a cookie one service sets must never go to another (every
    service is on 127.0.0.1, and cookies ignore ports)."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


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


def _forwarded(headers: Any) -> list[tuple[str, str]]:
    return [
        (name, value)
        for name, value in headers.items()
        if name.lower() not in NOT_FORWARDED and name.lower() not in _named(headers)
    ]


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


def _not_running(target: Target, door: ServiceDoor) -> Response:
    """404 once the job and its service have ended for good; 503 while the job is alive
    (a service that failed under a running job is down, not gone)."""
    link = door.link
    assert link is not None
    title = f"{target.kind.title} of job {target.job_id}"
    if link.state is State.RUNNING:
        detail = (
            f"the {title} runs at {link.address}, which this server does "
            "not reach: it serves services of its own machine only"
        )
    else:
        why = f": {link.reason}" if link.reason else ""
        detail = f"the {title} is {link.state}{why}"
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
