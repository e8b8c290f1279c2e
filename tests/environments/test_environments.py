"""Per-job Python environments, built for real with uv (packages from the index uv is
configured with: PyPI here), cached by content, shared, evicted, and their failures told."""

from __future__ import annotations

import threading
from pathlib import Path

import psutil
from helpers import run_cli, wait_for
from server.harness import ServerProcess

from trainfleet.client import Client
from trainfleet.control.engine import Engine
from trainfleet.domain.records import State
from trainfleet.environments.cache import EnvironmentCache
from trainfleet.environments.recipe import Recipe
from trainfleet.spec.environments import PythonEnvironment
from trainfleet.spec.loading import load_job_text

SIX = """
name: {name}
environment: {{pip: [six]}}
roles:
  worker:
    command: ["sh", "-c", "python -c 'import six, sys; print(sys.prefix)'; pip --version"]
"""


def _run(engine: Engine, text: str, workdir: Path) -> str:
    spec = load_job_text(text, "job.yaml").spec
    job = engine.submit(spec, workdir, start=True)
    assert engine.wait_ended(job.id, timeout=300)
    return job.id


def _setup_events(engine: Engine, job_id: str) -> list[str]:
    return [e.message for e in engine.store.list_events(job_id) if e.message.startswith("setup")]


def test_tasks_run_in_the_jobs_environment_built_once(engine: Engine, tmp_path: Path) -> None:
    first = _run(engine, SIX.format(name="first"), tmp_path)
    second = _run(engine, SIX.format(name="second"), tmp_path)
    for job_id in (first, second):
        assert engine.get(job_id).state == State.SUCCEEDED, engine.describe(job_id)
    root = engine.data_dir.root / "environments"
    (built,) = [path for path in root.iterdir() if path.is_dir()]
    log = engine.data_dir.log_path(first, "worker", 0).read_text()
    assert str(built) in log and "pip " in log and str(built / "lib") in log  # its pip too
    assert "ready (built in" in _setup_events(engine, first)[-1]
    assert _setup_events(engine, second)[-1].endswith("ready (cached)")
    setup = engine.data_dir.setup_log(first).read_text()
    assert "building python 3.11 with six" in setup and "+ six==" in setup


