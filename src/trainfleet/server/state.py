"""What the routers take from the application they serve in (``app.state``, set by
``create_app``), as FastAPI dependencies: its services and settings.

Each is a coroutine: FastAPI would run a plain function on a worker thread, a trip that
costs more than the lookup."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from trainfleet.control.services.accounts import Accounts
from trainfleet.control.services.audit import AuditLog
from trainfleet.control.services.bundle import Services
from trainfleet.control.services.gpus import Gpus
from trainfleet.control.services.jobs import Jobs
from trainfleet.control.services.queues import Queues
from trainfleet.control.services.secrets import TeamSecrets
from trainfleet.control.services.usage import Usage
from trainfleet.control.services.workflows import Workflows
from trainfleet.domain.records import JobRecord
from trainfleet.server.auth import Who
from trainfleet.server.hub import LogHub
from trainfleet.server.metrics import Metrics
from trainfleet.server.params import JobId
from trainfleet.server.settings import Settings
from trainfleet.workdirs.store import WorkdirStore


def _services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


async def _jobs(request: Request) -> Jobs:
    return _services(request).jobs


async def _accounts(request: Request) -> Accounts:
    return _services(request).accounts


async def _queues(request: Request) -> Queues:
    return _services(request).queues


async def _secrets(request: Request) -> TeamSecrets:
    return _services(request).secrets


async def _workflows(request: Request) -> Workflows:
    return _services(request).workflows


async def _audit_log(request: Request) -> AuditLog:
    return _services(request).audit


async def _usage(request: Request) -> Usage:
    return _services(request).usage


async def _gpus(request: Request) -> Gpus:
    return _services(request).gpus


async def _settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


async def _metrics(request: Request) -> Metrics:
    return request.app.state.metrics  # type: ignore[no-any-return]


async def _workdirs(request: Request) -> WorkdirStore:
    return request.app.state.workdirs  # type: ignore[no-any-return]


async def _log_hub(request: Request) -> LogHub:
    return request.app.state.log_hub  # type: ignore[no-any-return]


JobsDep = Annotated[Jobs, Depends(_jobs)]
AccountsDep = Annotated[Accounts, Depends(_accounts)]
QueuesDep = Annotated[Queues, Depends(_queues)]
SecretsDep = Annotated[TeamSecrets, Depends(_secrets)]
WorkflowsDep = Annotated[Workflows, Depends(_workflows)]
AuditLogDep = Annotated[AuditLog, Depends(_audit_log)]
UsageDep = Annotated[Usage, Depends(_usage)]
GpusDep = Annotated[Gpus, Depends(_gpus)]
SettingsDep = Annotated[Settings, Depends(_settings)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]
WorkdirsDep = Annotated[WorkdirStore, Depends(_workdirs)]
LogHubDep = Annotated[LogHub, Depends(_log_hub)]


async def readable_job(job_id: JobId, who: Who, jobs: JobsDep) -> JobRecord:
    """The job, if the caller sees it; 404 before a stream starts, not inside it."""
    return jobs.readable(who.caller, job_id)


Readable = Annotated[JobRecord, Depends(readable_job)]
"""The job the path names, if the caller may read it."""
