"""The dashboard at ``/``: static files shipped in the package (``server/dashboard/``), no
CDN and nothing fetched at run time; the page signs in through ``/api/v1/session`` and then
uses the same API as every client."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.responses import FileResponse
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ASSETS = Path(__file__).parent / "dashboard"

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; frame-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
"""Every file of the dashboard: its own scripts and styles only, never framed elsewhere,
revalidated on each load (an upgraded server's page is the one shown)."""


class _Headed:
    """An ASGI app whose answers get SECURITY_HEADERS."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, headed)


def install(app: FastAPI) -> None:
    """``/`` (the page) and ``/assets/`` (its scripts and styles) on ``app``."""
    index = ASSETS / "index.html"

    async def page(scope: Scope, receive: Receive, send: Send) -> None:
        await FileResponse(index, media_type="text/html; charset=utf-8")(scope, receive, send)

    app.mount("/assets", _Headed(StaticFiles(directory=ASSETS / "assets")), name="assets")
    app.add_route("/", _Headed(page), include_in_schema=False)  # type: ignore[arg-type]
