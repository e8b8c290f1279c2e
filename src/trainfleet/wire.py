"""What the REST API sends and receives, shared by the server and the Python SDK.

Jobs, tasks and events are the domain's own records; these models only wrap them. This
module imports nothing of the server, the engine, the backends or the store, so the SDK
(``import trainfleet.client``) loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from trainfleet.domain.records import EventRecord, JobRecord, State, TaskRecord
from trainfleet.spec.queues import QueueConfig, QueueName, Quota

if TYPE_CHECKING:
    from trainfleet.control.queueing import QueueStatus

API_PREFIX = "/api/v1"
"""Where every versioned endpoint lives."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Problem(_Model):
    """One thing wrong with a submitted job: where (file, line, field) and what."""

    file: str | None = None
    line: int | None = None
    field: str = ""
    message: str


class ErrorBody(_Model):
    """Every 4xx and 5xx answer: ``detail`` is the message the CLI prints after ``error:``."""

    detail: str
    problems: list[Problem] = Field(
        default_factory=list, description="For a job that cannot be read: each problem found."
    )


class Submitted(_Model):
    """A stored job and what the user should be told about how it was read."""

    job: JobRecord
    warnings: list[str] = Field(default_factory=list)


class JobDetails(_Model):
    """A job with its tasks (in spec order) and its events (oldest first)."""

    job: JobRecord
    tasks: list[TaskRecord]
    events: list[EventRecord]


class LogChunk(_Model):
    """A piece of a followed log: complete lines, decoded as UTF-8 (bad bytes replaced)."""

    text: str
    offset: int = Field(description="The byte offset just after this piece.")


class JobEnd(_Model):
    """The last message of a followed stream: the job has ended."""

    job_id: str
    state: State
    reason: str = ""


class QueueBody(_Model):
    """A queue's configuration, as ``PUT /api/v1/queues/{name}`` takes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cohort: QueueName | None = None
    nominal: Quota = Field(default_factory=Quota)
    borrowing_limit: Quota | None = None


class QueueState(_Model):
    """A queue: its configuration, what its admitted jobs use, and its jobs."""

    queue: QueueConfig
    used: dict[str, int] = Field(
        description="cpu in millicores, memory in bytes, gpu in thousandths, custom counts."
    )
    running: list[str] = Field(description="Ids of its admitted jobs.")
    waiting: list[str] = Field(description="Ids of its waiting jobs, in the order they go.")

    @classmethod
    def of(cls, status: QueueStatus) -> QueueState:
        return cls(
            queue=status.config, used=status.used, running=status.admitted, waiting=status.waiting
        )


class Health(_Model):
    status: str = "ok"
