"""The server at scale, on the simulated backend (issue 30's plan, §4 parts A to D).

Each scenario runs the real `trainfleet server` (store, scheduler, controllers, API) on the
simulated backend (``benchmarks/scale_server.py``: a simulation, no task runs a process)
with a data directory and a database of its own (SQLite, or a new database on the
PostgreSQL of --postgres-url). Its jobs have one role of T tasks asking one CPU each, restart
on failure (1,000 times, no backoff) and run until stopped. In turn:

(A) burst    After one job run to its end (a warm-up, not counted): N submissions from
             --clients connections, as fast as they are taken. From the first send: the
             time until all N jobs are running (the database polled every 0.25 s, not the
             server); /healthz every 20 ms from its own connection and thread until 10 s
             after that (p50, p99, max); the server's threads and RSS from /proc every
             0.5 s, with the names of its threads at their peak.
(B) steady   --steady-minutes with every running task failing at --fail-per-minute (exit 1):
             the restart latency (the start of attempt n+1 minus when the exit of attempt n
             was reported, from the backend's records), and threads and RSS before and after.
(C) stall    the backend answers nothing for --stall-seconds (failures go on, their reports
             wait): the tasks failed beyond those the simulation failed (0), the jobs not
             running or restarting (0), the failures the controllers counted beside those
             injected, and how long after the stall the last held failure's task started again.
(D) kill -9  the server is killed with every job running, and started again: the time to its
             first /healthz 200 and until every running job has an `adopted` event, and the
             tasks with more or fewer than one live attempt after that (0).

Scenarios: --jobs N one-task jobs beside --peer one-task jobs (100), and --gang JxT (100x100)
beside the same peer run (JxT: J jobs of T tasks each; "" skips it). Each figure is printed
and written as {value, peer, ratio, target, ok}. --only runs some parts (``--only D``: the
kill alone); A always runs, as it is what fills the server.

usage: python benchmarks/scale_sim.py [--jobs 10000] [--peer 100] [--gang 100x100]
           [--fail-per-minute 0.01] [--steady-minutes 5] [--stall-seconds 60]
           [--postgres-url URL] [--only ABCD] [--quick] [--out benchmarks/results/scale-sim.json]
`benchmarks/scale.py --part sim` runs the same through ``add_arguments`` and ``run``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import math
import secrets
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop
from api import (
    API,
    HOST,
    Load,
    Server,
    _latency,
    _source,
    postgres_database,
    server_processes,
    thread_names,
)

from trainfleet.backends.simulated import (
    SIM_VARIABLE,
    Attempt,
    attempts,
    request_failure_rate,
    request_stall,
)

HERE = Path(__file__).resolve().parent
SCALE_SERVER = HERE / "scale_server.py"
OUT = HERE / "results" / "scale-sim.json"
TASKS_PER_NODE = 128
HEALTHZ_EVERY = 0.02
POLL_EVERY = 0.25
SAMPLE_EVERY = 0.5
MIB = 1024**2
TARGETS = {
    "threads": 64,
    "rss_mib": 1024,
    "all_running_s": 60,
    "healthz_p99_ms": 50,
    "restart_p99_ms": 200,
    "readopted_s": 30,
}
"""The issue's targets (at 10,000 jobs)."""


@dataclass(frozen=True)
class Shape:
    """J jobs of T tasks each."""

    jobs: int
    tasks: int = 1

    def __str__(self) -> str:
        return f"{self.jobs}x{self.tasks}"


def _shape(text: str) -> Shape | None:
    if not text or text == "none":
        return None
    jobs, _, tasks = text.lower().partition("x")
    return Shape(int(jobs), int(tasks or 1))


def job_body(tasks: int, plan: str = "{}", name: str = "scale-sim") -> bytes:
    """A job of ``tasks`` simulated tasks that follow ``plan`` (by default: run until
    stopped), restarted at once when they fail."""
    worker = {
        "command": ["true"],  # never run: the simulation follows TRAINFLEET_SIM instead
        "replicas": tasks,
        "resources": {"cpu": 1},
        "env": {SIM_VARIABLE: plan},
    }
    restart = {"policy": "on-failure", "max_restarts": 1000, "backoff": {"initial": 0}}
    return json.dumps({"name": name, "roles": {"worker": worker}, "restart": restart}).encode()


