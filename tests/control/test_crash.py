"""Crash safety: the process running jobs is killed with kill -9; a new one picks them up.

Tasks run under their shim, outlive the killed process and record their exits; the new
engine adopts the running ones, applies the exits that happened meanwhile, restarts by
policy, and finishes every job with the right state. No task runs twice at once and no
process is left over. (The HTTP server's own crash test builds on this engine.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from crashjobs import EXPECTED_STARTS, starts, write_jobs
from helpers import process_group_alive, wait_for

from trainfleet.backends.supervision.shim import main as shim_main
from trainfleet.control.assembly import engine_at
from trainfleet.domain.records import State

PROGRAMS = Path(__file__).parent.parent / "programs"


def test_jobs_survive_kill_9_of_the_process_running_them(reap: Path) -> None:
    tmp_path = reap
    data = tmp_path / "data"
    host = subprocess.Popen(
        [
            sys.executable,
            str(PROGRAMS / "engine_host.py"),
            str(data),
            *map(str, write_jobs(tmp_path)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert host.stdout is not None
    ids = dict(
        zip(
            ["ends-ok", "ends-bad", "killed", "adopted", "with-ps"],
            host.stdout.readline().split() or [],
            strict=False,
        )
    )
    lines = [host.stdout.readline().strip() for _ in range(4)]
    ids = {name.rsplit("-", 1)[0]: name for name in [*ids.values(), *lines]}
    assert host.stdout.readline().strip() == "ready"
    engine = engine_at(data, supervised=True)
    wait_for(
        lambda: all((tmp_path / f"journal-{n}").exists() for n in range(1, 6)),
        what="every task to start",
    )
    before = {job_id: engine.tasks(job_id) for job_id in ids.values()}

    host.send_signal(signal.SIGKILL)
    host.wait()
    # While nothing watches: one task ends well, one fails, one is killed.
    (tmp_path / "go-1").touch()
    (tmp_path / "go-2").touch()
    killed_pid = int((tmp_path / "journal-3").read_text().split()[2])
    os.kill(killed_pid, signal.SIGKILL)
    wait_for(lambda: "end" in (tmp_path / "journal-2").read_text(), what="ends-bad to end")
    (tmp_path / "go-3").touch()  # lets the restarted attempt finish at once

    assert sorted(engine.resume()) == sorted(ids.values())
    adopted = engine.tasks(ids["adopted"])[0]
    assert adopted.state == State.RUNNING and adopted.pid == before[ids["adopted"]][0].pid
    (tmp_path / "go-4").touch()
    (tmp_path / "go-5").touch()
    final = {name: engine.wait(job_id, timeout=60) for name, job_id in ids.items()}

    assert final["ends-ok"].state == State.SUCCEEDED
    assert final["ends-bad"].state == State.FAILED
    assert final["ends-bad"].reason == "worker/0 exited with exit code 3 after 2 restart(s)"
    assert final["killed"].state == State.SUCCEEDED
    assert engine.tasks(ids["killed"])[0].restarts == 1
    assert final["adopted"].state == State.SUCCEEDED
    assert final["with-ps"].state == State.SUCCEEDED
    ps = next(t for t in engine.tasks(ids["with-ps"]) if t.role == "ps")
    assert ps.reason == "stopped: training finished"

    assert starts(tmp_path) == EXPECTED_STARTS, "every attempt ran once, none twice"
    for job_id, tasks in before.items():
        for task in [*tasks, *engine.tasks(job_id)]:
            assert task.pid is not None and not process_group_alive(task.pid)
    engine.shutdown()


def test_the_shim_records_how_its_task_ended(tmp_path: Path) -> None:
    record = tmp_path / "worker-0-0"
    assert shim_main([str(record), "--", "sh", "-c", "exit 7"]) == 7
    assert (tmp_path / "worker-0-0.exit").read_text() == "7"
    assert int((tmp_path / "worker-0-0.pid").read_text()) == os.getpid()
    killed = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(Path(shim_main.__code__.co_filename)),
            str(tmp_path / "k"),
            "--",
            "sh",
            "-c",
            "kill -TERM $$",
        ]
    )
    assert killed.returncode == -signal.SIGTERM, "the shim ends the way its task did"
    assert (tmp_path / "k.exit").read_text() == str(-signal.SIGTERM)
    assert shim_main([str(tmp_path / "missing"), "--", "no-such-program-here"]) == 127
