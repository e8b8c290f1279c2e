"""What tasks use, through the API: ``GET /api/v1/jobs/{id}/usage`` (read like the job
itself) and ``/metrics`` (a gauge per running task, and per queue), over a real job whose
shims sample it every 0.2 s."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import wait_for
from prometheus_client.parser import text_string_to_metric_families

from trainfleet.client import Client, NotFound
from trainfleet.domain.records import TeamRole
from trainfleet.server.metrics import QueueCollector
from trainfleet.spec.queues import QueueConfig, Quota
from trainfleet.wire import JobUsage, QueueBody, QueueState

from .harness import LiveServer, add_user

SPIN = "while True:\n    pass\n"
HOLD = """\
import time
held = bytearray(120 << 20)
for n in range(0, len(held), 4096):
    held[n] = 1
time.sleep(600)
"""


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    monkeypatch.setenv("TRAINFLEET_USAGE_INTERVAL", "0.2")
    server = LiveServer(tmp_path / "data").start()
    yield server
    server.stop()


def _metrics(live: LiveServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{live.url}/metrics", headers={"Authorization": f"Bearer {live.token}"})
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _busy(client: Client, job_id: str) -> JobUsage | None:
    found = client.usage(job_id)
    spin, hold = (task.current for task in found.tasks)
    if spin is None or hold is None or spin.cpu <= 50 or hold.rss < 100 << 20:
        return None
    return found


def test_usage_of_a_running_job_by_api_and_metrics(live: LiveServer, tmp_path: Path) -> None:
    (tmp_path / "spin.py").write_text(SPIN)
    (tmp_path / "hold.py").write_text(HOLD)
    text = (
        "name: busy\nroles:\n"
        f"  spin: {{command: '{sys.executable} -S {tmp_path / 'spin.py'}'}}\n"
        f"  hold: {{command: '{sys.executable} -S {tmp_path / 'hold.py'}'}}\n"
    )
    with Client(live.url, live.token, timeout=30) as admin:
        admin.put_queue("capped", QueueBody(nominal=Quota(cpu=2, gpu=1)))
        job = admin.submit(text)
        try:
            wait_for(lambda: _busy(admin, job.id), 60, "the job's use")
            found = admin.usage(job.id, history=True)
            assert found.team == "default" and all(t.history for t in found.tasks)
            assert all(t.history == sorted(t.history, key=lambda p: p.time) for t in found.tasks)

            metrics = _metrics(live)
            labels = (("index", "0"), ("job", job.id), ("role", "hold"), ("team", "default"))
            assert metrics[("trainfleet_task_memory_rss_bytes", labels)] >= 100 << 20
            spin = (("index", "0"), ("job", job.id), ("role", "spin"), ("team", "default"))
            assert metrics[("trainfleet_task_cpu_percent", spin)] >= 0
            assert ("trainfleet_task_gpu_memory_bytes", spin) not in metrics  # no GPU seen
            capped = (("queue", "capped"), ("resource", "cpu"), ("team", "default"))
            assert metrics[("trainfleet_queue_nominal", capped)] == 2.0
            assert metrics[("trainfleet_queue_used", capped)] == 0.0
            assert metrics[("trainfleet_queue_borrowed", capped)] == 0.0
            waiting = (("queue", "default"), ("team", "default"))
            assert metrics[("trainfleet_queue_waiting_jobs", waiting)] == 0

            # Another team's user does not see the job; a viewer of its team does.
            admin.create_team("elsewhere")
            outsider, _ = add_user(live.engine.store, "eve", team="elsewhere")
            with Client(live.url, outsider) as eve, pytest.raises(NotFound):
                eve.usage(job.id)
            viewer, _ = add_user(live.engine.store, "vic", team="default", role=TeamRole.VIEWER)
            with Client(live.url, viewer) as vic:
                assert [t.role for t in vic.usage(job.id).tasks] == ["spin", "hold"]
            with pytest.raises(NotFound):
                admin.usage("nope-12345678")
        finally:
            admin.cancel(job.id)
            admin.wait(job.id)
        ended = admin.usage(job.id)
        assert all(task.current is None for task in ended.tasks)
        assert not any(job.id in str(key) for key in _metrics(live))


def test_a_usage_query_with_a_typo_is_refused(live: LiveServer) -> None:
    response = httpx.get(
        f"{live.url}/api/v1/jobs/some-job/usage?histroy=1",
        headers={"Authorization": f"Bearer {live.token}"},
    )
    assert response.status_code == 422


def test_borrowed_is_what_a_queue_uses_over_its_nominal_quota() -> None:
    states = [
        QueueState(
            queue=QueueConfig(name="a", cohort="c", nominal=Quota(cpu=1, gpu=1)),
            team="vision",
            used={"cpu": 2500, "gpu": 500, "memory": 1 << 30},
            running=["j1"],
            waiting=["j2", "j3"],
        )
    ]

    class Queues:
        def every(self) -> list[QueueState]:
            return states

    found = {
        (sample.name, sample.labels.get("resource")): sample.value
        for family in QueueCollector(Queues()).collect()
        for sample in family.samples
    }
    assert found[("trainfleet_queue_nominal", "cpu")] == 1.0
    assert found[("trainfleet_queue_used", "cpu")] == 2.5
    assert found[("trainfleet_queue_borrowed", "cpu")] == 1.5
    assert found[("trainfleet_queue_borrowed", "gpu")] == 0.0
    assert found[("trainfleet_queue_used", "memory")] == float(1 << 30)
    assert ("trainfleet_queue_nominal", "memory") not in found  # not limited
    assert found[("trainfleet_queue_waiting_jobs", None)] == 2