# -- arguments ----------------------------------------------------------------


def _add(parser: argparse.ArgumentParser, *flags: str, **options: Any) -> None:
    """Add an option unless the parser has it already (scale.py shares --jobs and the like)."""
    with contextlib.suppress(argparse.ArgumentError):
        parser.add_argument(*flags, **options)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options; those scale.py may share (--jobs, --peer, --gang,
    --postgres-url, --fail-per-minute, --steady-minutes, --quick) only where it lacks them."""
    _add(parser, "--jobs", type=int, help="one-task jobs of the main run [10000; --quick 200]")
    _add(parser, "--peer", type=int, help="one-task jobs of the peer run [100; --quick 50]")
    _add(parser, "--gang", help='JxT jobs of T tasks beside the peer [100x100; --quick 10x10; ""]')
    _add(parser, "--postgres-url", help="a PostgreSQL admin URL: a new database per scenario")
    _add(parser, "--fail-per-minute", type=float, help="failures per task and minute [0.01]")
    _add(parser, "--steady-minutes", type=float, help="part B's length [5; --quick 1/3]")
    _add(parser, "--quick", action="store_true", help="a small run, for a smoke test")
    _add(parser, "--stall-seconds", type=float, help="part C's stall [60; --quick 5]")
    _add(parser, "--clients", type=int, default=64, help="connections of the burst [64]")
    _add(parser, "--running-timeout", type=float, default=900, help="seconds for all to run")
    _add(parser, "--src", type=Path, help="run the server from this source tree (its src/)")
    _add(parser, "--only", default="ABCD", help="the parts to run; A always runs [ABCD]")
    _add(
        parser,
        "--one-process",
        action="store_true",
        help="serve the API from the engine's process (`trainfleet server --one-process`)",
    )


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The options with their defaults, --quick's where it is given."""
    quick = bool(getattr(args, "quick", False))

    def pick(name: str, full: Any, small: Any) -> Any:
        given = getattr(args, name, None)
        return given if given is not None else (small if quick else full)

    return {
        "jobs": pick("jobs", 10_000, 200),
        "peer": pick("peer", 100, 50),
        "gang": _shape(pick("gang", "100x100", "10x10")),
        "postgres_url": getattr(args, "postgres_url", None),
        "fail_per_minute": pick("fail_per_minute", 0.01, 0.5),
        "steady_s": 60 * pick("steady_minutes", 5.0, 1 / 3),
        "stall_s": pick("stall_seconds", 60.0, 5.0),
        "after_running_s": 2.0 if quick else 10.0,
        "clients": getattr(args, "clients", 64),
        "running_timeout": getattr(args, "running_timeout", 900.0),
        "src": getattr(args, "src", None),
        "one_process": bool(getattr(args, "one_process", False)),
        "parts": "A" + getattr(args, "only", "ABCD").upper(),
    }


# -- what is watched ----------------------------------------------------------


class Database:
    """Read-only counts from the server's database, beside it (not through the server)."""

    def __init__(self, url: str | None, sqlite_file: Path) -> None:
        self.postgres = url is not None
        if url is not None:
            import psycopg

            self._connection: Any = psycopg.connect(url, autocommit=True)
        else:
            self._connection = sqlite3.connect(
                f"file:{sqlite_file}?mode=ro", uri=True, check_same_thread=False
            )

    def count(self, sql: str, *values: object) -> int:
        if self.postgres:
            sql = sql.replace("?", "%s")
        for attempt in range(20):
            try:
                return int(self._connection.execute(sql, values).fetchone()[0])
            except sqlite3.OperationalError:  # locked for a moment
                time.sleep(0.05 * (attempt + 1))
        return int(self._connection.execute(sql, values).fetchone()[0])

    def running(self) -> int:
        return self.count("SELECT count(*) FROM jobs WHERE state = 'running'")

    def close(self) -> None:
        self._connection.close()


