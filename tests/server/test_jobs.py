"""Jobs through the SDK against a live server: submit, follow to the end, find, cancel, delete."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from trainfleet.client import BadRequest, Client, Conflict, NotFound
from trainfleet.domain.records import State
from trainfleet.spec.loading import load_job_text

from .harness import LiveServer

HELLO = """\
name: hello
labels: {team: vision}
roles:
  worker: {replicas: 2, command: 'echo "hi from $TRAINFLEET_TASK_INDEX"; sleep 0.2; echo bye'}
"""

SLEEPER = "name: sleeper\nroles:\n  worker: {command: 'echo started; sleep 60', port: null}\n"


def test_health_needs_no_token(live: LiveServer) -> None:
    assert Client(live.url).health()
    assert httpx.get(f"{live.url}/healthz").json() == {"status": "ok"}


def test_a_job_runs_to_its_end_and_its_logs_follow_it(client: Client) -> None:
    warnings: list[str] = []
    client.on_warning = warnings.append
    job = client.submit(HELLO)
    assert job.state == State.QUEUED and job.user == "admin" and job.name == "hello"
    text = "".join(client.follow_log(job.id, "worker", 1))
    assert text.splitlines()[-1] == "bye"
    assert client.get(job.id).state == State.SUCCEEDED  # the stream ends once the job has
    details = client.describe(job.id)
    assert [(t.name, t.state, t.exit_code) for t in details.tasks] == [
        ("worker/0", State.SUCCEEDED, 0),
        ("worker/1", State.SUCCEEDED, 0),
    ]
    assert details.events[0].message == "submitted by admin"
    assert details.events[-1].state == "succeeded"
    assert warnings == []


def test_following_events_yields_each_change_until_the_end(client: Client) -> None:
    job = client.submit(HELLO)
    events = list(client.follow_events(job.id))
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert (events[0].task, events[0].state) == ("", "queued")
    assert (events[-1].task, events[-1].state) == ("", "succeeded")
    assert {e.task for e in events} == {"", "worker/0", "worker/1"}
    assert list(client.follow_events(job.id, after=events[-1].id)) == []
    assert client.events(job.id, after=events[1].id) == events[2:]


def test_json_text_a_jobspec_and_a_kubeflow_manifest_are_accepted(client: Client) -> None:
    spec = load_job_text(HELLO).spec
    assert client.wait(client.submit(spec).id).state == State.SUCCEEDED
    assert client.wait(client.submit(spec.model_dump_json()).id).state == State.SUCCEEDED
    container = {
        "name": "pytorch",
        "command": ["sh", "-c", "echo $RANK"],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    }
    pod = {"containers": [container], "volumes": [{"name": "scratch", "emptyDir": {}}]}
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "manifest"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": pod}}}},
    }
    warnings: list[str] = []
    client.on_warning = warnings.append
    job = client.submit(json.dumps(manifest))
    assert job.source == "PyTorchJob"
    assert any("emptyDir volume 'scratch' is not supported here" in w for w in warnings)
    assert client.wait(job.id).state == State.SUCCEEDED
    assert client.read_log(job.id, "master", 0) == b"0\n"


def test_a_job_runs_in_the_workdir_given(client: Client, tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("from the workdir\n")
    job = client.submit(
        "name: cat\nroles:\n  worker: {command: cat data.txt}\n", server_workdir=tmp_path
    )
    assert client.wait(job.id).state == State.SUCCEEDED
    assert client.read_log(job.id, "worker", 0) == b"from the workdir\n"
    assert client.get(job.id).workdir == str(tmp_path)


def test_a_failed_job_reports_its_exit_code(client: Client) -> None:
    job = client.submit("name: fails\nroles:\n  worker: {command: 'exit 3'}\n")
    assert client.wait(job.id).state == State.FAILED
    (task,) = client.describe(job.id).tasks
    assert task.exit_code == 3 and "exit code 3" in task.reason


def test_cancel_stops_a_running_job(client: Client) -> None:
    job = client.submit(SLEEPER)
    assert "".join(client.follow_log(job.id, "worker", 0, start=0).__next__()) == "started\n"
    client.cancel(job.id)
    ended = client.wait(job.id)
    assert ended.state == State.CANCELLED and ended.reason == "cancelled by admin"
    assert client.cancel(job.id).state == State.CANCELLED  # an ended job stays as it is


def test_delete_refuses_a_running_job_unless_forced(client: Client, live: LiveServer) -> None:
    job = client.submit(SLEEPER)
    with pytest.raises(Conflict, match=f"job {job.id} is (queued|starting|running)"):
        client.delete(job.id)
    assert client.get(job.id).state != State.CANCELLED
    client.delete(job.id, force=True)
    with pytest.raises(NotFound, match=f"no job '{job.id}'"):
        client.get(job.id)
    assert not live.engine.data_dir.job_dir(job.id).exists()


def test_delete_forgets_an_ended_job(client: Client) -> None:
    job = client.submit(HELLO)
    client.wait(job.id)
    client.delete(job.id)
    with pytest.raises(NotFound):
        client.delete(job.id)
    assert job.id not in {j.id for j in client.list_jobs()}


def test_find_filters_and_pages(client: Client) -> None:
    ids = [client.submit(HELLO.replace("hello", "paged")).id for _ in range(5)]
    for job_id in ids:
        client.wait(job_id)
    page = client.find(name="paged", limit=2)
    assert [job.id for job in page.jobs] == ids[::-1][:2] and page.next_cursor
    assert [job.id for job in client.list_jobs(name="paged", page_size=2)] == ids[::-1]
    assert {j.id for j in client.list_jobs(name="paged", state="succeeded")} == set(ids)
    assert list(client.list_jobs(name="paged", state=State.FAILED)) == []
    assert len(list(client.list_jobs(name="paged", user="admin"))) == 5
    assert list(client.list_jobs(name="paged", user="nobody")) == []
    assert len(list(client.list_jobs(name="paged", labels={"team": "vision"}))) == 5
    assert list(client.list_jobs(name="paged", labels={"team": "nlp"})) == []
    with pytest.raises(BadRequest, match="invalid cursor") as raised:
        client.find(cursor="not-a-cursor")
    assert raised.value.status == 400


def test_read_log_by_byte_range(client: Client) -> None:
    job = client.submit("name: ranges\nroles:\n  worker: {command: 'printf 0123456789'}\n")
    client.wait(job.id)
    assert client.read_log(job.id, "worker", 0) == b"0123456789"
    assert client.read_log(job.id, "worker", 0, start=3, end=6) == b"345"
    assert client.read_log(job.id, "worker", 0, start=8) == b"89"
    assert client.read_log(job.id, "worker", 0, start=50) == b""
    assert client.read_log(job.id, "worker", 0, start=4, end=4) == b""
    response = client._http.get(
        f"/api/v1/jobs/{job.id}/tasks/worker/0/log", params={"start": 2, "end": 5}
    )
    assert response.content == b"234"
    assert response.headers["content-type"] == "application/octet-stream"
    assert (response.headers["x-log-end"], response.headers["x-log-size"]) == ("5", "10")


def test_follow_log_sends_lines_as_they_come_and_resumes_from_an_offset(
    client: Client, live: LiveServer
) -> None:
    command = "for i in 1 2 3; do echo line $i; sleep 0.2; done; printf 'bar\\r50%%\\rdone'"
    job = client.submit(f'name: slow\nroles:\n  worker: {{command: "{command}"}}\n')
    pieces = []
    started = time.monotonic()
    for piece in client.follow_log(job.id, "worker", 0):
        pieces.append((time.monotonic() - started, piece))
    text = "".join(piece for _, piece in pieces)
    assert text == "line 1\nline 2\nline 3\nbar\r50%\rdone"
    assert len(pieces) >= 3  # lines arrived while the job ran, not all at its end
    # Last-Event-ID (the byte offset after a message) resumes a dropped stream there.
    headers = {"Authorization": f"Bearer {live.token}", "Last-Event-ID": "7"}
    with httpx.stream(
        "GET", f"{live.url}/api/v1/jobs/{job.id}/tasks/worker/0/log/follow", headers=headers
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = response.read().decode()
    assert '"text":"line 2\\n' in body and "line 1" not in body
    end = '"state":"succeeded","code":"succeeded","reason":"worker/0 succeeded"}'
    assert body.rstrip().endswith(end)


def test_unicode_and_undecodable_bytes_in_logs(client: Client) -> None:
    job = client.submit(
        "name: bytes\nroles:\n  worker: {command: \"printf 'caf\\\\303\\\\251 \\\\377\\\\n'\"}\n"
    )
    client.wait(job.id)
    assert client.read_log(job.id, "worker", 0) == "café ".encode() + b"\xff\n"
    assert "".join(client.follow_log(job.id, "worker", 0)) == "café \ufffd\n"


def test_a_followed_job_deleted_meanwhile_ends_the_stream_with_not_found(client: Client) -> None:
    job = client.submit(SLEEPER)
    events = client.follow_events(job.id)
    assert next(events).state == "queued"
    client.delete(job.id, force=True)
    with pytest.raises(NotFound, match=f"no job '{job.id}'"):
        list(events)


def test_following_events_resumes_after_the_last_event_id(client: Client, live: LiveServer) -> None:
    job = client.wait(client.submit(HELLO).id)
    ids = [event.id for event in client.events(job.id)]
    headers = {"Authorization": f"Bearer {live.token}", "Last-Event-ID": str(ids[2])}
    url = f"{live.url}/api/v1/jobs/{job.id}/events/follow"
    body = httpx.get(url, headers=headers, params={"after": 0}).text
    assert [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")] == ids[3:]
    assert "event: end" in body
