"""``/jobs/<id>/tensorboard/...``: a job's TensorBoard, behind the server's own sign-in.

The proxy reaches one place only: the port of that job's own TensorBoard task, on this
machine's loopback (its address as the store has it; never a host or URL from the
request). The caller must be able to read the job (``Action.READ_JOB``: another team's
job is not found); a path with ``..``, an encoded slash or dot, or a job's id that is not
the one authorised, is not found. Neither the caller's token nor its session cookie
reaches TensorBoard. A service that does not run answers 503 (or 404 for none) with its
state, at once: never a gateway error to retry in a loop.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from trainfleet.control.services.bundle import Services
from trainfleet.control.services.links import service_links
from trainfleet.domain.errors import NotFound
from trainfleet.domain.links import ServiceLink
from trainfleet.domain.records import State
from trainfleet.server.auth import TokenRefused, Tokens
from trainfleet.server.sessions import CSRF_HEADER

PREFIX = "/jobs/"
"""Where every job's services are served (the request guard covers it)."""

SERVICE = "tensorboard"
MAX_BODY = 1024 * 1024
"""TensorBoard's requests are small queries: more is refused (413)."""

TIMEOUT = httpx.Timeout(60.0, connect=2.0)
LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=16)

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
NOT_FORWARDED = HOP_BY_HOP | {"host", "authorization", "cookie", CSRF_HEADER.lower()}
"""What the caller sends that TensorBoard never sees: its credentials above all."""
NOT_RETURNED = HOP_BY_HOP | {"set-cookie"}

_ENCODED = re.compile(r"%(2f|5c|2e|00)", re.IGNORECASE)


class ServiceProxy:
    """Forwards a job's service requests to its task; one connection pool per server."""

    def __init__(self, services: Services, tokens: Tokens) -> None:
        self.services = services
        self.tokens = tokens
        self.client = httpx.AsyncClient(timeout=TIMEOUT, limits=LIMITS, follow_redirects=False)

    async def close(self) -> None:
        await self.client.aclose()

    async def handle(self, request: Request) -> Response:
        job_id: str = request.path_params["job_id"]
        raw = request.scope.get("raw_path", request.url.path.encode()).decode("latin-1")
        if not _plain(raw, job_id):
            return _answer(404, "no such page")
        try:  # a read whatever the method: TensorBoard's POSTs are queries (no CSRF token)
            principal = self.tokens.check_scope({**request.scope, "method": "GET"})
        except TokenRefused as error:
            return _answer(error.status, error.detail, headers=error.headers)
        try:
            link, job_ended = await run_in_threadpool(self._link, principal.caller, job_id)
        except NotFound as error:
            return _answer(404, str(error))
        if link is None:
            return _answer(404, f"job {job_id} has no TensorBoard (`tensorboard:` in its file)")
        port = _loopback_port(link)
        if link.state is not State.RUNNING or port is None:
            return _not_running(job_id, link, job_ended)
        return await self._forward(request, raw, port, job_id, link)

    def _link(self, caller: Any, job_id: str) -> tuple[ServiceLink | None, bool]:
        """The job's TensorBoard (None: it has none), and whether the job has ended."""
        jobs = self.services.jobs
        job = jobs.readable(caller, job_id)
        links = service_links(job, jobs.tasks(job_id))
        link = next((link for link in links if link.name == SERVICE), None)
        return link, State(job.state).is_final

    async def _forward(
        self, request: Request, raw: str, port: int, job_id: str, link: ServiceLink
    ) -> Response:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY:
            return _answer(413, f"a request to TensorBoard may carry {MAX_BODY} bytes at most")
        body = await request.body()
        if len(body) > MAX_BODY:
            return _answer(413, f"a request to TensorBoard may carry {MAX_BODY} bytes at most")
        query = request.scope.get("query_string", b"").decode("latin-1")
        url = f"http://127.0.0.1:{port}{raw}" + (f"?{query}" if query else "")
        headers = [
            (name, value)
            for name, value in request.headers.items()
            if name.lower() not in NOT_FORWARDED and name.lower() not in _named(request.headers)
        ]
        upstream_request = self.client.build_request(
            request.method, url, headers=headers, content=body
        )
        try:
            upstream = await self.client.send(upstream_request, stream=True)
        except httpx.TimeoutException:
            return _answer(504, f"the TensorBoard of job {job_id} did not answer in time")
        except httpx.TransportError:
            return _answer(
                503,
                f"the TensorBoard of job {job_id} does not answer yet (starting?)",
                state=link.state,
                headers={"Retry-After": "2"},
            )
        kept = {
            name: value
            for name, value in upstream.headers.items()
            if name.lower() not in NOT_RETURNED and name.lower() not in _named(upstream.headers)
        }
        return StreamingResponse(
            upstream.aiter_raw(),
            status_code=upstream.status_code,
            headers=kept,
            background=BackgroundTask(upstream.aclose),
        )


def install(app: FastAPI, proxy: ServiceProxy) -> None:
    """The proxy's routes on ``app`` (left out of the OpenAPI document: not the API)."""
    methods = ["GET", "HEAD", "POST"]
    path = PREFIX + "{job_id}/" + SERVICE + "{rest:path}"
    app.add_route(path, proxy.handle, methods=methods, include_in_schema=False)


def _plain(raw: str, job_id: str) -> bool:
    """Whether the raw path names this job's service plainly: no dot segment, no encoded
    slash, backslash, dot or NUL, nothing after the service's name but ``/...``."""
    if _ENCODED.search(raw) or "\\" in raw:
        return False
    head = f"{PREFIX}{job_id}/{SERVICE}"
    rest = raw[len(head) :]
    if not raw.startswith(head) or (rest and not rest.startswith("/")):
        return False
    return not any(part in (".", "..") for part in raw.split("/"))


def _loopback_port(link: ServiceLink) -> int | None:
    """Its task's port where it listens on this machine's loopback; None elsewhere."""
    host = link.address.rpartition(":")[0]
    return link.port if host in ("127.0.0.1", "localhost") else None


def _not_running(job_id: str, link: ServiceLink, job_ended: bool) -> Response:
    """404 once the job and its service have ended for good; 503 while the job is alive
    (a service that failed under a running job is down, not gone)."""
    if link.state is State.RUNNING:
        detail = (
            f"the TensorBoard of job {job_id} runs at {link.address}, which this server does "
            "not reach: it serves services of its own machine only"
        )
    else:
        why = f": {link.reason}" if link.reason else ""
        detail = f"the TensorBoard of job {job_id} is {link.state}{why}"
    status = 404 if link.state.is_final and job_ended else 503
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
