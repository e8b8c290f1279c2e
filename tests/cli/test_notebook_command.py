"""``trainfleet notebook start|list|stop`` on this machine (the real CLI, real JupyterLab):
start waits until JupyterLab runs and says where it opens, list finds it by its label,
stop ends it; a bad flag is named with exit code 2; ``--pip`` gets JupyterLab added. And
``run`` of a job with a quick link says where the task's own page is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli, trainfleet

from trainfleet.backends.supervision.ports import free_port
from trainfleet.cli.notebook_commands import notebook_spec

pytestmark = pytest.mark.usefixtures("reap", "data_dir")
pytest.importorskip("jupyterlab")


def _flags(**given: object) -> dict[str, object]:
    flags: dict[str, object] = dict.fromkeys(
        ("gpu", "cpu", "memory", "queue", "image", "python_version", "requirements")
    )
    return flags | {"name": "notebook", "packages": (), "idle_timeout": "1h"} | given


def test_start_list_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    (tmp_path / "notes.py").write_text("print('mine')\n")
    started = run_cli("notebook", "start", "--name", "lab", "--cpu", "1", cwd=tmp_path)
    assert started.returncode == 0, started.stdout + started.stderr
    job_id, where = started.stdout.splitlines()
    assert job_id.startswith("lab-")
    assert where == f"opens at /notebooks/{job_id}/lab of `trainfleet ui` (which opens the " + (
        "dashboard signed in)"
    )
    listed = run_cli("notebook", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    (found,) = json.loads(listed.stdout)
    assert (found["id"], found["state"]) == (job_id, "running")
    assert found["url"] == f"/notebooks/{job_id}/lab"
    described = run_cli("describe", job_id, "-o", "json")
    job = json.loads(described.stdout)["job"]
    assert job["spec"]["roles"]["notebook"]["resources"]["cpu"] == "1"
    assert job["workdir"] == str(tmp_path)

    stopped = run_cli("notebook", "stop", job_id)
    assert stopped.returncode == 0 and f"notebook {job_id} cancelled" in stopped.stdout


def test_stop_refuses_a_job_that_is_no_notebook(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("name: plain\nroles:\n  worker: {command: 'true'}\n")
    job_id = run_cli("submit", tmp_path / "job.yaml").stdout.strip()
    refused = run_cli("notebook", "stop", job_id)
    assert refused.returncode == 2
    assert refused.stderr == f"error: job {job_id} is not a notebook: `trainfleet stop {job_id}`\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--gpu", "-1"], "error: --gpu: Input should be greater than or equal to 0"),
        (["--memory", "lots"], "error: --memory: cannot parse memory 'lots'"),
        (["--idle-timeout", "3 days"], "error: --idle-timeout: '3 days' is not a duration"),
        (["--queue", "Bad Q"], "error: --queue: invalid queue name 'Bad Q'"),
        (["--name", "-x"], "error: --name: invalid job name '-x'"),
        (["--python", "three"], "error: --python:"),
    ],
)
def test_a_bad_flag_is_named(args: list[str], said: str, tmp_path: Path) -> None:
    done = run_cli("notebook", "start", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(said), done.stderr
    assert "Traceback" not in done.stderr
    assert run_cli("list", "-o", "json").stdout.strip() == "[]"  # nothing stored


def test_an_environment_gets_jupyterlab_unless_it_names_it() -> None:
    spec = notebook_spec(_flags(packages=("torch==2.13.0",)))
    assert spec.environment.pip == ["torch==2.13.0", "jupyterlab"]
    spec = notebook_spec(_flags(packages=("JupyterLab>=4.2",), python_version="3.11"))
    assert spec.environment.pip == ["JupyterLab>=4.2"]
    assert spec.environment.python == "3.11"
    assert notebook_spec(_flags()).environment is None


def test_start_says_why_a_notebook_waits(tmp_path: Path) -> None:
    assert run_cli("queue", "create", "small", "--nominal", "cpu=1").returncode == 0
    (tmp_path / "hog.yaml").write_text(
        "name: hog\nqueue: small\nroles:\n  worker: {command: sleep 60, resources: {cpu: 1}}\n"
    )
    assert run_cli("submit", tmp_path / "hog.yaml").returncode == 0
    start = subprocess.Popen(
        trainfleet("notebook", "start", "--queue", "small", "--cpu", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert start.stderr is not None
        line = start.stderr.readline()  # the quota's word (not the instant before admission)
        assert line.startswith("waiting: ") and "small" in line, line
    finally:
        start.kill()
        start.wait()


def test_run_announces_a_quicklink_at_its_tasks_own_root(tmp_path: Path) -> None:
    port = free_port()
    serve = (
        "import http.server, threading, time; s = http.server.HTTPServer(('127.0.0.1', "
        f"{port}), http.server.SimpleHTTPRequestHandler); "
        "threading.Thread(target=s.serve_forever, daemon=True).start(); time.sleep(3)"
    )
    (tmp_path / "job.yaml").write_text(
        f"name: web\nroles:\n  web: {{command: [{sys.executable!r}, -c, {serve!r}]}}\n"
        f"quicklinks: {{ui: 'http://web-0:{port}'}}\n"
    )
    done = run_cli("run", tmp_path / "job.yaml", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"trainfleet | ui at http://127.0.0.1:{port}/\n" in done.stdout