def test_two_jobs_asking_at_once_build_once(engine: Engine, tmp_path: Path) -> None:
    jobs: list[str] = []
    threads = [
        threading.Thread(target=lambda n=n: jobs.append(_run(engine, SIX.format(name=n), tmp_path)))
        for n in ("left", "right")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outcomes = sorted(_setup_events(engine, job_id)[-1].rsplit("(", 1)[1] for job_id in jobs)
    assert outcomes[0].startswith("built in") and outcomes[1] == "cached)", outcomes


def test_a_build_that_fails_fails_the_job_with_uvs_words(
    engine: Engine, tmp_path: Path, data_dir: Path
) -> None:
    job_id = _run(
        engine,
        "name: broken\nenvironment: {pip: [this-package-does-not-exist-xyz==1]}\n"
        "roles:\n  worker: {command: 'true'}\n",
        tmp_path,
    )
    job = engine.get(job_id)
    assert job.state == State.FAILED
    assert job.reason.startswith("environment build failed:")
    assert "this-package-does-not-exist-xyz" in job.reason
    shown = run_cli("logs", job_id, "--setup")
    assert shown.returncode == 0 and "this-package-does-not-exist-xyz" in shown.stdout
    assert [task.state for task in engine.tasks(job_id)] == [State.CANCELLED]  # never started
    assert not [p for p in (data_dir / "environments").iterdir() if p.is_dir()]  # nothing left

    missing = _run(
        engine,
        "name: nopython\nenvironment: {python: '3.9'}\nroles:\n  worker: {command: 'true'}\n",
        tmp_path,
    )
    reason = engine.get(missing).reason
    assert reason.startswith("environment build failed:") and "3.9" in reason, reason

    no_file = _run(
        engine,
        "name: nofile\nenvironment: {requirements: reqs.txt}\n"
        "roles:\n  worker: {command: 'true'}\n",
        tmp_path,
    )
    assert "environment.requirements: cannot read" in engine.get(no_file).reason


def test_trainfleet_run_builds_from_a_requirements_file(tmp_path: Path, data_dir: Path) -> None:
    """A requirements file, beside a package of the job's own named by a relative path:
    the file was written into the environment's folder before uv made it, and every such
    job stayed ``starting`` (``trainfleet run`` hung)."""
    (tmp_path / "own" / "own").mkdir(parents=True)
    (tmp_path / "own" / "own" / "__init__.py").write_text("WHO = 'own package'\n")
    (tmp_path / "own" / "pyproject.toml").write_text(
        '[project]\nname = "own"\nversion = "1"\n[build-system]\n'
        'requires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (tmp_path / "requirements.txt").write_text("six\n./own\n")
    (tmp_path / "job.yaml").write_text(
        "name: reqs\nenvironment: {requirements: requirements.txt}\nroles:\n"
        "  worker: {command: [python, -c, 'import own, six; print(own.WHO)']}\n"
    )
    done = run_cli("run", tmp_path / "job.yaml", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "own package" in done.stdout


def test_a_requirements_file_that_is_a_link_is_not_read(engine: Engine, tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").symlink_to("/etc/passwd")
    job_id = _run(
        engine,
        "name: linked\nenvironment: {requirements: requirements.txt}\n"
        "roles:\n  worker: {command: 'true'}\n",
        tmp_path,
    )
    reason = engine.get(job_id).reason
    assert reason.startswith("environment build failed: environment.requirements: cannot read")
    assert "a link" in reason and "root:" not in reason, reason
    assert not engine.data_dir.setup_log(job_id).exists()  # nothing was built from it


SLOW_BACKEND = """\
import os, time

def get_requires_for_build_wheel(config_settings=None):
    with open({mark!r}, "w") as file:
        file.write(str(os.getpid()))
    time.sleep(600)
    return []
"""


def test_a_job_stopped_while_its_environment_builds_stops_at_once(
    engine: Engine, tmp_path: Path
) -> None:
    """A build hook that takes ten minutes: cancel ends the job within seconds, the build
    (and the hook) with it, and leaves no environment behind."""
    package, mark = tmp_path / "slow", tmp_path / "hook.pid"
    package.mkdir()
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "slow"\nbackend-path = ["."]\n'
        '[project]\nname = "slow"\nversion = "1"\n'
    )
    (package / "slow.py").write_text(SLOW_BACKEND.format(mark=str(mark)))
    spec = load_job_text(
        f"name: slow\nenvironment: {{pip: ['slow @ file://{package}']}}\n"
        "roles:\n  worker: {command: 'true'}\n",
        "job.yaml",
    ).spec
    job = engine.submit(spec, tmp_path, start=True)
    wait_for(mark.exists, timeout=120, what="the build hook running")
    hook = int(mark.read_text())
    engine.cancel(job.id, "no longer needed")
    assert engine.wait_ended(job.id, timeout=10), engine.describe(job.id)
    ended = engine.get(job.id)
    assert ended.state == State.CANCELLED and ended.reason == "no longer needed", ended
    wait_for(lambda: not psutil.pid_exists(hook), timeout=10, what="the hook ended")
    root = engine.data_dir.root / "environments"
    assert not [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]


def test_least_recently_used_environments_go_but_never_one_in_use(tmp_path: Path) -> None:
    cache = EnvironmentCache(tmp_path / "environments", size=1)  # nothing fits: keep only in use
    log = tmp_path / "setup.log"
    recipes = [Recipe.of(PythonEnvironment(pip=[name]), tmp_path) for name in ("six", "idna")]
    held = cache.lease(recipes[0], log)
    other = cache.lease(recipes[1], log)  # built, and looks to evict: both are in use
    assert held.path.is_dir() and other.path.is_dir()
    other.release()
    assert cache.evict() == [recipes[1].digest] and not other.path.exists()
    assert held.path.is_dir()  # in use: kept, however full the cache
    again = cache.lease(recipes[0], log)
    assert not again.built
    held.release()
    assert cache.evict() == []  # still held by `again`
    again.release()
    assert cache.evict() == [recipes[0].digest] and not held.path.exists()


def test_bad_environments_are_refused_naming_the_field(job_file) -> None:
    for text, field in [
        ("environment: {pipp: [six]}", "environment.pipp: unknown field"),
        (
            "environment: {pip: ['numpy==']}",
            "environment.pip: pip[0]: 'numpy==' is not a requirement",
        ),
        ("environment: {python: 'three'}", "environment.python: python 'three' is not a version"),
        ("environment: {requirements: ../up.txt}", "must be a file inside the job's directory"),
    ]:
        job = job_file(f"name: bad\n{text}\nroles:\n  worker: {{command: 'true'}}\n")
        done = run_cli("run", job)
        assert done.returncode == 2 and field in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_setup_log_through_the_server(tmp_path: Path) -> None:
    token = "env-test-admin-token-0123456789abcdef"
    server = ServerProcess(tmp_path / "data", {"TRAINFLEET_ADMIN_TOKEN": token})
    try:
        with Client(server.url, token) as client:
            job = client.submit(SIX.format(name="remote"), server_workdir=tmp_path)
            assert client.wait(job.id).state == State.SUCCEEDED
            assert b"building python 3.11 with six" in client.read_setup_log(job.id)
            events = [e.message for e in client.describe(job.id).events]
            assert any("setup: python 3.11 with six ready" in m for m in events), events
    finally:
        server.stop()
