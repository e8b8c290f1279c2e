"""Ports come free again when their job ends: a small ephemeral range is never spent, and
a job that finds no free port fails with the reason instead of hanging the server."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import missing

from trainfleet.backends.supervision import ports

PORT_JOBS = Path(__file__).with_name("port_jobs.py")
PORT_ADOPT = Path(__file__).with_name("port_adopt.py")


def in_small_namespace(command: list[str], ports: str) -> list[str]:
    """``command`` in a network namespace of its own whose ephemeral range is ``ports``."""
    script = (
        f'ip link set lo up && sysctl -q -w net.ipv4.ip_local_port_range="{ports}" && exec "$@"'
    )
    return ["unshare", "--net", "sh", "-c", script, "sh", *command]


def run_jobs(
    data: Path, count: int, replicas: int, ports: str, *more: int
) -> tuple[int, list[str]]:
    """Runs port_jobs.py in a namespace with the range ``ports``: its exit code and lines."""
    driver = [sys.executable, str(PORT_JOBS), str(data), str(count), str(replicas), *map(str, more)]
    return run_in_namespace(driver, ports)


def run_in_namespace(driver: list[str], ports: str) -> tuple[int, list[str]]:
    """Runs ``driver`` in a namespace with the range ``ports``: its exit code and lines."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")):
        missing("root, unshare and ip, to make a network namespace with few ports")
    try:
        result = subprocess.run(
            in_small_namespace(driver, ports), capture_output=True, text=True, timeout=900
        )
    except subprocess.TimeoutExpired as timeout:
        output = timeout.stdout.decode() if isinstance(timeout.stdout, bytes) else ""
        pytest.fail(f"the jobs hung; last lines:\n{output[-1000:]}")
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout.splitlines()


def test_300_one_task_jobs_run_in_a_100_port_range(reap: Path) -> None:
    """Each job's task listens on its port; 300 jobs one after another all succeed.

    Before ports were given back, the 51st job never ended: the admitter looked for a port
    it had not handed out before, forever, holding its lock (the driver ran into the timeout).
    """
    code, lines = run_jobs(reap / "data", 300, 1, "40000 40099")
    assert code == 0, "\n".join(lines[-5:])
    assert lines[-1] == "all succeeded" and len(lines) == 301


def test_a_job_that_finds_no_free_port_fails_with_the_reason(reap: Path) -> None:
    """Three tasks in a range of two ports: the job fails, saying why, and nothing hangs."""
    code, lines = run_jobs(reap / "data", 1, 3, "40000 40001")
    assert code == 1
    assert lines[-1].endswith(
        "failed could not reserve ports: no free port: 3 wanted, 2 of the 2 ports of the"
        " ephemeral range 40000-40001 free (0 held by jobs here)"
    ), lines


def test_a_port_in_time_wait_is_handed_out_when_no_other_is_free(reap: Path) -> None:
    """Two ports, one in TIME_WAIT after serving a connection: a job of two tasks whose
    servers set SO_REUSEADDR gets both and runs. Before, it hung, as with no port free."""
    code, lines = run_jobs(reap / "data", 1, 2, "40000 40001", 40000)
    assert code == 0, lines
    assert lines[-1] == "all succeeded"


def test_an_adopted_job_keeps_its_ports_until_it_ends(reap: Path) -> None:
    """One port; an engine dies while a job (a sleeper, not bound to its port) holds it.
    The next engine adopts the job: a new job finds no free port, and gets it once the
    adopted job has been stopped. Before, the new job was given the adopted job's port."""
    run = shlex.join([sys.executable, str(PORT_ADOPT), str(reap / "data")])
    code, lines = run_in_namespace(["sh", "-c", f"{run} first && exec {run} second"], "40000 40000")
    assert code == 0, lines
    held = lines[0].split()[1]
    assert lines[1:] == [
        f"adopted {held}",
        "0 failed could not reserve ports: no free port: 1 wanted, 0 of the 1 ports of the"
        " ephemeral range 40000-40000 free (1 held by jobs here)",
        f"stopped {held}: cancelled",
        "1 succeeded worker/0 succeeded",
    ]


@pytest.fixture
def kernel_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """The kernel's ephemeral range and reserved ports, as files of this test's."""
    found = tmp_path / "ip_local_port_range", tmp_path / "ip_local_reserved_ports"
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", found[0])
    monkeypatch.setattr(ports, "RESERVED_PORTS", found[1])
    read = (ports.ephemeral_range, ports.reserved_ports)
    for settings in read:
        settings.cache_clear()  # type: ignore[attr-defined]
    yield found
    for settings in read:
        settings.cache_clear()  # type: ignore[attr-defined]


def test_the_kernel_s_port_settings_are_read_again_once_a_second(
    kernel_settings: tuple[Path, Path],
) -> None:
    """A burst takes ports for hundreds of jobs a second, and reading the two settings was
    most of each take: they are read at most once a second, and a change is seen then."""
    port_range, reserved = kernel_settings
    port_range.write_text("40000\t40999\n")
    reserved.write_text("40000-40499\n")
    pool = ports.PortPool()
    assert all(40500 <= port <= 40999 for port in pool.take("a", 20))
    port_range.write_text("41000\t41999\n")
    reserved.write_text("\n")
    assert all(40500 <= port <= 40999 for port in pool.take("b", 20)), "as read a moment ago"
    time.sleep(ports.KERNEL_SECONDS + 0.1)
    assert all(41000 <= port <= 41999 for port in pool.take("c", 20))


def test_in_use_tells_a_port_a_server_holds_from_a_free_one() -> None:
    """What a task restarting alone is checked with (a taken port moves its whole job)."""
    with socket.create_server(("", 0)) as server:
        port = server.getsockname()[1]
        assert ports.in_use(port)
    assert not ports.in_use(port)
