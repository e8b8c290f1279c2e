"""What the REST API sends and receives, shared by the server and the Python SDK.

Jobs, tasks and events are the domain's own records; these models only wrap them. This
module imports nothing of the server, the engine, the backends or the store, so the SDK
(``import trainfleet.client``) loads none of them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from trainfleet.domain.links import ServiceLink
from trainfleet.domain.records import (
    AuditRecord,
    CheckpointStep,
    EventRecord,
    JobRecord,
    State,
    TaskRecord,
    TeamRole,
)
from trainfleet.spec.models import NO_NUL_PATTERN
from trainfleet.spec.names import ACCOUNT_NAME, SECRET_NAME, SecretKey
from trainfleet.spec.queues import QueueConfig, QueueName, Quota

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
    checkpoints: list[CheckpointStep] = Field(
        default_factory=list,
        description="Its committed checkpoints (`trainfleet.checkpoint`), oldest first.",
    )
    may: list[str] = Field(
        default_factory=list,
        description="What the caller may do to the job now: `stop`, `delete` (access.RULES).",
    )
    services: list[ServiceLink] = Field(
        default_factory=list,
        description="Its services (`tensorboard`), each served by this server at its `path` "
        "while its `state` is running.",
    )


class LogChunk(_Model):
    """A piece of a followed log: complete lines, decoded as UTF-8 (bad bytes replaced)."""

    text: str
    offset: int = Field(description="The byte offset just after this piece.")


class JobEnd(_Model):
    """The last message of a followed stream: the job has ended."""

    job_id: str
    state: State
    code: str = ""
    """Why it ended: a ``Code`` of ``trainfleet.domain.conditions``."""
    reason: str = ""


class QueueBody(_Model):
    """A queue's configuration, as ``PUT /api/v1/queues/{name}`` takes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cohort: QueueName | None = None
    nominal: Quota = Field(default_factory=Quota)
    borrowing_limit: Quota | None = None
    team: QueueName | None = Field(
        default=None,
        description="The team of a new queue (default: the caller's only team); a queue "
        "keeps its team.",
    )


class QueueState(_Model):
    """A queue: its configuration, what its admitted jobs use, and its jobs."""

    queue: QueueConfig
    team: str = "default"
    used: dict[str, int] = Field(
        description="cpu in millicores, memory in bytes, gpu in thousandths, custom counts."
    )
    running: list[str] = Field(description="Ids of its admitted jobs.")
    waiting: list[str] = Field(description="Ids of its waiting jobs, in the order they go.")


NAME_PATTERN = ACCOUNT_NAME
"""Users, teams and tokens: lower-case letters, digits, ``.`` and ``-``, at most 63."""
Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class _Body(_Model):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WhoAmI(_Model):
    """The caller: its user, whether it is an administrator, its teams and roles."""

    user: str
    admin: bool
    token: str = Field(description="The name of the token used.")
    teams: dict[str, TeamRole]


class UserBody(_Body):
    """A new user, as ``POST /api/v1/users`` takes it."""

    name: Name
    admin: bool = False
    team: QueueName | None = Field(default=None, description="A team to add the user to.")
    role: TeamRole = TeamRole.MEMBER


class UserView(_Model):
    """A user: whether it is an administrator or disabled, its teams and roles."""

    name: str
    admin: bool
    created_at: float
    disabled_at: float | None = None
    teams: dict[str, TeamRole] = Field(default_factory=dict)


class NewUser(_Model):
    """A user just made, and its first token: shown once, never stored."""

    user: UserView
    token: str


class TeamBody(_Body):
    """A new team, as ``POST /api/v1/teams`` takes it; its default queue has its name."""

    name: QueueName


class TeamView(_Model):
    """A team: its members by role, and its default queue."""

    name: str
    default_queue: str
    created_at: float
    members: dict[str, TeamRole]


class MemberBody(_Body):
    """A member's role, as ``PUT /api/v1/teams/{team}/members/{user}`` takes it."""

    role: TeamRole = TeamRole.MEMBER


class TokenBody(_Body):
    """A new token of the caller, as ``POST /api/v1/tokens`` takes it."""

    name: Name


class TokenView(_Model):
    """A token, never its secret: its user, name and when it was made and revoked."""

    id: str
    name: str
    user: str
    created_at: float
    revoked_at: float | None = None


class NewToken(_Model):
    """A token just made: its secret is shown once, never stored."""

    token: TokenView
    secret: str


class SecretBody(_Body):
    """A new secret, as ``POST /api/v1/secrets`` takes it; its values are never answered."""

    name: Annotated[str, Field(pattern=SECRET_NAME.pattern)]
    team: QueueName | None = Field(
        default=None, description="The team it belongs to (default: the caller's only team)."
    )
    data: dict[
        SecretKey,
        Annotated[str, Field(pattern=NO_NUL_PATTERN)],
    ] = Field(min_length=1, description="Its values by key, e.g. {password: ...}.")


class SecretView(_Model):
    """A secret without its values: its team, name, keys, who made it and when."""

    team: str
    name: str
    keys: list[str]
    user: str
    created_at: float


