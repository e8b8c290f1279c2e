"""A soak of a team server as the README sets it up (issue 31): its figures over minutes of
mixed load.

One `trainfleet server` (benchmarks/api.py's Server) as root with --isolate-teams (through
TRAINFLEET_ISOLATE_TEAMS; tasks' python /usr/bin/python3), on a fresh PostgreSQL database
(tests/helpers.py's fresh_postgres_database on --postgres-url, else on the cluster that
scripts/postgres.sh starts). Two teams, soak-a and soak-b, each with a member (ana, bo) who
makes the team's secret `soak` of two keys, which every job of the team names: `token` as
the variable TOKEN, `cert` as a file (`file: true`) whose path CERT holds. Every task prints
both values (its log should show `***`).

For --minutes (or --seconds), all at once:
- --clients (4) SDK clients (trainfleet.client.Client, threads; half of them each team's
  member) submit --rate (2) jobs/s in all, paced, each with its folder (soak.sh) sent, of
  these kinds in turn (restart policy on-failure, 2 restarts, backoff from 0.2 s):
    quick       prints and succeeds                              intended: succeeded
    flaky       fails its first attempt and restarts once        succeeded, 1 restart
    big         writes --big-output bytes (100-byte lines)       succeeded, log whole
    sibling     two tasks: one sleeps, one fails until its
                restarts are used up                             failed, 2 restarts
    stop-now    a sleeper stopped right after its 201            cancelled
    stop-later  a sleeper stopped once it runs                   cancelled
- --followers (20) log followers (Client.follow_log from byte 0) come and go on random jobs
  (mostly recent ones): each leaves after 0.5-8 s, or at the log's end, where it checks that
  it got the whole log (its size then);
- --readers (2) members list jobs (first page) and describe one in a loop;
- a /healthz prober (every 0.25 s) and a sampler (every 2 s) of the server's threads, open
  descriptors and RSS (/proc/<pid>) and of its database's connections (pg_stat_activity).

Then the load stops. Every acknowledged (201) job should end within --drain (60) seconds:
the others are stuck. Then: each job's end against its kind's intent, the audit records
(the audit API) per change made, and every task's log read whole. The secrets' values, and
their base64 at each alignment, are searched for in every answer the clients got (the SDK's
transport sees every byte), every log read, every file of the data directory (as bytes) and a
pg_dump of the database. The server stops; processes of the data directory and nft rules of
the server still there are counted, then removed. The teams' Unix accounts (tf-soak-a,
tf-soak-b) stay, for the next run.

usage: python benchmarks/soak.py [--minutes 10 | --seconds S] [--rate 2] [--big-output BYTES]
                                 [--postgres-url URL] [--out FILE]
Needs root, setpriv, nft and PostgreSQL. Prints a table and writes the figures as JSON
(default benchmarks/results/soak.json).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import psutil
import psycopg
from api import HERE, HOST, Server, _latency, _met, _rows_table, _write
from hostile import rss_mb

from trainfleet.backends.local.firewall import Firewall
from trainfleet.client import Client, ClientError, NotFound
from trainfleet.wire import JobDetails, UserBody

sys.path.insert(0, str(HERE.parent / "tests"))
from helpers import POSTGRES_URL, fresh_postgres_database, kill_processes_under

TEAMS = {"soak-a": "ana", "soak-b": "bo"}
"""Each team and its member."""
SECRET = "soak"
MAX_RESTARTS = 2
FINAL = ("succeeded", "failed", "cancelled")
INTENDED = {
    "quick": "succeeded",
    "flaky": "succeeded",
    "big": "succeeded",
    "sibling": "failed",
    "stop-now": "cancelled",
    "stop-later": "cancelled",
}
# fmt: off
TURNS = (
    "quick", "flaky", "big", "quick", "sibling", "stop-later", "quick", "flaky", "quick",
    "sibling", "stop-now", "quick", "big", "flaky", "quick", "sibling", "stop-later", "quick",
    "quick", "sibling",
)
# fmt: on
"""The kinds in the order they are submitted, over and over: 40% quick, 15% flaky, 10% big,
20% sibling, 5% stop-now, 10% stop-later."""
MASKED = b"token=***"
"""What a task's log shows where the task printed its TOKEN."""
SCRIPT = """\
# One task of the soak: sh soak.sh KIND [BYTES]. It prints both secret values (masked).
echo "token=$TOKEN"
echo "cert=$(cat "$CERT")"
case "$1" in
quick) echo done ;;
flaky)
    if [ -e .failed-once ]; then echo "second attempt"
    else : > .failed-once; echo "first attempt fails" >&2; exit 3; fi ;;
big) yes "$(printf '%099d' 0)" | head -c "$2"; echo done ;;
sleep) exec sleep 900 ;;
crash) sleep 0.3; echo "crashing" >&2; exit 1 ;;
esac
"""
CHUNK = 8 << 20


