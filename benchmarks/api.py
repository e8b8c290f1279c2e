"""API benchmarks of `trainfleet server` on loopback, each beside a peer in the same run.

One server process (`trainfleet --data-dir TMP server --port 0`, started here as a
subprocess with a temporary data directory; SQLite unless --database-url is given and the
server accepts it). The load comes from this process: one asyncio (uvloop) loop with plain
keep-alive HTTP/1.1 connections parsed by httptools, one connection per client, so that the
figures are the server's rather than an HTTP client library's.

(list)   GET /api/v1/jobs?limit=50, first page over 10,000 stored jobs, one client
         (the store is filled through trainfleet.store before the server starts);
         peer: GET /healthz from one client.
(submit) POST /api/v1/jobs of a one-task job running `true` that asks for every CPU of
         the machine, from several clients: as on a busy cluster, the jobs queue and
         the server runs them one at a time (a controller thread, a supervisor process
         and `true` each) while it goes on accepting more, so that work is part of the
         figure; the time until all of them have ended (the drain) is reported beside it.
         peer: GET /healthz throughput from the same number of clients.
(get)    GET /api/v1/jobs/{id} (job, tasks, events) latency with 100 clients, once the
         submitted jobs have ended: back to back (at capacity), then paced at a sweep of
         offered rates, with the highest rate whose p99 stays under 20 ms;
         peer: GET /healthz under the same load.
(start)  On a second server of its own: time-to-start of a small job (`sleep`, a tenth of
         a CPU) in queue `default`, from its 201 to its state `running` (polled), right
         after a burst of 2,000 submissions (16 clients) to queue `burst`, whose quota has
         room for one of them: the rest wait on its quota while the machine is idle;
         peer: the same time-to-start on that idle server before the burst. --start-only
         runs this part alone.

(outage) with --outage, instead of the above: a server on a private PostgreSQL (started
         here; needs root and the PostgreSQL server binaries), a burst of POST /api/v1/jobs
         of a short job (`sleep 0.5`) from several clients, the database stopped
         (`pg_ctl stop -m fast`) for --outage-seconds mid-burst (--outage-after seconds in,
         once a job was stored), then started again, the server never restarted; with
         --outage-kind hang, the database's processes are
         stopped (SIGSTOP) instead, then continued: a database that hangs rather than
         refuses. Reports the answers (201 / 503 / 500), /readyz during and after, the
         slowest /healthz during the outage (and past its first STATEMENT_WAIT + 2 s, once
         a hang is known), and of the acknowledged (201) jobs how many are present and
         ended correctly (succeeded) once all have ended.

(followers) with --followers N, only this: GET /healthz and a 4 KiB log-range read of a
         running job's log, paced, beside the same with N open SSE followers of that log.
(memory)  with --followers alone, only this, on a server of its own: 20 jobs that each
         wrote a 20 MiB log (100-byte lines) and 20 that wrote 1 KB, all ended; a follower
         per log from byte 0 to its end (reading as fast as it comes), the small logs' 20
         at once, then the big logs' 20 at once. Reports the server's peak RSS during each
         (goal: big within 100 MiB of small), /healthz beside them, whether each follow
         reached its log's end, and the RSS before and --follower-settle (60) seconds
         after they left (goal: within 50 MiB of before).

(authz)  with --authz, only (submit) and (get) as above, each against three servers:
         (a) a server of this tree with the token of a user who is a member of team
             `bench` (made through the API), submitting to the team's queue `bench` and
             getting its team's jobs: every authorisation check on the path;
         (b) the same server with the admin token (the checks short-circuit), same jobs;
         (c) a server of the source tree before authorisation (--baseline-src DIR: run
             with PYTHONPATH=DIR/src and this interpreter) with its admin token, queue
             `default`; skipped, and said so, without --baseline-src.
         The servers start once; each round runs (submit) on a, b, c in turn, then (get)
         on each (with that server's submitted jobs), the next round in reverse order
         (c, b, a), for --authz-rounds rounds. Reports the median over the rounds (of two:
         their mean) of the submit throughput and the get p50/p99 (back to back and
         paced), with the ratios a/c and b/c; each probe's own figures are in the JSON.

usage: python benchmarks/api.py [--submit-count 2000] [--followers 400] [--out FILE]
       python benchmarks/api.py --followers [--follower-logs 20] [--follower-log-mib 20]
       python benchmarks/api.py --outage [--outage-kind stop|hang] [--submit-count 2000]
                                [--outage-seconds 20]
       python benchmarks/api.py --authz [--baseline-src DIR] [--authz-rounds 2]
Prints a table and writes the figures as JSON (default benchmarks/results/api.json, or
benchmarks/results/api-outage.json with --outage, api-authz.json with --authz,
api-followers.json with --followers alone).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httptools
import psutil
import uvloop

from trainfleet.datadir.layout import DataDir
from trainfleet.domain.records import JobRecord, State, TaskRecord
from trainfleet.spec.models import JobSpec
from trainfleet.store.connection import STATEMENT_WAIT
from trainfleet.store.database import Store

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
API = "/api/v1"


def _submit_body(queue: str | None = None) -> bytes:
    """The (submit) job: one task running `true` that asks for every CPU of the machine."""
    job: dict[str, Any] = {
        "name": "bench-submit",
        "roles": {"worker": {"command": ["true"], "resources": {"cpu": os.cpu_count() or 1}}},
    }
    if queue is not None:
        job["queue"] = queue
    return json.dumps(job).encode()


SUBMIT_BODY = _submit_body()
ACTIVE_STATES = (State.QUEUED, State.STARTING, State.RUNNING, State.RESTARTING)
WAITING_STATES = (State.QUEUED, State.STARTING)
REQUEST_TIMEOUT = 30.0
"""Seconds one request may take. (Timed with ``asyncio.timeout``: Python 3.11's
``asyncio.wait_for`` loses a cancellation that comes as its request ends, and a probe loop
cancelled that way ran on for ever.)"""


# -- figures ------------------------------------------------------------------


def _latency(samples: list[float]) -> dict[str, float]:
    """Nearest-rank percentiles, in milliseconds."""
    ordered = sorted(samples)
    n = len(ordered)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * n) - 1)] * 1000

    return {
        "p50_ms": rank(0.50),
        "p90_ms": rank(0.90),
        "p99_ms": rank(0.99),
        "max_ms": ordered[-1] * 1000,
        "mean_ms": sum(ordered) / n * 1000,
        "requests": n,
    }


# -- the server ---------------------------------------------------------------


class Server:
    """`trainfleet server` in a subprocess on a free loopback port; its output is drained."""

    def __init__(
        self,
        data_dir: Path,
        token: str,
        database_url: str | None,
        src: Path | None = None,
        program: Sequence[str] = ("-m", "trainfleet"),
        start_timeout: float = 60.0,
        options: Sequence[str] = (),
    ) -> None:
        """``src``: run the server from that source tree (``PYTHONPATH``) instead of ours;
        ``program``: what this interpreter runs, with trainfleet's arguments after it (a
        script that serves through trainfleet's CLI, ``scale_server.py``); ``start_timeout``:
        seconds it may take to listen (a restarted server first adopts its jobs);
        ``options``: more of ``trainfleet server``'s."""
        argv = [sys.executable, *program, "--data-dir", str(data_dir), "server"]
        argv += ["--host", HOST, "--port", "0", *options]
        if database_url:
            argv += ["--database-url", database_url]
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **{k: v for k, v in os.environ.items() if k != "TRAINFLEET_DATABASE_URL"},
                "TRAINFLEET_ADMIN_TOKEN": token,
                **({"PYTHONPATH": str(src)} if src else {}),
            },
            start_new_session=True,
        )
        self.lines = 0
        self.tail: deque[str] = deque(maxlen=50)
        self._url = threading.Event()
        self.port = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._url.wait(start_timeout) or not self.port:
            self.stop()
            raise RuntimeError("the server did not start:\n" + "\n".join(self.tail))

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines += 1
            self.tail.append(line.rstrip("\n"))
            if not self.port and (found := re.search(r"Uvicorn running on http://\S+:(\d+)", line)):
                self.port = int(found.group(1))
                self._url.set()
        self._url.set()

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        return code


