"""A notebook's token of its owner (``control.notebook_tokens``), the URL its server gives
it (``control.task_server``), and the variables its task gets (``JobLaunch.task``); the
live path is ``tests/server/test_notebook.py``."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trainfleet.backends.launch import JobLaunch, ServerAccess
from trainfleet.control import notebook_tokens
from trainfleet.control.assembly import engine_at, server_access_of
from trainfleet.control.services.tokens import digest, new_record, principal_of
from trainfleet.control.settings import Settings
from trainfleet.control.task_server import url_for_tasks
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobRecord, State, UserRecord
from trainfleet.scheduling.placement import Placement, TaskSlot, task_keys
from trainfleet.spec.loading import load_job_text
from trainfleet.store.database import Store


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened = Store.open(tmp_path / "store.db")
    opened.accounts.add_user(UserRecord(name="ana", created_at=time.time()))
    yield opened
    opened.close()


def _job(store: Store, job_id: str, state: State) -> None:
    record = JobRecord(
        id=job_id,
        name="nb",
        framework="generic",
        spec="{}",
        workdir="/",
        user="ana",
        created_at=time.time(),
    )
    store.add_job(record, [])
    if state is not State.QUEUED:
        store.transition(job_id, state, Condition(Code.EXITED, "test"), finished_at=time.time())


def test_a_notebook_token_is_its_owners_named_for_its_job_and_made_once(
    store: Store, tmp_path: Path
) -> None:
    secret = notebook_tokens.issue(store, tmp_path, "nb-1", "ana")
    assert secret is not None
    holder = principal_of(store, digest(secret))
    assert holder is not None and holder.caller.user == "ana" and not holder.caller.admin
    assert [(t.name, t.user) for t in store.list_tokens()] == [("notebook nb-1", "ana")]
    assert notebook_tokens.issue(store, tmp_path, "nb-1", "ana") == secret  # a restart's
    assert len(store.list_tokens()) == 1
    assert [(r.action, r.user) for r in store.audit.find()] == [("token.create", "ana")]

    notebook_tokens.revoke(store, tmp_path, "nb-1", "ana")
    assert principal_of(store, digest(secret)) is None
    assert store.list_tokens()[0].revoked


def test_a_users_own_token_of_that_name_is_neither_used_nor_revoked(
    store: Store, tmp_path: Path
) -> None:
    store.add_token(new_record("notebook nb-2", "a-secret-of-her-own-0123456789", "ana"))
    assert notebook_tokens.issue(store, tmp_path, "nb-2", "ana") is None
    notebook_tokens.revoke(store, tmp_path, "nb-2", "ana")
    _job(store, "nb-2", State.CANCELLED)
    assert notebook_tokens.sweep(store, tmp_path) == []
    assert not store.list_tokens()[0].revoked


def test_a_resuming_server_revokes_the_tokens_of_jobs_that_ended_or_went(
    store: Store, tmp_path: Path
) -> None:
    for job_id, state in (("live-1", State.RUNNING), ("done-1", State.SUCCEEDED)):
        _job(store, job_id, state)
    secrets = {
        job_id: notebook_tokens.issue(store, tmp_path, job_id, "ana")
        for job_id in ("live-1", "done-1", "gone-1")
    }
    assert sorted(notebook_tokens.sweep(store, tmp_path)) == ["done-1", "gone-1"]
    alive = {job_id for job_id, s in secrets.items() if principal_of(store, digest(s or "x"))}
    assert alive == {"live-1"}


def test_the_engine_revokes_them_as_it_resumes_and_as_it_deletes_a_job(tmp_path: Path) -> None:
    engine = engine_at(tmp_path / "data")
    try:
        store, root = engine.store, engine.data_dir.root
        store.accounts.add_user(UserRecord(name="ana", created_at=time.time()))
        secrets = {}
        for job_id in ("ended-1", "deleted-1"):
            _job(store, job_id, State.FAILED)
            secrets[job_id] = notebook_tokens.issue(store, root, job_id, "ana") or ""
        engine.delete("deleted-1")
        assert principal_of(store, digest(secrets["deleted-1"])) is None
        assert principal_of(store, digest(secrets["ended-1"])) is not None
        engine.resume()  # a server killed as the job ended had not revoked it
        assert principal_of(store, digest(secrets["ended-1"])) is None
    finally:
        engine.shutdown()
        engine.store.close()


@pytest.mark.parametrize(
    ("host", "port", "https", "here", "cluster", "url"),
    [
        ("127.0.0.1", 8080, False, True, None, "http://127.0.0.1:8080"),
        ("0.0.0.0", 8080, False, True, None, "http://127.0.0.1:8080"),
        ("::", 8080, False, True, None, "http://[::1]:8080"),
        ("10.0.0.5", 443, True, True, None, "https://10.0.0.5:443"),
        ("localhost", 8080, False, False, None, None),  # tasks elsewhere reach no loopback
        ("127.0.0.1", 0, False, True, None, None),  # the port is the system's to pick
        ("127.0.0.1", 8080, False, False, "http://tf.svc:8080/", "http://tf.svc:8080"),
    ],
)
def test_tasks_reach_their_server_at(
    host: str, port: int, https: bool, here: bool, cluster: str | None, url: str | None
) -> None:
    assert url_for_tasks(host, port, https, here, cluster) == url


def test_tasks_of_an_https_server_on_every_address_use_this_machines_name() -> None:
    import socket

    assert url_for_tasks("0.0.0.0", 8443, True, True) == f"https://{socket.getfqdn()}:8443"


def test_a_server_tells_its_notebooks_its_ca_over_https_only(tmp_path: Path) -> None:
    here = SimpleNamespace(queues_tasks=False)
    environ = {"XDG_CONFIG_HOME": str(tmp_path), "TRAINFLEET_CA_CERT": "ca.pem"}
    plain = Settings.resolve(environ, host="127.0.0.1", port=8080)
    assert server_access_of(plain, here) == ServerAccess("http://127.0.0.1:8080")  # type: ignore[arg-type]
    tls = Settings.resolve(environ, host="127.0.0.1", port=8443, tls_cert="cert.pem")
    access = server_access_of(tls, here)  # type: ignore[arg-type]
    assert access == ServerAccess("https://127.0.0.1:8443", ca_cert=str(Path("ca.pem").resolve()))
    assert server_access_of(Settings.resolve(environ), here) is None  # type: ignore[arg-type]


def test_only_the_notebook_role_gets_the_server_and_its_token_masked(tmp_path: Path) -> None:
    text = "name: nb\nnotebook: {idle_timeout: 0}\nroles: {tensorboard: {command: sleep 1}}\n"
    spec = load_job_text(text).spec
    slots = tuple(TaskSlot(*key, "127.0.0.1", 9000 + n) for n, key in enumerate(task_keys(spec)))
    attempts = dict.fromkeys(task_keys(spec), 0)
    data_dir = DataDir(tmp_path / "data")
    server = ServerAccess("https://h:1", "owner-token-0123456789", "/etc/ca.pem")
    job = JobLaunch("nb-1", spec, Placement(slots), tmp_path, data_dir, attempts, server=server)
    notebook = job.task(("notebook", 0))
    assert notebook.env["TRAINFLEET_SERVER"] == "https://h:1"
    assert notebook.env["TRAINFLEET_TOKEN"] == "owner-token-0123456789"
    assert notebook.env["TRAINFLEET_CA_CERT"] == "/etc/ca.pem"
    assert b"owner-token-0123456789" in notebook.mask
    assert "owner-token" not in repr(job)
    board = job.task(("tensorboard", 0)).env
    assert not {"TRAINFLEET_SERVER", "TRAINFLEET_TOKEN"} & set(board)
    none = JobLaunch("nb-1", spec, Placement(slots), tmp_path, data_dir, attempts)
    assert "TRAINFLEET_TOKEN" not in none.task(("notebook", 0)).env


def test_the_notebooks_variables_are_the_clients() -> None:
    from trainfleet import client
    from trainfleet.spec import notebook

    assert (client.SERVER_VARIABLE, client.TOKEN_VARIABLE, client.CA_VARIABLE) == (
        notebook.SERVER_VARIABLE,
        notebook.API_TOKEN_VARIABLE,
        notebook.CA_VARIABLE,
    )
