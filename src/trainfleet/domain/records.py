"""What the store keeps about jobs, tasks and events, as read by every face.

Plain frozen dataclasses, not pydantic models: the read commands (``trainfleet list``)
load no pydantic at all. The server and the SDK validate and serialise them with pydantic,
which takes dataclasses as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self

from trainfleet.domain.conditions import Code, Condition, known
from trainfleet.domain.errors import Conflict, NotFound


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


class Reason(StrEnum):
    """Why a job ended where no task's exit says it, in words: the first words of its
    stored reason. Programs read the ``Code`` stored beside it (``Reason.code``)."""

    ENVIRONMENT_BUILD_FAILED = "environment build failed"
    COULD_NOT_START = "could not start"
    NO_FREE_PORT = "could not reserve ports"
    DEADLINE_EXCEEDED = "deadline exceeded"
    DISK_FULL = "disk full"
    LOST = "lost"
    ADMISSION_FAILED = "admission failed"
    PREEMPTED = "preempted"
    NOT_STARTED = "not started"
    STOPPED = "stopped"
    INTERNAL_ERROR = "internal error"
    """A fault of trainfleet's own (a bug, a file it could not write); the detail says which."""

    @property
    def code(self) -> Code:
        """The condition code stored with this reason."""
        return Code[self.name]

    def because(self, detail: object) -> str:
        """The reason's message: ``<reason>: <detail>``."""
        return f"{self.value}: {detail}"

    def condition(self, detail: object) -> Condition:
        """The condition stored for this reason: its code and ``because(detail)``."""
        return Condition(self.code, self.because(detail))


@dataclass(frozen=True, slots=True)
class _Record:
    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        """A record from a row of the store (or a decoded JSON object): only its own fields."""
        return cls(**{name: row[name] for name in cls.__dataclass_fields__ if name in row})

    def to_dict(self, exclude: Collection[str] = ()) -> dict[str, Any]:
        """The fields but ``exclude`` as plain values (states as strings), for JSON or YAML."""
        values = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        return {
            name: value.value if isinstance(value, StrEnum) else value
            for name, value in values
            if name not in exclude
        }


def _typed(record: Any) -> None:
    """Store the state as a State and codes as Codes (rows and JSON give plain strings)."""
    if not isinstance(record.state, State):
        object.__setattr__(record, "state", State(record.state))
    for name in ("code", "waiting_code"):
        value = getattr(record, name, None)
        if isinstance(value, str) and not isinstance(value, Code):
            object.__setattr__(record, name, known(value))