@contextlib.contextmanager
def fresh_database(admin: str | None) -> Iterator[str | None]:
    """A new PostgreSQL database on ``admin``'s server, dropped afterwards; None: SQLite."""
    if admin is None:
        yield None
        return
    with postgres_database(admin, "scale_sim") as url:
        yield url


def _proc_status(pid: int) -> tuple[int, int] | None:
    """The server's threads and RSS (bytes), from /proc: its API's process's counted in."""
    found = [_one_status(one) for one in server_processes(pid)]
    if found[0] is None:
        return None
    counted = [status for status in found if status is not None]
    return sum(threads for threads, _ in counted), sum(rss for _, rss in counted)


def _one_status(pid: int) -> tuple[int, int] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) * 1024


class Sampler(threading.Thread):
    """The server's threads and RSS every ``SAMPLE_EVERY`` s; its threads' names at the peak."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True, name="sampler")
        self.pid = pid
        self.samples: list[tuple[float, int, int]] = []
        self.peak_names: dict[str, int] = {}
        self._done = threading.Event()

    def run(self) -> None:
        named_at = 0
        while not self._done.wait(SAMPLE_EVERY):
            found = _proc_status(self.pid)
            if found is None:
                return
            self.samples.append((time.time(), *found))
            if found[0] > named_at * 1.02:  # names read again only as the peak grows
                named_at = found[0]
                self.peak_names = thread_names(*server_processes(self.pid))

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=5)

    def now(self) -> dict[str, float]:
        found = _proc_status(self.pid) or (0, 0)
        return {"threads": found[0], "rss_mib": found[1] / MIB}

    def peak(self, since: float) -> dict[str, float]:
        window = [sample for sample in self.samples if sample[0] >= since] or [(0.0, 0, 0)]
        return {
            "threads": max(sample[1] for sample in window),
            "rss_mib": max(sample[2] for sample in window) / MIB,
        }


class Prober(threading.Thread):
    """GET /healthz every ``HEALTHZ_EVERY`` s on one keep-alive connection of its own."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True, name="healthz")
        self.port = port
        self.latencies: list[float] = []
        self.errors = 0
        self._done = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=30)
        while not self._done.wait(HEALTHZ_EVERY):
            began = time.perf_counter()
            try:
                connection.request("GET", "/healthz")
                answer = connection.getresponse()
                answer.read()
                if answer.status != 200:
                    self.errors += 1
                    continue
            except (OSError, http.client.HTTPException):
                self.errors += 1
                connection.close()
                continue
            self.latencies.append(time.perf_counter() - began)
        connection.close()

    def stop(self) -> dict[str, Any]:
        self._done.set()
        self.join(timeout=35)
        figures = _latency(self.latencies) if self.latencies else {}
        return {**figures, "errors": self.errors}


def _wait_for(check: Callable[[], bool], timeout: float, every: float = POLL_EVERY) -> float | None:
    """The wall time ``check()`` first held, polled every ``every`` s; None on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.time()
        time.sleep(every)
    return None


def _all_attempts(root: Path) -> list[Attempt]:
    return [found for run in (root / "jobs").glob("*/run") for found in attempts(run)]


def _task_of(attempt: Attempt) -> tuple[str, str]:
    """(job, ``role-index``) of an attempt."""
    return attempt.record.parent.parent.name, attempt.record.name.rpartition("-")[0]


def _by_task(found: list[Attempt]) -> dict[tuple[str, str], dict[int, Attempt]]:
    tasks: dict[tuple[str, str], dict[int, Attempt]] = defaultdict(dict)
    for attempt in found:
        tasks[_task_of(attempt)][attempt.attempt] = attempt
    return tasks


def restart_latencies(found: list[Attempt], since: float, until: float) -> list[float]:
    """Seconds from each exit reported in [since, until) to its task's next start."""
    latencies = []
    for by_attempt in _by_task(found).values():
        for number, attempt in by_attempt.items():
            following = by_attempt.get(number + 1)
            reported = attempt.reported_at
            if following is not None and reported is not None and since <= reported < until:
                latencies.append(following.started_at - reported)
    return latencies


