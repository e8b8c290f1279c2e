"""Who runs each embedded job: ``runner.pid`` in the job's folder holds the pid and the
start time of the process that runs it (``trainfleet run``, an embedded ``submit``'s
runner), so that another process can tell a live runner from a gone one (see
``control.local_admission``)."""

from __future__ import annotations

import os
from pathlib import Path

from trainfleet.datadir.layout import DataDir

RUNNER_RECORD = "runner.pid"


def record_runner(data_dir: DataDir, job_id: str, pid: int | None = None) -> None:
    """Say that process ``pid`` (this one by default) runs the job."""
    pid = os.getpid() if pid is None else pid
    path = data_dir.job_dir(job_id) / RUNNER_RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)  # private, as everything in the data directory
    path.write_text(f"{pid} {_start_time(pid) or ''}".strip())


def live_runner(data_dir: DataDir, job_id: str) -> int | None:
    """The pid of the live process that runs the job, if any."""
    recorded = _recorded(data_dir, job_id)
    return recorded[0] if recorded is not None and recorded[1] else None


def lost_runner(data_dir: DataDir, job_id: str) -> int | None:
    """The pid of the process that ran the job and is gone; None while it lives (or when
    none was recorded yet: a job between its storing and its runner's start)."""
    recorded = _recorded(data_dir, job_id)
    return recorded[0] if recorded is not None and not recorded[1] else None


def _recorded(data_dir: DataDir, job_id: str) -> tuple[int, bool] | None:
    """The recorded runner's pid and whether it still runs."""
    try:
        pid_text, _, started = (
            (data_dir.job_dir(job_id) / RUNNER_RECORD).read_text().strip().partition(" ")
        )
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    now = _start_time(pid)
    if now is None:
        return pid, False
    if started:
        return pid, now == started
    # A record without a start time (written by an older trainfleet): a live pid counts
    # when it still is a trainfleet process.
    try:
        return pid, b"trainfleet" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid, False


def _start_time(pid: int) -> str | None:
    """When the process started (clock ticks after boot), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else None
