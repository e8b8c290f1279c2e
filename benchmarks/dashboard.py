"""Dashboard benchmarks (issue 25): the page in a real browser and the server behind it, on
SQLite and on PostgreSQL, each figure beside its target (and a peer where one fits).

Every part runs its own `trainfleet server` (a subprocess, as benchmarks/api.py's
``Server``, so that this process's CPU does not count as the server's) on a fresh data
directory and a fresh database (PostgreSQL: a new database on --postgres-url, else on the
cluster that scripts/postgres.sh starts, dropped afterwards). The browser is Debian's
chromium, headless, driven by playwright, signed in through the page with the admin token.

(list)    10,000 stored jobs (added through trainfleet.store, not run; mixed states, users
          and labels): first rows in the browser (navigation to the first job row, from
          the page's own clock), a state filter change (submit to the first row of that
          state), GET /api/v1/jobs?limit=50 p99 with and without filters, one client;
          peer: GET /healthz from the same client.
(log)     one ended task whose log is --log-mib (1024) MiB of 64-byte lines, written
          straight into its place in the data directory: the tail on screen (navigation
          to the job's page until its last line shows in `.log`), the first 100 hits of
          a search whose hits are near the start and of one whose 100 hits are spread over
          the whole log (following `next`), and the server's RSS before, at its peak
          during these and a whole download, and after; peer: `grep -m 100 -i` of the
          same file.
(follow)  a real task printing --rate (10,000) lines/s for --seconds (60; --short: 20),
          each holding its print time: the job's page opened as it starts and left
          following it; the lag from a line's print time to its first showing as a
          `.log .row` (a MutationObserver in the page: at each update of the rows, the lag
          of the oldest line new to the page, bounded by the print time of the newest line
          of the update before, and beside it that of the newest line), the renderer's
          CPU (psutil, the chromium processes of --type=renderer), the most `.log .row`
          nodes at once, and at the end whether every line is in the view's rows
          (contiguous, checked by scrolling) or declared left out by its note.
(feed)    --feeds (200) SSE clients of GET /api/v1/events/follow (raw asyncio sockets,
          several users: a user may hold 32): GET /healthz p99, paced, before they open
          (peer) and while they are open, and the time from a POST /api/v1/jobs to its
          `submitted` change reaching each client.
(metrics) GET /metrics with --tasks (1,000) running tasks: stored as running with a usage
          history of a few samples each (fake: that many real tasks do not run on two
          cores); peer: GET /healthz.
(page)    the first page's size: index.html and every asset, each gzip -9, summed.

Sampling's cost (<= 1% of a core per 100 tasks) is benchmarks/sampling.py's: its figure
is read from benchmarks/results/sampling.json when there, not measured again.

usage: python benchmarks/dashboard.py [--only list,log,follow,feed,metrics,page]
                                      [--database sqlite|postgresql|both] [--short]
Prints a table and writes the figures as JSON (default benchmarks/results/dashboard.json).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import psutil
import uvloop
from api import HERE, HOST, Load, Server, _rows_table, _write
from api import _latency as _api_latency
from soak import postgres_url

from trainfleet.control.services.tokens import new_record, new_token
from trainfleet.datadir import usage
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.records import JobRecord, State, TaskRecord, UserRecord
from trainfleet.spec.models import JobSpec
from trainfleet.store.database import Store

sys.path.insert(0, str(HERE.parent / "tests"))
from helpers import POSTGRES_URL, fresh_postgres_database

PARTS = ("list", "log", "follow", "feed", "metrics", "page")
DASHBOARD = HERE.parent / "src" / "trainfleet" / "server" / "dashboard"
MIB = 1 << 20
TARGETS = {
    "first_rows_ms": 1000,
    "filter_change_ms": 300,
    "list_p99_ms": 50,
    "tail_ms": 1000,
    "search_100_ms": 3000,
    "rss_growth_mb": 50,
    "lag_p95_ms": 1000,
    "renderer_cores": 1.0,
    "line_nodes": 5000,
    "healthz_p99_ms": 50,
    "change_p95_ms": 1000,
    "metrics_ms": 200,
    "page_kib": 300,
}
STATES = (State.SUCCEEDED, State.FAILED, State.CANCELLED, State.SUCCEEDED)
"""Ended states only: a stored queued job would be run by the server."""
LAST_LINE = "THE-LAST-LINE-OF-THE-LOG"


# -- where the data lives -----------------------------------------------------------


class Place:
    """A fresh data directory and database for one part, and its server once started."""

    def __init__(self, root: Path, database: str) -> None:
        self.data = DataDir(root / "data")
        self.data.root.mkdir(parents=True)
        self.database = database
        self.url: str | None = None
        self.token = secrets.token_hex(16)
        self.server: Server | None = None
        self._pg: contextlib.ExitStack | None = None

    def __enter__(self) -> Place:
        if self.database == "postgresql":
            self._pg = contextlib.ExitStack()
            self.url = self._pg.enter_context(fresh_postgres_database())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.stop()
        if self._pg is not None:
            self._pg.close()

    @property
    def target(self) -> str:
        return self.url or str(self.data.database)

    def start(self) -> str:
        """Start the server; its base URL."""
        self.server = Server(self.data.root, self.token, self.url)
        return f"http://{HOST}:{self.server.port}"

    @property
    def pid(self) -> int:
        assert self.server is not None
        return self.server.process.pid


SPEC = JobSpec.model_validate(
    {"name": "bench-stored", "roles": {"worker": {"command": ["python", "train.py"]}}}
).model_dump_json()


def stored_job(job_id: str, created: float, state: State, **fields: Any) -> JobRecord:
    ended = State(state).is_final
    values: dict[str, Any] = {
        "id": job_id,
        "name": fields.pop("name", "bench-stored"),
        "framework": "generic",
        "state": state,
        "spec": SPEC,
        "workdir": "/tmp",
        "user": "bench",
        "created_at": created,
        "started_at": created + 0.1 if state is not State.QUEUED else None,
        "finished_at": created + 0.5 if ended else None,
    }
    return JobRecord(**{**values, **fields})


def stored_task(job: JobRecord, index: int = 0) -> TaskRecord:
    ended = State(job.state).is_final
    return TaskRecord(
        job_id=job.id,
        role="worker",
        index=index,
        state=job.state,
        address=f"{HOST}:{29500 + index}",
        exit_code=(0 if job.state is State.SUCCEEDED else 1) if ended else None,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def fill_jobs(target: str, count: int) -> float:
    """``count`` jobs of mixed states, users and labels; the seconds it took."""
    started = time.perf_counter()
    base = time.time() - count
    with Store.open(target) as store:
        for n in range(count):
            state = STATES[n % len(STATES)]
            job = stored_job(
                f"stored-{n:05d}",
                base + n,
                state,
                user=f"user{n % 7}",
                labels={"bench": "list", "batch": str(n % 10)},
            )
            store.add_job(job, [stored_task(job)])
    return time.perf_counter() - started


def add_admins(target: str, count: int) -> list[str]:
    """``count`` administrators, a token each (a user may hold 32 change feeds)."""
    tokens = []
    with Store.open(target) as store:
        for n in range(count):
            name = f"feeder{n}"
            store.accounts.add_user(UserRecord(name=name, admin=True, created_at=time.time()))
            secret = new_token()
            store.add_token(new_record(f"t{secrets.token_hex(3)}", secret, name))
            tokens.append(secret)
    return tokens


def _latency(samples: list[float]) -> dict[str, float]:
    """benchmarks/api.py's percentiles (seconds in, milliseconds out), and p95."""
    ordered = sorted(samples)
    p95 = ordered[max(0, -(-95 * len(ordered) // 100) - 1)] * 1000
    return _api_latency(samples) | {"p95_ms": p95}


def run_async(make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine on a uvloop loop of a thread of its own (playwright's sync API holds
    a loop in this thread)."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                out["value"] = runner.run(make())
        except BaseException as error:
            out["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


# -- the browser ------------------------------------------------------------------


class Browser:
    """Headless Debian chromium through playwright, signed in to one server."""

    def __init__(self, chromium: str) -> None:
        from playwright.sync_api import sync_playwright

        self._driver = sync_playwright().start()
        self.browser = self._driver.chromium.launch(
            executable_path=chromium,
            headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-sync"],
        )
        self.context: Any = None

    def sign_in(self, url: str, token: str) -> Any:
        """A fresh context signed in at ``url``; a page of it."""
        if self.context is not None:
            self.context.close()
        self.context = self.browser.new_context(
            viewport={"width": 1280, "height": 900},
            bypass_csp=True,  # for our probes only
        )
        page = self.context.new_page()
        page.goto(url + "/")
        page.get_by_label("token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", name="Jobs").wait_for(timeout=30_000)
        return page

    def renderers(self) -> list[psutil.Process]:
        """Chromium's renderer processes (children of this process, by their command line)."""
        found = []
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "--type=renderer" in " ".join(process.cmdline()):
                    found.append(process)
        return found

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.browser.close()
        self._driver.stop()


FIRST_ROW = """
window.__bench = {};
new MutationObserver(() => {
  if (window.__bench.firstRow === undefined && document.querySelector("tr[data-job]")) {
    window.__bench.firstRow = performance.now();
  }
}).observe(document, {childList: true, subtree: true});
"""

FILTER = """
async (state) => {
  const select = document.querySelector("form.filters select[name=state]");
  select.value = state;
  const began = performance.now();
  document.querySelector("form.filters button[type=submit]").click();
  return await new Promise((resolve) => {
    const look = () => {
      if (performance.now() - began > 20000) { resolve(-1); return; }
      const first = document.querySelector("table.jobs tbody tr[data-job] .state");
      if (first && first.textContent === state) resolve(performance.now() - began);
      else requestAnimationFrame(look);
    };
    look();
  });
}
"""

TAIL = """
window.__bench = {};
new MutationObserver(() => {
  if (window.__bench.tail !== undefined) return;
  for (const row of document.querySelectorAll(".log .row")) {
    if (row.textContent.includes("LAST")) { window.__bench.tail = performance.now(); return; }
  }
}).observe(document, {childList: true, subtree: true});
""".replace("LAST", LAST_LINE)

FOLLOW = """
window.__bench = {lags: [], newest: [], seen: -1, seenAt: 0, maxRows: 0};
new MutationObserver((records) => {
  const now = Date.now() / 1000;
  const bench = window.__bench;
  let newest = bench.seen, newestAt = 0;
  for (const record of records) {
    for (const node of record.addedNodes) {
      if (!(node instanceof Element) || !node.classList.contains("row")) continue;
      const found = /^(\\d+) (\\d+\\.\\d+) /.exec(node.textContent);
      if (found && Number(found[1]) > newest) {
        newest = Number(found[1]);
        newestAt = Number(found[2]);
      }
    }
  }
  if (newest > bench.seen) {
    // The lines after the last one seen, up to this newest, are in the page from now: the
    // oldest of them was printed no earlier than the last one seen (an upper bound of their
    // lag); the newest, at its own time.
    if (bench.seen >= 0) bench.lags.push(now - bench.seenAt);
    bench.newest.push(now - newestAt);
    bench.seen = newest;
    bench.seenAt = newestAt;
  }
  const rows = document.querySelectorAll(".log .row").length;
  if (rows > bench.maxRows) bench.maxRows = rows;
}).observe(document, {childList: true, subtree: true});
"""

CHECK_LINES = """
async (total) => {
  const box = document.querySelector(".log");
  const spacer = box.querySelector(".spacer");
  const ROW = 18;
  const kept = Math.round(parseFloat(spacer.style.height) / ROW);
  const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const numberAt = async (line) => {
    box.scrollTop = line * ROW;
    box.dispatchEvent(new Event("scroll"));
    await frame(); await frame();
    for (const row of box.querySelectorAll(".row")) {
      if (Math.round(parseFloat(row.style.top) / ROW) === line) {
        return Number(/^(\\d+) /.exec(row.textContent)?.[1] ?? -1);
      }
    }
    return -1;
  };
  const first = await numberAt(0);
  const checks = [];
  for (const at of [0, 0.25, 0.5, 0.75, 1]) {
    const line = Math.min(kept - 1, Math.floor(at * (kept - 1)));
    checks.push([line, await numberAt(line)]);
  }
  const note = document.querySelector(".logview .note").textContent;
  return {kept, first, checks, note};
}
"""


# -- (list) -------------------------------------------------------------------------


def bench_list(args: argparse.Namespace, database: str, browser: Browser | None) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="trainfleet-bench-dash-") as tmp,
        Place(Path(tmp), database) as place,
    ):
        print(f"  (list) storing {args.jobs:,} jobs ...", flush=True)
        result: dict[str, Any] = {"jobs": args.jobs, "fill_s": fill_jobs(place.target, args.jobs)}
        url = place.start()
        load = Load(place.server.port, place.token)  # type: ignore[union-attr]
        queries = {
            "none": "",
            "state": "&state=failed",
            "user": "&user=user3",
            "label": "&label=batch%3D4",
            "state+user+label": "&state=succeeded&user=user2&label=batch%3D2",
        }

        async def api_probes() -> dict[str, Any]:
            out: dict[str, Any] = {}
            total = args.list_requests
            for name, query in queries.items():
                target = f"/api/v1/jobs?limit=50{query}"
                run = await load.run(1, total, lambda n, t=target: ("GET", t, b""), warmup=5)
                out[name] = run["latency"] | {"errors": run["errors"]}
            run = await load.run(1, total, lambda n: ("GET", "/healthz", b""), warmup=5, auth=False)
            out["healthz (peer)"] = run["latency"]
            return out

        result["api"] = run_async(api_probes)
        result["list_p99_ms"] = max(
            figures["p99_ms"] for name, figures in result["api"].items() if "peer" not in name
        )
        if browser is not None:
            page = browser.sign_in(url, place.token)
            page.close()
            firsts = []
            for _ in range(args.page_loads):
                page = browser.context.new_page()
                page.add_init_script(FIRST_ROW)
                page.goto(url + "/#/jobs")
                page.wait_for_function("window.__bench.firstRow !== undefined", timeout=30_000)
                firsts.append(page.evaluate("window.__bench.firstRow") / 1000)
                if len(firsts) < args.page_loads:
                    page.close()
            changes = []
            for state in ("failed", "cancelled", "succeeded") * args.filter_rounds:
                took = page.evaluate(FILTER, state)
                if took < 0:
                    raise RuntimeError(f"no {state} row 20 s after the filter changed")
                changes.append(took / 1000)
            page.close()
            result["first_rows"] = _latency(firsts)
            result["filter_change"] = _latency(changes)
        return result


# -- (log) --------------------------------------------------------------------------


def write_log(path: Path, mib: int) -> tuple[int, int]:
    """``mib`` MiB of 64-byte lines, the 100 lines holding ``RARE-NEEDLE`` spread evenly,
    the last ``LAST_LINE``; its size and line count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines_per_block = MIB // 64
    template = b"".join(
        (b"block BBBBBB line %06d the quick brown fox jumps over it" % n).ljust(63, b".") + b"\n"
        for n in range(lines_per_block)
    )
    assert len(template) == MIB, len(template)
    rare_every = max(1, mib // 100)
    rare = b"block BBBBBB line 000000 the RARE-NEEDLE jumps over it".ljust(63, b".") + b"\n"
    with path.open("wb") as log:
        for block in range(mib):
            data = template.replace(b"BBBBBB", b"%06d" % block)
            if block % rare_every == 0 and block // rare_every < 100:
                data = rare.replace(b"BBBBBB", b"%06d" % block) + data[64:]
            if block == mib - 1:
                data = data[:-64] + (LAST_LINE.encode() + b" " * 64)[:63] + b"\n"
            log.write(data)
    return path.stat().st_size, mib * lines_per_block


class RssWatch:
    """The peak RSS of one process, sampled every 20 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def now(self) -> float:
        return self.process.memory_info().rss / MIB

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.now())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


def bench_log(args: argparse.Namespace, database: str, browser: Browser | None) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="trainfleet-bench-dash-") as tmp,
        Place(Path(tmp), database) as place,
    ):
        job = stored_job("biglog", time.time() - 60, State.SUCCEEDED, name="biglog")
        with Store.open(place.target) as store:
            store.add_job(job, [stored_task(job)])
        log_path = place.data.log_path(job.id, "worker", 0)
        print(f"  (log) writing a {args.log_mib} MiB log ...", flush=True)
        size, lines = write_log(log_path, args.log_mib)
        result: dict[str, Any] = {"log_bytes": size, "log_lines": lines}
        url = place.start()
        base = f"{url}/api/v1/jobs/{job.id}/tasks/worker/0/log"
        headers = {"Authorization": f"Bearer {place.token}"}
        with httpx.Client(headers=headers, timeout=120) as http:
            http.get(f"{url}/api/v1/jobs/{job.id}").raise_for_status()  # warm
            time.sleep(1)
            rss_before = psutil.Process(place.pid).memory_info().rss / MIB
            watch = RssWatch(place.pid)
            if browser is not None:
                page = browser.sign_in(url, place.token)
                page.close()
                tails = []
                for _ in range(args.page_loads):
                    page = browser.context.new_page()
                    page.add_init_script(TAIL)
                    page.goto(f"{url}/#/jobs/{job.id}")
                    page.wait_for_function("window.__bench.tail !== undefined", timeout=60_000)
                    tails.append(page.evaluate("window.__bench.tail") / 1000)
                    page.close()
                result["tail"] = _latency(tails)

            def search(query: str) -> tuple[float, int, int]:
                began, hits, start, calls = time.perf_counter(), 0, 0, 0
                while hits < 100:
                    found = http.get(
                        f"{base}/search", params={"q": query, "start": start, "limit": 100 - hits}
                    )
                    found.raise_for_status()
                    answer = found.json()
                    hits += len(answer["hits"])
                    calls += 1
                    if answer["next"] is None:
                        break
                    start = answer["next"]
                return time.perf_counter() - began, hits, calls

            for name, query in (("near", "quick brown fox"), ("spread", "rare-needle")):
                times, hits, calls = [], 0, 0
                for _ in range(args.search_rounds):
                    took, hits, calls = search(query)
                    times.append(took)
                grep = []
                for _ in range(args.search_rounds):
                    began = time.perf_counter()
                    subprocess.run(
                        ["grep", "-m", "100", "-i", "-F", query, str(log_path)],
                        stdout=subprocess.PIPE,  # not /dev/null: grep would stop at one
                        check=False,
                    )
                    grep.append(time.perf_counter() - began)
                result[f"search_{name}"] = _latency(times) | {"hits": hits, "calls": calls}
                result[f"grep_{name} (peer)"] = _latency(grep)
            began = time.perf_counter()
            got = 0
            with http.stream("GET", f"{base}/download") as answer:
                for chunk in answer.iter_bytes(MIB):
                    got += len(chunk)
            result["download_s"] = time.perf_counter() - began
            result["download_bytes"] = got
            peak = watch.stop()
            time.sleep(2)
            after = psutil.Process(place.pid).memory_info().rss / MIB
        result |= {
            "rss_before_mib": rss_before,
            "rss_peak_mib": peak,
            "rss_after_mib": after,
            "rss_growth_mb": (max(peak, after) - rss_before) * MIB / 1e6,
        }
        return result