def tasks_of(kind: str) -> list[tuple[str, int]]:
    """The (role, index) of a kind's tasks."""
    return [("steady", 0), ("crashy", 0)] if kind == "sibling" else [("main", 0)]


def job_text(kind: str, big_output: int) -> str:
    """A job of ``kind`` as its member writes it (JSON, which is YAML too)."""
    step = {"stop-now": "sleep", "stop-later": "sleep"}.get(kind, kind)
    roles = {"main": {"command": f"sh soak.sh {step}"}}
    if kind == "big":
        roles["main"]["command"] += f" {big_output}"
    elif kind == "sibling":
        roles = {
            "steady": {"command": "sh soak.sh sleep"},
            "crashy": {"command": "sh soak.sh crash"},
        }
    job = {
        "name": f"soak-{kind}",
        "grace_period": 2,
        "env": {
            "TOKEN": {"secret": SECRET, "key": "token"},
            "CERT": {"secret": SECRET, "key": "cert", "file": True},
        },
        "roles": roles,
        "restart": {
            "policy": "on-failure",
            "max_restarts": MAX_RESTARTS,
            "backoff": {"initial": 0.2},
        },
    }
    return json.dumps(job)


# -- looking for the secrets --------------------------------------------------


def base64_forms(value: bytes) -> list[bytes]:
    """The base64 characters that ``value`` alone decides, at each of the three places it
    can start in a longer encoded text."""
    forms = []
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + value)
        first, last = -(-8 * pad // 6), 8 * (pad + len(value)) // 6
        forms.append(encoded[first:last])
    return forms


class Scanner:
    """Looks for the secrets' values (and their base64) in bytes, and counts what it read."""

    def __init__(self, values: dict[str, str]) -> None:
        """``values``: each secret value by a label (``soak-a token``)."""
        self.patterns = [(value.encode(), label) for label, value in values.items()]
        self.patterns += [
            (form, f"{label} (base64)")
            for label, value in values.items()
            for form in base64_forms(value.encode())
        ]
        self.keep = max(len(pattern) for pattern, _ in self.patterns) - 1
        self.read: Counter[str] = Counter()
        """Pieces read by kind (``answers``, ``logs``, ``files``...) and their ``... bytes``."""
        self.found: dict[tuple[str, str], int] = {}
        """(where, which value): how many times."""
        self._lock = threading.Lock()

    def check(self, data: bytes, where: str) -> None:
        for pattern, label in self.patterns:
            if pattern in data:
                with self._lock:
                    self.found[where, label] = self.found.get((where, label), 0) + 1

    def count(self, kind: str, size: int) -> None:
        with self._lock:
            self.read[kind] += 1
            self.read[f"{kind} bytes"] += size

    def stream(self, chunks: Iterator[bytes], where: str) -> Iterator[bytes]:
        """``chunks`` as they come, each checked with the end of the one before."""
        tail = b""
        for chunk in chunks:
            self.check(tail + chunk, where)
            tail = (tail + chunk)[-self.keep :]
            yield chunk


class _Scanned(httpx.SyncByteStream):
    """An answer's body, checked as the client reads it; counted once it is closed."""

    def __init__(self, inner: httpx.SyncByteStream, scanner: Scanner, where: str) -> None:
        self.inner, self.scanner, self.where = inner, scanner, where
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.scanner.stream(iter(self.inner), self.where):
            self.size += len(chunk)
            yield chunk

    def close(self) -> None:
        self.inner.close()
        self.scanner.count("logs read" if "/log" in self.where else "answers", self.size)


class ScanningTransport(httpx.HTTPTransport):
    """The SDK's transport, with every answer's bytes checked for the secrets."""

    def __init__(self, scanner: Scanner) -> None:
        super().__init__()
        self.scanner = scanner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"  # the bytes as they are
        response = super().handle_request(request)
        assert isinstance(response.stream, httpx.SyncByteStream)
        where = f"answer to {request.method} {request.url.path}"
        response.stream = _Scanned(response.stream, self.scanner, where)
        return response


def scan_tree(root: Path, scanner: Scanner) -> None:
    """Every regular file under ``root``, as bytes (links not followed)."""
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            if path.is_symlink() or not path.is_file():
                continue
            size = 0
            with path.open("rb") as handle:
                chunks = iter(lambda: handle.read(CHUNK), b"")
                for chunk in scanner.stream(chunks, f"file {path.relative_to(root)}"):
                    size += len(chunk)
            scanner.count("files", size)


def scan_database(url: str, scanner: Scanner) -> None:
    """A pg_dump of the database at ``url``."""
    done = subprocess.run(["pg_dump", "--dbname", url], capture_output=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"pg_dump: {done.stderr.decode(errors='replace')}")
    scanner.check(done.stdout, "pg_dump of the database")
    scanner.count("database dumps", len(done.stdout))


# -- the load -----------------------------------------------------------------


@dataclass(frozen=True)
class Submitted:
    """An acknowledged job."""

    id: str
    kind: str
    team: str


@dataclass
class Setup:
    """What the run is made of."""

    url: str
    admin: str
    members: dict[str, str]
    """Each team's member's token."""
    project: Path
    """The jobs' folder (soak.sh), sent with each."""
    server_pid: int
    database: str
    """Its name."""
    admin_url: str
    """Of the PostgreSQL cluster, for pg_stat_activity."""


class Soak:
    """The load's threads and what they saw."""

    def __init__(self, setup: Setup, scanner: Scanner, args: argparse.Namespace) -> None:
        self.setup, self.scanner, self.args = setup, scanner, args
        self.jobs: list[Submitted] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        """The load stops."""
        self.done = threading.Event()
        """The probes stop (after the drain)."""
        self.turn = 0
        self.errors: Counter[str] = Counter()
        self.cancels: Counter[str] = Counter()
        self.follows: dict[str, Counter[str]] = {kind: Counter() for kind in INTENDED}
        """Follows by the kind of the job followed and how they ended."""
        self.short_follows: list[dict[str, Any]] = []
        self.reads = 0
        self.health: list[float] = []
        self.samples: list[dict[str, float]] = []
        self.stoppers: list[threading.Thread] = []

    def client(self, team: str | None = None) -> Client:
        """An SDK client of ``team``'s member (of the administrator without a team)."""
        token = self.setup.members[team] if team else self.setup.admin
        return Client(self.setup.url, token, timeout=60, transport=ScanningTransport(self.scanner))

    def failed(self, what: str, error: BaseException) -> None:
        with self.lock:
            self.errors[f"{what}: {type(error).__name__}"] += 1

    # -- the clients --

    def submitter(self, number: int, began: float, ends: float) -> None:
        """Client ``number``: its share of the rate, paced, until ``ends``."""
        team = list(TEAMS)[number % len(TEAMS)]
        interval = self.args.clients / self.args.rate
        with self.client(team) as client:
            for k in range(1_000_000):
                due = began + (number / self.args.clients + k) * interval
                if due >= ends or self.stop.wait(max(0.0, due - time.monotonic())):
                    return
                with self.lock:
                    kind = TURNS[self.turn % len(TURNS)]
                    self.turn += 1
                try:
                    text = job_text(kind, self.args.big_output)
                    job = client.submit(text, workdir=self.setup.project)
                except ClientError as error:
                    self.failed("submit", error)
                    continue
                with self.lock:
                    self.jobs.append(Submitted(job.id, kind, team))
                if kind == "stop-now":
                    self.cancel(client, job.id)
                elif kind == "stop-later":
                    stopper = threading.Thread(target=self.stop_later, args=(team, job.id))
                    stopper.start()
                    self.stoppers.append(stopper)

    def cancel(self, client: Client, job_id: str) -> None:
        try:
            client.cancel(job_id)
        except ClientError as error:
            self.failed("cancel", error)
        else:
            with self.lock:
                self.cancels["ok"] += 1

    def stop_later(self, team: str, job_id: str) -> None:
        """Stop the job once it runs."""
        deadline, state = time.monotonic() + 60, "unknown"
        with self.client(team) as client:
            while time.monotonic() < deadline:
                state = client.get(job_id).state
                if state == "running":
                    self.cancel(client, job_id)
                    return
                if state in FINAL:
                    break
                time.sleep(0.1)
        with self.lock:
            self.errors[f"stop-later: {state} and not running"] += 1

    def follower(self, number: int) -> None:
        """Follow random jobs' logs, one at a time, leaving early or at the end."""
        rng = random.Random(number)
        clients = {team: self.client(team) for team in TEAMS}
        try:
            while not self.stop.is_set():
                with self.lock:
                    jobs = self.jobs[-30:] if rng.random() < 0.7 else self.jobs
                    job = rng.choice(jobs) if jobs else None
                if job is None:
                    self.stop.wait(0.2)
                    continue
                self.follow(clients[job.team], job, *rng.choice(tasks_of(job.kind)), rng)
                self.stop.wait(rng.uniform(0, 1))
        finally:
            for client in clients.values():
                client.close()

    def follow(self, client: Client, job: Submitted, role: str, index: int, rng: Any) -> None:
        leave = time.monotonic() + rng.uniform(0.5, 8)
        got, left = 0, False
        stream = cast(Generator[str, None, None], client.follow_log(job.id, role, index))
        try:
            for text in stream:
                got += len(text.encode())
                if time.monotonic() > leave or self.stop.is_set():
                    left = True
                    break
            size = 0 if left else _log_size(client, job.id, role, index)
        except ClientError as error:
            self.failed("follow", error)
            return
        finally:
            stream.close()
        ended = "left early" if left else "to the end, " + ("whole" if got == size else "short")
        with self.lock:
            self.follows[job.kind][ended] += 1
            if ended == "to the end, short":
                where = {"job": job.id, "kind": job.kind, "task": f"{role}/{index}"}
                self.short_follows.append({**where, "got": got, "log_size": size})

    def reader(self, number: int) -> None:
        """List a team's jobs and describe one of them, in a loop."""
        team = list(TEAMS)[number % len(TEAMS)]
        rng = random.Random(1000 + number)
        with self.client(team) as client:
            while not self.stop.wait(0.1):
                with self.lock:
                    mine = [job for job in self.jobs[-100:] if job.team == team]
                try:
                    client.find(limit=50)
                    if mine:
                        client.describe(rng.choice(mine).id)
                except ClientError as error:
                    self.failed("read", error)
                    continue
                with self.lock:
                    self.reads += 2 if mine else 1

    # -- the probes --

    def prober(self) -> None:
        """GET /healthz every 0.25 s until the probes stop."""
        with httpx.Client(base_url=self.setup.url, timeout=30) as http:
            while not self.done.wait(0.25):
                began = time.perf_counter()
                try:
                    status = http.get("/healthz").status_code
                except httpx.HTTPError as error:
                    self.failed("healthz", error)
                    continue
                if status != 200:
                    with self.lock:
                        self.errors[f"healthz: {status}"] += 1
                self.health.append(time.perf_counter() - began)

    def sampler(self) -> None:
        """The server's threads, descriptors, RSS and database connections, every 2 s."""
        pid, began = self.setup.server_pid, time.monotonic()
        with psycopg.connect(self.setup.admin_url, autocommit=True) as db:
            while True:
                status = Path(f"/proc/{pid}/status").read_text()
                threads = next(line for line in status.splitlines() if line.startswith("Threads:"))
                connections = db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                    (self.setup.database,),
                ).fetchone()
                self.samples.append(
                    {
                        "at_s": round(time.monotonic() - began, 1),
                        "threads": int(threads.split()[1]),
                        "fds": len(os.listdir(f"/proc/{pid}/fd")),
                        "rss_mb": round(rss_mb(pid), 1),
                        "db_connections": connections[0] if connections else -1,
                    }
                )
                if self.done.wait(self.args.sample_every):
                    return

    # -- the run --

    def run(self) -> float:
        """The load for the run's length, then the drain; returns the drain's seconds."""
        length = self.args.seconds if self.args.seconds is not None else self.args.minutes * 60
        began = time.monotonic()
        ends = began + length
        probes = [threading.Thread(target=self.sampler), threading.Thread(target=self.prober)]
        load = [
            *(
                threading.Thread(target=self.submitter, args=(n, began, ends))
                for n in range(self.args.clients)
            ),
            *(
                threading.Thread(target=self.follower, args=(n,))
                for n in range(self.args.followers)
            ),
            *(threading.Thread(target=self.reader, args=(n,)) for n in range(self.args.readers)),
        ]
        for thread in (*probes, *load):
            thread.daemon = True
            thread.start()
        try:
            self.stop.wait(length)
            self.stop.set()
            stopped = time.monotonic()
            for thread in (*load, *self.stoppers):
                thread.join(timeout=max(1.0, stopped + 60 - time.monotonic()))
            busy = sum(thread.is_alive() for thread in (*load, *self.stoppers))
            if busy:
                with self.lock:
                    self.errors["threads of the load still busy 60 s after it stopped"] += busy
            self.drain(stopped + self.args.drain)
            return time.monotonic() - stopped
        finally:
            self.stop.set()
            self.done.set()
            for thread in probes:
                thread.join(timeout=30)

    def drain(self, deadline: float) -> None:
        """Wait until every acknowledged job has ended, or ``deadline``."""
        waiting = {job.id for job in self.jobs}
        with self.client() as admin:
            while waiting and time.monotonic() < deadline:
                states = {job.id: job.state for job in admin.list_jobs(page_size=1000)}
                waiting = {job_id for job_id in waiting if states.get(job_id) not in FINAL}
                time.sleep(1)


