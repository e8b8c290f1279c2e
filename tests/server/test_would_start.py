""" "Would a job start now?" of a queue, on a real server: yes on an idle queue, its quota
or its turn or the machine otherwise, never where it asks for more than exists; only for
those who see the queue; bad amounts named."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from trainfleet.client import Client
from trainfleet.domain.records import TeamRole
from trainfleet.spec.queues import Quota
from trainfleet.wire import QueueBody

from .harness import LiveServer, add_user

API = "/api/v1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("would") / "data").start()
    yield live
    live.stop()


def ask(server: LiveServer, token: str, queue: str, **amounts: object) -> httpx.Response:
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as api:
        return api.get(f"{API}/queues/{queue}/would-start", params=amounts)


def test_idle_quota_turn_and_never(server: LiveServer) -> None:
    with Client(server.url, server.token) as admin:
        admin.put_queue("small", QueueBody(nominal=Quota(cpu="1"), team="default"))
        assert ask(server, server.token, "small", cpu="1").json() == {
            "starts": True,
            "code": "",
            "message": "it would start now",
        }
        job = admin.submit(
            "name: holder\nqueue: small\nroles:\n  worker:\n"
            "    command: sleep 600\n    resources: {cpu: 1}\n"
        )
        deadline = time.monotonic() + 30
        while admin.get(job.id).state != "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        quota = ask(server, server.token, "small", cpu="1").json()
        assert (quota["starts"], quota["code"]) == (False, "waiting-for-quota"), quota
        assert "cpu" in quota["message"]
        assert ask(server, server.token, "default", cpu="1").json()["starts"] is True
        never = ask(server, server.token, "default", memory="100Ti").json()
        assert (never["starts"], never["code"]) == (False, "unschedulable"), never
        admin.cancel(job.id)


def test_only_who_sees_the_queue_may_ask(server: LiveServer) -> None:
    with Client(server.url, server.token) as admin:
        admin.create_team("elsewhere")
    stranger, _ = add_user(server.engine.store, "outsider", team="elsewhere", role=TeamRole.VIEWER)
    assert ask(server, stranger, "default", cpu="1").status_code == 404
    viewer, _ = add_user(server.engine.store, "looker", role=TeamRole.VIEWER)
    assert ask(server, viewer, "default", cpu="1").status_code == 200
    assert ask(server, viewer, "no-such-queue").status_code == 404


def test_bad_amounts_are_named(server: LiveServer) -> None:
    for amounts, field in (
        ({"cpu": "lots"}, "query.cpu"),
        ({"memory": "-1Gi"}, "query.memory"),
        ({"gpu": -1}, "query.gpu"),
        ({"gpu": "x"}, "query.gpu"),
        ({"cpus": 1}, "cpus"),
    ):
        answer = ask(server, server.token, "default", **amounts)
        assert answer.status_code == 422, (amounts, answer.text)
        assert field in answer.json()["detail"], answer.text