class AuditPage(_Model):
    """One page of the audit trail, newest first."""

    records: list[AuditRecord]
    next_before: int | None = Field(
        default=None, description="Pass as `before` for the next, older page; none on the last."
    )


class Health(_Model):
    status: str = "ok"


class SignIn(_Body):
    """A token, as ``POST /api/v1/session`` takes it to open a dashboard session."""

    token: str = Field(min_length=1, max_length=1024)


class SessionView(WhoAmI):
    """The caller, and the CSRF token every change of its dashboard session must send."""

    csrf: str | None = Field(
        description="Send as X-CSRF-Token with every change; null: not a session (a bearer "
        "token needs none)."
    )


class LogHit(_Model):
    """A line of a task's log holding the searched text."""

    offset: int = Field(description="The line's byte offset in the log.")
    line: str = Field(description="The line (at most 2,000 characters around the match).")


class LogHits(_Model):
    """The lines found by one search, and where to search on from."""

    hits: list[LogHit]
    next: int | None = Field(description="Search again from here (`start`); null: done.")


class OutputFile(_Model):
    """A file a job's tasks left in its output folder (``$TRAINFLEET_OUTPUT_DIR``)."""

    name: str = Field(description="Its name: a plain file name, no folder.")
    size: int = Field(description="Its size in bytes, when it was listed.")
    modified: float = Field(description="When it last changed, in seconds since the epoch.")


class NoticeCode(StrEnum):
    """What a change feed's ``notice`` says."""

    EVENTS_LOST = "events-lost"
    """The stream fell behind and skipped events: reload, then go on with the stream."""
    UNKNOWN_ID = "unknown-id"
    """``Last-Event-ID`` is newer than any event (the database was replaced): reload."""
    UNAVAILABLE = "unavailable"
    """The server cannot read changes now; the stream stays open and goes on by itself."""
    AVAILABLE = "available"
    """The server reads changes again; nothing was lost meanwhile."""


class FeedNotice(_Model):
    """A ``notice`` of ``GET /api/v1/events/follow``: something about the stream itself."""

    code: NoticeCode
    message: str
    after: int | None = Field(
        default=None, description="The id of the last event sent before what was lost."
    )
    resync: bool = Field(
        default=False, description="What the client shows may be stale: read it again."
    )


class UsagePoint(_Model):
    """What a task used at one time: a sample, or (``samples`` > 1) a minute's average."""

    time: float = Field(description="Seconds since the epoch (a minute's start, for an average).")
    cpu: float = Field(description="CPU of the task's process tree, in percent of one core.")
    rss: int = Field(description="Resident memory of the task's process tree, in bytes.")
    gpu_util: float | None = Field(
        default=None, description="Mean utilisation of its GPUs in percent; null: none seen."
    )
    gpu_memory: int | None = Field(
        default=None, description="GPU memory its processes hold (NVML), in bytes; null: none."
    )
    samples: int = Field(default=1, description="1: one sample; more: a minute's average.")


class TaskUsage(_Model):
    """One task's resource use: its newest sample while it runs, and its history if asked."""

    role: str
    index: int
    state: State
    current: UsagePoint | None = Field(
        default=None, description="Its newest sample, while it runs (null: none yet)."
    )
    history: list[UsagePoint] = Field(
        default_factory=list,
        description="Oldest first: minute averages, then the last hour's samples.",
    )


class JobUsage(_Model):
    """What each task of a job uses (``GET /api/v1/jobs/{id}/usage``)."""

    job_id: str
    team: str = "default"
    tasks: list[TaskUsage]


class WouldStart(_Model):
    """Whether a job would start in a queue now (``GET /api/v1/queues/{name}/would-start``)."""

    starts: bool
    code: str = Field(
        default="", description="Why not: a waiting code (docs/conditions.md), or unschedulable."
    )
    message: str


class GpuHolder(_Model):
    """A task that holds (part of) a GPU."""

    task: str = Field(
        description="``job/role/index`` (the job's name); empty: another team's task, "
        "which the caller does not see."
    )
    job_id: str = Field(default="", description="Its job's id; empty: another team's.")
    share: float = Field(description="How much of the GPU it holds: 1 whole, or the fraction.")


class GpuState(_Model):
    """One GPU of the machine the engine places tasks on, as its driver reports it now."""

    index: int = Field(description="Its host index.")
    model: str = Field(default="", description="Its model; empty where unknown.")
    memory_total: int | None = Field(default=None, description="Bytes; null: unknown.")
    memory_used: int | None = Field(default=None, description="Bytes used by every process.")
    utilisation: float | None = Field(default=None, description="Percent busy; null: unknown.")
    temperature: int | None = Field(default=None, description="Degrees Celsius.")
    healthy: bool = Field(description="False: nothing new is placed on it.")
    problems: list[str] = Field(
        default_factory=list, description="Why it is unhealthy (not cleared by an operator)."
    )
    cleared: list[str] = Field(
        default_factory=list, description="Problems an operator cleared (ignored)."
    )
    holders: list[GpuHolder] = Field(default_factory=list, description="The tasks on it.")
