"""Prometheus metrics at ``/metrics``: jobs and tasks by state, restarts, submissions, latency.

Jobs, tasks and restarts are read from the store (through the jobs service) at each
scrape, so they count every job the store holds, whichever process ran it. Submissions
and latency are this process's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainfleet.domain.records import State

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Counts(Protocol):
    """What the jobs service tells of the stored jobs and tasks."""

    def count_jobs(self) -> dict[str, int]: ...

    def count_tasks(self) -> dict[str, int]: ...

    def count_restarts(self) -> int: ...


class StoreCollector(Collector):
    """Gauges read from the store when Prometheus scrapes."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("trainfleet_jobs", "Stored jobs by state.", labels=["state"])
        tasks = GaugeMetricFamily("trainfleet_tasks", "Stored tasks by state.", labels=["state"])
        for family, counts in (
            (jobs, self.counts.count_jobs()),
            (tasks, self.counts.count_tasks()),
        ):
            for state in State:
                family.add_metric([state.value], counts.get(state.value, 0))
            yield family
        yield GaugeMetricFamily(
            "trainfleet_task_restarts",
            "Restarts of the stored tasks, added up.",
            value=self.counts.count_restarts(),
        )


class Metrics:
    """One registry per application, so that several can live in one process (tests)."""

    def __init__(self, counts: Counts) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StoreCollector(counts))
        self.submissions = Counter(
            "trainfleet_submissions",
            "Jobs submitted to this server, by how they were written.",
            ["source"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "trainfleet_http_request_duration_seconds",
            "Seconds from a request to the start of its answer, by route and status.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class LatencyMiddleware:
    """Times every HTTP request to the start of its answer (a stream's length is not latency).

    Requests are labelled by route template (``/api/v1/jobs/{job_id}``), never by raw path,
    so ids cannot multiply the series; paths matching no route count as ``unmatched``.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                method = scope["method"] if scope["method"] in METHODS else "OTHER"
                route = route_template(scope)
                self.metrics.latency.labels(method, route, str(message["status"])).observe(
                    time.perf_counter() - started
                )
            await send(message)

        await self.app(scope, receive, timed_send)


def route_template(scope: Scope) -> str:
    """``/api/v1/jobs/{job_id}`` for ``/api/v1/jobs/abc``; ``unmatched`` if no route matched.

    The matched route knows its path below the router's prefix; the prefix is what the
    request's path has in front of as many segments (a parameter holds no ``/``).
    """
    below = getattr(scope.get("route"), "path", None)
    if not isinstance(below, str) or not below.startswith("/"):
        return "unmatched"
    segments = str(scope["path"]).split("/")
    return "/".join(segments[: len(segments) - below.count("/")]) + below