@contextlib.contextmanager
def postgres_database(admin: str, prefix: str) -> Iterator[str]:
    """A new database ``prefix_<random>`` on ``admin``'s server, dropped afterwards."""
    import psycopg

    name = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def thread_names(*pids: int) -> dict[str, int]:
    """How many of the processes' threads have each name (``/proc/PID/task/*/comm``), most
    first."""
    names: Counter[str] = Counter()
    for pid in pids:
        for comm in Path(f"/proc/{pid}/task").glob("*/comm"):
            with contextlib.suppress(OSError):
                names[comm.read_text().strip()] += 1
    return dict(names.most_common())


def server_processes(pid: int) -> list[int]:
    """The server ``pid`` and the process it serves its API from, if it has one (the
    default; not with ``trainfleet server --one-process``)."""
    try:
        children = psutil.Process(pid).children()
    except psutil.Error:
        return [pid]
    return [pid] + [child.pid for child in children if _runs_api(child)]


def _runs_api(process: psutil.Process) -> bool:
    """Whether it is a server's API process (one of its tasks' shims may end as it is asked:
    not one, while the API's own is still counted)."""
    try:
        return "trainfleet.server.api_process" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def _server_accepts(option: str) -> bool:
    result = subprocess.run(
        [sys.executable, "-m", "trainfleet", "server", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return option in result.stdout


def fill_store(target: str | Path, count: int, tag: str) -> float:
    """Store ``count`` ended one-task jobs, oldest first; returns the seconds it took."""
    spec = JobSpec.model_validate(
        {"name": "bench-stored", "roles": {"worker": {"command": ["python", "train.py"]}}}
    ).model_dump_json()
    started = time.perf_counter()
    base = time.time() - count
    with Store.open(target) as store:
        for n in range(count):
            created = base + n
            job = JobRecord(
                id=f"stored-{tag}-{n:05d}",
                name="bench-stored",
                framework="generic",
                state=State.SUCCEEDED,
                spec=spec,
                workdir="/tmp",
                user="bench",
                labels={"bench": "list", "batch": str(n % 10)},
                created_at=created,
                started_at=created + 0.1,
                finished_at=created + 0.5,
            )
            task = TaskRecord(
                job_id=job.id,
                role="worker",
                index=0,
                state=State.SUCCEEDED,
                address=f"{HOST}:29500",
                exit_code=0,
                started_at=created + 0.1,
                finished_at=created + 0.5,
            )
            store.add_job(job, [task])
    return time.perf_counter() - started


# -- the load -----------------------------------------------------------------


class _Sink:
    """httptools callbacks for one response."""

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.complete = False

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class Connection:
    """One keep-alive HTTP/1.1 connection to the server, one request at a time."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.auth = f"Authorization: Bearer {token}\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
            self.writer = self.reader = None

    async def request(
        self, method: str, target: str, body: bytes = b"", auth: bool = True
    ) -> tuple[int, bytes]:
        await self.open()
        assert self.reader is not None and self.writer is not None
        head = f"{method} {target} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n"
        if auth:
            head += self.auth
        if method in ("POST", "PUT"):
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write((head + "\r\n").encode() + body)
        sink = _Sink()
        parser = httptools.HttpResponseParser(sink)
        while not sink.complete:
            data = await self.reader.read(1 << 16)
            if not data:
                await self.close()
                raise ConnectionError("the server closed the connection")
            parser.feed_data(data)
        status = parser.get_status_code()
        if not parser.should_keep_alive():
            await self.close()
        return status, b"".join(sink.body)


class Load:
    """Connections to one server; runs fixed-count request loops and times every request."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token

    async def one(self, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
        connection = Connection(self.port, self.token)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                return await connection.request(method, target, body)
        finally:
            await connection.close()

    async def run(
        self,
        clients: int,
        total: int,
        request: Callable[[int], tuple[str, str, bytes]],
        expect: int = 200,
        warmup: int = 0,
        auth: bool = True,
        interval: float = 0.0,
        answered: Callable[[int], object] = lambda status: None,
    ) -> dict[str, Any]:
        """``total`` requests from ``clients`` connections (``request(n)`` makes the n-th),
        after ``warmup`` untimed requests on each connection; ``answered(status)`` after
        each answer.

        Without ``interval`` (closed loop) each client sends its next request as soon as it
        has the answer to the last one. With it (open loop), each client sends ``total //
        clients`` requests, one every ``interval`` seconds (clients staggered), and a
        request's latency counts from when it was due, so that a server that falls behind
        is charged for the wait.
        """
        connections = [Connection(self.port, self.token) for _ in range(clients)]
        latencies: list[float] = []
        statuses: Counter[str] = Counter()
        bodies: list[bytes] = []
        issued = 0
        began = 0.0

        async def send(connection: Connection, due: float | None = None) -> tuple[int, bytes]:
            nonlocal issued
            method, target, body = request(issued)
            issued += 1
            start = time.perf_counter() if due is None else due
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT):
                    status, data = await connection.request(method, target, body, auth)
            except (OSError, TimeoutError) as error:
                statuses[type(error).__name__] += 1
                await connection.close()
                return 0, b""
            latencies.append(time.perf_counter() - start)
            statuses[str(status)] += 1
            answered(status)
            if status == expect:
                bodies.append(data)
            return status, data

        async def client(number: int, connection: Connection) -> None:
            nonlocal issued
            await connection.open()
            for _ in range(warmup):
                async with asyncio.timeout(REQUEST_TIMEOUT):
                    await connection.request(*request(0), auth=auth)
            await ready.wait()
            await go.wait()
            if not interval:
                while issued < total:
                    await send(connection)
                return
            for k in range(total // clients):
                due = began + (number / clients + k) * interval
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                await send(connection, due)

        # Connections and warm-up requests first, then every client starts together.
        ready, go = asyncio.Barrier(clients + 1), asyncio.Event()
        tasks = [asyncio.create_task(client(n, c)) for n, c in enumerate(connections)]
        try:
            await ready.wait()
            began = time.perf_counter()
            go.set()
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for connection in connections:
                await connection.close()
        wall = time.perf_counter() - began
        errors = sum(count for status, count in statuses.items() if status != str(expect))
        return {
            "clients": clients,
            "wall_s": wall,
            "req_per_s": len(latencies) / wall,
            "errors": errors,
            "statuses": dict(statuses),
            "latency": _latency(latencies) if latencies else {},
            "bodies": bodies,
        }


def _strip(result: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in result.items() if key != "bodies"}


# -- the benchmarks -----------------------------------------------------------


async def bench_list(load: Load, args: argparse.Namespace) -> dict[str, Any]:
    """(list) first page of 10,000 stored jobs, one client, beside /healthz."""
    target = f"{API}/jobs?limit=50"
    page = await load.run(1, args.list_requests, lambda n: ("GET", target, b""), warmup=10)
    health = await load.run(
        1, args.list_requests, lambda n: ("GET", "/healthz", b""), warmup=10, auth=False
    )
    first = json.loads(page["bodies"][0]) if page["bodies"] else {"jobs": []}
    return {
        "stored_jobs": args.list_jobs,
        "page_jobs": len(first["jobs"]),
        "page_bytes": len(page["bodies"][0]) if page["bodies"] else 0,
        "list": _strip(page),
        "healthz": _strip(health),
        "ratio_p50": page["latency"]["p50_ms"] / health["latency"]["p50_ms"],
        "ratio_p99": page["latency"]["p99_ms"] / health["latency"]["p99_ms"],
        "target_ms": 50.0,
    }


async def _count_active(load: Load) -> dict[str, int]:
    counts = {}
    for state in ACTIVE_STATES:
        status, body = await load.one("GET", f"{API}/jobs?state={state}&name=bench-submit&limit=1")
        if status != 200:
            raise RuntimeError(f"listing {state} jobs: {status} {body[:200]!r}")
        counts[str(state)] = len(json.loads(body)["jobs"])
    return counts


async def _count_states(load: Load) -> dict[str, int]:
    """How many submitted jobs are in each final state (paged through, 1,000 a page)."""
    counts: dict[str, int] = {}
    for state in (State.SUCCEEDED, State.FAILED, State.CANCELLED):
        cursor = None
        while True:
            target = f"{API}/jobs?state={state}&name=bench-submit&limit=1000"
            if cursor:
                target += f"&cursor={quote(cursor)}"
            status, body = await load.one("GET", target)
            if status != 200:
                raise RuntimeError(f"listing {state} jobs: {status} {body[:200]!r}")
            page = json.loads(body)
            counts[str(state)] = counts.get(str(state), 0) + len(page["jobs"])
            cursor = page["next_cursor"]
            if not cursor:
                break
    return counts


async def bench_submit(
    load: Load, args: argparse.Namespace, body: bytes = SUBMIT_BODY
) -> dict[str, Any]:
    """(submit) job submissions/s (the server queues and runs each job), beside /healthz."""
    target = f"{API}/jobs"
    submitted = await load.run(
        args.submit_clients,
        args.submit_count,
        lambda n: ("POST", target, body),
        expect=201,
        warmup=0,
    )
    ids = [json.loads(body)["job"]["id"] for body in submitted["bodies"]]
    # The jobs run now: wait until none is active, so that the next figures don't carry them.
    began = time.perf_counter()
    deadline = began + args.drain_timeout
    while any((active := await _count_active(load)).values()):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"jobs still active after {args.drain_timeout} s: {active}")
        await asyncio.sleep(0.25)
    drained = time.perf_counter() - began
    health = await load.run(
        args.submit_clients,
        args.submit_count,
        lambda n: ("GET", "/healthz", b""),
        warmup=5,
        auth=False,
    )
    return {
        "jobs": args.submit_count,
        "submit": _strip(submitted),
        "all_ended_after_last_response_s": drained,
        "submit_to_all_ended_s": submitted["wall_s"] + drained,
        "final_states": await _count_states(load),
        "healthz": _strip(health),
        "ratio_req_per_s": submitted["req_per_s"] / health["req_per_s"],
        "target_req_per_s": 500.0,
        "ids": ids,
    }


async def bench_get(load: Load, args: argparse.Namespace, ids: list[str]) -> dict[str, Any]:
    """(get) GET /api/v1/jobs/{id} latency with 100 clients, beside /healthz."""
    if not ids:
        raise RuntimeError("no submitted job to get")
    clients, total = args.get_clients, args.get_clients * args.get_requests

    def job(n: int) -> tuple[str, str, bytes]:
        return "GET", f"{API}/jobs/{ids[n % len(ids)]}", b""

    def health(n: int) -> tuple[str, str, bytes]:
        return "GET", "/healthz", b""

    figures: dict[str, Any] = {"target_p99_ms": 20.0, "open_loop": []}
    # Back to back, the latency is the time to serve the 99 requests ahead (Little's law);
    # paced, it is the server's own, so a sweep of rates finds where it stays under target.
    runs = [(0.0, total)] + [
        (1 / rate, clients * args.get_paced_requests) for rate in args.get_rates
    ]
    for interval, count in runs:
        got = await load.run(clients, count, job, warmup=5, interval=interval)
        peer = await load.run(clients, count, health, warmup=5, auth=False, interval=interval)
        run = {
            "offered_req_per_s": clients / interval if interval else None,
            "get": _strip(got),
            "healthz": _strip(peer),
            "ratio_p50": got["latency"]["p50_ms"] / peer["latency"]["p50_ms"],
            "ratio_p99": got["latency"]["p99_ms"] / peer["latency"]["p99_ms"],
        }
        if interval:
            figures["open_loop"].append(run)
        else:
            figures["closed_loop"] = run
    within = [
        run["offered_req_per_s"]
        for run in figures["open_loop"]
        if run["get"]["errors"] == 0 and run["get"]["latency"]["p99_ms"] < figures["target_p99_ms"]
    ]
    figures["highest_rate_within_target_req_per_s"] = max(within, default=0.0)
    return figures


def _small_job(name: str, queue: str = "default") -> bytes:
    return json.dumps(
        {
            "name": name,
            "queue": queue,
            "grace_period": 1,
            "roles": {"w": {"command": ["sleep", "600"], "resources": {"cpu": 0.1}}},
        }
    ).encode()


async def _time_to_start(load: Load, name: str, timeout: float) -> float | None:
    """Submit one small job to ``default``; seconds from its 201 to its state ``running``
    (None if it did not run within ``timeout``); then cancel it."""
    status, body = await load.one("POST", f"{API}/jobs", _small_job(name))
    if status != 201:
        raise RuntimeError(f"submitting {name}: {status} {body[:200]!r}")
    accepted = time.perf_counter()
    job_id = json.loads(body)["job"]["id"]
    took = None
    while time.perf_counter() - accepted < timeout:
        status, body = await load.one("GET", f"{API}/jobs/{job_id}")
        if status == 200 and json.loads(body)["job"]["state"] not in WAITING_STATES:
            took = time.perf_counter() - accepted
            break
        await asyncio.sleep(0.005)
    await load.one("POST", f"{API}/jobs/{job_id}/cancel")
    return took


async def _start_probe(port: int, token: str, args: argparse.Namespace) -> dict[str, Any]:
    load = Load(port, token)
    samples, timeout = args.start_samples, args.start_timeout
    idle = [await _time_to_start(load, "bench-idle", timeout) for _ in range(samples)]
    status, body = await load.one("PUT", f"{API}/queues/burst", b'{"nominal": {"cpu": 0.1}}')
    if status != 200:
        raise RuntimeError(f"creating queue burst: {status} {body[:200]!r}")
    burst_body = _small_job("bench-burst", "burst")
    burst = await load.run(
        args.submit_clients,
        args.start_burst,
        lambda n: ("POST", f"{API}/jobs", burst_body),
        expect=201,
    )
    after = [await _time_to_start(load, "bench-after", timeout) for _ in range(samples)]
    # Their tasks would outlive the server: the queued ones first, so that none is admitted
    # after (one cancelled frees the queue's quota for the next), then those begun.
    page = 100
    for state in ("queued", "starting", "running"):
        for _ in range(1 + args.start_burst // page if state == "queued" else 1):
            query = f"name=bench-burst&state={state}&limit={page}"
            _, body = await load.one("GET", f"{API}/jobs?{query}")
            found = json.loads(body)["jobs"]
            for job in found:
                await load.one("POST", f"{API}/jobs/{job['id']}/cancel")

    def seconds(found: list[float | None]) -> dict[str, Any]:
        started = sorted(t for t in found if t is not None)
        return {
            "samples_s": found,
            "first_s": found[0],
            "median_s": started[len(started) // 2] if started else None,
            "max_s": None if None in found else max(started),
        }

    return {
        "burst": _strip(burst),
        "idle": seconds(idle),
        "after_burst": seconds(after),
        "timeout_s": timeout,
        "target_s": 1.0,
    }


def bench_start(args: argparse.Namespace, token: str) -> dict[str, Any]:
    """(start) time-to-start after a burst, beside time-to-start on the idle server."""
    print("(start) ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-start-") as tmp:
        server = Server(Path(tmp) / "data", token, None)
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                probe = _start_probe(server.port, token, args)
                return runner.run(asyncio.wait_for(probe, args.timeout))
        except BaseException:
            print("\n".join(server.tail), file=sys.stderr)
            raise
        finally:
            server.stop()


def _start_rows(start: dict[str, Any]) -> list[tuple[str, ...]]:
    idle, after = start["idle"], start["after_burst"]

    def shown(value: float | None) -> str:
        return f"> {start['timeout_s']:.0f} s" if value is None else f"{value * 1000:.0f} ms"

    ratio = (
        f"{after['median_s'] / idle['median_s']:.1f}x"
        if after["median_s"] and idle["median_s"]
        else ""
    )
    burst = start["burst"]
    return [
        ("measure", "figure", "peer (idle server)", "ratio", "target", "met"),
        (
            f"time-to-start after {burst['statuses'].get('201', 0):,} queued, first",
            shown(after["first_s"]),
            shown(idle["first_s"]),
            "",
            "<= 1 s",
            _met(after["first_s"] is not None and after["first_s"] <= start["target_s"]),
        ),
        (
            f"  median / max of {len(after['samples_s'])}",
            f"{shown(after['median_s'])} / {shown(after['max_s'])}",
            f"{shown(idle['median_s'])} / {shown(idle['max_s'])}",
            ratio,
            "<= 1 s",
            _met(after["max_s"] is not None and after["max_s"] <= start["target_s"]),
        ),
        (
            "  burst submissions",
            f"{burst['req_per_s']:.0f} req/s, {burst['errors']} errors",
            "",
            "",
            "",
            "",
        ),
    ]


def _rows_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


async def bench_all(port: int, token: str, args: argparse.Namespace) -> dict[str, Any]:
    load = Load(port, token)
    results: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
        ("list", lambda: bench_list(load, args)),
        ("submit", lambda: bench_submit(load, args)),
        ("get", lambda: bench_get(load, args, results["submit"].pop("ids"))),
    ]
    for name, step in steps:
        print(f"({name}) ...", flush=True)
        results[name] = await step()
    return results


# -- the database outage ------------------------------------------------------

OUTAGE_BODY = json.dumps(
    {
        "name": "bench-outage",
        "roles": {"worker": {"command": ["sleep", "0.5"], "resources": {"cpu": 0.1}}},
    }
).encode()


async def bench_outage(
    load: Load, args: argparse.Namespace, stop: Callable[[], None], start: Callable[[], None]
) -> dict[str, Any]:
    """(outage) a burst of submissions with the database stopped mid-burst."""
    readyz: list[tuple[float, int]] = []
    healthz: list[tuple[float, float]] = []  # (asked at, seconds to answer)
    began = time.perf_counter()

    async def watch_readiness() -> None:
        while True:
            status, _ = await load.one("GET", "/readyz")
            readyz.append((time.perf_counter() - began, status))
            await asyncio.sleep(0.5)

    async def watch_health() -> None:
        while True:
            asked = time.perf_counter()
            await load.one("GET", "/healthz")
            healthz.append((asked - began, time.perf_counter() - asked))
            await asyncio.sleep(0.25)

    acknowledged = asyncio.Event()

    async def outage() -> tuple[float, float]:
        await asyncio.sleep(args.outage_after)
        with contextlib.suppress(TimeoutError):  # mid-burst: a loaded machine had none by then
            await asyncio.wait_for(acknowledged.wait(), REQUEST_TIMEOUT)
        stopped = time.perf_counter() - began
        await asyncio.to_thread(stop)
        await asyncio.sleep(args.outage_seconds)
        await asyncio.to_thread(start)
        return stopped, time.perf_counter() - began

    watchers = [asyncio.create_task(watch()) for watch in (watch_readiness, watch_health)]
    window = asyncio.create_task(outage())
    burst = await load.run(
        args.submit_clients,
        args.submit_count,
        lambda n: ("POST", f"{API}/jobs", OUTAGE_BODY),
        expect=201,
        answered=lambda status: status == 201 and acknowledged.set(),
    )
    stopped, restarted = await window
    ids = [json.loads(body)["job"]["id"] for body in burst["bodies"]]
    deadline = time.perf_counter() + args.drain_timeout
    while await _outage_active(load) and time.perf_counter() < deadline:
        await asyncio.sleep(0.5)
    drained = time.perf_counter() - began
    for watcher in watchers:
        watcher.cancel()
    ready_by = time.perf_counter() + 10  # the store reconnects with backoff: give it a while
    while (
        after := (await load.one("GET", "/readyz"))[0]
    ) != 200 and time.perf_counter() < ready_by:
        await asyncio.sleep(0.2)
    states: Counter[str] = Counter()
    for job_id in ids:
        status, body = await load.one("GET", f"{API}/jobs/{job_id}")
        states[json.loads(body)["job"]["state"] if status == 200 else f"http {status}"] += 1
    during = [status for at, status in readyz if stopped + 2 <= at <= restarted]
    known = stopped + STATEMENT_WAIT + 2  # a hang is known by then
    return {
        "jobs_sent": args.submit_count,
        "outage_kind": args.outage_kind,
        "outage_s": args.outage_seconds,
        "stopped_at_s": stopped,
        "restarted_at_s": restarted,
        "burst": _strip(burst),
        "answers": {code: burst["statuses"].get(code, 0) for code in ("201", "503", "500")},
        "acknowledged": len(ids),
        "present": sum(n for state, n in states.items() if not state.startswith("http")),
        "ended_correctly": states.get(str(State.SUCCEEDED), 0),
        "still_active_at_the_end": sum(states.get(str(state), 0) for state in ACTIVE_STATES),
        "states": dict(states),
        "all_ended_s": drained,
        "readyz_during_outage": dict(Counter(str(status) for status in during)),
        "readyz_after": after,
        "healthz_slowest_during_outage_s": max(
            (took for at, took in healthz if stopped <= at <= restarted), default=None
        ),
        "healthz_slowest_once_known_s": max(
            (took for at, took in healthz if known <= at <= restarted), default=None
        ),
    }


async def _outage_active(load: Load) -> bool:
    """Whether a job of the outage run is still active (or the server cannot say)."""
    for state in ACTIVE_STATES:
        target = f"{API}/jobs?state={state}&name=bench-outage&limit=1"
        status, body = await load.one("GET", target)
        if status != 200 or json.loads(body)["jobs"]:
            return True
    return False


def run_outage(args: argparse.Namespace) -> dict[str, Any]:
    """The outage run, on a private PostgreSQL (the test suite's helper starts it)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from private_postgres import private_postgres, unavailable

    why = unavailable()
    if why is not None:
        raise SystemExit(f"--outage needs a private PostgreSQL: {why}")
    token = secrets.token_hex(16)
    results: dict[str, Any] = {"cpus": os.cpu_count(), "database": "postgresql (private)"}
    with (
        tempfile.TemporaryDirectory(prefix="trainfleet-bench-outage-") as tmp,
        private_postgres() as postgres,
    ):
        server = Server(Path(tmp) / "data", token, postgres.url)
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                load = Load(server.port, token)
                hang = args.outage_kind == "hang"
                stop, start = (
                    (postgres.freeze, postgres.thaw) if hang else (postgres.stop, postgres.start)
                )
                outage = bench_outage(load, args, stop, start)
                results["outage"] = runner.run(asyncio.wait_for(outage, args.timeout))
        except BaseException:
            print("\n".join(server.tail), file=sys.stderr)
            raise
        finally:
            results["server_exit_code"] = server.stop()
            results["server_output_lines"] = server.lines
    return results


def outage_table(results: dict[str, Any]) -> str:
    run = results["outage"]
    rows = [
        ("measure", "figure"),
        (
            "jobs sent / database stopped for",
            f"{run['jobs_sent']} / {run['outage_s']:g} s ({run['outage_kind']})",
        ),
        ("answers 201 / 503 / 500", " / ".join(str(n) for n in run["answers"].values())),
        ("acknowledged (201) jobs", str(run["acknowledged"])),
        ("of them present afterwards", str(run["present"])),
        ("of them ended correctly (succeeded)", str(run["ended_correctly"])),
        ("still active at the end", str(run["still_active_at_the_end"])),
        ("/readyz during the outage", json.dumps(run["readyz_during_outage"])),
        ("/readyz after", str(run["readyz_after"])),
        ("slowest /healthz during the outage", _seconds(run["healthz_slowest_during_outage_s"])),
        ("  the same once it is known", _seconds(run["healthz_slowest_once_known_s"])),
        ("all ended after (from the burst's start)", f"{run['all_ended_s']:.1f} s"),
    ]
    width = max(len(row[0]) for row in rows)
    return "\n".join(f"{name:<{width}}  {figure}" for name, figure in rows)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


# -- output -------------------------------------------------------------------


def table(results: dict[str, Any]) -> str:
    listed, sub, got = results["list"], results["submit"], results["get"]
    rows = [
        ("measure", "figure", "peer (/healthz)", "ratio", "target", "met"),
        (
            f"list first page of {listed['stored_jobs']:,} jobs, p50",
            f"{listed['list']['latency']['p50_ms']:.2f} ms",
            f"{listed['healthz']['latency']['p50_ms']:.2f} ms",
            f"{listed['ratio_p50']:.1f}x",
            "",
            "",
        ),
        (
            "  p99 (1 client)",
            f"{listed['list']['latency']['p99_ms']:.2f} ms",
            f"{listed['healthz']['latency']['p99_ms']:.2f} ms",
            f"{listed['ratio_p99']:.1f}x",
            "< 50 ms",
            _met(listed["list"]["latency"]["p99_ms"] < listed["target_ms"]),
        ),
        (
            f"submit {sub['jobs']:,} jobs, {sub['submit']['clients']} clients",
            f"{sub['submit']['req_per_s']:.0f} req/s",
            f"{sub['healthz']['req_per_s']:.0f} req/s",
            f"{sub['ratio_req_per_s']:.2f}x",
            ">= 500/s",
            _met(sub["submit"]["req_per_s"] >= sub["target_req_per_s"]),
        ),
        (
            "  submit latency p50 / p99",
            f"{sub['submit']['latency']['p50_ms']:.1f} / "
            f"{sub['submit']['latency']['p99_ms']:.1f} ms",
            f"{sub['healthz']['latency']['p50_ms']:.1f} / "
            f"{sub['healthz']['latency']['p99_ms']:.1f} ms",
            "",
            "",
            "",
        ),
        (
            "  errors; all jobs ended after",
            f"{sub['submit']['errors']}; +{sub['all_ended_after_last_response_s']:.1f} s",
            f"{sub['healthz']['errors']}",
            "",
            "0",
            _met(sub["submit"]["errors"] == 0),
        ),
        *_get_rows(got, got["closed_loop"], "back to back"),
        *(row for run in got["open_loop"] for row in _get_rows(got, run, "paced")),
        (
            "get job, highest paced rate with p99 < 20 ms",
            f"{got['highest_rate_within_target_req_per_s']:.0f} req/s",
            "",
            "",
            "",
            "",
        ),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def _get_rows(got: dict[str, Any], figures: dict[str, Any], how: str) -> list[tuple[str, ...]]:
    target = got["target_p99_ms"]
    mine, peer = figures["get"], figures["healthz"]
    offered = figures["offered_req_per_s"]
    load = f"{offered:.0f} req/s offered" if offered else "at capacity"
    return [
        (
            f"get job, {mine['clients']} clients {how}, p50",
            f"{mine['latency']['p50_ms']:.2f} ms",
            f"{peer['latency']['p50_ms']:.2f} ms",
            f"{figures['ratio_p50']:.2f}x",
            "",
            "",
        ),
        (
            f"  p99 ({mine['latency']['requests']:,} requests, {load})",
            f"{mine['latency']['p99_ms']:.2f} ms",
            f"{peer['latency']['p99_ms']:.2f} ms",
            f"{figures['ratio_p99']:.2f}x",
            "< 20 ms",
            _met(mine["latency"]["p99_ms"] < target),
        ),
        (
            f"  throughput, errors {mine['errors']} / {peer['errors']}",
            f"{mine['req_per_s']:.0f} req/s",
            f"{peer['req_per_s']:.0f} req/s",
            f"{mine['req_per_s'] / peer['req_per_s']:.2f}x",
            "",
            "",
        ),
    ]


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


# -- followers (--followers N) ------------------------------------------------

FOLLOWED_BODY = json.dumps(
    {
        "name": "bench-followed",
        "grace_period": 1,
        "roles": {"worker": {"command": "while true; do echo step; sleep 0.1; done"}},
    }
).encode()


async def _follower(port: int, token: str, target: str, started: asyncio.Event) -> None:
    """One SSE client of ``target`` that reads and drops what comes until it is cancelled."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        head = f"GET {target} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
        writer.write(f"{head}Authorization: Bearer {token}\r\n\r\n".encode())
        while data := await reader.read(1 << 16):
            if b"data:" in data:
                started.set()
    finally:
        writer.close()


async def bench_followers(port: int, token: str, args: argparse.Namespace) -> dict[str, Any]:
    """GET /healthz and a log-range read beside the same with ``args.followers`` open SSE
    followers of the running job's log, one request every 10 ms each, in one run."""
    load = Load(port, token)
    status, body = await load.one("POST", f"{API}/jobs", FOLLOWED_BODY)
    assert status == 201, body
    job_id = json.loads(body)["job"]["id"]
    log = f"{API}/jobs/{job_id}/tasks/worker/0/log"
    while json.loads((await load.one("GET", f"{API}/jobs/{job_id}"))[1])["job"]["state"] != (
        "running"
    ):
        await asyncio.sleep(0.1)

    async def probe() -> dict[str, Any]:
        requests = args.follower_requests
        health = await load.run(1, requests, lambda n: ("GET", "/healthz", b""), interval=0.01)
        read = await load.run(
            1, requests, lambda n: ("GET", f"{log}?start=0&end=4096", b""), interval=0.01
        )
        return {"healthz": _strip(health), "log_range": _strip(read)}

    results: dict[str, Any] = {"followers": args.followers, "without": await probe()}
    events = [asyncio.Event() for _ in range(args.followers)]
    tasks = [
        asyncio.create_task(_follower(port, token, f"{log}/follow", event)) for event in events
    ]
    try:
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in events)), 120)
        results["with"] = await probe()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await load.one("POST", f"{API}/jobs/{job_id}/cancel")
    return results