# -- (follow) -----------------------------------------------------------------------

PRINTER = """\
import sys, time
rate, seconds = {rate}, {seconds}
pad = "x" * 40
out = sys.stdout
n, began = 0, time.time()
while n < rate * seconds:
    due = began + n / rate
    now = time.time()
    if due > now:
        time.sleep(due - now)
    now = time.time()
    batch = max(1, min(rate // 100, rate * seconds - n))
    out.write("".join("%d %.6f %s\\n" % (n + k, now, pad) for k in range(batch)))
    out.flush()
    n += batch
print("%d %.6f DONE %d lines" % (n, time.time(), n), flush=True)
"""


def bench_follow(
    args: argparse.Namespace, database: str, browser: Browser | None
) -> dict[str, Any]:
    if browser is None:
        return {"skipped": "no browser"}
    seconds = 20 if args.short else args.seconds
    with (
        tempfile.TemporaryDirectory(prefix="trainfleet-bench-dash-") as tmp,
        Place(Path(tmp), database) as place,
    ):
        script = PRINTER.format(rate=args.rate, seconds=seconds)
        url = place.start()
        page = browser.sign_in(url, place.token)
        page.close()
        headers = {"Authorization": f"Bearer {place.token}"}
        body = {
            "name": "printer",
            "roles": {"worker": {"command": [sys.executable, "-c", script]}},
        }
        with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=60) as http:
            answer = http.post("/jobs", json=body)
            answer.raise_for_status()
            job_id = answer.json()["job"]["id"]
            page = browser.context.new_page()
            page.add_init_script(FOLLOW)
            page.goto(f"{url}/#/jobs/{job_id}")
            page.locator(".log").wait_for(timeout=30_000)
            renderers = browser.renderers()
            cpu_before = {r.pid: sum(r.cpu_times()[:2]) for r in renderers}
            began = time.perf_counter()
            state = ""
            while time.perf_counter() - began < seconds + 120:
                state = http.get(f"/jobs/{job_id}").json()["job"]["state"]
                if state in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.5)
            ran = time.perf_counter() - began
            cpu = {}
            for process in renderers:
                with contextlib.suppress(psutil.Error):
                    cpu[process.pid] = sum(process.cpu_times()[:2]) - cpu_before[process.pid]
            total = args.rate * seconds
            # the last line shown (or the wait ran out)
            with contextlib.suppress(Exception):
                page.wait_for_function(
                    f"window.__bench.seen >= {total - 1}", timeout=30_000, polling=200
                )
            bench = page.evaluate("window.__bench")
            check = page.evaluate(CHECK_LINES, total)
            page.close()
        lags = [max(0.0, lag) for lag in bench["lags"]]
        newest = [max(0.0, lag) for lag in bench["newest"]]
        contiguous = all(number == check["first"] + line for line, number in check["checks"])
        end = check["first"] + check["kept"]
        declared = check["first"] == 0 or "earlier" in check["note"]
        return {
            "rate_lines_s": args.rate,
            "seconds": seconds,
            "short": args.short or seconds != 60,
            "job_state": state,
            "lines_printed": total,
            "last_line_seen": bench["seen"],
            "lag": _latency(lags) if lags else {},
            "lag_of_newest_line": _latency(newest) if newest else {},
            "updates_measured": len(lags),
            "renderer_cpu_s": cpu,
            "renderer_cores": max(cpu.values(), default=0.0) / ran,
            "wall_s": ran,
            "max_line_nodes": bench["maxRows"],
            "kept_lines": check["kept"],
            "first_kept_line": check["first"],
            "checks": check["checks"],
            "note": check["note"],
            "every_line_shown_or_declared": contiguous and end >= total and declared,
        }


