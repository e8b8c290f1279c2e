"""A million stored jobs on PostgreSQL: listing and describing them, and the server's start
over them (issue 30's plan, §4 part E).

A new database on the PostgreSQL of --postgres-url (else $TRAINFLEET_TEST_POSTGRES_URL, else
the one scripts/postgres.sh starts), migrated by ``Store.open``, is filled on the database
side in one transaction (``generate_series``; the column lists are the store's schema
module's, so the fill follows the schema): --stored jobs (1,000,000; --quick 10,000), each
ended (87% succeeded, 7% failed, 6% cancelled), of one of 20 teams and 100 users, with one
task, two events (submitted, ended) and one label ``batch=0..9``; then VACUUM ANALYZE.
Then the real `trainfleet server` on it, and one client (one keep-alive connection) times
--stored-requests (200) requests of each kind, after 5 untimed:

(list)      GET /api/v1/jobs?limit=50 (the newest page, with every job counted by state)
(state)     the same, &state=succeeded
(label)     the same, &label=batch=3 (a tenth of the jobs)
(team)      the same, &team=team-3 (a twentieth)
(pages)     the next page by its cursor, 20 pages deep, then from the first page again
(describe)  GET /api/v1/jobs/{id} of a random stored job (the job, its tasks and events)

Each kind's p50 and p99 beside the same with 100 stored jobs (the peer, where pages go only
one deep). Target: p99 <= 150 ms. Also: the server's start (from its launch to listening)
with the jobs stored, and its RSS then; the fill's seconds; and whether the counts each
listing answered are the database's own COUNT(*) of the same filters (they must be exact).
The JSON holds EXPLAIN (ANALYZE, BUFFERS) of the store's queries for each kind and for a
start's reads (``unfinished_jobs``, ``lingering``), run beside the server.

usage: python benchmarks/scale.py --part stored [--stored 1000000] [--stored-requests 200]
           [--postgres-url URL] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from api import API, Connection, Server, _latency, postgres_database

from trainfleet.spec.models import JobSpec
from trainfleet.store import queries, schema
from trainfleet.store.database import Store

HERE = Path(__file__).resolve().parent
TARGET_P99_MS = 150.0
PEER = 100
TEAMS, BATCHES = 20, 10
DEPTH = 20
WARMUP = 5
KINDS = ("list", "state", "label", "team", "pages", "describe")
FILTERS: dict[str, dict[str, Any]] = {
    "list": {},
    "state": {"state": "succeeded"},
    "label": {"labels": {"batch": "3"}},
    "team": {"teams": ["team-3"]},
}
"""Each listing's filters, as ``Store.find_jobs`` takes them (its counts ignore ``state``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Part E's options (scale.py gives --postgres-url and --quick)."""
    parser.add_argument("--stored", type=int, help="jobs stored [1000000; --quick 10000]")
    parser.add_argument("--stored-requests", type=int, help="timed requests of each kind [200]")
    parser.add_argument(
        "--stored-start-timeout", type=float, default=1800, help="seconds the server may take"
    )


# -- the database -------------------------------------------------------------


def admin_url(given: str | None) -> str:
    """The PostgreSQL server's URL: given, from the tests' variable, else scripts/postgres.sh's."""
    if given or os.environ.get("TRAINFLEET_TEST_POSTGRES_URL"):
        return given or os.environ["TRAINFLEET_TEST_POSTGRES_URL"]
    script = HERE.parent / "scripts" / "postgres.sh"
    done = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"no PostgreSQL: {script} start failed:\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


