"""``GET /api/v1/gpus``, ``POST /api/v1/gpus/{index}/clear`` and the GPU gauges of
``/metrics``, on a server whose two GPUs a fake NVML reports (no GPU runs here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fake_nvml import fake_nvml
from helpers import wait_for
from prometheus_client.parser import text_string_to_metric_families

from trainfleet.backends.local import processes
from trainfleet.client import Client
from trainfleet.control.assembly import engine_at
from trainfleet.domain.records import TeamRole
from trainfleet.spec.loading import load_job_text

from .harness import LiveServer, add_user

API = "/api/v1"


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    """A server of two GPUs through a fake NVML (no GPU runs here), GPU 1 lost; a job of
    team ``audio`` runs on GPU 0."""
    nvml = fake_nvml(2)
    nvml.gpus[1].lost = True
    monkeypatch.setenv("TRAINFLEET_GPUS", "0,1")
    monkeypatch.setattr(processes, "load_nvml", lambda: nvml)
    root = tmp_path / "data"
    server = LiveServer(root, engine=engine_at(root, vault=True)).start()
    engine = server.engine
    with Client(server.url, server.token) as admin:
        admin.create_team("audio")
    text = "name: secretname\nroles:\n  worker: {command: 'sleep 60', resources: {gpu: 1}}\n"
    spec = load_job_text(text, "job.yaml").spec
    job = engine.submit(spec, root, user="x", team="audio", start=True).id
    wait_for(lambda: engine.tasks(job)[0].state == "running", 30, "the job running")
    yield server
    server.stop()


def _get(server: LiveServer, token: str, path: str, method: str = "GET") -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.request(method, f"{server.url}{path}", headers=headers, timeout=30)


def test_members_see_every_gpu_but_not_other_teams_jobs(live: LiveServer) -> None:
    """The administrator sees the job on GPU 0 by name; a member of another team sees
    that a whole GPU is held, not by what."""
    admin = _get(live, live.token, f"{API}/gpus").json()
    assert [gpu["healthy"] for gpu in admin] == [True, False]
    assert admin[0]["model"] == "NVIDIA H200" and admin[0]["holders"][0]["share"] == 1
    assert admin[0]["holders"][0]["task"] == "secretname/worker/0"
    assert admin[1]["problems"][0].startswith("lost:")
    member, _ = add_user(live.engine.store, "bo", "default", TeamRole.MEMBER)
    seen = _get(live, member, f"{API}/gpus")
    assert seen.status_code == 200
    assert seen.json()[0]["holders"] == [{"task": "", "job_id": "", "share": 1.0}]
    assert "secretname" not in seen.text


def test_only_an_administrator_clears_and_bad_indices_are_4xx(live: LiveServer) -> None:
    member, _ = add_user(live.engine.store, "bo", "default", TeamRole.TEAM_ADMIN)
    refused = _get(live, member, f"{API}/gpus/1/clear", "POST")
    assert refused.status_code == 403 and "administrator" in refused.json()["detail"]
    for bad, status in (("x", 422), ("-1", 422), ("99999", 422), ("7", 404)):
        answer = _get(live, live.token, f"{API}/gpus/{bad}/clear", "POST")
        assert answer.status_code == status, (bad, answer.text)
    assert "no GPU 7 here" in _get(live, live.token, f"{API}/gpus/7/clear", "POST").text
    cleared = _get(live, live.token, f"{API}/gpus/1/clear", "POST")
    assert cleared.status_code == 200 and cleared.json()["healthy"]
    assert cleared.json()["cleared"][0].startswith("lost:")


def test_metrics_have_a_gauge_set_per_gpu(live: LiveServer) -> None:
    text = _get(live, live.token, "/metrics").text
    found = {
        (sample.name, sample.labels.get("gpu")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("trainfleet_gpu_")
    }
    assert found[("trainfleet_gpu_healthy", "0")] == 1
    assert found[("trainfleet_gpu_healthy", "1")] == 0
    assert found[("trainfleet_gpu_memory_total_bytes", "0")] == 141 << 30
    assert found[("trainfleet_gpu_temperature_celsius", "0")] == 41
    assert ("trainfleet_gpu_memory_total_bytes", "1") not in found, "a lost GPU tells none"
