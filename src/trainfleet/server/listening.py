"""How ``trainfleet server`` listens: uvicorn's settings for the API, over HTTP or HTTPS."""

from __future__ import annotations

from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

WS_DEFLATE = False
"""No compression of proxied WebSockets (a notebook's kernels): it would run on the event
loop every request shares, and cost more than it saves on a server's network (a 100 KB
output: 1.38x a direct round trip with it, 1.07x without; benchmarks/proxy.py)."""

GRACEFUL_SHUTDOWN = 3
"""Seconds a stopping server waits for open requests before it cuts them."""


@dataclass(frozen=True)
class Tls:
    """The server's certificate (PEM, its chain after it) and private key: it serves HTTPS."""

    cert: str
    key: str


def http_config(app: ASGIApp | str, host: str, port: int, tls: Tls | None) -> uvicorn.Config:
    """How uvicorn serves the API of ``trainfleet server``."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        server_header=False,
        # Followed streams last as long as their jobs: on stop, give them this long, then
        # cut them, so that the jobs can be stopped (clients resume elsewhere or give up).
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
        ws_per_message_deflate=WS_DEFLATE,
        ssl_certfile=tls.cert if tls else None,
        ssl_keyfile=tls.key if tls else None,
    )
