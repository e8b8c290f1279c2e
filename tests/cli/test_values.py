"""Bad values and oversized jobs exit 2 naming the field, here and through a server; a token
that cannot travel in a header is named instead of raising a traceback (issue 10, 5 and 6)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import run_cli, trainfleet
from server.harness import ServerProcess

from trainfleet.control.engine import Engine

TOKEN = "values-cli-tests-admin-token"


def json_job(role: dict[str, object]) -> str:
    return json.dumps({"name": "bad", "roles": {"worker": role}})


BAD_JOBS = [
    (json_job({"command": "echo a\0b"}), "roles.worker.command"),
    (json_job({"command": "x", "working_dir": "/tmp\0"}), "roles.worker.working_dir"),
    (json_job({"command": "x", "env": {"A=B": "1"}}), "roles.worker.env.A=B"),
    (json_job({"command": "x", "env": {"": "1"}}), "roles.worker.env['']"),
    (json_job({"command": [""]}), "roles.worker.command"),
    (json_job({"command": "x", "replicas": "2"}), "roles.worker.replicas"),
    (json_job({"command": "x", "replicas": True}), "roles.worker.replicas"),
    (json_job({"command": "x", "replicas": 2000}), "roles.worker.replicas"),
]


@pytest.mark.parametrize(("text", "field"), BAD_JOBS)
def test_embedded_run_exits_2_naming_the_field(
    job_file: Callable[..., Path], engine: Engine, text: str, field: str
) -> None:
    result = run_cli("run", job_file(text, "job.json"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"job.json:1: {field}" in result.stderr and "Traceback" not in result.stderr
    assert engine.list() == []


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("values") / "data",
        {"TRAINFLEET_ADMIN_TOKEN": TOKEN},
        ["--max-roles", "2", "--max-tasks", "3", "--max-body", "4096"],
    )
    yield process
    process.stop()


def remote(
    server: ServerProcess, *args: str | Path, token: str = TOKEN
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINFLEET_SERVER": server.url, "TRAINFLEET_TOKEN": token}
    return subprocess.run(trainfleet(*args), capture_output=True, text=True, timeout=120, env=env)


def test_the_server_holds_jobs_to_its_own_limits(
    server: ServerProcess, job_file: Callable[..., Path]
) -> None:
    four = job_file("name: four\nroles:\n  worker: {replicas: 4, command: 'true'}\n")
    result = remote(server, "run", four)
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {four}:3: roles.worker.replicas: the job has 4 tasks, more than the limit "
        "of 3 per job\n"
    )
    roles = "".join(f"  r{i}: {{command: 'true'}}\n" for i in range(3))
    result = remote(server, "run", job_file(f"name: three\nroles:\n{roles}", "roles.yaml"))
    assert result.returncode == 2 and "more than the limit of 2 per job" in result.stderr
    big = job_file("name: big\nroles:\n  worker: {command: 'true'}\n" + "#" * 5000, "big.yaml")
    result = remote(server, "run", big)
    assert result.returncode == 2
    assert "larger than the server's limit of 4096 bytes" in result.stderr
    three = job_file("name: three\nroles:\n  worker: {replicas: 3, command: 'true'}\n", "ok.yaml")
    assert remote(server, "run", three).returncode == 0


@pytest.mark.parametrize(("text", "field"), BAD_JOBS[:-1])
def test_the_server_refuses_bad_values_naming_the_field(
    server: ServerProcess, job_file: Callable[..., Path], text: str, field: str
) -> None:
    result = remote(server, "run", job_file(text, "job.json"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"job.json:1: {field}" in result.stderr and "Traceback" not in result.stderr


def test_a_token_that_cannot_be_sent_is_named(no_server_configured: Path) -> None:
    env = {**os.environ, "TRAINFLEET_SERVER": "http://127.0.0.1:9", "TRAINFLEET_TOKEN": "tökén"}
    result = subprocess.run(trainfleet("list"), capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert result.stderr == (
        "error: TRAINFLEET_TOKEN: a token holds only printable ASCII characters, without "
        "spaces; this one has 'ö'\n"
    )
    path = no_server_configured / "trainfleet" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("server: http://127.0.0.1:9\ntoken: 'abc def'\n")
    env.pop("TRAINFLEET_TOKEN")
    result = subprocess.run(trainfleet("list"), capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {path}: token: a token holds only printable")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("cap", ["banana", "12"])
def test_a_bad_log_cap_exits_2_naming_it(
    job_file: Callable[..., Path], data_dir: Path, monkeypatch: pytest.MonkeyPatch, cap: str
) -> None:
    monkeypatch.setenv("TRAINFLEET_LOG_CAP", cap)
    result = run_cli("run", job_file("name: capped\nroles: {w: {command: 'true'}}\n"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: TRAINFLEET_LOG_CAP: "), result.stderr
    assert "Traceback" not in result.stderr
