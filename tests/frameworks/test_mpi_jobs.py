"""MPI jobs for real: Debian's Open MPI (``mpirun``) and mpi4py on this machine (installed by
``scripts/mpi.sh``), ranks in Python under Debian's own ``/usr/bin/python3``."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest
from helpers import missing, run_cli, wait_for
from server.harness import LiveServer

from trainfleet.client import Client
from trainfleet.spec.models import JobSpec

PI = Path(__file__).resolve().parents[2] / "examples" / "mpi_pi" / "pi.py"
PYTHON = "/usr/bin/python3"  # Debian's, with python3-mpi4py

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def open_mpi() -> None:
    if shutil.which("mpirun") is None or subprocess.run([PYTHON, "-c", "import mpi4py"]).returncode:
        missing("Open MPI and mpi4py on this machine: bash scripts/mpi.sh")


def job_file(tmp_path: Path, launcher: str, slots: int = 2) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        textwrap.dedent(f"""\
            name: pi
            framework: mpi
            mpi: {{slots_per_worker: {slots}}}
            roles:
              launcher: {{command: {launcher!r}}}
              worker: {{replicas: 2}}
            """)
    )
    return path


def test_mpirun_starts_one_rank_per_worker_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINFLEET_DATA_DIR", str(tmp_path / "data"))
    done = run_cli("run", job_file(tmp_path, f"mpirun {PYTHON} {PI}"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "launcher/0 | pi=3.1415926536 from 4 ranks" in done.stdout, done.stdout
    for rank in range(4):
        assert f"launcher/0 | rank {rank} of 4 on " in done.stdout
    assert "worker/1 succeeded: stopped: training finished" in done.stdout


def test_more_ranks_than_slots_fail_in_open_mpis_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINFLEET_DATA_DIR", str(tmp_path / "data"))
    done = run_cli("run", job_file(tmp_path, f"mpirun -n 3 {PYTHON} {PI}", slots=1))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "There are not enough slots available in the system" in done.stdout
    assert "failed: launcher/0 exited with exit code 1" in done.stdout


def test_stopping_an_mpi_job_ends_every_rank(tmp_path: Path) -> None:
    """Stop reaches the ranks mpirun started: none is left, whatever its process group."""
    marker = uuid.uuid4().hex
    program = tmp_path / "wait.py"
    program.write_text(
        "import sys, time\nfrom mpi4py import MPI\n"
        "sys.stdout.write(f'ready {MPI.COMM_WORLD.allreduce(1)}\\n')\n"
        "sys.stdout.flush()\ntime.sleep(600)\n"
    )
    spec = JobSpec.model_validate(
        {
            "name": "stopped",
            "framework": "mpi",
            "env": {"TEST_MARKER": marker},
            "roles": {
                "launcher": {"command": ["mpirun", PYTHON, str(program)]},
                "worker": {"replicas": 2},
            },
        }
    )
    server = LiveServer(tmp_path / "data").start()
    try:
        with Client(server.url, server.token) as client:
            job = client.submit(spec)
            wait_for(
                lambda: client.read_log(job.id, "launcher", 0).count(b"ready 2") == 2,
                what="both ranks after their all-reduce",
            )
            assert len(ranks(marker, program)) == 2
            client.cancel(job.id)
            assert client.wait(job.id).state == "cancelled"
            wait_for(lambda: not ranks(marker, program), timeout=15, what="no rank left")
    finally:
        server.stop()


def ranks(marker: str, program: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if process.info["cmdline"] == [PYTHON, str(program)] and (
                process.environ().get("TEST_MARKER") == marker
            ):
                found.append(process)
    return found