JOB_ID = "'stored-' || lpad(n::text, 7, '0')"
STATE = "(CASE WHEN mod(n, 97) < 84 THEN 'succeeded' WHEN mod(n, 97) < 91 THEN 'failed' ELSE 'cancelled' END)"  # noqa: E501
CREATED = "(%(base)s + n * 0.01)"
JOB = {
    "id": JOB_ID, "name": "'stored-' || mod(n, 50)", "framework": "'generic'", "state": STATE,
    "code": STATE, "reason": "''", "waiting_code": "''", "waiting": "''", "spec": "%(spec)s",
    "source": "'trainfleet'", "workdir": "'/tmp'", "user": "'user-' || mod(n, 100)",
    "team": f"'team-' || mod(n, {TEAMS})", "queue": "'default'", "created_at": CREATED,
    "started_at": f"{CREATED} + 0.1", "finished_at": f"{CREATED} + 0.5",
}  # fmt: skip
TASK = {
    "job_id": "id", "role": "'worker'", "index": "0", "state": "state", "address": "''",
    "gpus": "''", "pid": "NULL", "restarts": "0",
    "exit_code": "CASE state WHEN 'succeeded' THEN 0 WHEN 'failed' THEN 1 ELSE -15 END",
    "code": "'exited'", "reason": "''", "started_at": "started_at",
    "finished_at": "finished_at", "position": "0",
}  # fmt: skip
EVENT = {
    "job_id": "id", "time": "e.time", "task": "''", "state": "e.state", "code": "e.code",
    "message": "e.message", "team": "team",
}  # fmt: skip
EVENTS = (
    "(VALUES (created_at, 'queued', 'submitted', 'submitted by ' || \"user\", 0), "
    "(finished_at, state, code, state, 1)) AS e(time, state, code, message, k)"
)


def _columns(table: str, given: dict[str, str], wanted: set[str]) -> list[str]:
    """The columns of ``given``, which must be the schema's: the fill follows the schema."""
    if set(given) != wanted:
        raise SystemExit(
            f"the fill of {table} is not the schema's: it lacks {sorted(wanted - set(given))} "
            f"and has {sorted(set(given) - wanted)} beyond"
        )
    return list(given)


def fill(url: str, count: int) -> float:
    """Store ``count`` ended jobs, all at once on the database's side; the seconds it took."""
    spec = JobSpec.model_validate(
        {"name": "stored", "roles": {"worker": {"command": ["python", "train.py"]}}}
    ).model_dump_json()
    jobs = _columns("jobs", JOB, set(schema.JOB_COLUMNS))
    tasks = _columns("tasks", TASK, {*schema.TASK_COLUMNS, "position"})
    events = _columns("events", EVENT, set(schema.EVENT_COLUMNS) - {"id"})  # the id is given
    started = time.perf_counter()
    with psycopg.connect(url) as db:  # one transaction, committed at the end of the block
        db.execute("SET LOCAL synchronous_commit = off")
        params = {"base": time.time() - count * 0.01 - 3600, "spec": spec, "last": count - 1}
        db.execute(
            f"INSERT INTO jobs ({queries.columns(jobs)}) SELECT "
            f"{', '.join(JOB[c] for c in jobs)} FROM generate_series(0, %(last)s) AS n",
            params,
        )
        db.execute(
            f"INSERT INTO tasks ({queries.columns(tasks)}) "
            f"SELECT {', '.join(TASK[c] for c in tasks)} FROM jobs"
        )
        db.execute(  # ids in the order of the events' times, as the store hands them out
            f"INSERT INTO events ({queries.columns(events)}) "
            f"SELECT {', '.join(EVENT[c] for c in events)} FROM jobs CROSS JOIN LATERAL "
            f"{EVENTS} ORDER BY e.time, e.k, id"
        )
        db.execute(
            'INSERT INTO job_labels (job_id, "key", "value") '
            f"SELECT {JOB_ID}, 'batch', mod(n, {BATCHES})::text "
            "FROM generate_series(0, %(last)s) AS n",
            params,
        )
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


# -- the requests -------------------------------------------------------------


def _target(kind: str, count: int, rng: random.Random) -> str:
    if kind == "describe":
        return f"{API}/jobs/stored-{rng.randrange(count):07d}"
    filters = FILTERS[kind]
    query = "limit=50"
    if "state" in filters:
        query += f"&state={filters['state']}"
    for key, value in filters.get("labels", {}).items():
        query += "&label=" + quote(f"{key}={value}")
    for team in filters.get("teams", []):
        query += f"&team={team}"
    return f"{API}/jobs?{query}"


