"""What the store keeps about workflows on a server: each workflow, its schedule's state,
its runs and each run's steps, as read by every face."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from trainfleet.domain.records import _Record


class StepState(StrEnum):
    """The life of one step of a run."""

    WAITING = "waiting"
    STARTING = "starting"
    """Its job is being submitted: a server killed meanwhile looks for it by its labels."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self not in (StepState.WAITING, StepState.STARTING, StepState.RUNNING)


class RunState(StrEnum):
    """The life of one run of a workflow."""

    WAITING = "waiting"
    """Stored (by a schedule or a submission), not yet driven."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    """Never ran: due while another ran (``concurrency: forbid``), or missed beyond
    ``catch_up``; its ``code`` says which."""

    @property
    def is_final(self) -> bool:
        return self not in (RunState.WAITING, RunState.RUNNING)


class RunCode(StrEnum):
    """Why a run is in its state, for programs (its ``reason`` says it to people)."""

    SUBMITTED = "submitted"
    SCHEDULED = "scheduled"
    CAUGHT_UP = "caught-up"
    """Started late, for a time the server missed (``catch_up``)."""
    RETRIED = "retried"
    SUCCEEDED = "succeeded"
    STEP_FAILED = "step-failed"
    STOPPED = "stopped"
    REPLACED = "replaced"
    """Stopped for a newer run (``concurrency: replace``)."""
    MISSED = "missed"
    """Skipped: its time passed while no server ran, beyond ``catch_up``."""
    CONCURRENT = "concurrent"
    """Skipped: another run was running (``concurrency: forbid``)."""


class ScheduleCode(StrEnum):
    """Why a schedule fires or not."""

    ACTIVE = "active"
    PAUSED = "paused"
    """Paused by a person (or by the file's ``paused: true``)."""
    OWNER_DISABLED = "owner-disabled"
    """Its owner's account is disabled: it runs as its owner, so it waits."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowRecord(_Record):
    """A workflow stored on a server, of ``team``, owned by ``user``; ``source`` is its
    file as sent, ``tree`` the folder sent with it (``owner/digest``; ``""``: none)."""

    id: str
    name: str
    team: str
    user: str
    source: str
    filename: str = "<request>"
    tree: str = ""
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecord(_Record):
    """The state of a workflow's schedule (its settings are in the workflow's file)."""

    workflow_id: str
    cron: str
    timezone: str = "UTC"
    code: str = ScheduleCode.ACTIVE
    reason: str = ""
    last_time: float
    """The latest scheduled time handled (run, skipped or missed); the next is after it."""

    @property
    def paused(self) -> bool:
        return self.code != ScheduleCode.ACTIVE


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord(_Record):
    """One run of a workflow: its parameters, its state and why, its folder."""

    id: str
    workflow_id: str
    workflow: str
    team: str
    user: str
    number: int
    trigger: str = RunCode.SUBMITTED
    """What started it: ``submitted``, ``scheduled`` or ``caught-up`` (late, for a time
    the server missed); or, for one skipped, ``missed`` or ``concurrent``."""
    state: str = RunState.WAITING
    code: str = RunCode.SUBMITTED
    reason: str = ""
    scheduled_for: float | None = None
    """The scheduled time it is the run of (its key: one run per time); None: by hand."""
    parameters: dict[str, Any] = field(default_factory=dict)
    source: str = field(default="", repr=False)
    """The workflow's file it runs (as it was when the run was stored)."""
    filename: str = "<request>"
    tree: str = ""
    """The folder it runs with (``owner/digest``; ``""``: none)."""
    retries: int = 0
    """How many times ``retry`` ran it again."""
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord(_Record):
    """One step of a run: its state, its tries and the job of each."""

    run_id: str
    step: str
    state: str = StepState.WAITING
    tries: int = 0
    jobs: list[str] = field(default_factory=list)
    reason: str = ""
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def job_id(self) -> str | None:
        """The job of its latest try."""
        return self.jobs[-1] if self.jobs else None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowDetails(_Record):
    """A workflow with its schedule's state, its next times and its latest runs."""

    workflow: WorkflowRecord
    schedule: ScheduleRecord | None = None
    next_times: list[float] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowSummary(_Record):
    """A workflow as a list shows it: its schedule's state, next time and latest run."""

    workflow: WorkflowRecord
    schedule: ScheduleRecord | None = None
    next_time: float | None = None
    last_run: RunRecord | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowSubmitted(_Record):
    """A workflow stored, with the run started of it (None: it has a schedule)."""

    workflow: WorkflowRecord
    run: RunRecord | None = None
    next_times: list[float] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDetails(_Record):
    """A run with each of its steps, its graph, and what its reader may do to it."""

    run: RunRecord
    steps: list[StepRecord] = field(default_factory=list)
    graph: dict[str, list[str]] = field(default_factory=dict)
    """The steps each step needs (the run's DAG)."""
    may: list[str] = field(default_factory=list)
    """What the reader may do to the run: ``stop``, ``retry`` (none: it may only read)."""
