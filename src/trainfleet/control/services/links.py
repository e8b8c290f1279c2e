"""Which services a job has (``JobSpec.service_roles``: its TensorBoard) and where each
is: read from the job's spec and its tasks, for the API, the proxy and the CLI."""

from __future__ import annotations

from collections.abc import Sequence

from trainfleet.domain.links import ServiceLink
from trainfleet.domain.records import JobRecord, State, TaskRecord
from trainfleet.spec.models import JobSpec
from trainfleet.spec.notebook import PREFIX as NOTEBOOK_PREFIX
from trainfleet.spec.notebook import ROLE as NOTEBOOK_ROLE


def service_links(job: JobRecord, tasks: Sequence[TaskRecord]) -> list[ServiceLink]:
    """The job's services, each with its task's state and address (none: no service)."""
    spec = JobSpec.model_validate_json(job.spec)
    roles = spec.service_roles() | ({NOTEBOOK_ROLE} if spec.notebook is not None else set())
    links = []
    for role in sorted(roles):
        task = next((t for t in tasks if t.role == role and t.index == 0), None)
        links.append(
            ServiceLink(
                name=role,
                path=f"{NOTEBOOK_PREFIX}{job.id}/"
                if role == NOTEBOOK_ROLE
                else f"/jobs/{job.id}/{role}/",
                state=State(task.state) if task else State.QUEUED,
                reason=task.reason if task else "",
                address=task.address if task else "",
            )
        )
    return links