def _log_size(client: Client, job_id: str, role: str, index: int) -> int:
    """A task's log size; 0 for a task that never started (no log)."""
    try:
        return client.log_size(job_id, role, index)
    except NotFound:
        return 0


# -- the end: outcomes, audit, logs -------------------------------------------


def as_intended(job: Submitted, details: JobDetails, admin: Client, big_output: int) -> bool:
    """Whether the job ended as its kind means it to."""
    if details.job.state != INTENDED[job.kind]:
        return False
    restarts = {task.role: task.restarts for task in details.tasks}
    if job.kind == "flaky":
        return restarts.get("main") == 1
    if job.kind == "sibling":
        return restarts.get("crashy") == MAX_RESTARTS
    if job.kind == "big":
        return _log_size(admin, job.id, "main", 0) >= big_output
    return True


def outcomes(soak: Soak, admin: Client) -> dict[str, Any]:
    """How each acknowledged job ended, by kind; the stuck and the unintended ones."""
    kinds: dict[str, Counter[str]] = {kind: Counter() for kind in INTENDED}
    stuck, unintended = [], []
    for job in soak.jobs:
        details = admin.describe(job.id)
        state = str(details.job.state)
        intended = as_intended(job, details, admin, soak.args.big_output)
        kinds[job.kind].update({"acknowledged": 1, state: 1, "as intended": int(intended)})
        if state not in FINAL:
            stuck.append({"job": job.id, "kind": job.kind, "state": state})
        elif not intended:
            tasks = {task.name: (str(task.state), task.restarts) for task in details.tasks}
            unintended.append({"job": job.id, "kind": job.kind, "state": state, "tasks": tasks})
    return {
        "acknowledged": len(soak.jobs),
        "as_intended": sum(counts["as intended"] for counts in kinds.values()),
        "stuck": len(stuck),
        "by_kind": {kind: dict(counts) for kind, counts in kinds.items()},
        "stuck_jobs": stuck,
        "unintended_jobs": unintended[:50],
    }


