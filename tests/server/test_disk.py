"""A small, full disk: logs are capped, submissions refused (507, CLI exit 2), exits kept.

Each test mounts a real 30 MB tmpfs as the data directory (we run as root here; where
mounting is impossible the test is skipped, and fails under CI).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import fill_disk, run_cli, tmpfs, wait_for

from trainfleet.client import Client, ClientError

from .harness import ServerProcess

DISK = "30m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 30 MB tmpfs mounted for this test alone, unmounted afterwards."""
    with tmpfs(tmp_path / "disk", DISK) as mount:
        yield mount


def _job_file(folder: Path, name: str, command: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nroles:\n  worker: {{command: {json.dumps(command)}}}\n"
        "restart: {policy: never}\n"
    )
    return path


def test_a_log_far_over_its_cap_keeps_its_head_and_tail(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """80 MB of output on a 30 MB disk, capped at 4 MiB: the job succeeds and its log
    is about the cap: the first lines, a line saying how much was dropped, the last lines."""
    monkeypatch.setenv("TRAINFLEET_DATA_DIR", str(small_disk))
    monkeypatch.setenv("TRAINFLEET_LOG_CAP", "4Mi")
    lines = 6_000_000  # "line 1234567\n": about 80 MB, more than the whole disk
    program = (
        "import sys\n"
        f"for start in range(0, {lines}, 100_000):\n"
        "    sys.stdout.write(''.join(f'line {i}\\n' for i in range(start, start + 100_000)))\n"
    )
    (tmp_path / "loud.py").write_text(program)
    job = _job_file(tmp_path, "loud", "python loud.py")

    done = run_cli("run", job, timeout=600, cwd=tmp_path)

    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (log,) = small_disk.glob("jobs/loud-*/logs/worker-0.log")
    text = log.read_bytes()
    assert 3 << 20 < len(text) <= (4 << 20) + 1024
    assert text.startswith(b"line 0\nline 1\nline 2\n")
    assert text.endswith(f"line {lines - 2}\nline {lines - 1}\n".encode())
    dropped = [line for line in text.splitlines() if line.endswith(b"bytes dropped here]")]
    assert len(dropped) == 1, dropped
    number = int(dropped[0].split()[1])
    assert number > 70 << 20
    assert not list(log.parent.glob("*.tail.*"))  # the ring is gone


def test_a_full_disk_refuses_work_and_loses_no_exit(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk filled while a task runs: a submission is refused (507, CLI exit 2 naming the
    disk), the task that ends meanwhile gets its own exit code once space is back, and the
    jobs stored before are all there."""
    server = ServerProcess(small_disk)
    try:
        token = server.admin_token
        assert token
        monkeypatch.setenv("TRAINFLEET_SERVER", server.url)
        monkeypatch.setenv("TRAINFLEET_TOKEN", token)
        with Client(server.url, token, timeout=30) as client:
            earlier = client.submit(_job_file(tmp_path, "earlier", "echo kept").read_text())
            assert client.wait(earlier.id).state == "succeeded"
            go, finished = tmp_path / "go", tmp_path / "finished"
            waiting = _job_file(
                tmp_path,
                "waiting",
                f"sh -c 'while [ ! -e {go} ]; do sleep 0.05; done; echo bye; "
                f"touch {finished}; exit 3'",
            )
            job = client.submit(waiting.read_text())
            wait_for(lambda: client.get(job.id).state == "running", what="a running job")
            # Running as soon as its shim is spawned: the shim must have written its records
            # and started the task before the disk fills (a CI run filled it first).
            wait_for(lambda: _task_alive(small_disk, job.id), what="the task's process")

            fill_disk(small_disk / "filler")
            with pytest.raises(ClientError) as refused:
                client.submit(waiting.read_text())
            assert refused.value.status == 507
            assert "disk full" in str(refused.value)
            done = run_cli("submit", waiting, cwd=tmp_path)
            assert done.returncode == 2, done.stdout + done.stderr
            assert "disk full" in done.stderr and "Traceback" not in done.stderr

            go.touch()  # the task ends (exit 3) while the disk is still full
            try:
                wait_for(finished.exists, what="the task's end")
            except AssertionError:  # say where it stands (one CI run, on two workers)
                pytest.fail(f"no end: {client.describe(job.id)}; {_tree(small_disk, job.id)}")
            wait_for(lambda: not _task_alive(small_disk, job.id), what="the task's process")
            assert client.get(job.id).state == "running"  # its exit waits for room, not lost

            (small_disk / "filler").unlink()
            ended = client.wait(job.id)
            assert ended.state == "failed"
            (task,) = client.describe(job.id).tasks
            assert task.exit_code == 3, task

            after = client.submit(_job_file(tmp_path, "after", "echo again").read_text())
            assert client.wait(after.id).state == "succeeded"
            ids = {stored.id for stored in client.list_jobs()}
            assert {earlier.id, job.id, after.id} <= ids
            assert client.read_log(earlier.id, "worker", 0) == b"kept\n"
    finally:
        server.stop()


def _shim(data_dir: Path, job_id: str) -> int | None:
    """The pid of the job's one task's shim, from its record (None: not written yet)."""
    records = list((data_dir / "jobs" / job_id / "run").glob("*.pid"))
    assert len(records) <= 1, records
    return int(records[0].read_text()) if records else None


def _task_alive(data_dir: Path, job_id: str) -> bool:
    """Whether the task's own process (the shim's child) runs."""
    shim = _shim(data_dir, job_id)
    if shim is None:
        return False
    children = Path(f"/proc/{shim}/task/{shim}/children")
    try:
        return bool(children.read_text().split())
    except OSError:
        return False


def _tree(data_dir: Path, job_id: str) -> str:
    """The task's shim and its descendants as ``ps`` shows them (state, command)."""
    pid = _shim(data_dir, job_id)
    if pid is None:
        return "no shim's pid recorded"
    shim = psutil.Process(pid)
    shown = []
    for process in [shim, *shim.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            shown.append(f"{process.pid} {process.status()} {process.cmdline()}")
    return "; ".join(shown)


def test_a_full_disk_where_the_servers_keys_go_is_named_not_a_traceback(
    small_disk: Path,
) -> None:
    """The data directory's disk fills before the server has made the dashboard's session
    key (an upgrade from before the dashboard): it says which file, with exit code 2."""
    data = small_disk / "data"
    server = ServerProcess(data)
    server.stop()
    (data / "session.key").unlink()
    fill_disk(small_disk / "filler")
    done = run_cli("--data-dir", data, "server", "--port", "0", timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == f"error: disk full: cannot make the key file {data / 'session.key'}\n"
    (small_disk / "filler").unlink()
    again = ServerProcess(data)  # room again: it starts, with a new key
    try:
        assert (data / "session.key").stat().st_mode & 0o777 == 0o600
    finally:
        again.stop()
