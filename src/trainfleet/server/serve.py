"""``trainfleet server``: the server's own flags (TLS, audit retention), then, on the engine
the assembly built, the queues given, the keys checked, an admin token made, jobs resumed,
and the API served."""

from __future__ import annotations

import ipaddress
import logging
import math
import re
import socket
import ssl
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import uvicorn

from trainfleet.control.engine import Engine
from trainfleet.control.services.audit import AuditPruner
from trainfleet.control.services.bundle import Services
from trainfleet.server.api_supervisor import serve_apart
from trainfleet.server.app import create_app
from trainfleet.server.listening import (
    GRACEFUL_SHUTDOWN,
    STARTUP_FAILURE,
    WS_DEFLATE,
    Tls,
    http_config,
)
from trainfleet.server.resumption import Resumption
from trainfleet.server.settings import Settings
from trainfleet.spec.queues import QueuesFile

MAX_RETENTION = 100_000
"""The longest ``--audit-retention`` in days (about 270 years)."""

log = logging.getLogger("trainfleet.server")


class _Encrypted(Exception):
    """The private key asks for a passphrase."""


def tls_of(cert: str | None, key: str | None) -> Tls | None:
    """HTTPS from ``--tls-cert`` and ``--tls-key`` (or TRAINFLEET_TLS_CERT and
    TRAINFLEET_TLS_KEY), None without either; ValueError naming the flag when the files
    cannot serve: one without the other, unreadable, not PEM, or a key not the cert's own.
    """
    cert, key = cert or None, key or None  # an empty variable is no file
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, lacking = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise ValueError(f"{given}: give {lacking} too (HTTPS needs the certificate and its key)")
    _readable(cert, "--tls-cert")
    _readable(key, "--tls-key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_verify_locations(cafile=cert)
    except ssl.SSLError as error:
        raise ValueError(f"--tls-cert: {cert} holds no PEM certificate: {_reason(error)}") from None
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except _Encrypted:
        raise ValueError(
            f"--tls-key: {key} is encrypted; give a key without a passphrase"
        ) from None
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise ValueError(f"--tls-key: {key} is not the key of the certificate {cert}") from None
        raise ValueError(f"--tls-key: {key} holds no PEM private key: {_reason(error)}") from None
    return Tls(cert, key)


def _readable(path: str, flag: str) -> None:
    """ValueError naming ``flag`` unless ``path`` is a file this process can read."""
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise ValueError(f"{flag}: cannot read {path}: {error.strerror or error}") from None


def _no_passphrase() -> bytes:
    raise _Encrypted


def _reason(error: ssl.SSLError) -> str:
    """OpenSSL's words, without the ``(_ssl.c:1234)`` of where CPython met them."""
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(error))


def audit_retention_of(days: str | None) -> float | None:
    """``--audit-retention DAYS`` (or TRAINFLEET_AUDIT_RETENTION) as days, None (keep every
    record) without it; ValueError naming the flag unless it is a number of days above 0."""
    if days is None or not days.strip():
        return None
    try:
        value = float(days)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_RETENTION:
        raise ValueError(
            f"--audit-retention {days!r}: expected a number of days above 0 (e.g. 90), "
            f"at most {MAX_RETENTION}"
        )
    return value


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only: localhost, 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def warn_if_clear(host: str, port: int, tls: Tls | None) -> None:
    """Warn, once, that tokens cross the network readable by anyone on the way."""
    if tls is None and not is_loopback(host):
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        log.warning(
            "listening on %s without TLS: API tokens travel in clear over the network; "
            "serve HTTPS with --tls-cert and --tls-key",
            where,
        )


