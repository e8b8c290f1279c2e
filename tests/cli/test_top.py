"""``trainfleet top`` and ``describe`` show what a real job's running tasks use, sampled by
their shims (every 0.2 s here): a busy loop's CPU, the memory a task holds."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import run_cli, wait_for

from trainfleet.control.access import EMBEDDED
from trainfleet.control.engine import Engine
from trainfleet.control.services.reads import JobReads
from trainfleet.control.services.usage import Usage
from trainfleet.wire import JobUsage

SPIN = "while True:\n    pass\n"
HOLD = """\
import time
held = bytearray(120 << 20)
for n in range(0, len(held), 4096):
    held[n] = 1
time.sleep(600)
"""


def _job(job_file: Callable[..., Path], tmp_path: Path) -> Path:
    (tmp_path / "spin.py").write_text(SPIN)
    (tmp_path / "hold.py").write_text(HOLD)
    return job_file(
        f"""\
        name: busy
        roles:
          spin: {{command: '{sys.executable} -S spin.py'}}
          hold: {{command: '{sys.executable} -S hold.py'}}
        """
    )


def _shows(engine: Engine, job_id: str) -> JobUsage | None:
    """The job's use, once the busy loop shows > 50% of a core and the holder 100 MiB."""
    found = Usage(JobReads.of(engine)).job(EMBEDDED, job_id)
    spin, hold = (task.current for task in found.tasks)
    if spin is None or hold is None or spin.cpu <= 50 or hold.rss < 100 << 20:
        return None
    return found


def test_top_and_describe_show_a_running_job_s_use(
    job_file: Callable[..., Path],
    engine: Engine,
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINFLEET_USAGE_INTERVAL", "0.2")
    submitted = run_cli("submit", _job(job_file, tmp_path))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    try:
        found = wait_for(lambda: _shows(engine, job_id), 60, "the job's use")
        assert isinstance(found, JobUsage)
        spin, hold = found.tasks
        assert (spin.role, hold.role) == ("spin", "hold")
        assert spin.current is not None and spin.current.rss > 0

        top = run_cli("top", job_id)
        assert top.returncode == 0, top.stderr
        rows = {line.split()[1]: line.split() for line in top.stdout.splitlines()[1:]}
        assert set(rows) == {"spin/0", "hold/0"}
        assert rows["spin/0"][3].endswith("%") and rows["hold/0"][5] == "MiB"
        assert float(rows["hold/0"][4]) >= 100

        every = run_cli("top")  # every running task
        assert every.returncode == 0 and f"{job_id}  spin/0" in every.stdout

        history = run_cli("top", job_id, "-o", "json")
        (job,) = [JobUsage.model_validate(item) for item in json.loads(history.stdout)]
        assert job.job_id == job_id and all(task.history for task in job.tasks)

        described = run_cli("describe", job_id)
        assert described.returncode == 0, described.stderr
        assert "spin/0: cpu " in described.stdout and "hold/0: cpu " in described.stdout
        assert "MiB" in described.stdout
    finally:
        assert run_cli("stop", job_id).returncode == 0


def test_top_of_an_unknown_job_says_so(data_dir: Path) -> None:
    missing = run_cli("top", "nope-12345678")
    assert missing.returncode == 2
    assert missing.stderr == "error: no job 'nope-12345678'\n"
    assert run_cli("top", "../etc").returncode == 2
