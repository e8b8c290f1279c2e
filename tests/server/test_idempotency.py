"""Submissions sent again with their ``Idempotency-Key`` (their answer was lost): one job,
the first, whichever way it was stored; a key sent with another job, or a malformed one,
refused (422) naming the header, with nothing stored."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from trainfleet.client import BadRequest, Client

from .harness import LiveServer, add_user


def _job(name: str, command: str = "true") -> str:
    return f"name: {name}\nroles:\n  main: {{command: '{command}', resources: {{cpu: 0.1}}}}\n"


def _named(client: Client, name: str) -> list[str]:
    return [job.id for job in client.list_jobs(name=name)]


def _at_once(live: LiveServer, count: int, send: Callable[[Client], str]) -> list[str]:
    """``send`` on ``count`` connections of their own, all at once: the ids answered."""
    answers: list[str] = []

    def one() -> None:
        with Client(live.url, live.token, timeout=60) as own:
            answers.append(send(own))

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def test_a_submission_sent_again_with_its_key_is_answered_with_its_first_job(
    client: Client, live: LiveServer, tmp_path: Path
) -> None:
    key = str(uuid.uuid4())
    first = client.submit(_job("again"), idempotency_key=key)
    assert client.submit(_job("again"), idempotency_key=key).id == first.id
    assert _named(client, "again") == [first.id]
    # A job sent with its folder (stored by the engine's own call, not in a batch): the
    # second copy of its folder is not left behind.
    (tmp_path / "train.py").write_text("print('hi')\n")
    sent = client.submit(_job("sent"), workdir=tmp_path, idempotency_key=key + "-sent")
    assert (
        client.submit(_job("sent"), workdir=tmp_path, idempotency_key=key + "-sent").id == sent.id
    )
    assert _named(client, "sent") == [sent.id]
    folders = [p.name for p in (live.engine.data_dir.root / "jobs").iterdir()]
    assert [name for name in folders if name.startswith("sent-")] == [sent.id]


def test_the_same_key_sent_at_once_stores_one_job(client: Client, live: LiveServer) -> None:
    """Eight copies at once: they may meet in one batch of the submission writer."""
    key = str(uuid.uuid4())

    def send(own: Client) -> str:
        return own.submit(_job("together"), idempotency_key=key).id

    answers = _at_once(live, 8, send)
    assert len(answers) == 8 and len(set(answers)) == 1
    assert _named(client, "together") == answers[:1]


def test_copies_of_a_job_sent_with_its_folder_at_once_store_one_job_and_one_folder(
    client: Client, live: LiveServer, tmp_path: Path
) -> None:
    """Copies that arrive while the first one's folder is still being stored (a folder of
    4 MiB): each stores the folder apart, one job is kept, the others' folders are removed."""
    (tmp_path / "weights.bin").write_bytes(bytes(range(256)) * (16 << 10))
    (tmp_path / "train.py").write_text("print('hi')\n")
    key = str(uuid.uuid4())

    def send(own: Client) -> str:
        return own.submit(_job("bulky"), workdir=tmp_path, idempotency_key=key).id

    answers = _at_once(live, 4, send)
    assert len(answers) == 4 and len(set(answers)) == 1
    assert _named(client, "bulky") == answers[:1]
    folders = [p.name for p in (live.engine.data_dir.root / "jobs").iterdir()]
    assert [name for name in folders if name.startswith("bulky-")] == answers[:1]


def test_a_key_is_its_user_s_own(client: Client, live: LiveServer) -> None:
    token, _ = add_user(live.engine.store, f"other-{uuid.uuid4().hex[:6]}")
    key = str(uuid.uuid4())
    mine = client.submit(_job("owned"), idempotency_key=key)
    with Client(live.url, token, timeout=30) as other:
        theirs = other.submit(_job("owned"), idempotency_key=key)
    assert theirs.id != mine.id and sorted(_named(client, "owned")) == sorted([mine.id, theirs.id])


def test_a_key_sent_with_another_job_or_malformed_is_refused_naming_it(
    client: Client, live: LiveServer
) -> None:
    key = str(uuid.uuid4())
    first = client.submit(_job("first"), idempotency_key=key)
    try:
        client.submit(_job("first", "sleep 1"), idempotency_key=key)
    except BadRequest as error:
        assert error.status == 422 and "Idempotency-Key" in str(error) and first.id in str(error)
    else:
        raise AssertionError("a key sent with another job was taken")
    for bad in ("has a space", "x" * 256, ""):
        answer = httpx.post(
            f"{live.url}/api/v1/jobs",
            content=_job("malformed"),
            headers={
                "Authorization": f"Bearer {live.token}",
                "Content-Type": "application/yaml",
                "Idempotency-Key": bad,
            },
        )
        assert answer.status_code == 422, (bad, answer.text)
        assert "Idempotency-Key" in answer.text, answer.text
    assert _named(client, "first") == [first.id] and _named(client, "malformed") == []
