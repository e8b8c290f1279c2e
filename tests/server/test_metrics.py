"""Prometheus metrics: what the store holds, what this server was sent, how fast it answered."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from trainfleet.client import Client

from .harness import LiveServer


def scrape(live: LiveServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{live.url}/metrics", headers={"Authorization": f"Bearer {live.token}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_metrics_count_jobs_tasks_restarts_submissions_and_latency(
    live: LiveServer, client: Client
) -> None:
    before = scrape(live)
    flaky = (
        "name: flaky\nrestart: {policy: on-failure, max_restarts: 1, backoff: {initial: 0.05}}\n"
        "roles:\n  worker: {command: 'exit 1'}\n"
    )
    for text in (flaky, "name: fine\nroles:\n  worker: {command: 'true'}\n"):
        client.wait(client.submit(text).id)
    after = scrape(live)

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert grew("trainfleet_jobs", state="failed") == 1
    assert grew("trainfleet_jobs", state="succeeded") == 1
    assert grew("trainfleet_tasks", state="failed") == 1
    assert grew("trainfleet_task_restarts") == 1
    assert grew("trainfleet_submissions_total", source="trainfleet") == 2
    assert after[("trainfleet_tasks", (("state", "running"),))] >= 0
    route = (("method", "POST"), ("route", "/api/v1/jobs"), ("status", "201"))
    assert grew("trainfleet_http_request_duration_seconds_count", **dict(route)) == 2
    assert after[("trainfleet_http_request_duration_seconds_sum", route)] > 0
    # ids never become labels: an unknown job counts under its route template
    httpx.get(f"{live.url}/api/v1/jobs/nope-123", headers={"Authorization": "Bearer x"})
    labels = {dict(key[1]).get("route") for key in scrape(live)}
    assert "/api/v1/jobs/{job_id}" in labels and not any("nope" in str(x) for x in labels)


def test_metrics_want_a_token(live: LiveServer) -> None:
    assert httpx.get(f"{live.url}/metrics").status_code == 401
