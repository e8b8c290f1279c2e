"""The examples under examples/ train for real with `trainfleet run` and get the right answer.

Each test runs the CLI as a user would, then reads the program's own output from the
prefixed log lines (``client/0 | w=2.00 b=10.01``) and checks that no task was left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterable
from pathlib import Path

import psutil
import pytest
from container_images import base_image
from server.harness import ServerProcess

from trainfleet.client import Client

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT = 300  # seconds; each example takes about 10 on two slow cores
EPOCHS = 24
"""Epochs of the examples killed mid-training (after epoch 3: the kill lands well before
the end, even where the output read lags behind the training on a loaded machine)."""

pytestmark = pytest.mark.slow


def run_example(job_file: Path, tmp_path: Path) -> str:
    """Run ``trainfleet run job_file``, check that it succeeded and return its stdout."""
    marker = uuid.uuid4().hex
    env = {
        **os.environ,
        "TRAINFLEET_DATA_DIR": str(tmp_path / "data"),
        "TRAINFLEET_TEST_MARKER": marker,  # inherited by every task: finds leftovers
    }
    try:
        result = subprocess.run(
            [sys.executable, "-m", "trainfleet", "run", str(job_file)],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as timeout:
        # Only `run` itself was killed: stop its tasks, and show what it had printed.
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if process.environ().get("TRAINFLEET_TEST_MARKER") == marker:
                    process.kill()
        printed = timeout.stdout.decode(errors="replace") if timeout.stdout else ""
        pytest.fail(f"`trainfleet run` took over {TIMEOUT}s; it printed:\n{printed}")
    assert result.returncode == 0, (
        f"exit code {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    assert_no_task_left(marker)
    return result.stdout


def assert_no_task_left(marker: str, grace: float = 5.0) -> None:
    """No process of the job (one with the marker in its environment) is still alive."""
    deadline = time.monotonic() + grace
    while True:
        left = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            try:
                if process.environ().get("TRAINFLEET_TEST_MARKER") == marker:
                    left.append(process.info)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"tasks left running after the job ended: {left}"


def warn_of_restarts(stdout: str) -> None:
    """Make a restart visible in the test report: the job succeeded, but something failed."""
    restarts = [line for line in stdout.splitlines() if "restarting" in line]
    if restarts:
        warnings.warn("the job restarted:\n" + "\n".join(restarts), stacklevel=2)


def task_output(stdout: str, task: str) -> list[str]:
    """The lines that one task (``"role/index"``) printed, without their prefix."""
    line = re.compile(rf"^\s*{re.escape(task)}\s*\| ?(.*)$")
    return [match[1] for match in map(line.match, stdout.splitlines()) if match]


def numbers(lines: list[str], pattern: str) -> list[tuple[float, ...]]:
    """The float groups of ``pattern`` in every line that contains it."""
    found = (re.search(pattern, line) for line in lines)
    return [tuple(map(float, match.groups())) for match in found if match]


def test_tf_ingraph_fits_the_line(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    stdout = run_example(EXAMPLES / "tf_ingraph" / "job.yaml", tmp_path)

    for server in ("ps/0", "worker/0", "worker/1"):
        assert any("serving at grpc://" in line for line in task_output(stdout, server)), stdout
    client = task_output(stdout, "client/0")
    losses = [loss for (_, loss) in numbers(client, r"step (\d+): loss=([\d.]+)")]
    assert len(losses) >= 2 and losses[-1] < losses[0] / 100, client
    [(w, b)] = numbers(client, r"^w=(-?[\d.]+) b=(-?[\d.]+)$")
    assert w == pytest.approx(2, abs=0.1)
    assert b == pytest.approx(10, abs=0.1)


def test_tf_ps_strategy_fits_the_line(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    stdout = run_example(EXAMPLES / "tf_ps_strategy" / "job.yaml", tmp_path)

    chief = task_output(stdout, "chief/0")
    losses = [loss for (_, loss) in numbers(chief, r"epoch (\d+): loss=([\d.]+)")]
    assert len(losses) == 5, chief
    [(final_loss, w, b)] = numbers(chief, r"final loss=([\d.]+) w=(-?[\d.]+) b=(-?[\d.]+)")
    assert final_loss < 0.05
    assert w == pytest.approx(2, abs=0.1)
    assert b == pytest.approx(10, abs=0.1)


@pytest.mark.parametrize("job_file", ["job.yaml", "job-image.yaml"])
def test_tf_multiworker_keeps_workers_in_sync(tmp_path: Path, job_file: str) -> None:
    if job_file == "job.yaml":
        pytest.importorskip("tensorflow")
    else:
        base_image()  # the TensorFlow image is built with it
    stdout = run_example(EXAMPLES / "tf_multiworker" / job_file, tmp_path)

    workers = [task_output(stdout, f"worker/{index}") for index in (0, 1)]
    finals = []
    for lines in workers:
        assert "2 replicas in sync" in lines, lines
        losses = [loss for (_, loss) in numbers(lines, r"epoch (\d+): loss=([\d.]+)")]
        assert len(losses) == 5 and losses[-1] < losses[0] / 10, lines
        [final] = numbers(lines, r"final loss=([\d.]+) w=(-?[\d.]+) b=(-?[\d.]+)")
        finals.append(final)
    # The all-reduce keeps both copies of the model identical.
    assert finals[0] == finals[1]
    _, w, b = finals[0]
    assert w == pytest.approx(2, abs=0.1)
    assert b == pytest.approx(10, abs=0.1)


@pytest.mark.parametrize(
    ("job_file", "rank0"),
    [("job.yaml", "master/0"), ("pytorchjob.yaml", "master/0"), ("trainjob.yaml", "worker/0")],
)
def test_torch_ddp_trains(tmp_path: Path, job_file: str, rank0: str) -> None:
    """``pytorchjob.yaml`` and ``trainjob.yaml`` (a TrainJob of three nodes on the built-in
    torch-distributed runtime, as written) run in containers of their image."""
    if job_file == "job.yaml":
        pytest.importorskip("torch")
    else:
        base_image()
    stdout = run_example(EXAMPLES / "torch_ddp" / job_file, tmp_path)
    warn_of_restarts(stdout)

    master = task_output(stdout, rank0)
    epochs = dict(numbers(master, r"epoch (\d+): loss=([\d.]+)"))
    # If a node failed, the whole group restarted (scope job) from its last epoch saved.
    assert sorted(epochs) == [1, 2, 3, 4, 5], master
    assert epochs[5] < epochs[1] / 10, master
    assert any(line.startswith("done: 3 ranks") for line in master), master


@pytest.mark.parametrize(
    ("example", "victim", "rank0", "done"),
    [
        ("torch_ddp", "worker/1", "master/0", "done: 3 ranks"),
        ("tf_multiworker", "worker/1", "worker/0", "worker 0: final loss="),
        ("tf_ps_strategy", "ps/0", "chief/0", "final loss="),
    ],
)
def test_an_example_resumes_from_its_last_epoch_after_a_task_is_killed(
    tmp_path: Path, example: str, victim: str, rank0: str, done: str
) -> None:
    """kill -9 of a task's whole process group mid-training: the job recovers (a DDP or
    MultiWorkerMirrored group restarts whole; a parameter-server coordinator that lost its
    ps restarts) from the newest committed epoch, computes at most the epoch it was in
    again, and ends at the exact last epoch."""
    pytest.importorskip("torch" if example == "torch_ddp" else "tensorflow")
    shutil.copy(EXAMPLES / example / "train.py", tmp_path)
    job = (EXAMPLES / example / "job.yaml").read_text()
    epochs, count = re.subn(r"(?m)^env: \{", f'env: {{EPOCHS: "{EPOCHS}", ', job)
    (tmp_path / "job.yaml").write_text(epochs if count else job + f'env: {{EPOCHS: "{EPOCHS}"}}\n')
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}
    run = subprocess.Popen(
        [sys.executable, "-m", "trainfleet", "run", str(tmp_path / "job.yaml")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None
    lines = _until(run.stdout, rf"{rank0}\s*\| epoch 1: ")
    listed = subprocess.run(
        [sys.executable, "-m", "trainfleet", "describe", "-o", "json", _job_id(lines)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    tasks = json.loads(listed.stdout)["tasks"]
    (killed,) = [t for t in tasks if f"{t['role']}/{t['index']}" == victim]
    # Killed as soon as epoch 3 is told, not a `describe` later: on a loaded machine the
    # training had ended by then (the ps of a chief that had finished was killed).
    lines += _until(run.stdout, rf"{rank0}\s*\| epoch 3: ")
    os.killpg(killed["pid"], signal.SIGKILL)
    # The rest through the same reader: communicate() reads the pipe itself, and would
    # drop the lines this reader has already taken from it (epochs 4 and 5, under load).
    rest = run.stdout.read()
    run.wait(timeout=TIMEOUT)
    stdout = "".join(lines) + rest
    assert run.returncode == 0, stdout

    said = task_output(stdout, rank0)
    [(resumed,)] = numbers(said, r"^resumed after epoch (\d+)")
    assert resumed >= 2, said  # epoch 3 was printed, so epoch 2 was committed
    printed = [int(epoch) for (epoch, _) in numbers(said, r"^epoch (\d+): loss=([\d.]+)")]
    assert len(printed) - len(set(printed)) <= 1, said  # at most one epoch computed again
    assert printed[-1] == EPOCHS and sorted(set(printed)) == list(range(1, EPOCHS + 1)), said
    assert any(line.startswith(done) for line in said), said


def _until(stdout: Iterable[str], pattern: str) -> list[str]:
    """The lines read from ``stdout`` up to the first that matches ``pattern``."""
    lines = []
    for line in stdout:
        lines.append(line)
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no line matches {pattern!r}: {''.join(lines)}")


def _job_id(lines: list[str]) -> str:
    for line in lines:
        found = re.search(r"^trainfleet \| job (\S+-[0-9a-f]{8}): ", line)
        if found:
            return found[1]
    raise AssertionError(f"no job id in {lines}")


@pytest.mark.parametrize("job_file", ["job.yaml", "mpijob.yaml"])
def test_mpi_pi_sums_the_shares_of_every_rank(tmp_path: Path, job_file: str) -> None:
    """Open MPI in the image built by scripts/images.sh; ``mpijob.yaml`` is an MPI operator
    manifest (v2beta1) run as written."""
    base_image()  # the Open MPI image is built with it
    stdout = run_example(EXAMPLES / "mpi_pi" / job_file, tmp_path)

    launcher = task_output(stdout, "launcher/0")
    shares = numbers(launcher, r"^rank \d of 4 on .*: share=([\d.]+)$")
    assert len(shares) == 4, launcher
    [(pi, _)] = numbers(launcher, r"^pi=([\d.]+) from 4 ranks \(error ([\d.e+-]+)\)$")
    assert pi == pytest.approx(sum(share for (share,) in shares), abs=1e-5)
    assert pi == pytest.approx(3.14159265, abs=1e-8)


def test_two_tensorflow_versions_side_by_side_on_one_server(tmp_path: Path) -> None:
    """The issue's demo: two jobs on one server, each on its own TensorFlow (2.20, 2.21),
    each built once into an environment of its own and printing its version."""
    folder = EXAMPLES / "two_tensorflow_versions"
    token = "two-versions-admin-token-0123456789abcdef"
    server = ServerProcess(tmp_path / "data", {"TRAINFLEET_ADMIN_TOKEN": token})
    try:
        with Client(server.url, token) as client:
            jobs = {
                version: client.submit(
                    (folder / f"tf{version.replace('.', '')}.yaml").read_text(), workdir=folder
                ).id
                for version in ("2.20", "2.21")
            }
            for version, job_id in jobs.items():
                ended = client.wait(job_id)
                assert ended.state == "succeeded", client.describe(job_id)
                log = client.read_log(job_id, "worker", 0).decode()
                assert f"tensorflow {version}.0: [1, 2] x [3, 4] = 11" in log, log
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("job_file", "rank0", "result"),
    [
        ("tf_multiworker/job-image.yaml", "worker", "worker 0: final loss="),
        ("torch_ddp/pytorchjob.yaml", "master", "done: 3 ranks"),
    ],
)
def test_an_example_in_containers_through_a_server(
    tmp_path: Path, job_file: str, rank0: str, result: str
) -> None:
    """``submit`` to a server: the job's folder is uploaded, and each task runs in a
    container of the job's image (TensorFlow, and PyTorch as a Kubeflow PyTorchJob) with
    the server's copy of the folder mounted."""
    base_image()
    token = "images-admin-token-0123456789abcdef"
    server = ServerProcess(tmp_path / "data", {"TRAINFLEET_ADMIN_TOKEN": token})
    path = EXAMPLES / job_file
    try:
        with Client(server.url, token) as client:
            job = client.submit(path.read_text(), workdir=path.parent)
            ended = client.wait(job.id)
            assert ended.state == "succeeded", client.describe(job.id)
            log = client.read_log(job.id, rank0, 0).decode()
            assert result in log, log
            tasks = client.describe(job.id).tasks
            assert all(task.state == "succeeded" for task in tasks), tasks
    finally:
        server.stop()
