"""The server's knobs, with the defaults ``trainfleet server`` uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainfleet.server.changes import KEEP, STREAMS_PER_USER
from trainfleet.server.host_paths import HostPaths
from trainfleet.server.hub import READ, WINDOW
from trainfleet.spec.limits import DEFAULT_MAX_ROLES, DEFAULT_MAX_TASKS, JobLimits
from trainfleet.workdirs.pack import DEFAULT_CAP as DEFAULT_WORKDIR_CAP

DEFAULT_MAX_BODY = 1 << 20


@dataclass(frozen=True)
class Settings:
    """How one server answers: where jobs run by default, how big and how live."""

    workdir: Path
    """Where a job runs when its submission names no ``workdir``."""
    max_body: int = DEFAULT_MAX_BODY
    """Largest request body accepted, in bytes (413 beyond, before it is all read)."""
    max_roles: int = DEFAULT_MAX_ROLES
    """Most roles of one job (422 beyond)."""
    max_tasks: int = DEFAULT_MAX_TASKS
    """Most tasks of one job, replicas summed over its roles (422 beyond)."""
    max_workdir: int = DEFAULT_WORKDIR_CAP
    """Most bytes of a job directory sent to the server, as sent and as unpacked (413)."""
    host_paths: HostPaths = field(default_factory=HostPaths)
    """The folders of this machine jobs may run in place in and mount (any by default)."""
    poll_interval: float = 0.1
    """Seconds between two looks at a followed log or event list."""
    log_window: int = WINDOW
    """Latest bytes of a followed log kept in memory for its followers."""
    log_read: int = READ
    """Most bytes of a log one follower reads at a time."""
    changes_kept: int = KEEP
    """Latest events of every job kept in memory for the change feed's streams; a stream
    that falls further behind is told to resync."""
    change_feeds_per_user: int = STREAMS_PER_USER
    """Most change feeds one user may hold open at once."""
    audit_retention: float | None = None
    """Days an audit record is kept: older ones are pruned at start, then daily (None:
    every record is kept)."""

    @property
    def limits(self) -> JobLimits:
        """The job limits these settings set."""
        return JobLimits(roles=self.max_roles, tasks=self.max_tasks)
