"""The ASGI application: the API's routers, its error handlers, its OpenAPI document."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Annotated

from fastapi import Depends, FastAPI, Response
from fastapi.concurrency import run_in_threadpool

from trainfleet.control.access import Action
from trainfleet.control.engine import Engine
from trainfleet.server import (
    errors,
    openapi,
    routes_accounts,
    routes_audit,
    routes_jobs,
    routes_logs,
    routes_queues,
    routes_secrets,
    routes_workdirs,
)
from trainfleet.server.audit import Auditor
from trainfleet.server.auth import Principal, Tokens, authenticator
from trainfleet.server.guard import RequestGuard
from trainfleet.server.metrics import CONTENT_TYPE, LatencyMiddleware, Metrics
from trainfleet.server.ownership import QueueTeams
from trainfleet.server.params import known_query_only
from trainfleet.server.readiness import Readiness
from trainfleet.server.settings import Settings
from trainfleet.wire import API_PREFIX, Health
from trainfleet.workdirs.store import WorkdirStore


def create_app(engine: Engine, settings: Settings) -> FastAPI:
    """The API over ``engine`` (``control.assembly.server_engine``, or ``build_engine`` with
    its vault); when the server stops, the jobs it runs are stopped."""

    readiness = Readiness(engine.store)
    secrets = engine.secrets
    if secrets is None:
        raise ValueError("a server keeps teams' secrets: build its engine with a vault")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        readiness.close()
        await run_in_threadpool(auditor.writer.flush)
        await run_in_threadpool(engine.shutdown)

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
    tokens = Tokens(engine.store)
    auditor = Auditor(engine.store.audit)
    auth = authenticator(engine.store, tokens, refused=auditor.refused)
    audit = auditor.dependency(auth)
    app.add_middleware(
        RequestGuard,
        tokens=tokens,
        refused=auditor.refused,
        max_body=settings.max_body,
        guarded=(f"{API_PREFIX}/", "/metrics"),
        public=(f"{API_PREFIX}/openapi.json", f"{API_PREFIX}/docs"),
        larger={f"{API_PREFIX}/workdirs/": settings.max_workdir},
    )
    metrics = Metrics(engine.store)
    app.add_middleware(LatencyMiddleware, metrics=metrics)  # outermost: it sees every answer
    workdirs = WorkdirStore(engine.data_dir.root / "workdirs", settings.max_workdir)
    queue_teams = QueueTeams(engine.store)
    app.include_router(
        routes_jobs.router(engine, settings, auth, audit, metrics, workdirs, queue_teams),
        prefix=API_PREFIX,
    )
    app.include_router(routes_workdirs.router(workdirs, auth), prefix=API_PREFIX)
    app.include_router(routes_logs.router(engine, settings, auth), prefix=API_PREFIX)
    app.include_router(routes_queues.router(engine, auth, audit, queue_teams), prefix=API_PREFIX)
    app.include_router(routes_accounts.router(engine, auth, audit, queue_teams), prefix=API_PREFIX)
    app.include_router(routes_secrets.router(secrets, auth, audit), prefix=API_PREFIX)
    app.include_router(
        routes_audit.router(engine.store.audit, auth, auditor.writer.flush), prefix=API_PREFIX
    )

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
            "503": errors.answer("Not ready: the store cannot answer now (see Retry-After)."),
        },
    )
    async def readyz() -> Health:
        """Whether the server can serve requests now (its store answers); needs no token."""
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
    def metrics_text(who: Annotated[Principal, Depends(auth)]) -> Response:
        """Prometheus metrics of every team (scrape with an administrator's token)."""
        who.caller.require(Action.READ_METRICS)
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    app.state.auditor = auditor  # what writes the audit trail (tests tune its throttle)
    app.openapi = lambda: openapi.document(app)  # type: ignore[method-assign]
    return app
