"""Which services a job has (its TensorBoard, its notebook, its quick links) and where
each is: read from the job's spec and its tasks, for the API, the proxy and the CLI."""

from __future__ import annotations

from collections.abc import Sequence

from trainfleet.domain.links import ServiceLink
from trainfleet.domain.records import JobRecord, State, TaskRecord
from trainfleet.spec.models import JobSpec
from trainfleet.spec.notebook import PREFIX as NOTEBOOK_PREFIX
from trainfleet.spec.notebook import ROLE as NOTEBOOK_ROLE


def service_links(job: JobRecord, tasks: Sequence[TaskRecord]) -> list[ServiceLink]:
    """The job's services (its TensorBoard, its notebook) and quick links, each with its
    task's state and address (none: no service)."""
    spec = JobSpec.model_validate_json(job.spec)
    roles = spec.service_roles() | ({NOTEBOOK_ROLE} if spec.notebook is not None else set())
    wanted = [(role, role, 0, service_path(job.id, role)) for role in sorted(roles)]
    wanted += [
        (name, link.role, link.index, quicklink_path(job.id, name))
        for name, link in spec.quicklinks.items()
    ]
    links = []
    for name, role, index, path in wanted:
        task = next((t for t in tasks if t.role == role and t.index == index), None)
        links.append(
            ServiceLink(
                name=name,
                path=path,
                state=State(task.state) if task else State.QUEUED,
                reason=task.reason if task else "",
                address=task.address if task else "",
            )
        )
    return links


def service_path(job_id: str, role: str) -> str:
    """Where a server serves the job's service ``role`` (``tensorboard``, ``notebook``)."""
    return f"{NOTEBOOK_PREFIX}{job_id}/" if role == NOTEBOOK_ROLE else f"/jobs/{job_id}/{role}/"


def quicklink_path(job_id: str, name: str) -> str:
    """Where a server serves the job's quick link ``name``."""
    return f"/jobs/{job_id}/links/{name}/"


def direct_url(job_id: str, link: ServiceLink) -> str:
    """Where this machine opens the service without a proxy: TensorBoard under its path,
    a quick link at its task's root; "" for a notebook (its token stays with the proxy)
    and for a service that has no address yet."""
    if not link.address or link.path == service_path(job_id, NOTEBOOK_ROLE):
        return ""
    if link.path == quicklink_path(job_id, link.name):
        return f"http://{link.address}/"
    return f"http://{link.address}{link.path}"
