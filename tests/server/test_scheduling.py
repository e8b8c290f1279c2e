"""Gang admission on this machine for real: jobs that each need all of it, through a server.

Every job asks for every CPU of the machine, so only one can run at a time; the order in
which they run and what happens to the one that is preempted are read from a shared file
that the real task processes append to.
"""

from __future__ import annotations

import os
import shutil
import signal
import textwrap
from pathlib import Path

from helpers import wait_for

from trainfleet.client import Client
from trainfleet.domain.records import JobRecord, State

from .harness import ServerProcess

PROGRAM = Path(__file__).parent.parent / "programs" / "whole_machine.py"
CPUS = os.cpu_count() or 1


def job(name: str, priority: int, seconds: float = 0.5, extra: str = "") -> str:
    return textwrap.dedent(
        f"""
        name: {name}
        priority: {priority}
        grace_period: 5
        roles:
          worker:
            command: python whole_machine.py events.log {name} {seconds} {extra}
            resources: {{cpu: {CPUS}}}
        """
    )


def events(folder: Path) -> list[tuple[str, str]]:
    path = folder / "events.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(line.split()[0], line.split()[1]) for line in lines]


def test_jobs_needing_the_whole_machine_run_one_at_a_time_in_priority_order(
    tmp_path: Path,
) -> None:
    shutil.copy(PROGRAM, tmp_path)
    server = ServerProcess(tmp_path / "data")
    try:
        with Client(server.url, server.admin_token or "", timeout=30) as client:
            blocker = client.submit(job("blocker", 10, seconds=2), server_workdir=tmp_path)
            wait_for(lambda: ("blocker", "start") in events(tmp_path), what="blocker running")
            low = client.submit(job("low", 1), server_workdir=tmp_path)
            high = client.submit(job("high", 5), server_workdir=tmp_path)
            middle = client.submit(job("middle", 3), server_workdir=tmp_path)
            waiting = wait_for(  # the admitter's pass stores the reason
                lambda: (
                    "waiting for resources" in (record := client.get(high.id)).waiting and record
                ),
                what="the reason high waits",
            )
            assert isinstance(waiting, JobRecord) and waiting.state == State.QUEUED
            assert "cpu" in waiting.waiting and waiting.waiting_code == "waiting-for-resources"
            wait_for(lambda: ("high", "start") in events(tmp_path), timeout=60, what="high")
            started = client.get(high.id)  # running, or already ended: no longer waiting
            assert (started.waiting, started.waiting_code) == ("", ""), started

            jobs = (blocker, low, high, middle)
            wait_for(
                lambda: all(State(client.get(j.id).state).is_final for j in jobs),
                timeout=120,
                what="every job to end",
            )
            for each in jobs:
                assert client.get(each.id).state == State.SUCCEEDED, client.describe(each.id)
    finally:
        server.stop()
    order = events(tmp_path)
    assert order == [
        ("blocker", "start"), ("blocker", "end"),
        ("high", "start"), ("high", "end"),
        ("middle", "start"), ("middle", "end"),
        ("low", "start"), ("low", "end"),
    ]  # fmt: skip


def test_a_higher_priority_job_preempts_a_running_one_which_later_succeeds(
    tmp_path: Path,
) -> None:
    shutil.copy(PROGRAM, tmp_path)
    server = ServerProcess(tmp_path / "data")
    try:
        with Client(server.url, server.admin_token or "", timeout=30) as client:
            low = client.submit(job("low", 0, extra="--until-preempted"), server_workdir=tmp_path)
            wait_for(lambda: ("low", "start") in events(tmp_path), what="low running")
            high = client.submit(job("high", 5), server_workdir=tmp_path)
            wait_for(
                lambda: all(State(client.get(j.id).state).is_final for j in (low, high)),
                timeout=120,
                what="both jobs to end",
            )
            assert client.get(high.id).state == State.SUCCEEDED
            assert client.get(low.id).state == State.SUCCEEDED
            low_events = client.describe(low.id).events
    finally:
        server.stop()
    assert events(tmp_path) == [
        ("low", "start"), ("low", "sigterm:preempted"),
        ("high", "start"), ("high", "end"),
        ("low", "start"), ("low", "end"),
    ]  # fmt: skip
    requeued = [e for e in low_events if e.task == "" and e.state == State.QUEUED]
    assert len(requeued) == 2, low_events  # submitted, then preempted
    assert requeued[1].message == f"preempted by {high.id} (priority 5)"
    assert requeued[1].code == "preempted"


def test_after_a_kill_9_the_running_job_keeps_the_machine_and_the_waiting_one_waits(
    tmp_path: Path,
) -> None:
    """A restarted server adopts the running job with its resources, requeues the rest."""
    shutil.copy(PROGRAM, tmp_path)
    data = tmp_path / "data"
    server = ServerProcess(data)
    token = server.admin_token or ""
    try:
        with Client(server.url, token, timeout=30) as client:
            first = client.submit(job("first", 0, seconds=6), server_workdir=tmp_path)
            wait_for(lambda: ("first", "start") in events(tmp_path), what="first running")
            second = client.submit(job("second", 0), server_workdir=tmp_path)
            assert client.get(second.id).state == State.QUEUED
    finally:
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    server = ServerProcess(data)
    try:
        with Client(server.url, token, timeout=30) as client:
            assert client.get(second.id).state == State.QUEUED  # first still holds the CPUs
            wait_for(
                lambda: all(State(client.get(j.id).state).is_final for j in (first, second)),
                timeout=120,
                what="both jobs to end",
            )
            assert client.get(first.id).state == State.SUCCEEDED
            assert client.get(second.id).state == State.SUCCEEDED
    finally:
        server.stop()
    assert events(tmp_path) == [
        ("first", "start"), ("first", "end"), ("second", "start"), ("second", "end"),
    ]  # fmt: skip