# -- one scenario --------------------------------------------------------------


class Scenario:
    """One server on a fresh data directory and database, run through parts A to D."""

    def __init__(self, shape: Shape, settings: dict[str, Any], database_url: str | None) -> None:
        self.shape = shape
        self.settings = settings
        self.database_url = database_url
        self.folder = Path(tempfile.mkdtemp(prefix=f"scale-sim-{shape}-"))
        self.root = self.folder / "data"
        self.token = secrets.token_urlsafe(24)
        nodes = math.ceil(shape.jobs * shape.tasks / TASKS_PER_NODE) + 1
        self.sim = {"nodes": nodes, "cpu": TASKS_PER_NODE}
        self.server: Server | None = None
        self.sampler: Sampler | None = None

    def start_server(self) -> Server:
        program = [str(SCALE_SERVER), "--sim", json.dumps(self.sim)]
        src = self.settings["src"]
        self.server = Server(
            self.root,
            self.token,
            self.database_url,
            src / "src" if src else None,
            program=program,
            start_timeout=900,
            options=["--one-process" if self.settings["one_process"] else "--api-process"],
        )
        self.sampler = Sampler(self.server.process.pid)
        self.sampler.start()
        return self.server

    def run(self) -> dict[str, Any]:
        print(f"scale-sim: {self.shape} ...", file=sys.stderr, flush=True)
        server = self.start_server()
        database = Database(self.database_url, self.root / "trainfleet.db")
        try:
            parts = self.settings["parts"]
            results = {"A": self.burst(server, database)}
            if "B" in parts:
                results["B"] = self.steady()
            if "C" in parts:
                results["C"] = self.stall(database)
            if "D" in parts:
                results["D"] = self.kill(database)
            return results
        finally:
            database.close()
            self.stop()
            shutil.rmtree(self.folder, ignore_errors=True)

    def stop(self) -> None:
        try:
            if self.sampler is not None:
                self.sampler.stop()
        finally:
            if self.server is not None:
                self.server.stop()

    def burst(self, server: Server, database: Database) -> dict[str, Any]:
        jobs, body = self.shape.jobs, job_body(self.shape.tasks)
        assert self.sampler is not None
        load = Load(server.port, self.token)
        self.warm_up(load, database)
        prober = Prober(server.port)
        prober.start()
        began = time.time()
        submit = load.run(
            self.settings["clients"], jobs, lambda n: ("POST", f"{API}/jobs", body), 201
        )
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            submitted = runner.run(submit)
        submitted_s = time.time() - began
        running_at = _wait_for(lambda: database.running() >= jobs, self.settings["running_timeout"])
        time.sleep(self.settings["after_running_s"])
        healthz = prober.stop()
        return {
            "submitted_s": submitted_s,
            "statuses": submitted["statuses"],
            "all_running_s": None if running_at is None else running_at - began,
            "healthz": healthz,
            **self.sampler.peak(began),
            "thread_names": self.sampler.peak_names,
        }

    def warm_up(self, load: Load, database: Database) -> None:
        """One job run to its end before the burst: what a server does once (imports,
        first queries) is not the burst's."""
        body = job_body(self.shape.tasks, '{"runs": 0}', "scale-sim-warm-up")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            status, answer = runner.run(load.one("POST", f"{API}/jobs", body))
        if status != 201:
            raise RuntimeError(f"the warm-up job was refused: {status} {answer[:300]!r}")
        ended = "SELECT count(*) FROM jobs WHERE state = 'succeeded'"
        if _wait_for(lambda: database.count(ended) == 1, 120) is None:
            raise RuntimeError("the warm-up job did not succeed within 120 s")
        _healthz(load.port)

    def steady(self) -> dict[str, Any]:
        assert self.sampler is not None
        request_failure_rate(self.root, self.settings["fail_per_minute"])
        before, began = self.sampler.now(), time.time()
        time.sleep(self.settings["steady_s"])
        ended = time.time()
        latencies = restart_latencies(_all_attempts(self.root), began, ended)
        return {
            "seconds": ended - began,
            "restarts": len(latencies),
            "latency": _latency(latencies) if latencies else {},
            "before": before,
            "after": self.sampler.now(),
            "began": began,
        }

    def stall(self, database: Database) -> dict[str, Any]:
        stall_end = request_stall(self.root, self.settings["stall_s"])
        lead = min(5.0, self.settings["stall_s"] / 4)  # reading every record takes a while
        time.sleep(max(0.0, stall_end - time.time() - lead))
        held = [a for a in _all_attempts(self.root) if a.code is not None and a.reported_at is None]
        time.sleep(max(0.0, stall_end - time.time()))

        def restarted(attempt: Attempt) -> Path:
            number = attempt.attempt + 1
            return attempt.record.with_name(
                f"{attempt.record.name.rpartition('-')[0]}-{number}.sim"
            )

        drained_at = _wait_for(lambda: all(restarted(a).exists() for a in held), 120)
        starts = [json.loads(restarted(a).read_text())["started_at"] for a in held]
        request_failure_rate(self.root, 0)
        time.sleep(2.0)  # the restarts under way end
        found = _all_attempts(self.root)
        injected = sum(attempt.injected for attempt in found)
        counted = database.count(
            "SELECT count(*) FROM events WHERE task IS NOT NULL AND state = 'restarting'"
        )
        alive = database.count("SELECT count(*) FROM jobs WHERE state IN ('running', 'restarting')")
        return {
            "seconds": self.settings["stall_s"],
            "held_exits": len(held),
            "drain_s": None if drained_at is None or not held else max(starts) - stall_end,
            "failed_tasks": database.count("SELECT count(*) FROM tasks WHERE state = 'failed'"),
            "lost_jobs": self.shape.jobs - alive,
            "injected_failures": injected,
            "counted_failures": counted,
        }

    def kill(self, database: Database) -> dict[str, Any]:
        assert self.server is not None and self.sampler is not None
        running = database.running()
        self.sampler.stop()
        killed = time.time()
        self.server.process.kill()
        self.server.stop()
        adopted = "SELECT count(DISTINCT job_id) FROM events WHERE code = 'adopted' AND time > ?"
        watch: dict[str, float | None] = {}
        watcher = threading.Thread(
            target=lambda: watch.update(
                at=_wait_for(lambda: database.count(adopted, killed) >= running, 900)
            ),
            daemon=True,
        )
        watcher.start()
        server = self.start_server()
        answered = _wait_for(lambda: _healthz(server.port), 60, every=0.05)
        watcher.join()
        readopted = watch.get("at")
        live = Counter(_task_of(a) for a in _all_attempts(self.root) if a.code is None)
        tasks = self.shape.jobs * self.shape.tasks
        return {
            "running_jobs": running,
            "first_healthz_s": None if answered is None else answered - killed,
            "readopted_s": None if readopted is None else readopted - killed,
            "double_attempts": sum(count > 1 for count in live.values()),
            "tasks_without_attempt": tasks - len(live),
            "after": self.sampler.now() if self.sampler else {},
        }