async def _times(port: int, token: str, kind: str, count: int, requests: int) -> dict[str, Any]:
    """``requests`` timed requests of ``kind`` on one connection, after WARMUP untimed."""
    rng = random.Random(30)
    connection = Connection(port, token)
    samples: list[float] = []
    first: dict[str, Any] = {}
    cursor: str | None = None
    depth = 0
    try:
        while len(samples) < requests + WARMUP:
            if kind == "pages" and cursor is None:  # from the first page again, untimed
                status, body = await connection.request("GET", f"{API}/jobs?limit=50")
                cursor, depth = json.loads(body)["next_cursor"], 0
                if cursor is None:
                    raise RuntimeError("too few jobs stored for a second page")
            target = _target(kind, count, rng) if kind != "pages" else ""
            if kind == "pages":
                target = f"{API}/jobs?limit=50&cursor={quote(cursor or '')}"
            began = time.perf_counter()
            status, body = await connection.request("GET", target)
            took = time.perf_counter() - began
            if status != 200:
                raise RuntimeError(f"GET {target}: {status} {body[:300]!r}")
            samples.append(took)
            if not first:
                first = json.loads(body)
            if kind == "pages":
                depth += 1
                cursor = json.loads(body)["next_cursor"] if depth < DEPTH else None
    finally:
        await connection.close()
    return {"latency": _latency(samples[WARMUP:]), "first": first}


def _rss_mib(pid: int) -> float | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


# -- what the database does ---------------------------------------------------


def _recorded(store: Store, calls: Callable[[Store], object]) -> list[tuple[str, dict[str, Any]]]:
    """The reads ``calls`` makes of ``store``, each once: (SQL as the store wrote it, params)."""
    found: dict[str, dict[str, Any]] = {}
    connection = store._db  # the store's one connection: its reads are what is explained
    real = connection.rows

    def rows(query: str, params: Any = None, wait: float | None = None) -> Any:
        found.setdefault(query, dict(params or {}))
        return real(query, params, wait)

    connection.rows = rows  # type: ignore[method-assign]
    try:
        calls(store)
    finally:
        del connection.rows  # back to the class's
    return list(found.items())


def explain(url: str, count: int) -> dict[str, list[dict[str, Any]]]:
    """EXPLAIN (ANALYZE, BUFFERS) of the store's reads for each kind of request, and a start's."""
    job_id = f"stored-{count // 2:07d}"
    reads: dict[str, Callable[[Store], object]] = {
        kind: (lambda store, f=filters: store.find_jobs(limit=50, **f))
        for kind, filters in FILTERS.items()
    }
    reads["pages"] = lambda store: store.find_jobs(
        limit=50, cursor=store.find_jobs(limit=50).next_cursor
    )
    reads["describe"] = lambda store: (
        store.get_job(job_id),
        store.list_tasks(job_id),
        store.list_events(job_id),
    )
    reads["start"] = lambda store: (store.unfinished_jobs(), store.lingering())
    plans: dict[str, list[dict[str, Any]]] = {}
    with Store.open(url) as store, psycopg.connect(url, autocommit=True) as db:
        sql = store._db.dialect.sql
        for kind, calls in reads.items():
            plans[kind] = []
            for query, params in _recorded(store, calls):
                lines = db.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql(query)}", params).fetchall()
                plans[kind].append({"query": query, "plan": [str(line[0]) for line in lines]})
    return plans


