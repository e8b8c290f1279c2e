"""Submissions stored many per transaction (``SubmissionWriter``, ``Engine.submit_soon``),
on a real store, and the audit writer's gathering of a burst's records."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from trainfleet.control import submissions
from trainfleet.control.engine import Engine
from trainfleet.control.services import audit
from trainfleet.control.submissions import NewJob, SubmissionWriter
from trainfleet.domain.records import Audited, AuditRecord, JobRecord, State, TaskRecord
from trainfleet.spec.models import JobSpec
from trainfleet.store.database import Store
from trainfleet.store.errors import StoreConflict

SPEC = JobSpec.model_validate(yaml.safe_load("name: quick\nroles:\n  worker: {command: 'true'}\n"))


def _new(job_id: str) -> NewJob:
    job = JobRecord(
        id=job_id, name="quick", framework="generic", spec="{}", workdir="/tmp", created_at=1.0
    )
    return NewJob(job, [TaskRecord(job_id=job_id, role="worker", index=0)], SPEC)


class HeldStore:
    """A real store whose first ``add_jobs`` waits for ``go``, counting each call's jobs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.go, self.entered = threading.Event(), threading.Event()
        self.writes: list[int] = []

    def add_jobs(
        self, new: Sequence[tuple[JobRecord, Sequence[TaskRecord]]], keys: dict[str, str]
    ) -> None:
        if not self.writes:
            self.entered.set()
            self.go.wait(30)
        self.writes.append(len(new))
        self.store.add_jobs(new, keys)


def test_jobs_queued_during_a_write_are_stored_together(tmp_path: Path) -> None:
    """300 jobs queued while the first is written: stored 256 and 43 at a time (BATCH),
    not 300 transactions, and handed on in the order they came."""
    with Store.open(str(tmp_path / "db.sqlite")) as store:
        held, handed = HeldStore(store), []
        writer = SubmissionWriter(held, lambda batch: handed.extend(n.job.id for n in batch))  # type: ignore[arg-type]
        futures = [writer.add(_new("job-0"))]
        assert held.entered.wait(30)
        futures += [writer.add(_new(f"job-{n}")) for n in range(1, 300)]
        held.go.set()
        stored = [future.result(timeout=30) for future in futures]
        assert held.writes == [1, submissions.BATCH, 300 - 1 - submissions.BATCH]
        assert [job.id for job in stored] == handed == [f"job-{n}" for n in range(300)]
        assert len(store.list_jobs(limit=1000)) == 300


def test_a_job_the_store_refuses_fails_alone(tmp_path: Path) -> None:
    """A batch with a taken id is written again a job at a time: that job's future has the
    conflict, each other job is stored and handed on once."""
    with Store.open(str(tmp_path / "db.sqlite")) as store:
        store.add_job(_new("taken").job, [])
        held, handed = HeldStore(store), []
        writer = SubmissionWriter(held, lambda batch: handed.extend(n.job.id for n in batch))  # type: ignore[arg-type]
        futures = [writer.add(_new("first"))]
        assert held.entered.wait(30)
        futures += [writer.add(_new(name)) for name in ("a", "taken", "b")]
        held.go.set()
        with pytest.raises(StoreConflict):
            futures[2].result(timeout=30)
        assert [f.result(timeout=30).id for f in (futures[0], futures[1], futures[3])] == [
            "first",
            "a",
            "b",
        ]
        assert handed == ["first", "a", "b"]
        assert {job.id for job in store.list_jobs()} == {"taken", "first", "a", "b"}


def test_a_job_submitted_soon_is_stored_then_run(engine: Engine, tmp_path: Path) -> None:
    future = engine.submit_soon(SPEC, tmp_path, user="ada", team="default")
    job = future.result(timeout=30)
    assert job.user == "ada" and engine.get(job.id).id == job.id
    assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED


def test_a_taken_id_is_drawn_again(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second of two submissions that draw the same id gets a new one, not the error."""
    draws = iter(["aaaaaaaa", "aaaaaaaa", "bbbbbbbb"])
    monkeypatch.setattr("trainfleet.control.engine.secrets.token_hex", lambda _: next(draws))
    first = engine.submit_soon(SPEC, tmp_path).result(timeout=30)
    second = engine.submit_soon(SPEC, tmp_path).result(timeout=30)
    assert (first.id, second.id) == ("quick-aaaaaaaa", "quick-bbbbbbbb")


def test_a_burst_of_audit_records_is_written_a_few_transactions_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Records queued 2 ms apart (a burst of requests) go in at most one transaction per
    GATHER seconds, all of them, in order; one transaction each before."""
    written: list[list[str]] = []

    class Trail:
        def record_many(self, entries: Sequence[AuditRecord]) -> bool:
            written.append([entry.target for entry in entries])
            return True

    writer = audit.AuditWriter(Trail())  # type: ignore[arg-type]
    began = time.monotonic()
    for n in range(100):
        writer.put(AuditRecord(time=0.0, action=Audited.JOB_SUBMIT, target=str(n)))
        time.sleep(0.002)
    writer.flush()
    took = time.monotonic() - began
    assert [target for batch in written for target in batch] == [str(n) for n in range(100)]
    assert len(written) <= took / audit.GATHER + 2
