"""What the store keeps about jobs, tasks and events, as read by every face."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class State(StrEnum):
    """The life of a job and of each of its tasks."""

    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class TaskRecord(_Record):
    """One task of a job: a replica of a role."""

    job_id: str
    role: str
    index: int
    state: State = State.QUEUED
    address: str = ""
    gpus: str = ""
    pid: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    reason: str = ""
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def name(self) -> str:
        """``role/index``, as logs are prefixed."""
        return f"{self.role}/{self.index}"


class JobRecord(_Record):
    """One submitted job; ``spec`` is the validated JobSpec as JSON."""

    id: str
    name: str
    framework: str
    state: State = State.QUEUED
    reason: str = ""
    spec: str
    source: str = "trainfleet"
    workdir: str
    user: str = ""
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    labels: dict[str, str] = {}


class JobPage(_Record):
    """One page of jobs, newest first; ``next_cursor`` fetches the next (None on the last)."""

    jobs: list[JobRecord]
    next_cursor: str | None = None


class EventRecord(_Record):
    """A timestamped change of a job or of one of its tasks."""

    id: int
    job_id: str
    time: float
    task: str = ""
    state: str
    message: str = ""


class TokenRecord(_Record):
    """An API token: the store keeps only its ``digest``; hashing is the server's job."""

    id: str
    name: str
    digest: str
    admin: bool = False
    created_at: float
    revoked_at: float | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class JobNotFound(LookupError):
    """No job has that id."""


class JobActive(RuntimeError):
    """The job has not ended, and the request needs it to have."""


@dataclass(frozen=True)
class JobDetails:
    """A job with its tasks and events, as ``describe`` shows it."""

    job: JobRecord
    tasks: list[TaskRecord]
    events: list[EventRecord]
