"""The job's directory travels with it: `trainfleet submit job.yaml` from the job's folder
works the same with and without a server, the server runs each job in its own copy of what
was sent, stores the same tree once, and refuses what is over its cap."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import httpx
import pytest
from helpers import trainfleet, wait_for
from server.harness import ServerProcess

from trainfleet.client import Client

TOKEN = "workdir-test-admin-token-0123456789abcdef"
JOB = "name: fromdir\nroles:\n  worker: {command: sh task.sh}\n"
TASK = "cat data.txt; test -e big.bin && echo has-big || echo no-big; echo job-edit > data.txt\n"


@pytest.fixture
def job_folder(tmp_path: Path) -> Path:
    """A job's folder: its job file, its script and data, and a big file git ignores."""
    folder = tmp_path / "my-job"
    folder.mkdir()
    (folder / "job.yaml").write_text(JOB)
    (folder / "task.sh").write_text(TASK)
    (folder / "data.txt").write_text("the job's own data\n")
    (folder / ".gitignore").write_text("big.bin\n")
    (folder / "big.bin").write_bytes(os.urandom(1 << 20))
    return folder


def _cli(folder: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        trainfleet(*args), cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )


def _submitted(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split()[-1]


def test_submit_from_the_job_folder_without_a_server(job_folder: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}
    env.pop("TRAINFLEET_SERVER", None)
    job_id = _submitted(_cli(job_folder, env, "submit", "job.yaml"))

    def ended() -> bool:
        out = _cli(job_folder, env, "describe", job_id, "-o", "json").stdout
        return json.loads(out)["job"]["state"] == "succeeded"

    wait_for(ended, timeout=60, what="the job's end")
    log = _cli(job_folder, env, "logs", job_id).stdout
    assert "the job's own data" in log and "has-big" in log  # it ran in the folder itself


def test_submit_from_the_job_folder_with_a_server(job_folder: Path, tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "server-data", {"TRAINFLEET_ADMIN_TOKEN": TOKEN})
    env = {**os.environ, "TRAINFLEET_SERVER": server.url, "TRAINFLEET_TOKEN": TOKEN}
    try:
        job_id = _submitted(_cli(job_folder, env, "submit", "job.yaml"))
        (job_folder / "data.txt").write_text("edited here after the submit\n")
        with Client(server.url, TOKEN) as client:
            assert client.wait(job_id).state == "succeeded", client.describe(job_id)
            log = client.read_log(job_id, "worker", 0).decode()
            workdir = Path(client.get(job_id).workdir)
            # The same tree again is not stored twice; an edited one is stored beside it.
            (job_folder / "data.txt").write_text("the job's own data\n")
            again = _submitted(_cli(job_folder, env, "submit", "job.yaml"))
            client.wait(again)
            admins = tmp_path / "server-data" / "workdirs" / "admin"  # an administrator's
            trees = sorted(p.name for p in admins.iterdir())
            stored = (admins / trees[0] / "data.txt").read_text()
    finally:
        server.stop()
    assert "the job's own data" in log and "no-big" in log, log
    assert workdir == tmp_path / "server-data" / "jobs" / job_id / "workdir"
    assert (workdir / "data.txt").read_text() == "job-edit\n"  # the job's copy, its own
    assert (job_folder / "data.txt").read_text() == "the job's own data\n"
    assert len(trees) == 1 and stored == "the job's own data\n"


def test_server_workdir_runs_in_place_and_caps_refuse(job_folder: Path, tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "server-data", {"TRAINFLEET_ADMIN_TOKEN": TOKEN}, ["--max-workdir", "2Ki"]
    )
    env = {**os.environ, "TRAINFLEET_SERVER": server.url, "TRAINFLEET_TOKEN": TOKEN}
    try:
        (job_folder / ".gitignore").write_text("")  # the big file goes too: over the cap
        refused = _cli(job_folder, env, "submit", "job.yaml")
        mine = {**env, "TRAINFLEET_MAX_WORKDIR": "2Ki"}  # the client's own cap
        big = _cli(job_folder, mine, "submit", "job.yaml", "--workdir", str(tmp_path))
        in_place = _cli(job_folder, env, "submit", "job.yaml", "--server-workdir", str(job_folder))
        missing = _cli(job_folder, env, "submit", "job.yaml", "--server-workdir", "/no/such/dir")
        with Client(server.url, TOKEN) as client:
            job_id = _submitted(in_place)
            assert client.wait(job_id).state == "succeeded"
            assert client.get(job_id).workdir == str(job_folder)
        workdirs = tmp_path / "server-data" / "workdirs"
        left = list(workdirs.iterdir()) if workdirs.exists() else []
    finally:
        server.stop()
    assert refused.returncode == 2 and "request body is larger than the server's limit" in (
        refused.stderr
    ), refused.stderr
    assert big.returncode == 2 and "over the cap" in big.stderr, big.stderr
    assert missing.returncode == 2 and "/no/such/dir" in missing.stderr
    assert (job_folder / "data.txt").read_text() == "job-edit\n"  # ran in place
    assert left == []  # nothing half-stored
    assert "Traceback" not in refused.stderr + big.stderr + missing.stderr


def test_embedded_refuses_server_workdir(job_folder: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}
    env.pop("TRAINFLEET_SERVER", None)
    done = _cli(job_folder, env, "submit", "job.yaml", "--server-workdir", "/srv")
    assert done.returncode == 2 and "--server-workdir needs a server" in done.stderr


def test_api_refuses_hostile_and_unauthenticated_uploads(tmp_path: Path) -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        info = tarfile.TarInfo("../../escape.sh")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    tree = "a" * 64
    server = ServerProcess(tmp_path / "server-data", {"TRAINFLEET_ADMIN_TOKEN": TOKEN})
    try:
        url = f"{server.url}/api/v1/workdirs/{tree}"
        anonymous = httpx.put(url, content=data.getvalue())
        auth = {"Authorization": f"Bearer {TOKEN}"}
        hostile = httpx.put(url, content=data.getvalue(), headers=auth)
        absent = httpx.head(url, headers=auth)
        bad_digest = httpx.head(f"{server.url}/api/v1/workdirs/nope", headers=auth)
        named = httpx.post(
            f"{server.url}/api/v1/jobs", params={"tree": tree}, content=JOB, headers=auth
        )
    finally:
        server.stop()
    assert anonymous.status_code == 401
    assert hostile.status_code == 422 and "escape.sh" in hostile.json()["detail"]
    assert absent.status_code == 404 and bad_digest.status_code == 422
    assert named.status_code == 422 and "no stored tree" in named.json()["detail"]
    assert not (tmp_path / "escape.sh").exists()
    assert not list((tmp_path / "server-data" / "workdirs").rglob("[0-9a-f]*"))
