"""The ASGI application: the API's routers, its error handlers, its OpenAPI document."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version

from anyio import to_thread
from fastapi import Depends, FastAPI, Response
from fastapi.concurrency import run_in_threadpool

from trainfleet.control.access import Action
from trainfleet.control.engine import Engine
from trainfleet.control.services.bundle import Services
from trainfleet.server import (
    errors,
    openapi,
    routes_accounts,
    routes_audit,
    routes_events,
    routes_gpus,
    routes_jobs,
    routes_logs,
    routes_outputs,
    routes_queues,
    routes_secrets,
    routes_session,
    routes_usage,
    routes_workdirs,
    routes_workflows,
    ui,
)
from trainfleet.server import proxy as service_proxy
from trainfleet.server.audit import Auditor
from trainfleet.server.auth import Tokens, Who
from trainfleet.server.changes import ChangeHub
from trainfleet.server.guard import RequestGuard
from trainfleet.server.hub import LogHub
from trainfleet.server.metrics import CONTENT_TYPE, LatencyMiddleware, Metrics
from trainfleet.server.params import known_query_only
from trainfleet.server.readiness import Readiness
from trainfleet.server.sessions import Sessions
from trainfleet.server.settings import Settings
from trainfleet.wire import API_PREFIX, Health
from trainfleet.workdirs.store import WorkdirStore

WORKER_THREADS = 16
"""Threads for the requests' blocking work (anyio's default: 40), large submissions
waiting for the engine's answer among them; more such requests wait their turn without a
thread (a burst of 100 jobs of 100 tasks held 40, past the server's bound of 64 in all)."""


def create_app(
    engine: Engine,
    settings: Settings,
    services: Services | None = None,
    starting: Callable[[], str | None] = lambda: None,
) -> FastAPI:
    """The API over ``engine`` (``control.assembly.server_engine``, or ``build_engine`` with
    its vault) and its ``services`` (made here if not given); when the server stops, the
    jobs it runs are stopped. ``starting``: why the server is not ready yet, while it
    starts (``/readyz`` says so), or None."""
    services = services or Services.of(engine)
    readiness = Readiness(services.problem, starting)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        to_thread.current_default_thread_limiter().total_tokens = WORKER_THREADS
        if not services.jobs.local_runners:  # a server drives workflows (not `trainfleet ui`)
            services.workflows.start()
        yield
        await proxy.close()
        readiness.close()
        await run_in_threadpool(services.shutdown)

    app = FastAPI(
        title="trainfleet",
        version=version("trainfleet"),
        summary="Run distributed training jobs: submit, follow, stop.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    errors.install(app)
    tokens = Tokens(services.accounts, Sessions.of_data_dir(engine.data_dir.root))
    proxy = service_proxy.ServiceProxy(services, tokens)
    auditor = Auditor(services.audit)
    app.add_middleware(
        RequestGuard,
        tokens=tokens,
        refused=auditor.refused,
        max_body=settings.max_body,
        guarded=(f"{API_PREFIX}/", "/metrics", *service_proxy.PREFIXES),
        reads=service_proxy.PREFIXES,
        public=(f"{API_PREFIX}/openapi.json", f"{API_PREFIX}/docs", f"{API_PREFIX}/session"),
        larger={f"{API_PREFIX}/workdirs/": settings.max_workdir, **service_proxy.LARGER},
        own_tokens=routes_workdirs.POD_PATHS,
    )
    metrics = Metrics(services.jobs, services.usage, services.queues, services.gpus)
    app.add_middleware(LatencyMiddleware, metrics=metrics)  # outermost: it sees every answer
    app.state.services = services
    app.state.settings = settings
    app.state.tokens = tokens
    app.state.sign_ins = routes_session.sign_in_throttle()
    app.state.auditor = auditor  # what writes the audit trail (tests tune its throttle)
    app.state.metrics = metrics
    app.state.workdirs = WorkdirStore(engine.data_dir.root / "workdirs", settings.max_workdir)
    app.state.log_hub = LogHub(settings.poll_interval, settings.log_window)
    app.state.change_hub = ChangeHub(
        services.jobs,
        settings.poll_interval,
        settings.changes_kept,
        per_user=settings.change_feeds_per_user,
    )
    for routes in (
        routes_jobs,
        routes_workdirs,
        routes_logs,
        routes_outputs,
        routes_queues,
        routes_accounts,
        routes_secrets,
        routes_workflows,
        routes_audit,
        routes_events,
        routes_session,
        routes_usage,
        routes_gpus,
    ):
        app.include_router(routes.router, prefix=API_PREFIX)
    app.include_router(routes_workdirs.pods, prefix=API_PREFIX)
    ui.install(app)
    service_proxy.install(app, proxy)

    @app.get(
        "/healthz",
        tags=["health"],
        dependencies=[Depends(known_query_only)],
        responses={"400": errors.ERROR_RESPONSES["400"]},
    )
    async def healthz() -> Health:
        """Whether the server answers; needs no token."""
        return Health()

    @app.get(
        "/readyz",
        tags=["health"],
        dependencies=[Depends(known_query_only)],
        responses={
            "400": errors.ERROR_RESPONSES["400"],
            "503": errors.answer(
                "Not ready: the server is starting, or its store cannot answer now (see "
                "Retry-After)."
            ),
        },
    )
    async def readyz() -> Health:
        """Whether the server can serve requests now (it has picked up its jobs, its store
        answers); needs no token."""
        problem = await readiness.problem()
        if problem is not None:
            raise errors.ApiError(
                503, f"not ready: {problem}", {"Retry-After": str(errors.RETRY_AFTER)}
            )
        return Health(status="ready")

    @app.get(
        "/metrics",
        tags=["health"],
        dependencies=[Depends(known_query_only)],
        response_class=Response,
        responses={
            200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}},
            **errors.responses(_403="Administrators only."),
        },
    )
    def metrics_text(who: Who) -> Response:
        """Prometheus metrics of every team (scrape with an administrator's token)."""
        who.caller.require(Action.READ_METRICS)
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    app.openapi = lambda: openapi.document(app)  # type: ignore[method-assign]
    return app