def audit_per_change(soak: Soak, admin: Client) -> dict[str, Any]:
    """The audit records (ok and refused) by action, beside the changes the run made."""
    records = list(admin.audit(limit=None, page_size=1000))
    ok = Counter(record.action for record in records if record.outcome == "ok")
    refused = Counter(record.action for record in records if record.outcome != "ok")
    teams = len(TEAMS)
    changes = {
        "team.create": teams,
        "user.create": teams,
        "secret.create": teams,
        "job.submit": len(soak.jobs),
        "job.stop": soak.cancels["ok"],
    }
    return {
        "records": len(records),
        "ok_by_action": dict(ok),
        "refused_by_action": dict(refused),
        "changes": changes,
        "one_per_change": all(ok[action] == count for action, count in changes.items()),
    }


def read_logs(soak: Soak, admin: Client) -> dict[str, int]:
    """Every task's log, read whole (the transport checks it); how many show the mask."""
    figures: Counter[str] = Counter()
    for job in soak.jobs:
        for role, index in tasks_of(job.kind):
            try:
                log = admin.read_log(job.id, role, index)
            except NotFound:
                figures["absent (never started)"] += 1
                continue
            figures["read"] += 1
            figures["showing token=***"] += MASKED in log
    return dict(figures)


def stop_stuck(admin: Client, stuck: list[dict[str, Any]]) -> None:
    """Cancel the stuck jobs and give them a while to end, so that the server stops clean."""
    for job in stuck:
        with contextlib.suppress(ClientError):
            admin.cancel(job["job"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(admin.get(job["job"]).state in FINAL for job in stuck):
            return
        time.sleep(1)


def leftovers(folder: Path) -> list[int]:
    """Processes (but this one) that run in ``folder``, name it or are an attempt of it."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd", "environ"]):
        attempt = (process.info["environ"] or {}).get("TRAINFLEET_ATTEMPT", "")
        names = [*(process.info["cmdline"] or []), process.info["cwd"] or "", attempt]
        if process.pid != os.getpid() and any(str(folder) in name for name in names):
            found.append(process.pid)
    return found


def clean_up(data: Path) -> dict[str, Any]:
    """Count what the stopped server left (processes, nft rules), then remove it."""
    processes = leftovers(data)
    kill_processes_under(data)
    for pid in leftovers(data):  # attempts that only their environment names
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    nft = shutil.which("nft")
    rules = Firewall(str(data), nft)._listed() if nft else []
    Firewall.clear(str(data))
    return {"processes": len(processes), "nft_rules": len(rules)}


# -- the run ------------------------------------------------------------------


def make_teams(
    url: str, admin_token: str, scanner: Scanner, values: dict[str, str]
) -> dict[str, str]:
    """The teams, their members and secrets; each member's token."""
    members = {}
    transport = ScanningTransport(scanner)
    with Client(url, admin_token, timeout=60, transport=transport) as admin:
        for team, member in TEAMS.items():
            admin.create_team(team)
            members[team] = admin.create_user(UserBody(name=member, team=team)).token
    for team, token in members.items():
        with Client(url, token, timeout=60, transport=ScanningTransport(scanner)) as client:
            keys = {key: values[f"{team} {key}"] for key in ("token", "cert")}
            client.create_secret(SECRET, keys)
    return members


def postgres_url(given: str | None) -> str:
    """The PostgreSQL cluster's URL: given, from the tests' variable, else scripts/postgres.sh's."""
    if given or os.environ.get(POSTGRES_URL):
        return given or os.environ[POSTGRES_URL]
    script = HERE.parent / "scripts" / "postgres.sh"
    done = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"no PostgreSQL: {script} start failed:\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def spread(samples: list[dict[str, float]], name: str) -> dict[str, float]:
    """First, max and last of one sampled figure."""
    values = [sample[name] for sample in samples]
    return {"first": values[0], "max": max(values), "last": values[-1]} if values else {}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole soak; its figures."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("nft"):
        raise SystemExit("the soak runs a server isolating teams: it needs root, setpriv, nft")
    os.environ[POSTGRES_URL] = admin_url = postgres_url(args.postgres_url)
    os.environ["TRAINFLEET_ISOLATE_TEAMS"] = "1"  # read by the server that Server starts
    os.environ.setdefault("TRAINFLEET_TASK_PYTHON", "/usr/bin/python3")
    values = {
        f"{team} {key}": f"soak-{key}-{secrets.token_hex(16)}"
        for team in TEAMS
        for key in ("token", "cert")
    }
    scanner = Scanner(values)
    length = args.seconds if args.seconds is not None else args.minutes * 60
    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "database": "postgresql",
        "seconds": length,
        "rate_jobs_per_s": args.rate,
        "clients": args.clients,
        "followers": args.followers,
        "readers": args.readers,
        "big_output_bytes": args.big_output,
        "drain_s": args.drain,
    }
    with (
        tempfile.TemporaryDirectory(prefix="trainfleet-soak-", dir="/var/tmp") as tmp,
        fresh_postgres_database() as url,
    ):
        Path(tmp).chmod(0o711)  # the teams' accounts pass through to their jobs
        data, project = Path(tmp) / "data", Path(tmp) / "project"
        project.mkdir()
        (project / "soak.sh").write_text(SCRIPT)
        token = secrets.token_hex(16)
        server = Server(data, token, url)
        try:
            members = make_teams(f"http://{HOST}:{server.port}", token, scanner, values)
            setup = Setup(
                url=f"http://{HOST}:{server.port}",
                admin=token,
                members=members,
                project=project,
                server_pid=server.process.pid,
                database=urlsplit(url).path.lstrip("/"),
                admin_url=admin_url,
            )
            soak = Soak(setup, scanner, args)
            print(f"soak of {length:g} s at {args.rate:g} jobs/s ...", flush=True)
            results["drained_after_s"] = soak.run()
            print("the load stopped; checking ...", flush=True)
            with soak.client() as admin:
                results["jobs"] = outcomes(soak, admin)
                results["audit"] = audit_per_change(soak, admin)
                results["logs"] = read_logs(soak, admin)
                stop_stuck(admin, results["jobs"]["stuck_jobs"])
            results["server"] = {
                name: spread(soak.samples, name)
                for name in ("threads", "fds", "rss_mb", "db_connections")
            }
            results["samples"] = soak.samples
            results["healthz"] = _latency(soak.health) if soak.health else {}
            results["follows"] = {kind: dict(ended) for kind, ended in soak.follows.items()}
            results["short_follows"] = soak.short_follows[:50]
            results["reads"] = soak.reads
            results["cancels_ok"] = soak.cancels["ok"]
            results["errors"] = dict(soak.errors)
        except BaseException:
            print("\n".join(server.tail), file=sys.stderr)
            raise
        finally:
            results["server_exit_code"] = server.stop()
            results["server_output_lines"] = server.lines
            results["server_output_tail"] = list(server.tail)
            results["left_behind"] = clean_up(data)
        scan_tree(data, scanner)
        scan_database(url, scanner)
    results["secrets"] = {
        "read": dict(scanner.read),
        "found": [
            {"where": where, "value": label, "times": times}
            for (where, label), times in sorted(scanner.found.items())
        ],
    }
    results["held"] = held(results)
    return results


def held(results: dict[str, Any]) -> dict[str, bool]:
    """The soak's figures that must hold."""
    jobs = results["jobs"]
    return {
        "every acknowledged job ended as intended": jobs["as_intended"] == jobs["acknowledged"],
        "none stuck": jobs["stuck"] == 0,
        "one audit record per change": results["audit"]["one_per_change"],
        "every follow to the end got the whole log": not results["short_follows"],
        "no secret value anywhere": not results["secrets"]["found"],
        "nothing left behind": not any(results["left_behind"].values()),
    }


def table(results: dict[str, Any]) -> str:
    """The figures, as the issue reports them."""
    jobs, server, audit, read = (
        results["jobs"],
        results["server"],
        results["audit"],
        results["secrets"]["read"],
    )

    def spread_text(name: str, unit: str = "") -> str:
        figure = server[name]
        return " / ".join(f"{figure[at]:g}{unit}" for at in ("first", "max", "last"))

    health = results["healthz"]
    kinds = ", ".join(
        f"{kind} {counts.get('as intended', 0)}/{counts.get('acknowledged', 0)}"
        for kind, counts in jobs["by_kind"].items()
    )
    per_change = ", ".join(
        f"{action} {audit['ok_by_action'].get(action, 0)}/{count}"
        for action, count in audit["changes"].items()
    )
    found = results["secrets"]["found"]
    follows = sum((Counter(ended) for ended in results["follows"].values()), Counter())
    rows: list[tuple[str, ...]] = [
        ("measure", "figure"),
        ("length, rate", f"{results['seconds']:g} s at {results['rate_jobs_per_s']:g} jobs/s"),
        ("acknowledged jobs", f"{jobs['acknowledged']:,}"),
        ("  ended as intended", f"{jobs['as_intended']:,} ({kinds})"),
        (f"  stuck ({results['drain_s']:g} s after the load)", str(jobs["stuck"])),
        ("server threads first / max / last", spread_text("threads")),
        ("  open descriptors", spread_text("fds")),
        ("  RSS", spread_text("rss_mb", " MB")),
        ("  database connections", spread_text("db_connections")),
        (
            "/healthz p50 / p99",
            f"{health.get('p50_ms', 0):.1f} / {health.get('p99_ms', 0):.1f} ms "
            f"({health.get('requests', 0):,} probes)",
        ),
        ("audit records ok / changes", per_change),
        ("follows", ", ".join(f"{k} {n}" for k, n in sorted(follows.items()))),
        (
            "  of big logs",
            ", ".join(f"{k} {n}" for k, n in sorted(results["follows"]["big"].items())),
        ),
        ("reads (list, describe)", f"{results['reads']:,}"),
        (
            "searched for the secrets",
            f"{read.get('answers', 0):,} answers, {read.get('logs read', 0):,} logs read, "
            f"{read.get('files', 0):,} files ({read.get('files bytes', 0) / 1e6:,.0f} MB), "
            f"{read.get('database dumps', 0)} database dump",
        ),
        ("  found", "nowhere" if not found else f"{len(found)} places: {found[:3]}"),
        ("left behind (processes, nft rules)", str(results["left_behind"])),
        ("errors", str(results["errors"] or "none")),
    ]
    rows += [(f"held: {name}", _met(ok)) for name, ok in results["held"].items()]
    return _rows_table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, help="instead of --minutes")
    parser.add_argument("--rate", type=float, default=2.0, help="jobs/s, all clients together")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--followers", type=int, default=20)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument(
        "--big-output", type=int, default=20 << 20, help="bytes a big job writes (20 MiB)"
    )
    parser.add_argument(
        "--drain", type=float, default=60.0, help="seconds the jobs have to end after the load"
    )
    parser.add_argument("--sample-every", type=float, default=2.0, help="seconds")
    parser.add_argument(
        "--postgres-url",
        help=f"a PostgreSQL cluster's URL [default: {POSTGRES_URL}, else scripts/postgres.sh's]",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "soak.json")
    args = parser.parse_args()
    if args.rate <= 0 or args.clients < 1:
        parser.error("--rate and --clients must be positive")
    results = run(args)
    print(table(results))
    _write(args.out, results)


if __name__ == "__main__":
    main()