def exact_counts(url: str, answers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each listing's counts beside COUNT(*) of its filters (but state) in the database."""
    found: dict[str, Any] = {}
    with Store.open(url) as store, psycopg.connect(url, autocommit=True) as db:
        sql = store._db.dialect.sql
        for kind, filters in FILTERS.items():
            where, params = queries.job_filter(
                state=None,
                name=None,
                user=None,
                labels=filters.get("labels", {}),
                after=None,
                teams=filters.get("teams"),
            )
            rows = db.execute(
                sql(f"SELECT state, COUNT(*) AS n FROM jobs {where} GROUP BY state"), params
            ).fetchall()
            counted = {str(state): int(n) for state, n in rows}
            found[kind] = {"answered": answers[kind]["first"]["counts"], "counted": counted}
    found["exact"] = all(entry["answered"] == entry["counted"] for entry in found.values())
    return found


# -- one run and the figures --------------------------------------------------


def measure(admin: str, count: int, requests: int, start_timeout: float) -> dict[str, Any]:
    """Fill a new database with ``count`` jobs, start a server on it, time every kind."""
    with postgres_database(admin, "scale_stored") as url, tempfile.TemporaryDirectory() as tmp:
        Store.open(url).close()
        filled = fill(url, count)
        print(f"  stored {count} jobs in {filled:.1f} s", flush=True)
        token = secrets.token_urlsafe(24)
        began = time.perf_counter()
        server = Server(Path(tmp), token, url, start_timeout=start_timeout)
        started = time.perf_counter() - began
        rss = _rss_mib(server.process.pid)
        print(f"  the server listened {started:.1f} s after its launch", flush=True)
        try:
            kinds = {
                kind: asyncio.run(_times(server.port, token, kind, count, requests))
                for kind in KINDS
            }
        finally:
            server.stop()
        counts = exact_counts(url, kinds)
        plans = explain(url, count)
    return {
        "stored": count,
        "fill_s": filled,
        "start_s": started,
        "rss_after_start_mib": rss,
        "latency": {kind: found["latency"] for kind, found in kinds.items()},
        "counts": counts,
        "explain": plans,
    }


def _figure(
    value: Any, peer: Any, target: float | bool | None, within: Callable[[Any], bool] | None = None
) -> dict[str, Any]:
    ratio = value / peer if isinstance(value, float) and isinstance(peer, float) and peer else None
    ok = None if target is None or within is None else within(value)
    return {"value": value, "peer": peer, "ratio": ratio, "target": target, "ok": ok}


def figures(run: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """Each figure of the run beside the peer's: {value, peer, ratio, target, ok}."""
    found: dict[str, Any] = {}
    for kind in KINDS:
        mine, theirs = run["latency"][kind], peer["latency"][kind]
        found[f"E {kind} p50 (ms)"] = _figure(mine["p50_ms"], theirs["p50_ms"], None)
        p99 = _figure(mine["p99_ms"], theirs["p99_ms"], TARGET_P99_MS, lambda v: v <= TARGET_P99_MS)
        found[f"E {kind} p99 (ms)"] = p99 | {"explain": run["explain"][kind]}
    found["E server start (s)"] = _figure(run["start_s"], peer["start_s"], None) | {
        "explain": run["explain"]["start"]
    }
    found["E server RSS after start (MiB)"] = _figure(
        run["rss_after_start_mib"], peer["rss_after_start_mib"], None
    )
    found["E fill (s)"] = _figure(run["fill_s"], peer["fill_s"], None)
    exact = run["counts"]["exact"] and peer["counts"]["exact"]
    found["E counts exact"] = _figure(exact, peer["counts"]["exact"], True, bool) | {
        "counts": run["counts"]
    }
    return found


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Part E's figures (see the module), each {value, peer, ratio, target, ok}."""
    quick = bool(getattr(args, "quick", False))
    count = args.stored or (10_000 if quick else 1_000_000)
    requests = args.stored_requests or (20 if quick else 200)
    admin = admin_url(getattr(args, "postgres_url", None))
    runs = {}
    for label, stored in (("peer", PEER), ("main", count)):
        print(f"E: {stored} stored jobs ({label})", flush=True)
        runs[label] = measure(admin, stored, requests, args.stored_start_timeout)
    return figures(runs["main"], runs["peer"])
