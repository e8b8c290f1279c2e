"""Secrets, end to end against a real server on SQLite and on PostgreSQL: a job echoes its
secret, and no byte sequence of the value appears in any answer, any line trainfleet
logs, any file of its data directory or any row of its database; the task's log shows
``***``. Bad references are refused naming the field; another team's secret does not
exist; the key rotates without a restart.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import every_answer, fresh_postgres_database, run_cli

from trainfleet.client import BadRequest, Client, NotFound
from trainfleet.wire import UserBody

from .harness import ServerProcess

JOB = """\
name: echo
queue: vision
env:
  PASSWORD: {secret: db, key: password}
roles:
  worker:
    command: sh -c 'echo "pw=$PASSWORD"; cat "$CERT_FILE"; echo; echo done'
    env:
      CERT_FILE: {secret: db, key: cert, file: true}
restart: {policy: never}
"""


class Deployment:
    """A server, its admin, team ``vision`` with member ``ana``, ``audio`` with ``bo``."""

    def __init__(self, root: Path, database: str | None) -> None:
        self.root, self.database = root, database
        env = {"TRAINFLEET_DATABASE_URL": database} if database else {}
        self.server = ServerProcess(root / "data", env=env)
        assert self.server.admin_token
        with self.client(self.server.admin_token) as admin:
            admin.create_team("vision")
            admin.create_team("audio")
            self.ana = admin.create_user(UserBody(name="ana", team="vision")).token
            self.bo = admin.create_user(UserBody(name="bo", team="audio")).token

    def client(self, token: str) -> Client:
        return Client(self.server.url, token, timeout=60)

    def cli(self, token: str, *args: str | Path) -> tuple[int, str]:
        os.environ["TRAINFLEET_SERVER"], os.environ["TRAINFLEET_TOKEN"] = self.server.url, token
        try:
            done = run_cli(*args, cwd=self.root)
        finally:
            del os.environ["TRAINFLEET_SERVER"], os.environ["TRAINFLEET_TOKEN"]
        return done.returncode, done.stdout + done.stderr

    def password_reversed(self, secret: str) -> bytes:
        """The log of ana's ``run`` of JOB on ``secret``, its password printed reversed (so
        that the log does not mask it)."""
        job = JOB.replace("secret: db", f"secret: {secret}")
        (self.root / "job.yaml").write_text(
            job.replace('echo "pw=$PASSWORD"', 'echo "$PASSWORD" | rev')
        )
        code, out = self.cli(self.ana, "run", self.root / "job.yaml")
        assert code == 0, out
        with self.client(self.ana) as ana:
            ran = next(iter(ana.list_jobs()))  # the newest
            return ana.read_log(ran.id, "worker", 0)

    def database_bytes(self) -> bytes:
        """Every page of the SQLite file and its WAL, or every row of every table."""
        if self.database is None:
            files = (self.root / "data").glob("trainfleet.db*")
            return b"".join(path.read_bytes() for path in files)
        import psycopg

        rows = []
        with psycopg.connect(self.database) as connection:
            tables = connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchall()
            for (table,) in tables:
                rows += connection.execute(f'SELECT * FROM "{table}"').fetchall()
        return repr(rows).encode()


@pytest.fixture(params=["sqlite", "postgresql"])
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    if request.param == "sqlite":
        made = Deployment(tmp_path, None)
        yield made
        made.server.stop()
        return
    with fresh_postgres_database() as url:
        made = Deployment(tmp_path, url)
        yield made
        made.server.stop()


def test_a_secret_reaches_only_its_task_and_never_an_answer_a_log_or_the_database(
    deployment: Deployment, tmp_path: Path
) -> None:
    password = f"pw-{secrets.token_hex(12)}"
    cert = f"cert-{secrets.token_hex(12)}"
    (tmp_path / "cert.pem").write_text(cert)
    code, out = deployment.cli(
        deployment.ana,
        "secret", "create", "db",
        "--from-literal", f"password={password}",
        "--from-file", f"cert={tmp_path / 'cert.pem'}",
    )  # fmt: skip
    assert code == 0, out
    project = tmp_path / "project"  # the job's folder, sent to the server: no secret in it
    project.mkdir()
    (project / "job.yaml").write_text(JOB)
    code, out = deployment.cli(deployment.ana, "run", project / "job.yaml")
    assert code == 0, out
    with deployment.client(deployment.ana) as ana:
        (job,) = list(ana.list_jobs())
        log = ana.read_log(job.id, "worker", 0)
        assert log == b"pw=***\n***\ndone\n", log
        assert ana.get(job.id).state == "succeeded"
        assert not (deployment.root / "data" / "jobs" / job.id / "secrets").exists()
        answers = every_answer(deployment.server.url, deployment.server.admin_token, job.id)
        outputs = [
            deployment.cli(deployment.ana, *args)[1]
            for args in (("describe", job.id), ("list",), ("logs", job.id), ("secret", "list"))
        ]
    for value in (password.encode(), cert.encode()):
        assert value not in answers
        assert value not in "\n".join(outputs).encode()
        assert value not in "\n".join(deployment.server.lines).encode()
        assert value not in deployment.database_bytes()
        for path in (deployment.root / "data").rglob("*"):
            if path.is_file():
                assert value not in path.read_bytes(), path
    assert "db" in outputs[3] and "cert, password" in outputs[3]


def test_bad_references_are_refused_naming_the_field_and_other_teams_secrets_do_not_exist(
    deployment: Deployment, tmp_path: Path
) -> None:
    with deployment.client(deployment.ana) as ana, deployment.client(deployment.bo) as bo:
        ana.create_secret("db", {"password": "x" * 16})
        bo.create_secret("theirs", {"password": "y" * 16})
        assert [s.name for s in bo.secrets()] == ["theirs"]
        with pytest.raises(NotFound):
            bo.delete_secret("vision", "db")
        missing = JOB.replace("key: password", "key: pasword")
        with pytest.raises(BadRequest) as refused:
            ana.submit(missing)
        assert "env.PASSWORD: secret 'db' has no key 'pasword' (its keys: password)" in str(
            refused.value
        )
        stolen = JOB.replace("{secret: db, key: password}", "{secret: theirs, key: password}")
        with pytest.raises(BadRequest, match=r"env\.PASSWORD: no secret 'theirs' in team 'vision'"):
            ana.submit(stolen)
        with pytest.raises(BadRequest, match=r"body\.data: Dictionary should have at least 1"):
            ana.create_secret("empty", {})
        assert list(ana.list_jobs()) == []
    (tmp_path / "job.yaml").write_text(JOB)
    code, out = deployment.cli(deployment.bo, "submit", tmp_path / "job.yaml")
    assert code == 2 and "queue: no queue 'vision'" in out and "Traceback" not in out
    code, out = deployment.cli(deployment.ana, "secret", "create", "db", "--from-literal", "a=b")
    assert code == 2 and "has a secret 'db' already" in out
    code, out = deployment.cli(deployment.ana, "secret", "create", "x", "--from-file", "k=/nope")
    assert code == 2 and "--from-file: cannot read /nope" in out


def test_the_key_rotates_without_a_restart(tmp_path: Path) -> None:
    """``trainfleet secret rotate-key`` puts a new key first in the key file and seals
    every secret with it; the running server reads the new file and jobs still get
    their values."""
    deployment = Deployment(tmp_path, None)
    try:
        with deployment.client(deployment.ana) as ana:
            ana.create_secret("db", {"password": "first-value", "cert": "c" * 8})
        key_file = tmp_path / "data" / "secret.key"
        assert oct(key_file.stat().st_mode & 0o777) == "0o600"
        before = key_file.read_bytes().split()
        done = run_cli("--data-dir", tmp_path / "data", "secret", "rotate-key")
        assert done.returncode == 0 and "1 encrypted again" in done.stdout, done.stderr
        after = key_file.read_bytes().split()
        assert after[1:] == before and len(after) == 2
        assert deployment.password_reversed("db").startswith(b"eulav-tsrif\n")
        with sqlite3.connect(tmp_path / "data" / "trainfleet.db") as db:
            (data,) = db.execute("SELECT data FROM secrets").fetchone()
        from cryptography.fernet import Fernet

        assert json.loads(Fernet(after[0]).decrypt(data.encode()))["password"] == "first-value"
    finally:
        deployment.server.stop()


def test_a_rotation_killed_halfway_loses_no_secret(tmp_path: Path) -> None:
    """``kill -9`` of ``secret rotate-key`` after it sealed some secrets with the new key
    and not others: every secret still opens (the key file holds both keys before any
    secret is sealed again), a job gets its values, and a second rotation seals the rest."""
    from cryptography.fernet import Fernet, InvalidToken

    deployment = Deployment(tmp_path, None)
    count = 300
    try:
        with deployment.client(deployment.ana) as ana:
            for n in range(count):
                ana.create_secret(f"s{n}", {"password": f"value-{n}", "cert": "c" * 8})
        data = tmp_path / "data"
        key_file = data / "secret.key"

        def sealed_with_new() -> int:
            keys = key_file.read_bytes().split()
            if len(keys) < 2:
                return 0
            with sqlite3.connect(data / "trainfleet.db") as db:
                rows = db.execute("SELECT data FROM secrets").fetchall()
            newest, opened = Fernet(keys[0]), 0
            for (row,) in rows:
                try:
                    newest.decrypt(row.encode())
                    opened += 1
                except InvalidToken:
                    pass
            return opened

        argv = [sys.executable, "-m", "trainfleet", "--data-dir", str(data)]
        rotation = subprocess.Popen([*argv, "secret", "rotate-key"], stdout=subprocess.PIPE)
        while not 0 < (done := sealed_with_new()) < count:
            assert rotation.poll() is None, "the rotation ended before it could be killed"
        rotation.kill()
        rotation.wait(timeout=30)
        assert 0 < sealed_with_new() < count, done

        assert deployment.password_reversed(f"s{count - 1}").startswith(b"992-eulav\n")
        again = run_cli("--data-dir", data, "secret", "rotate-key")
        assert again.returncode == 0, again.stderr
        assert sealed_with_new() == count and len(key_file.read_bytes().split()) == 3
    finally:
        deployment.server.stop()


def test_a_server_with_a_bad_key_does_not_start(tmp_path: Path) -> None:
    """A malformed TRAINFLEET_SECRET_KEY stops the start with exit 2, naming the variable
    and not the key."""
    env = {**os.environ, "TRAINFLEET_SECRET_KEY": "not-a-key"}
    argv = ["--data-dir", str(tmp_path / "data"), "server", "--port", "0"]
    answer = subprocess.run(
        [sys.executable, "-m", "trainfleet", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert answer.returncode == 2, answer.stderr
    assert "TRAINFLEET_SECRET_KEY" in answer.stderr and "not-a-key" not in answer.stderr
    assert "Traceback" not in answer.stderr


def test_an_embedded_run_refuses_secrets_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``trainfleet run`` without a server has no secrets to give: exit 2, the field named."""
    monkeypatch.setenv("TRAINFLEET_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "job.yaml").write_text(JOB)
    done = run_cli("run", tmp_path / "job.yaml", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "env.PASSWORD: secrets are kept by a server" in done.stderr
    assert "Traceback" not in done.stderr