# -- (feed) -------------------------------------------------------------------------


class FeedClient:
    """One SSE client of the change feed on a raw socket: when each job's `submitted`
    change reached it."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.arrived: dict[str, float] = {}
        self.opened = asyncio.Event()
        self.failed: str | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def run(self) -> None:
        try:
            reader, self.writer = await asyncio.open_connection(HOST, self.port)
            self.writer.write(
                (
                    f"GET /api/v1/events/follow HTTP/1.1\r\nHost: {HOST}\r\n"
                    f"Authorization: Bearer {self.token}\r\nAccept: text/event-stream\r\n\r\n"
                ).encode()
            )
            status = await reader.readline()
            if b" 200 " not in status:
                self.failed = status.decode(errors="replace").strip()
                return
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            self.opened.set()
            buffer = b""
            while data := await reader.read(1 << 16):
                buffer += data
                *events, buffer = buffer.split(b"\n\n")
                now = time.perf_counter()
                for event in events:
                    # chunked transfer: a size line may lead; the fields are what matter
                    for line in event.split(b"\n"):
                        if line.startswith(b"data: ") and b'"submitted"' in line:
                            change = json.loads(line[6:])
                            self.arrived.setdefault(change["job_id"], now)
        except (OSError, asyncio.CancelledError) as error:
            self.failed = self.failed or type(error).__name__
        finally:
            self.opened.set()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _feed(port: int, token: str, tokens: list[str], args: argparse.Namespace) -> Any:
    load = Load(port, token)
    out: dict[str, Any] = {"feeds": args.feeds}
    paced = {"interval": 0.05, "warmup": 3, "auth": False}
    healthz = lambda n: ("GET", "/healthz", b"")  # noqa: E731
    before = await load.run(2, args.healthz_requests, healthz, **paced)  # type: ignore[arg-type]
    out["healthz_without (peer)"] = before["latency"]
    clients = [FeedClient(port, tokens[n % len(tokens)]) for n in range(args.feeds)]
    tasks = [asyncio.create_task(client.run()) for client in clients]
    await asyncio.wait_for(asyncio.gather(*(c.opened.wait() for c in clients)), 60)
    out["feeds_open"] = sum(1 for c in clients if c.failed is None)
    out["feed_failures"] = sorted({c.failed for c in clients if c.failed})
    await asyncio.sleep(1)
    during = await load.run(2, args.healthz_requests, healthz, **paced)  # type: ignore[arg-type]
    out["healthz_with_feeds"] = during["latency"]
    posted: dict[str, float] = {}
    body = json.dumps({"name": "feed-change", "roles": {"worker": {"command": ["true"]}}})
    for _ in range(args.changes):
        began = time.perf_counter()
        status, data = await load.one("POST", "/api/v1/jobs", body.encode())
        if status == 201:
            posted[json.loads(data)["job"]["id"]] = began
        else:
            out.setdefault("post_failures", []).append(f"{status} {data[:200]!r}")
        await asyncio.sleep(args.change_every)
    await asyncio.sleep(3)
    delays, missing = [], 0
    for client in clients:
        for job_id, sent in posted.items():
            if job_id in client.arrived:
                delays.append(client.arrived[job_id] - sent)
            elif client.failed is None:
                missing += 1
    out["changes_posted"] = len(posted)
    out["change_delay"] = _latency(delays) if delays else {}
    out["changes_missing"] = missing
    for client in clients:
        client.close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return out


def bench_feed(args: argparse.Namespace, database: str, browser: Browser | None) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="trainfleet-bench-dash-") as tmp,
        Place(Path(tmp), database) as place,
    ):
        tokens = add_admins(place.target, max(1, -(-args.feeds // 30)))
        place.start()
        port = place.server.port  # type: ignore[union-attr]
        return run_async(lambda: _feed(port, tokens[0], tokens, args))  # admins: no bootstrap


# -- (metrics) ----------------------------------------------------------------------


def bench_metrics(
    args: argparse.Namespace, database: str, browser: Browser | None
) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="trainfleet-bench-dash-") as tmp,
        Place(Path(tmp), database) as place,
    ):
        per_job = 4
        now = time.time()
        with Store.open(place.target) as store:
            for n in range(-(-args.tasks // per_job)):
                job = stored_job(f"running-{n:04d}", now - 600, State.RUNNING, name="running")
                tasks = [stored_task(job, k) for k in range(per_job)]
                store.add_job(job, tasks)
                for task in tasks:
                    path = usage.usage_path(place.data.log_path(job.id, "worker", task.index))
                    path.parent.mkdir(parents=True, exist_ok=True)
                    writer = usage.UsageWriter(path)
                    for k in range(12):
                        writer.append(usage.Sample(time=now - 60 + 5 * k, cpu=50.0, rss=1 << 28))
                    writer.close()
        url = place.start()
        load = Load(place.server.port, place.token)  # type: ignore[union-attr]
        with httpx.Client(headers={"Authorization": f"Bearer {place.token}"}) as http:
            text = http.get(f"{url}/metrics", timeout=60).text
        running = sum(
            1 for line in text.splitlines() if line.startswith("trainfleet_task_cpu_percent{")
        )

        async def probes() -> dict[str, Any]:
            metrics = await load.run(
                1, args.metrics_requests, lambda n: ("GET", "/metrics", b""), warmup=2
            )
            healthz = await load.run(
                1, args.metrics_requests, lambda n: ("GET", "/healthz", b""), warmup=2, auth=False
            )
            return {"metrics": metrics["latency"], "healthz (peer)": healthz["latency"]}

        result = run_async(probes)
        return {"tasks": args.tasks, "tasks_with_gauges": running, "fake_tasks": True, **result}


# -- (page) -------------------------------------------------------------------------


def bench_page(args: argparse.Namespace, database: str, browser: Browser | None) -> dict[str, Any]:
    files = [DASHBOARD / "index.html", *sorted((DASHBOARD / "assets").iterdir())]
    sizes = {
        str(path.relative_to(DASHBOARD)): (
            path.stat().st_size,
            len(gzip.compress(path.read_bytes(), 9)),
        )
        for path in files
        if path.is_file()
    }
    return {
        "files": {name: {"bytes": raw, "gzip": packed} for name, (raw, packed) in sizes.items()},
        "bytes": sum(raw for raw, _ in sizes.values()),
        "gzip_kib": sum(packed for _, packed in sizes.values()) / 1024,
    }


BENCHES: dict[str, Callable[[argparse.Namespace, str, Browser | None], dict[str, Any]]] = {
    "list": bench_list,
    "log": bench_log,
    "follow": bench_follow,
    "feed": bench_feed,
    "metrics": bench_metrics,
    "page": bench_page,
}


# -- the table ----------------------------------------------------------------------


def _ms(figures: dict[str, Any] | None, key: str) -> float | None:
    if not figures or key not in figures:
        return None
    return float(figures[key])


def rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per figure: its value on each database, the target, and whether it is met."""
    databases = [name for name in ("sqlite", "postgresql") if name in results["databases"]]

    def s(value: float | None, unit: str) -> str:
        if value is None:
            return "-"
        return f"{value:.0f} {unit}" if value >= 10 else f"{value:.2f} {unit}"

    def get(db: str, part: str, *keys: str) -> Any:
        value: Any = results["databases"][db].get(part)
        for key in keys:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value

    table: list[tuple[str, ...]] = [("figure", *databases, "target", "met")]

    def add(label: str, unit: str, target: float | None, part: str, *keys: str) -> None:
        if not any(part in results["databases"][db] for db in databases):
            return
        values = [get(db, part, *keys) for db in databases]
        shown = [
            str(v) if isinstance(v, bool) else s(v, unit) if isinstance(v, int | float) else "-"
            for v in values
        ]
        if target is None:
            met = ""
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            met = "yes" if all(v <= target for v in values) else "NO"
        else:
            met = "-"
        table.append((label, *shown, s(target, unit) if target is not None else "peer", met))

    add("list: first rows in the browser, p50", "ms", None, "list", "first_rows", "p50_ms")
    add("list: first rows in the browser, max", "ms", 1000, "list", "first_rows", "max_ms")
    add("list: filter change, max", "ms", 300, "list", "filter_change", "max_ms")
    add("list API p99, worst filter", "ms", 50, "list", "list_p99_ms")
    add("list API p99, no filter", "ms", 50, "list", "api", "none", "p99_ms")
    add("list API p99, state=failed", "ms", 50, "list", "api", "state", "p99_ms")
    add("/healthz p99 (peer)", "ms", None, "list", "api", "healthz (peer)", "p99_ms")
    add("log: tail on screen, max", "ms", 1000, "log", "tail", "max_ms")
    add("log: 100 hits near the start, max", "ms", 3000, "log", "search_near", "max_ms")
    add("log: 100 hits over the whole log, max", "ms", 3000, "log", "search_spread", "max_ms")
    add("grep -m 100 over the whole log (peer)", "ms", None, "log", "grep_spread (peer)", "max_ms")
    add("log: server RSS growth (peak/after)", "MB", 50, "log", "rss_growth_mb")
    add("follow: lag p95", "ms", 1000, "follow", "lag", "p95_ms")
    add("follow: renderer", "cores", 1.0, "follow", "renderer_cores")
    add("follow: most line nodes", "", 5000, "follow", "max_line_nodes")
    add("follow: every line shown or declared", "", None, "follow", "every_line_shown_or_declared")
    without = ("healthz_without (peer)", "p99_ms")
    add("feed: /healthz p99 without feeds (peer)", "ms", None, "feed", *without)
    add("feed: /healthz p99 with the feeds", "ms", 50, "feed", "healthz_with_feeds", "p99_ms")
    add("feed: change to the clients p95", "ms", 1000, "feed", "change_delay", "p95_ms")
    add("/metrics with running tasks, p99", "ms", 200, "metrics", "metrics", "p99_ms")
    add("/healthz p99 (peer)", "ms", None, "metrics", "healthz (peer)", "p99_ms")
    add("first page, gzip -9", "KiB", 300, "page", "gzip_kib")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts")
    parser.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--postgres-url", help=f"a cluster's URL [default: {POSTGRES_URL}]")
    parser.add_argument("--chromium", default=os.environ.get("TRAINFLEET_TEST_CHROMIUM"))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--list-requests", type=int, default=300)
    parser.add_argument("--page-loads", type=int, default=5)
    parser.add_argument("--filter-rounds", type=int, default=3)
    parser.add_argument("--log-mib", type=int, default=1024)
    parser.add_argument("--search-rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=10_000, help="(follow) lines a second")
    parser.add_argument("--seconds", type=int, default=60, help="(follow) seconds of printing")
    parser.add_argument("--short", action="store_true", help="(follow) 20 s instead of 60")
    parser.add_argument("--feeds", type=int, default=200)
    parser.add_argument("--healthz-requests", type=int, default=400)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--change-every", type=float, default=0.5)
    parser.add_argument("--tasks", type=int, default=1000, help="(metrics) running tasks")
    parser.add_argument("--metrics-requests", type=int, default=30)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "dashboard.json")
    args = parser.parse_args()
    only = [part.strip() for part in args.only.split(",") if part.strip()]
    if unknown := set(only) - set(PARTS):
        parser.error(f"--only: unknown parts {sorted(unknown)} (choose from {', '.join(PARTS)})")
    databases = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    if "postgresql" in databases:
        os.environ[POSTGRES_URL] = postgres_url(args.postgres_url)
    chromium = args.chromium or shutil.which("chromium") or "/usr/bin/chromium"
    needs_browser = bool({"list", "log", "follow"} & set(only))
    browser = Browser(chromium) if needs_browser and Path(chromium).exists() else None
    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "parts": only,
        "browser": chromium if browser else None,
        "targets": TARGETS,
        "databases": {},
    }
    sampling = HERE / "results" / "sampling.json"
    if sampling.exists():
        results["sampling (benchmarks/sampling.py)"] = json.loads(sampling.read_text()).get("shims")
    try:
        # Parts interleaved: each part runs on one database, then the other, before the next.
        for part in only:
            for database in databases:
                if part == "page" and database != databases[0]:
                    results["databases"][database]["page"] = results["databases"][databases[0]][
                        "page"
                    ]
                    continue
                print(f"({part}) on {database} ...", flush=True)
                figures = BENCHES[part](args, database, browser)
                results["databases"].setdefault(database, {})[part] = figures
    finally:
        if browser is not None:
            browser.close()
    print(_rows_table(rows(results)))
    _write(args.out, results)


if __name__ == "__main__":
    main()
