"""What reaches a task's environment: the small base for a server's tasks, the user's own
shell for `trainfleet run`, never a server's secrets; and `trainfleet tf-server` runs under a
Python that has TensorFlow but not trainfleet."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from helpers import run_cli, wait_for
from server.harness import ServerProcess

from trainfleet.client import Client
from trainfleet.environments.task_base import BASE_VARIABLES, TaskBase
from trainfleet.frameworks.argv import standalone
from trainfleet.programs import tf_server

TOKEN = "env-test-admin-token-0123456789abcdef"
SECRETS = {
    "TRAINFLEET_ADMIN_TOKEN": TOKEN,
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value-93f1c2",
    "TRAINFLEET_DATABASE_URL_SECRET": "postgresql://u:db-password-77a1@127.0.0.1/x",
    "OPERATOR_EXPORTED": "operator-value-5e6d",
}
PRINT_ENV = "python -c 'import json, os; print(json.dumps(dict(os.environ)))'"


def _printed_env(log: bytes) -> dict[str, str]:
    line = next(line for line in log.decode().splitlines() if line.startswith("{"))
    env: dict[str, str] = json.loads(line)
    return env


def test_base_keeps_only_the_documented_variables() -> None:
    source = {**SECRETS, "PATH": "/usr/bin", "HOME": "/home/u", "LANG": "de_DE.UTF-8"}
    env = TaskBase(python="/opt/py/bin/python3").environment(source)
    assert set(env) == {*BASE_VARIABLES, "PYTHONUNBUFFERED"}
    assert env["PATH"] == "/opt/py/bin:/usr/bin" and env["LANG"] == "de_DE.UTF-8"
    assert TaskBase(inherit=True).environment(source)["OPERATOR_EXPORTED"] == "operator-value-5e6d"


def test_server_secrets_never_reach_a_task(tmp_path: Path) -> None:
    """The issue's test: a server started with secrets in its environment runs a job that
    prints its whole environment; no secret's name or value appears in it."""
    server = ServerProcess(tmp_path / "data", SECRETS)
    try:
        job = f"name: env\nenv: {{MINE: job-value}}\nroles:\n  worker: {{command: {PRINT_ENV!r}}}\n"
        with Client(server.url, TOKEN) as client:
            job_id = client.submit(job, server_workdir=tmp_path).id
            ended = client.wait(job_id)
            log = client.read_log(job_id, "worker", 0)
    finally:
        server.stop()
    assert ended.state == "succeeded", ended
    env = _printed_env(log)
    for name, value in SECRETS.items():
        assert name not in env and value.encode() not in log, name
    assert env["MINE"] == "job-value" and env["TRAINFLEET_JOB"] == job_id
    # `python` is the server's own interpreter (no --task-python given).
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)


def test_task_python_flag(tmp_path: Path) -> None:
    bad = run_cli("--data-dir", tmp_path / "d", "server", "--task-python", "/nope/python")
    assert bad.returncode == 2, bad
    assert "--task-python: '/nope/python' is not an executable file" in bad.stderr
    assert "Traceback" not in bad.stderr

    other = tmp_path / "bin"
    other.mkdir()
    (other / "python").symlink_to(sys.executable)
    server = ServerProcess(
        tmp_path / "data",
        {"TRAINFLEET_ADMIN_TOKEN": TOKEN, "TRAINFLEET_TASK_PYTHON": str(other / "python")},
    )
    try:
        with Client(server.url, TOKEN) as client:
            job = f"name: py\nroles:\n  worker: {{command: {PRINT_ENV!r}}}\n"
            job_id = client.submit(job, server_workdir=tmp_path).id
            client.wait(job_id)
            env = _printed_env(client.read_log(job_id, "worker", 0))
    finally:
        server.stop()
    assert env["PATH"].split(os.pathsep)[0] == str(other)


def test_run_passes_the_users_own_environment(
    job_file, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trainfleet run` is the user running their own job: their shell's variables reach it,
    and the job's `env` wins over them."""
    job = job_file(
        f"name: mine\nenv: {{LANG: C, SHADOWED: from-job}}\n"
        f"roles:\n  worker: {{command: {PRINT_ENV!r}}}\n"
    )
    monkeypatch.setenv("FROM_MY_SHELL", "shell-value")
    monkeypatch.setenv("SHADOWED", "shell")
    done = run_cli("run", job)
    assert done.returncode == 0, done.stderr
    env = json.loads(done.stdout.split("worker/0 | ", 1)[1].splitlines()[0])
    assert env["FROM_MY_SHELL"] == "shell-value"
    assert env["SHADOWED"] == "from-job" and env["LANG"] == "C"


def test_tf_server_command_runs_the_program_under_the_tasks_python() -> None:
    assert standalone(["trainfleet", "tf-server"]) == ["python3", tf_server.__file__]
    assert standalone(["/usr/bin/trainfleet", "tf-server", "--protocol", "grpc"])[2:] == [
        "--protocol",
        "grpc",
    ]
    assert standalone(["python", "train.py"]) == ["python", "train.py"]


@pytest.mark.slow
def test_tf_server_serves_under_a_python_without_trainfleet(tmp_path: Path) -> None:
    """A Python that has TensorFlow but cannot import trainfleet serves a real TF task.

    The venv sees this environment's site-packages through a path entry (a ``.pth`` line):
    its packages, TensorFlow included, import; the ``.pth`` files inside it (trainfleet's
    editable install) are not run, so trainfleet does not.
    """
    pytest.importorskip("tensorflow")
    venv = tmp_path / "tf-only"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(venv)})["purelib"])
    (site / "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = venv / "bin" / "python3"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    hidden = subprocess.run([python, "-c", "import trainfleet"], env=env, capture_output=True)
    assert hidden.returncode != 0, "trainfleet must not be importable there"

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = {"cluster": {"ps": [f"127.0.0.1:{port}"]}, "task": {"type": "ps", "index": 0}}
    argv = standalone(["trainfleet", "tf-server"])
    server = subprocess.Popen(
        argv,
        env={**env, "TF_CONFIG": json.dumps(config)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 120
        lines = []
        while time.monotonic() < deadline:
            line = server.stdout.readline()
            lines.append(line)
            if "serving at" in line or not line:
                break
        assert "serving at" in lines[-1], "".join(lines)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
    wait_for(lambda: server.poll() is not None, timeout=5, what="stopped")
