"""``trainfleet run`` of a job with ``tensorboard:`` shows its TensorBoard's address and
stops it with the job; ``trainfleet tensorboard JOB JOB`` opens one TensorBoard over both
jobs' event folders (real runs, the real ``tensorboard`` package)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx
import pytest
from helpers import run_cli, trainfleet, wait_for

from trainfleet.backends.supervision.ports import free_port

pytestmark = pytest.mark.usefixtures("reap", "data_dir")
pytest.importorskip("tensorboard")
torch_tensorboard = pytest.importorskip("torch.utils.tensorboard")


def _run(folder: Path, name: str) -> str:
    folder.mkdir()
    (folder / "job.yaml").write_text(
        f"name: {name}\nroles:\n  worker: {{command: sleep 3}}\ntensorboard: true\n"
    )
    done = run_cli("run", folder / "job.yaml", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(
        r"tensorboard at (http://127\.0\.0\.1:\d+/jobs/(\S+)/tensorboard/)", done.stdout
    )
    assert found, done.stdout
    assert "tensorboard/0  succeeded" in done.stdout  # stopped with the job (keep_after 0)
    writer = torch_tensorboard.SummaryWriter(str(folder / "tensorboard"))
    writer.add_scalar("loss", 1.0, 0)
    writer.close()
    return found.group(2)


def _runs(url: str) -> list[str] | None:
    try:
        return httpx.get(f"{url}/data/runs", timeout=5).json() or None
    except httpx.HTTPError:
        return None


def test_one_tensorboard_over_two_jobs(tmp_path: Path) -> None:
    first, second = _run(tmp_path / "a", "first"), _run(tmp_path / "b", "second")
    port = free_port()
    said = tmp_path / "tensorboard.log"  # printed at the end: pytest shows it on a failure
    with said.open("w") as out:
        board = subprocess.Popen(
            trainfleet("tensorboard", first, second, "--port", str(port)),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: len(_runs(url) or []) == 2, 60, "both jobs' runs")
        assert sorted(_runs(url) or []) == sorted([f"{first}/.", f"{second}/."])
    finally:
        board.terminate()
        board.wait(timeout=30)
        print("trainfleet tensorboard said:", said.read_text()[-4000:])


def test_a_job_without_tensorboard_is_named(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("name: plain\nroles:\n  worker: {command: 'true'}\n")
    done = run_cli("run", tmp_path / "job.yaml", timeout=60)
    job_id = done.stdout.split("job ", 1)[1].split(":", 1)[0]
    refused = run_cli("tensorboard", job_id)
    assert refused.returncode == 2
    assert f"job {job_id} has no TensorBoard" in refused.stderr