def serve(
    engine: Engine,
    host: str,
    port: int,
    settings: Settings | None = None,
    queues: QueuesFile | None = None,
    tls: Tls | None = None,
    admin_token: str | None = None,
    apart: bool = False,
) -> None:
    """Serve ``engine`` (``control.assembly.server_engine``) in this process until SIGINT
    or SIGTERM.

    Supervised tasks outlive this process; a restarted server adopts them (resume), on a
    thread of its own while it serves (see ``server.resumption``).
    ``settings``: limits and defaults (``Settings``' own, in this directory, by default).
    ``queues`` (from ``--queues FILE``) are created or updated before jobs resume.
    ``tls``: serve HTTPS with this certificate (see ``tls_of``); plain HTTP without.
    ``admin_token``: the first administrator's token (TRAINFLEET_ADMIN_TOKEN; else one is
    made and shown once).
    ``apart``: serve the API from a process of its own (``server.api_supervisor``).
    """
    engine.expect_resume()  # it runs while the server serves (``server.resumption``)
    for queue in queues.queues if queues else []:
        engine.set_queue(queue)
    if engine.secrets is not None:
        rotated = engine.secrets.rotate()  # the keys are checked now: a bad one stops the start
        if rotated:
            print(
                f"trainfleet | {rotated} secret(s) encrypted again with the first key", flush=True
            )
    services = Services.of(engine)
    token = services.accounts.bootstrap(admin_token)
    if token is not None:
        print(f"trainfleet | admin token (shown only this once): {token}", flush=True)
    engine.sweep_tokens()  # before any request: no token of an ended job is taken
    settings = settings or Settings(workdir=Path.cwd())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    warn_if_clear(host, port, tls)
    retention = settings.audit_retention
    pruning: AbstractContextManager[object] = (
        AuditPruner(services.audit.trail, retention) if retention else nullcontext()
    )
    if apart:
        try:
            serve_apart(engine, services, host, port, settings, tls, pruning)
        finally:
            close_backend(engine)
        return
    server: uvicorn.Server | None = None

    def stop(_: BaseException) -> None:  # a server that cannot follow its jobs serves none
        if server is not None:
            server.should_exit = True

    resumption = Resumption(engine.resume_jobs, stop)
    app = create_app(engine, settings, services, starting=resumption.problem)
    server = uvicorn.Server(http_config(app, host, port, tls))
    resumption.start()
    try:
        with pruning:  # at start, then daily, until the server stops
            server.run()
    except KeyboardInterrupt:  # Ctrl-C, raised again once served: a clean stop
        pass
    finally:
        close_backend(engine)
    if resumption.error is not None:
        raise resumption.error
    if not server.started:  # as uvicorn.run says it (the port is taken, say)
        sys.exit(STARTUP_FAILURE)


def close_backend(engine: Engine) -> None:
    """End the backend's own threads (its watchers) once the engine has stopped; its tasks
    run on, for the next server to adopt."""
    close = getattr(engine.backend, "close", None)  # not every backend has threads to end
    if close is not None:
        close()


def serve_dashboard(
    engine: Engine, port: int, open_page: Callable[[str], object] | None = None
) -> None:
    """``trainfleet ui``: the dashboard over ``engine`` (``control.assembly.dashboard_engine``)
    on 127.0.0.1 until SIGINT or SIGTERM. A token made for this run signs one browser in,
    once, from the link printed (in its fragment: never sent, never logged); it is revoked
    when the command ends. A job another local process runs is stopped by asking it."""
    services = Services.of(engine, local_runners=True)
    token, token_id = services.accounts.page_token()
    try:
        app = create_app(engine, Settings(workdir=Path.cwd()), services)
        app.state.tokens.sign_in_once(token)
        listener = socket.create_server(("127.0.0.1", port))
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/#token={token}"
        print(f"trainfleet | the dashboard of {engine.data_dir.root}: {url}", flush=True)
        print("trainfleet | the link signs one browser in, once; Ctrl-C ends it", flush=True)
        if open_page is not None:
            open_page(url)
        config = uvicorn.Config(
            app,
            log_level="warning",
            server_header=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
            ws_per_message_deflate=WS_DEFLATE,
        )
        uvicorn.Server(config).run(sockets=[listener])
    finally:  # the app's own end flushed the audit records and stopped the jobs it ran
        services.accounts.revoke_page_token(token_id)
