"""Queue configurations and task places in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

from trainfleet.domain.records import JobRecord, TaskRecord
from trainfleet.store.database import Store


def test_a_queue_is_created_then_replaced(store: Store) -> None:
    assert store.list_queues() == {}
    store.put_queue("team-b", '{"name": "team-b"}')
    store.put_queue("team-a", '{"name": "team-a", "cohort": null}')
    store.put_queue("team-b", '{"name": "team-b", "cohort": "research"}')
    assert store.list_queues() == {
        "team-a": '{"name": "team-a", "cohort": null}',
        "team-b": '{"name": "team-b", "cohort": "research"}',
    }


def test_admission_records_every_task_place_at_once(store: Store) -> None:
    job = JobRecord(id="j-1", name="j", framework="generic", spec="{}", workdir="/", created_at=1.0)
    store.add_job(job, [TaskRecord(job_id="j-1", role="worker", index=i) for i in (0, 1)])
    store.place_tasks({"j-1": {("worker", 0): ("h:1", "0,1"), ("worker", 1): ("h:2", "")}})
    tasks = store.list_tasks("j-1")
    assert [(t.address, t.gpus) for t in tasks] == [("h:1", "0,1"), ("h:2", "")]
    assert [e.message for e in store.list_events("j-1")] == ["submitted by unknown"]