def followers_table(results: dict[str, Any]) -> str:
    rows = [f"{'followers':>9}  {'request':<10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"]
    for label, count in (("without", 0), ("with", results["followers"])):
        for name in ("healthz", "log_range"):
            latency = results[label][name]["latency"]
            rows.append(
                f"{count:>9}  {name:<10} {latency['p50_ms']:>8.1f} "
                f"{latency['p99_ms']:>8.1f} {latency['max_ms']:>8.1f}"
            )
    p99 = results["with"]["healthz"]["latency"]["p99_ms"]
    rows.append(f"/healthz p99 with followers under 50 ms: {_met(p99 < 50)}")
    return "\n".join(rows)


# -- follower memory (--followers alone) --------------------------------------

MIB = 1 << 20
LINES_PER_MIB = 10_486
"""100-byte lines in a MiB of log (1,048,600 bytes)."""
SMALL_LOG = 10 * 100
"""Bytes of a small log: 10 lines."""


def _writer_job(name: str, mib: int, lines: int = LINES_PER_MIB) -> bytes:
    """A job whose task writes ``mib`` times ``lines`` lines of 100 bytes, then ends."""
    code = f'import sys; [sys.stdout.buffer.write((b"x"*99+b"\\n")*{lines}) for _ in range({mib})]'
    return json.dumps(
        {"name": name, "roles": {"worker": {"command": f"python -c '{code}'"}}}
    ).encode()