def _healthz(port: int) -> bool:
    connection = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


# -- figures --------------------------------------------------------------------


def _get(run: dict[str, Any], *path: str) -> Any:
    for step in path:
        if not isinstance(run, dict):
            return None
        run = run.get(step)  # type: ignore[assignment]
    return run


FIGURES: list[tuple[str, tuple[str, ...], str | None]] = [
    ("A submit all (s)", ("A", "submitted_s"), None),
    ("A all running (s)", ("A", "all_running_s"), "all_running_s"),
    ("A /healthz p50 (ms)", ("A", "healthz", "p50_ms"), None),
    ("A /healthz p99 (ms)", ("A", "healthz", "p99_ms"), "healthz_p99_ms"),
    ("A /healthz max (ms)", ("A", "healthz", "max_ms"), None),
    ("A threads at peak", ("A", "threads"), "threads"),
    ("A RSS at peak (MiB)", ("A", "rss_mib"), "rss_mib"),
    ("B restarts", ("B", "restarts"), None),
    ("B restart p50 (ms)", ("B", "latency", "p50_ms"), None),
    ("B restart p99 (ms)", ("B", "latency", "p99_ms"), "restart_p99_ms"),
    ("B restart max (ms)", ("B", "latency", "max_ms"), None),
    ("B threads before", ("B", "before", "threads"), None),
    ("B threads after", ("B", "after", "threads"), None),
    ("B RSS before (MiB)", ("B", "before", "rss_mib"), None),
    ("B RSS after (MiB)", ("B", "after", "rss_mib"), None),
    ("C exits held by the stall", ("C", "held_exits"), None),
    ("C drain after the stall (s)", ("C", "drain_s"), None),
    ("C tasks failed", ("C", "failed_tasks"), "zero"),
    ("C jobs lost", ("C", "lost_jobs"), "zero"),
    ("C failures injected", ("C", "injected_failures"), None),
    ("C failures counted", ("C", "counted_failures"), None),
    ("D first /healthz after kill -9 (s)", ("D", "first_healthz_s"), None),
    ("D all re-adopted (s)", ("D", "readopted_s"), "readopted_s"),
    ("D tasks with two live attempts", ("D", "double_attempts"), "zero"),
    ("D tasks with no live attempt", ("D", "tasks_without_attempt"), "zero"),
]


