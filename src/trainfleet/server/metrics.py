"""Prometheus metrics at ``/metrics``: jobs and tasks by state, restarts, submissions, latency,
what each running task uses, and each queue's quota and use.

Jobs, tasks and restarts are read from the store (through the jobs service) at each
scrape, so they count every job the store holds, whichever process ran it; so is each
running task's newest sample (CPU, memory, GPUs: the usage service, from its history
beside its log) and each queue's state (the queues service). Submissions and latency are
this process's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainfleet.control.queueing import quota_amounts
from trainfleet.domain.records import State
from trainfleet.scheduling.resources import GPU_UNIT
from trainfleet.wire import GpuState, JobUsage, QueueState

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


class RunningUse(Protocol):
    """What the usage service tells of the running tasks."""

    def running(self) -> Iterator[JobUsage]: ...


class AllQueues(Protocol):
    """What the queues service tells of every queue."""

    def every(self) -> list[QueueState]: ...


class AllGpus(Protocol):
    """What the GPUs service tells of every GPU."""

    def every(self) -> list[GpuState]: ...


TASK_GAUGES = (
    ("trainfleet_task_cpu_percent", "CPU of a running task's processes, percent of a core."),
    ("trainfleet_task_memory_rss_bytes", "Resident memory of a running task's processes."),
    ("trainfleet_task_gpu_utilization_percent", "Mean utilisation of a running task's GPUs."),
    ("trainfleet_task_gpu_memory_bytes", "GPU memory a running task's processes hold."),
)
TASK_LABELS = ["job", "role", "index", "team"]


class UsageCollector(Collector):
    """Gauges of each running task's newest sample (labels job, role, index, team): a
    task with no sample yet, or no GPU seen, has none of its gauges (or no GPU ones)."""

    def __init__(self, usage: RunningUse) -> None:
        self.usage = usage

    def collect(self) -> Iterator[Metric]:
        cpu, rss, gpu, gpu_memory = (
            GaugeMetricFamily(name, text, labels=TASK_LABELS) for name, text in TASK_GAUGES
        )
        for job in self.usage.running():
            for task in job.tasks:
                now = task.current
                if now is None:
                    continue
                labels = [job.job_id, task.role, str(task.index), job.team]
                cpu.add_metric(labels, now.cpu)
                rss.add_metric(labels, now.rss)
                if now.gpu_util is not None:
                    gpu.add_metric(labels, now.gpu_util)
                if now.gpu_memory is not None:
                    gpu_memory.add_metric(labels, now.gpu_memory)
        yield from (cpu, rss, gpu, gpu_memory)


QUEUE_LABELS = ["queue", "team", "resource"]


class QueueCollector(Collector):
    """Gauges of each queue: its nominal quota, what its admitted jobs use, how much of
    that is borrowed (over nominal), by resource (cpu and gpu in units, memory in bytes),
    and how many jobs wait in it."""

    def __init__(self, queues: AllQueues) -> None:
        self.queues = queues

    def collect(self) -> Iterator[Metric]:
        nominal, used, borrowed = (
            GaugeMetricFamily(f"trainfleet_queue_{name}", text, labels=QUEUE_LABELS)
            for name, text in (
                ("nominal", "A queue's nominal quota, by resource."),
                ("used", "What a queue's admitted jobs use, by resource."),
                ("borrowed", "What a queue's admitted jobs use over its nominal quota."),
            )
        )
        waiting = GaugeMetricFamily(
            "trainfleet_queue_waiting_jobs", "Jobs waiting in a queue.", labels=["queue", "team"]
        )
        for state in self.queues.every():
            name, quota = state.queue.name, quota_amounts(state.queue.nominal)
            for resource in sorted(quota.keys() | state.used.keys()):
                labels = [name, state.team, resource]
                amount = state.used.get(resource, 0)
                if resource in quota:
                    nominal.add_metric(labels, _units(resource, quota[resource]))
                    borrowed.add_metric(labels, _units(resource, max(0, amount - quota[resource])))
                used.add_metric(labels, _units(resource, amount))
            waiting.add_metric([name, state.team], len(state.waiting))
        yield from (nominal, used, borrowed, waiting)


GPU_GAUGES = (
    ("trainfleet_gpu_memory_used_bytes", "GPU memory used by every process on a GPU."),
    ("trainfleet_gpu_memory_total_bytes", "A GPU's memory."),
    ("trainfleet_gpu_utilization_percent", "How busy a GPU is, in percent."),
    ("trainfleet_gpu_temperature_celsius", "A GPU's temperature."),
)


class GpuCollector(Collector):
    """Gauges of each GPU of the machine tasks are placed on (label ``gpu``, its index):
    memory used and total, utilisation and temperature where its driver tells them, and
    ``trainfleet_gpu_healthy`` (1, or 0 while nothing new is placed on it)."""

    def __init__(self, gpus: AllGpus) -> None:
        self.gpus = gpus

    def collect(self) -> Iterator[Metric]:
        gauges = [GaugeMetricFamily(name, text, labels=["gpu"]) for name, text in GPU_GAUGES]
        healthy = GaugeMetricFamily(
            "trainfleet_gpu_healthy",
            "1: a GPU is healthy; 0: nothing new goes on it.",
            labels=["gpu"],
        )
        for gpu in self.gpus.every():
            label = [str(gpu.index)]
            values = (gpu.memory_used, gpu.memory_total, gpu.utilisation, gpu.temperature)
            for gauge, value in zip(gauges, values, strict=True):
                if value is not None:
                    gauge.add_metric(label, value)
            healthy.add_metric(label, 1 if gpu.healthy else 0)
        yield from (*gauges, healthy)


def _units(resource: str, amount: int) -> float:
    """cpu in cores (from millicores), gpu in GPUs (from thousandths), the rest as it is."""
    if resource == "cpu":
        return amount / 1000
    if resource == "gpu":
        return amount / GPU_UNIT
    return float(amount)


class Metrics:
    """One registry per application, so that several can live in one process (tests)."""

    def __init__(
        self,
        counts: Counts,
        usage: RunningUse | None = None,
        queues: AllQueues | None = None,
        gpus: AllGpus | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StoreCollector(counts))
        if gpus is not None:
            self.registry.register(GpuCollector(gpus))
        if usage is not None:
            self.registry.register(UsageCollector(usage))
        if queues is not None:
            self.registry.register(QueueCollector(queues))
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
