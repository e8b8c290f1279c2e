"""How ``trainfleet server`` listens: uvicorn's settings for the API, over HTTP or HTTPS."""

from __future__ import annotations

import logging
import socket
import sys
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

WS_DEFLATE = False
"""No compression of proxied WebSockets (a notebook's kernels): it would run on the event
loop every request shares, and cost more than it saves on a server's network (a 100 KB
output: 1.38x a direct round trip with it, 1.07x without; benchmarks/proxy.py)."""

GRACEFUL_SHUTDOWN = 3
"""Seconds a stopping server waits for open requests before it cuts them."""
STARTUP_FAILURE = 3
"""The exit status of a server that could not start listening (uvicorn's)."""
BACKLOG = 2048
"""Connections a listener holds before they are accepted (uvicorn's default)."""

log = logging.getLogger("uvicorn.error")


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


def listen_on(host: str, port: int, tls: Tls | None) -> socket.socket:
    """A socket listening on ``host``:``port``, then said in uvicorn's words (``Uvicorn
    running on``: clients may connect once they read it); where it cannot listen, the
    reason logged and SystemExit(STARTUP_FAILURE), as uvicorn does."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(BACKLOG)
    except OSError as error:
        listener.close()
        log.error(error)
        sys.exit(STARTUP_FAILURE)
    where = f"[{host}]" if family == socket.AF_INET6 else host
    scheme = "https" if tls else "http"
    port = listener.getsockname()[1]
    log.info("Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", scheme, where, port)
    return listener