def _rss(pid: int) -> int:
    """The resident memory of the server ``pid`` and its API's process, in bytes."""
    total = 0
    for one in server_processes(pid):
        with contextlib.suppress(OSError):
            found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{one}/status").read_text())
            total += int(found.group(1)) * 1024 if found else 0
    return total


def _say(what: str) -> None:
    """Where the run is, on stderr (a run stopped from outside has said how far it got)."""
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


async def _ended_logs(load: Load, bodies: list[bytes]) -> list[str]:
    """Submit the jobs and wait for them to succeed; each one's log path."""
    ids = []
    for body in bodies:
        status, answer = await load.one("POST", f"{API}/jobs", body)
        assert status == 201, answer
        ids.append(json.loads(answer)["job"]["id"])
    for job_id in ids:
        while not State((job := await _job(load, job_id))["state"]).is_final:
            await asyncio.sleep(0.2)
        assert job["state"] == "succeeded", job
    return [f"{API}/jobs/{job_id}/tasks/worker/0/log" for job_id in ids]


async def _job(load: Load, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = json.loads((await load.one("GET", f"{API}/jobs/{job_id}"))[1])["job"]
    return job


async def _follow_to_end(port: int, token: str, target: str) -> dict[str, Any]:
    """One SSE client of ``target`` from byte 0 to its ``end``, reading as fast as it can:
    the bytes it received, and the log offset its last ``log`` message reached."""
    reader, writer = await asyncio.open_connection(HOST, port)
    received, tail = 0, b""
    try:
        head = f"GET {target} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
        writer.write(f"{head}Authorization: Bearer {token}\r\n\r\n".encode())
        while data := await reader.read(1 << 16):
            received += len(data)
            tail = (tail + data)[-512:]
            if b"event: end" in tail:
                break
    finally:
        writer.close()
    offsets = re.findall(rb'"offset":(\d+)', tail)
    reached = int(offsets[-1]) if offsets else 0
    return {"received": received, "ended": b"event: end" in tail, "reached": reached}


async def _followed(
    server: Server, load: Load, token: str, logs: list[str], size: int
) -> dict[str, Any]:
    """A follower per log, all at once, to their ends: the server's peak RSS meanwhile
    (sampled every 10 ms) and /healthz beside them (every 50 ms)."""
    peak = _rss(server.process.pid)
    health: list[float] = []

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, _rss(server.process.pid))
            await asyncio.sleep(0.01)

    async def probe() -> None:
        while True:
            started = time.perf_counter()
            await load.one("GET", "/healthz")
            health.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)

    side = [asyncio.create_task(watch()), asyncio.create_task(probe())]
    started = time.perf_counter()
    try:
        follows = await asyncio.gather(
            *(_follow_to_end(server.port, token, f"{log}/follow") for log in logs)
        )
    finally:
        for task in side:
            task.cancel()
        await asyncio.gather(*side, return_exceptions=True)
    return {
        "followers": len(logs),
        "log_bytes": size,
        "received_bytes": sum(follow["received"] for follow in follows),
        "ended": sum(follow["ended"] for follow in follows),
        "read_to_the_end": sum(follow["reached"] == size for follow in follows),
        "wall_s": time.perf_counter() - started,
        "peak_rss_mib": max(peak, _rss(server.process.pid)) / MIB,
        "healthz": _latency(health) if health else {},
    }


