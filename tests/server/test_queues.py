"""Queues through the API and the SDK: create, change, list, and jobs that wait on quota."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import wait_for

from trainfleet.client import BadRequest, Client, Forbidden, NotFound
from trainfleet.control.queueing import quota_amounts
from trainfleet.domain.records import State
from trainfleet.spec.queues import Quota
from trainfleet.wire import QueueBody

from .harness import LiveServer, ServerProcess, add_user


def test_an_admin_creates_and_changes_a_queue_others_only_read(
    live: LiveServer, client: Client
) -> None:
    body = QueueBody(
        cohort="research",
        nominal=Quota.model_validate({"cpu": "1.5", "memory": "2Gi", "gpu": 2}),
        borrowing_limit=Quota(gpu=1),
    )
    state = client.put_queue("team-a", body)
    assert quota_amounts(state.queue.nominal) == {"cpu": 1500, "memory": 2**31, "gpu": 2000}
    assert state.running == [] and state.waiting == []
    assert "team-a" in [queue.queue.name for queue in client.queues()]

    changed = client.put_queue("team-a", QueueBody(nominal=Quota(gpu=4)))
    assert changed.queue.cohort is None and quota_amounts(changed.queue.nominal) == {"gpu": 4000}
    assert client.queue("team-a") == changed

    secret, _ = add_user(live.engine.store, "alice")
    with Client(live.url, secret) as alice:
        assert alice.queue("team-a") == changed
        with pytest.raises(
            Forbidden, match="changing queues in team 'default' needs the role team-admin"
        ):
            alice.put_queue("team-a", QueueBody())
    with pytest.raises(NotFound, match="no queue 'nope'"):
        client.queue("nope")


def test_bad_queues_and_jobs_for_them_are_refused(client: Client, tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match=r"body\.cohort: invalid name 'Team A'"):
        client.put_queue("ok", QueueBody.model_construct(cohort="Team A"))
    client.put_queue("small", QueueBody(nominal=Quota.model_validate({"cpu": 1})))
    with pytest.raises(BadRequest, match="no queue 'missing'"):
        client.submit("name: lost\nqueue: missing\nroles:\n  w: {command: 'true'}\n")
    too_big = "name: big\nqueue: small\nroles:\n  w: {command: 'true', resources: {cpu: 2}}\n"
    with pytest.raises(BadRequest, match="queue 'small' can never have more than cpu 1"):
        client.submit(too_big)


def test_a_job_over_its_queue_quota_waits_and_says_why(tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(
        textwrap.dedent(
            """
            queues:
              - name: team
                nominal: {cpu: 500m}
            """
        )
    )
    job = textwrap.dedent(
        """
        name: {name}
        queue: team
        roles:
          w: {{command: '{command}', resources: {{cpu: 0.5}}}}
        """
    )
    server = ServerProcess(tmp_path / "data", args=["--queues", str(queues)])
    try:
        with Client(server.url, server.admin_token or "", timeout=30) as client:
            first = client.submit(
                job.format(name="first", command="sleep 3"), server_workdir=tmp_path
            )
            second = client.submit(
                job.format(name="second", command="true"), server_workdir=tmp_path
            )
            reason = (
                "waiting for quota: queue 'team' has a nominal quota of cpu 0.5, uses cpu 0.5 "
                "and the job needs cpu 0.5; it has no cohort to borrow from"
            )
            # The admitter's pass stores the reason, a moment after the submission.
            wait_for(lambda: client.get(second.id).waiting == reason, what="the waiting reason")
            assert client.get(second.id).waiting_code == "waiting-for-quota"
            assert client.get(second.id).state == State.QUEUED
            assert client.queue("team").waiting == [second.id]
            wait_for(
                lambda: client.get(second.id).state == State.SUCCEEDED,
                timeout=60,
                what="the second job to run once the first has ended",
            )
            assert client.get(first.id).state == State.SUCCEEDED
    finally:
        server.stop()
