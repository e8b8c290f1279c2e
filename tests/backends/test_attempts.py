"""A task's attempt ends with every process it started, even one in a session of its own."""

from __future__ import annotations

from pathlib import Path

import psutil

from trainfleet.control.engine import Engine
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec

# Starts a sleeper that leaves the task's process group (setsid), notes its pid, and exits.
ESCAPE = (
    "import subprocess, sys;"
    " escaped = subprocess.Popen(['sleep', '600'], start_new_session=True);"
    " open(sys.argv[1], 'w').write(str(escaped.pid))"
)


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie awaiting its reaper has ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_process_that_left_the_task_group_ends_with_the_task(engine: Engine, reap: Path) -> None:
    """The task exits 0 at once; its setsid sleeper is gone when the job has ended.
    Before, only the task's process group was killed, and the sleeper ran on."""
    journal = reap / "escaped"
    command = ["python", "-S", "-c", ESCAPE, str(journal)]
    spec = JobSpec.model_validate({"name": "escape", "roles": {"worker": {"command": command}}})
    job = engine.submit(spec, reap, start=True)
    assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED
    escaped = int(journal.read_text())
    assert not running(escaped), "the sleeper outlived its task"