async def bench_follower_memory(
    server: Server, token: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Peak server RSS with a follower per finished big log beside the same with a follower
    per finished small log, and the RSS ``args.follower_settle`` seconds after they left."""
    load = Load(server.port, token)
    count, mib = args.follower_logs, args.follower_log_mib
    _say(f"{count} jobs writing 1 KB, then {count} writing {mib} MiB")
    small = await _ended_logs(load, [_writer_job(f"small-{n}", 1, 10) for n in range(count)])
    big = await _ended_logs(load, [_writer_job(f"big-{n}", mib) for n in range(count)])
    await asyncio.sleep(1)
    results: dict[str, Any] = {"rss_before_mib": _rss(server.process.pid) / MIB}
    _say("following the 1 KB logs")
    results["small"] = await _followed(server, load, token, small, SMALL_LOG)
    _say(f"following the {mib} MiB logs")
    results["big"] = await _followed(server, load, token, big, mib * LINES_PER_MIB * 100)
    _say(f"{args.follower_settle} s for the server to settle")
    await asyncio.sleep(args.follower_settle)
    results["settle_s"] = args.follower_settle
    results["rss_after_mib"] = _rss(server.process.pid) / MIB
    results["peak_over_small_mib"] = (
        results["big"]["peak_rss_mib"] - results["small"]["peak_rss_mib"]
    )
    results["after_over_before_mib"] = results["rss_after_mib"] - results["rss_before_mib"]
    return results


def run_follower_memory(args: argparse.Namespace) -> dict[str, Any]:
    """The --followers run: a fresh server of its own (SQLite), its jobs, its followers."""
    token = secrets.token_hex(16)
    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "database": "sqlite",
        "client": "asyncio (uvloop) raw SSE connections, each read as fast as it comes",
        "log_mib": args.follower_log_mib,
        "small_log_bytes": SMALL_LOG,
    }
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-followers-") as tmp:
        server = Server(Path(tmp) / "data", token, None)
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                memory = bench_follower_memory(server, token, args)
                results.update(runner.run(asyncio.wait_for(memory, args.timeout)))
        except BaseException:
            print("\n".join(server.tail), file=sys.stderr)
            raise
        finally:
            results["server_exit_code"] = server.stop()
    return results


def follower_memory_table(results: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [
        ("followers of finished logs", "peak RSS", "/healthz p50", "p99", "whole", "wall")
    ]
    for label in ("small", "big"):
        run = results[label]
        size = "1 KB" if label == "small" else f"{results['log_mib']} MiB"
        health = run["healthz"] or {"p50_ms": math.nan, "p99_ms": math.nan}
        rows.append(
            (
                f"{run['followers']} of {size} logs",
                f"{run['peak_rss_mib']:.0f} MiB",
                f"{health['p50_ms']:.1f} ms",
                f"{health['p99_ms']:.1f} ms",
                f"{run['read_to_the_end']}/{run['followers']}",
                f"{run['wall_s']:.1f} s",
            )
        )
    over, after = results["peak_over_small_mib"], results["after_over_before_mib"]
    return "\n".join(
        [
            _rows_table(rows),
            f"RSS before: {results['rss_before_mib']:.0f} MiB; "
            f"{results['settle_s']:.0f} s after they left: {results['rss_after_mib']:.0f} MiB",
            f"peak with big logs within 100 MiB of small ({over:+.0f} MiB): {_met(over <= 100)}",
            f"RSS after within 50 MiB of before ({after:+.0f} MiB): {_met(after <= 50)}",
        ]
    )


# -- authorisation (--authz) --------------------------------------------------

AUTHZ_TEAM = "bench"


async def _member_token(admin: Load) -> str:
    """Make team ``bench`` (with its queue ``bench``) and a member of it; its token."""
    made = b""
    for target, body in (
        ("teams", {"name": AUTHZ_TEAM}),
        ("users", {"name": "bench", "team": AUTHZ_TEAM, "role": "member"}),
    ):
        status, made = await admin.one("POST", f"{API}/{target}", json.dumps(body).encode())
        if status != 201:
            raise RuntimeError(f"creating {target} {body}: {status} {made[:200]!r}")
    return str(json.loads(made)["token"])


def _authz_figures(run: dict[str, Any]) -> dict[str, float]:
    """The compared figures of one (submit) and one (get) probe, by name."""
    got = run["get"]
    figures = {"submit_req_per_s": run["submit"]["submit"]["req_per_s"]}
    for probe in (got["closed_loop"], *got["open_loop"]):
        offered = probe["offered_req_per_s"]
        key = f"get_paced_{offered:.0f}_per_s" if offered else "get_at_capacity"
        figures[f"{key}_p50_ms"] = probe["get"]["latency"]["p50_ms"]
        figures[f"{key}_p99_ms"] = probe["get"]["latency"]["p99_ms"]
    figures["get_highest_rate_within_target_req_per_s"] = got[
        "highest_rate_within_target_req_per_s"
    ]
    return figures


def _authz_errors(run: dict[str, Any]) -> int:
    got = run["get"]
    probes = (run["submit"]["submit"], *(r["get"] for r in (got["closed_loop"], *got["open_loop"])))
    return sum(probe["errors"] for probe in probes)


async def bench_authz(
    current: int, before: int | None, admin: str, args: argparse.Namespace
) -> dict[str, Any]:
    """(submit) then (get) against (a) the current server with a member's token, (b) the
    same server with the admin token, (c) the before server with its admin token; each
    probe in turn on a, b, c, then c, b, a, and so on for ``args.authz_rounds`` rounds."""
    member = await _member_token(Load(current, admin))
    targets = {
        "a": (Load(current, member), _submit_body(AUTHZ_TEAM)),
        "b": (Load(current, admin), _submit_body(AUTHZ_TEAM)),
    }
    if before is not None:
        targets["c"] = (Load(before, admin), SUBMIT_BODY)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in targets}
    for number in range(args.authz_rounds):
        order = list(targets) if number % 2 == 0 else list(reversed(targets))
        submitted = {}
        for label in order:
            print(f"(submit) {label}, round {number + 1} ...", flush=True)
            load, body = targets[label]
            submitted[label] = await bench_submit(load, args, body)
        for label in order:
            print(f"(get) {label}, round {number + 1} ...", flush=True)
            got = await bench_get(targets[label][0], args, submitted[label].pop("ids"))
            runs[label].append({"submit": submitted[label], "get": got})
    medians = {
        label: {
            name: statistics.median(_authz_figures(run)[name] for run in probes)
            for name in _authz_figures(probes[0])
        }
        for label, probes in runs.items()
    }
    ratios = {
        f"{label}/c": {
            name: figure / medians["c"][name] if medians["c"][name] else None
            for name, figure in medians[label].items()
        }
        for label in ("a", "b")
        if "c" in medians
    }
    errors = {label: sum(_authz_errors(run) for run in probes) for label, probes in runs.items()}
    return {"medians": medians, "ratios": ratios, "errors": errors, "runs": runs}


def _source(src: Path) -> str:
    """The commit a source tree is at (plus `+changes` if it has any), or why unknown."""

    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(src), *argv], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "not a git tree"
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def run_authz(args: argparse.Namespace) -> dict[str, Any]:
    """The --authz run: one current-tree server, and one before server if --baseline-src."""
    admin = secrets.token_hex(16)
    ours = HERE.parent
    baseline = args.baseline_src
    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "database": "sqlite",
        "client": "asyncio (uvloop) + httptools, keep-alive HTTP/1.1, one connection a client",
        "rounds": args.authz_rounds,
        "figures": "median over the rounds of each (submit) and (get) probe's figures",
        "servers": {
            "a": f"current tree ({_source(ours)}), member token of team bench, queue bench",
            "b": f"current tree ({_source(ours)}), admin token, queue bench",
            "c": (
                f"before tree {baseline} ({_source(baseline)}), admin token, queue default"
                if baseline
                else "skipped: no --baseline-src given"
            ),
        },
        "note": "final_states counts every bench-submit job its token sees on that server",
    }
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-authz-") as tmp:
        servers = [Server(Path(tmp) / "current", admin, None)]
        try:
            if baseline:
                servers.append(
                    Server(Path(tmp) / "before", admin, None, src=baseline.resolve() / "src")
                )
            before = servers[1].port if baseline else None
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                authz = bench_authz(servers[0].port, before, admin, args)
                results.update(runner.run(asyncio.wait_for(authz, args.timeout)))
        except BaseException:
            for server in servers:
                print("\n".join(server.tail), file=sys.stderr)
            raise
        finally:
            results["server_exit_codes"] = [server.stop() for server in servers]
    return results


def authz_table(results: dict[str, Any]) -> str:
    medians, ratios, errors = results["medians"], results["ratios"], results["errors"]

    def shown(label: str, name: str) -> str:
        if label not in medians:
            return "skipped"
        value = medians[label][name]
        return f"{value:.0f} req/s" if name.endswith("req_per_s") else f"{value:.2f} ms"

    def ratio(key: str, name: str) -> str:
        value = ratios.get(key, {}).get(name)
        return "" if value is None else f"{value:.2f}x"

    header = ("median of the rounds", "(a) member", "(b) admin", "(c) before", "a/c", "b/c")
    rows = [header] + [
        (
            name.removesuffix("_req_per_s").removesuffix("_ms").replace("_", " "),
            *(shown(label, name) for label in "abc"),
            ratio("a/c", name),
            ratio("b/c", name),
        )
        for name in medians["a"]
    ]
    rows.append(("errors, all rounds", *(str(errors.get(label, "-")) for label in "abc"), "", ""))
    lines = [_rows_table(rows)]
    lines += [f"({label}) {text}" for label, text in results["servers"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--submit-count", type=int, default=2000)
    parser.add_argument("--submit-clients", type=int, default=16)
    parser.add_argument("--get-clients", type=int, default=100)
    parser.add_argument("--get-requests", type=int, default=100, help="per client")
    parser.add_argument(
        "--get-rates",
        type=lambda text: [float(rate) for rate in text.split(",")],
        default=[2.0, 5.0, 8.0, 11.0],
        help="requests/s per client, open loop, comma-separated",
    )
    parser.add_argument("--get-paced-requests", type=int, default=20, help="per client")
    parser.add_argument("--list-jobs", type=int, default=10_000)
    parser.add_argument("--list-requests", type=int, default=200)
    parser.add_argument(
        "--drain-timeout", type=float, default=300, help="seconds for submitted jobs to end"
    )
    parser.add_argument("--timeout", type=float, default=1200, help="seconds for everything")
    parser.add_argument(
        "--database-url",
        help="PostgreSQL URL for the server's store (only if `trainfleet server` accepts it)",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--outage", action="store_true", help="the database-outage run only")
    parser.add_argument("--outage-seconds", type=float, default=20.0)
    parser.add_argument(
        "--outage-kind",
        choices=("stop", "hang"),
        default="stop",
        help="stop the database (it refuses) or stop its processes (it hangs)",
    )
    parser.add_argument(
        "--outage-after", type=float, default=3.0, help="seconds into the burst, after a 201"
    )
    parser.add_argument("--start-burst", type=int, default=2000, help="(start) burst size")
    parser.add_argument("--start-samples", type=int, default=5, help="(start) jobs timed")
    parser.add_argument(
        "--start-timeout", type=float, default=120, help="(start) seconds a job may take"
    )
    parser.add_argument("--start-only", action="store_true", help="run only (start)")
    parser.add_argument(
        "--followers",
        type=int,
        nargs="?",
        const=0,
        help="with N: run only the followers probe, with N SSE followers (e.g. 400); "
        "alone: run only the memory of followers of big logs",
    )
    parser.add_argument("--follower-requests", type=int, default=300)
    parser.add_argument(
        "--follower-logs", type=int, default=20, help="--followers: logs of each size"
    )
    parser.add_argument(
        "--follower-log-mib", type=int, default=20, help="--followers: big log size"
    )
    parser.add_argument(
        "--follower-settle", type=float, default=60, help="--followers: seconds after they left"
    )
    parser.add_argument(
        "--authz", action="store_true", help="only (submit) and (get): authorisation on/before"
    )
    parser.add_argument(
        "--baseline-src", type=Path, help="--authz: a source tree of before, holding src/"
    )
    parser.add_argument("--authz-rounds", type=int, default=2, help="--authz: rounds (median)")
    args = parser.parse_args()
    if args.authz:
        if args.baseline_src and not (args.baseline_src / "src" / "trainfleet").is_dir():
            parser.error(f"--baseline-src: no src/trainfleet in {args.baseline_src}")
        authz = run_authz(args)
        print(authz_table(authz))
        _write(args.out or HERE / "results" / "api-authz.json", authz)
        return
    if args.followers == 0:
        memory = run_follower_memory(args)
        print(follower_memory_table(memory))
        _write(args.out or HERE / "results" / "api-followers.json", memory)
        return
    if args.outage:
        outage = run_outage(args)
        print(outage_table(outage))
        _write(args.out or HERE / "results" / "api-outage.json", outage)
        return
    args.out = args.out or HERE / "results" / "api.json"
    if args.database_url and not _server_accepts("--database-url"):
        parser.error("this `trainfleet server` has no --database-url option")
    token = secrets.token_hex(16)
    tag = secrets.token_hex(3)
    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "database": "postgresql" if args.database_url else "sqlite",
        "client": "asyncio (uvloop) + httptools, keep-alive HTTP/1.1, one connection a client",
    }
    if args.start_only:
        results["start"] = bench_start(args, token)
        print(_rows_table(_start_rows(results["start"])))
        _write(args.out, results)
        return
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-api-") as tmp:
        data_dir = DataDir(Path(tmp) / "data")
        data_dir.root.mkdir()
        print(f"filling the store with {args.list_jobs:,} ended jobs ...", flush=True)
        results["fill_s"] = fill_store(args.database_url or data_dir.database, args.list_jobs, tag)
        server = Server(data_dir.root, token, args.database_url)
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                bench = bench_followers if args.followers else bench_all
                results.update(
                    runner.run(asyncio.wait_for(bench(server.port, token, args), args.timeout))
                )
        except BaseException:
            print("\n".join(server.tail), file=sys.stderr)
            raise
        finally:
            results["server_exit_code"] = server.stop()
            results["server_output_lines"] = server.lines
    if args.followers:
        print(followers_table(results))
        _write(args.out, results)
        return
    results["start"] = bench_start(args, token)
    print(table(results))
    print(_rows_table(_start_rows(results["start"])))
    _write(args.out, results)


def _write(out: Path, results: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