@dataclass(frozen=True, slots=True, kw_only=True)
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
    code: str = ""
    """Why it is in its state: a ``Code`` (a newer server's unknown one stays text)."""
    reason: str = ""
    """The same said to people (``exited with exit code 1 after 2 restart(s)``)."""
    started_at: float | None = None
    finished_at: float | None = None

    def __post_init__(self) -> None:
        _typed(self)

    @property
    def name(self) -> str:
        """``role/index``, as logs are prefixed."""
        return f"{self.role}/{self.index}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord(_Record):
    """One submitted job; ``spec`` is the validated JobSpec as JSON."""

    id: str
    name: str
    framework: str
    state: State = State.QUEUED
    code: str = ""
    """Why it is in its state (``preempted``, ``succeeded``, ``lost``...): a ``Code``."""
    reason: str = ""
    """The same said to people; for an ended job, why it ended."""
    waiting_code: str = ""
    """While it does not run yet, why it waits (``waiting-for-quota``...); else ``""``."""
    waiting: str = ""
    """The same said to people (``waiting for quota: queue 'a' has ...``)."""
    spec: str
    source: str = "trainfleet"
    workdir: str
    user: str = ""
    team: str = "default"
    queue: str = "default"
    """The queue it waits (and is admitted) in, as its spec says."""
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _typed(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPage(_Record):
    """One page of jobs, newest first; ``next_cursor`` fetches the next (None on the last)."""

    jobs: list[JobRecord]
    next_cursor: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    """How many jobs match every filter but ``state``, by state (states with none left
    out): the same on every page."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRecord(_Record):
    """A timestamped change of a job or of one of its tasks."""

    id: int
    job_id: str
    time: float
    task: str = ""
    state: str
    code: str = ""
    """The condition code of the change (see ``Code``)."""
    message: str = ""
    team: str = ""
    """The team of its job (kept with the event: a job's deletion leaves its last event)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", known(self.code))


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRecord(_Record):
    """An API token: the store keeps only its ``digest``; hashing is the server's job."""

    id: str
    name: str
    digest: str
    admin: bool = False
    """Kept for tokens made before users existed; what a token may do is its user's."""
    created_at: float
    revoked_at: float | None = None
    user: str = "admin"

    def __post_init__(self) -> None:
        object.__setattr__(self, "admin", bool(self.admin))  # SQLite keeps 0 or 1

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class TeamRole(StrEnum):
    """What a member may do in its team, each role all that the ones before it may."""

    VIEWER = "viewer"
    """Reads the team's jobs, queues and logs."""
    MEMBER = "member"
    """Also submits into the team's queues, and stops and deletes its own jobs."""
    TEAM_ADMIN = "team-admin"
    """Also stops and deletes the team's jobs, and changes its members, queues and secrets."""

    @property
    def rank(self) -> int:
        return list(TeamRole).index(self)

    def allows(self, needed: TeamRole) -> bool:
        """Whether this role may do what ``needed`` may."""
        return self.rank >= needed.rank


@dataclass(frozen=True, slots=True, kw_only=True)
class UserRecord(_Record):
    """A person (or a robot) who holds tokens; an ``admin`` may do everything."""

    name: str
    admin: bool = False
    created_at: float
    disabled_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "admin", bool(self.admin))  # SQLite keeps 0 or 1

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamRecord(_Record):
    """A team: its members by role, and the queue its jobs go to when they name none."""

    name: str
    default_queue: str
    created_at: float
    members: dict[str, TeamRole] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class SecretRecord(_Record):
    """A team's secret as stored: the names of its keys, and its values encrypted together
    (``data``: a Fernet token of their JSON; see ``trainfleet.vault``)."""

    team: str
    name: str
    keys: list[str]
    data: str = field(repr=False)
    user: str
    created_at: float


class Audited(StrEnum):
    """The kinds of change the audit trail records (stored as plain text: a newer
    server's kinds still read)."""

    JOB_SUBMIT = "job.submit"
    JOB_STOP = "job.stop"
    JOB_DELETE = "job.delete"
    TOKEN_CREATE = "token.create"
    TOKEN_REVOKE = "token.revoke"
    USER_CREATE = "user.create"
    USER_DISABLE = "user.disable"
    TEAM_CREATE = "team.create"
    MEMBER_SET = "team.member.set"
    MEMBER_REMOVE = "team.member.remove"
    QUEUE_PUT = "queue.put"
    GPU_CLEAR = "gpu.clear"
    """An operator's word that a GPU is well: its present problems are ignored."""
    AUTH_FAILED = "auth.failed"
    AUDIT_PRUNE = "audit.prune"
    """The server's own: it removed the records older than its retention."""
    SECRET_CREATE = "secret.create"
    SECRET_DELETE = "secret.delete"
    SECRET_ROTATE = "secret.rotate"
    """The secrets' kinds: for their endpoints, which never put a value in a record."""
    WORKFLOW_SUBMIT = "workflow.submit"
    WORKFLOW_RUN = "workflow.run"
    WORKFLOW_PAUSE = "workflow.pause"
    WORKFLOW_RESUME = "workflow.resume"
    WORKFLOW_DELETE = "workflow.delete"
    RUN_STOP = "workflow.run.stop"
    RUN_RETRY = "workflow.run.retry"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord(_Record):
    """One change, or one refused attempt at one: who (``user`` and ``token`` id, ``""``
    when unknown), when, what (``action`` on ``target``, of ``team``), from where
    (``source``: the client's address) and how it ended (``outcome``: ``ok``, or the
    status and why, as ``403 ...``). Never holds a secret or a token's value."""

    id: int = 0
    """The order of records; given by the store (0 before it is stored)."""
    time: float
    user: str = ""
    token: str = ""
    action: str
    target: str = ""
    team: str = ""
    source: str = ""
    outcome: str = "ok"
    detail: str = ""


class JobNotFound(NotFound):
    """No job has that id."""


class JobActive(Conflict):
    """The job has not ended, and the request needs it to have."""


@dataclass(frozen=True, slots=True)
class CheckpointStep:
    """A committed checkpoint of a job (``trainfleet.checkpoint``'s ``step-<N>``)."""

    step: int
    path: str
    committed_at: float
    """When its ``COMMITTED`` marker was written."""


@dataclass(frozen=True, slots=True)
class OutputFile:
    """A file a job's tasks left in its output folder (``$TRAINFLEET_OUTPUT_DIR``)."""

    name: str
    size: int
    """Its size in bytes, when it was listed."""
    modified: float
    """When it last changed (seconds since the epoch)."""


@dataclass(frozen=True)
class JobDetails:
    """A job with its tasks and events, as ``describe`` shows it."""

    job: JobRecord
    tasks: list[TaskRecord]
    events: list[EventRecord]
    checkpoints: list[CheckpointStep] = field(default_factory=list)
    """Its committed checkpoints, oldest first (where trainfleet can read its folder)."""