def figures(run: dict[str, Any], peer: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Each figure of ``run`` beside ``peer``'s: {value, peer, ratio, target, ok}."""
    found = {}
    for name, path, target_name in FIGURES:
        value, seen = _get(run, *path), _get(peer, *path)
        target = 0 if target_name == "zero" else TARGETS.get(target_name or "")
        ratio = value / seen if isinstance(value, int | float) and seen else None
        ok = None if target is None or value is None else value <= target
        found[prefix + name] = {
            "value": value,
            "peer": seen,
            "ratio": ratio,
            "target": target,
            "ok": ok,
        }
    found[prefix + "A threads at peak"]["names"] = _get(run, "A", "thread_names")
    found[prefix + "A threads at peak"]["peer_names"] = _get(peer, "A", "thread_names")
    return found


def measure(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every scenario's figures, and the scenarios' own results."""
    settings = _settings(args)
    shapes = {"peer": Shape(settings["peer"]), "main": Shape(settings["jobs"])}
    if settings["gang"] is not None:
        shapes["gang"] = settings["gang"]
    runs = {}
    for label, shape in shapes.items():
        with fresh_database(settings["postgres_url"]) as url:
            runs[label] = {"shape": str(shape), **Scenario(shape, settings, url).run()}
    found = figures(runs["main"], runs["peer"])
    if "gang" in runs:
        found |= figures(runs["gang"], runs["peer"], prefix="gang ")
    shown = {key: str(value) if isinstance(value, Shape | Path) else value
             for key, value in settings.items()}  # fmt: skip
    if settings["src"] is not None:
        shown["src"] += f" ({_source(settings['src'])})"
    return found, {"settings": shown, "runs": runs}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The figures (see the module), each {value, peer, ratio, target, ok}."""
    return measure(args)[0]


def table(found: dict[str, Any]) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
        if isinstance(value, bool):
            return "yes" if value else "NO"
        return str(value)

    rows = [("figure", "value", "peer", "ratio", "target", "ok")]
    rows += [
        (name, *(cell(entry[key]) for key in ("value", "peer", "ratio", "target", "ok")))
        for name, entry in found.items()
    ]
    widths = [max(len(row[n]) for row in rows) for n in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    found, details = measure(args)
    print(table(found))
    for label in ("main", "peer", "gang"):
        names = _get(details, "runs", label, "A", "thread_names")
        if names:
            print(f"threads at the peak, {label}: {names}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"figures": found, **details}, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
