"""Real local jobs: what N running tasks cost the server and each task's supervisor (issue
30's plan, §4 part F).

`trainfleet server` (the local backend, SQLite, a data directory of its own; started through
the real CLI by a wrapper that only names each thread in the kernel, ``scale_server.py``'s
``name_threads``, so that its threads can be told apart from outside) is sent --local (300;
--quick 20) one-task jobs running `sleep 90` (a thousandth of a CPU each) from 8
connections. Once all of them run (or --local-timeout has passed) and --local-settle (12)
seconds more (a supervisor loads its sampler when its first sample is due, 5 s in, and is
some 4 MB larger from then on: the figures are its steady size), it reads:

(threads)     the server's threads, its API process's counted in (``Threads:`` of
              /proc/PID/status), and how many of them have each name
              (/proc/PID/task/*/comm). Target: <= 64.
(RSS)         the server's VmRSS, its API process's counted in.
(supervisor)  each running task's supervisor (the shim: found through the ``.pid`` records
              under the data directory's jobs/*/run/): its VmRSS (/proc/PID/status) and its
              Pss (/proc/PID/smaps_rollup: its share of pages it shares with the other
              shims, the honest cost of one more task), mean and max. Target: < 15 MB.

(running)     how many ran, and the seconds from the first submission until all of them did.

Each beside the same with --local-peer (100; --quick 5) jobs, in a server of its own. The
tasks are killed (their shims' process groups) once the server has stopped.

usage: python benchmarks/scale.py --part local [--local 300] [--local-peer 100] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from api import API, Load, Server, server_processes, thread_names

import trainfleet.backends.supervision.shim as shim_module

HERE = Path(__file__).resolve().parent
THREADS_TARGET = 64
SUPERVISOR_TARGET_MB = 15.0
MB = 1_000_000
SHIM = Path(shim_module.__file__).name
WRAPPER = (
    "import sys; sys.path.insert(0, {here!r}); from scale_server import name_threads; "
    "name_threads(); from trainfleet.cli.main import cli; "
    "cli(args=sys.argv[1:], prog_name='trainfleet')"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Part F's options (scale.py gives --quick)."""
    parser.add_argument("--local", type=int, help="running local jobs [300; --quick 20]")
    parser.add_argument("--local-peer", type=int, help="the peer's jobs [100; --quick 5]")
    parser.add_argument("--local-sleep", type=int, default=90, help="each task's sleep [90]")
    parser.add_argument(
        "--local-timeout", type=float, default=120, help="seconds for all jobs to run [120]"
    )
    parser.add_argument(
        "--local-settle", type=float, default=12, help="seconds from all running to reading [12]"
    )


def _job(seconds: int) -> bytes:
    return json.dumps(
        {
            "name": "scale-local",
            "grace_period": 1,
            "roles": {"w": {"command": ["sleep", str(seconds)], "resources": {"cpu": 0.001}}},
        }
    ).encode()


# -- /proc --------------------------------------------------------------------


def status(pid: int) -> dict[str, str]:
    """/proc/PID/status as {field: value}; {} for a process that is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {k: v.strip() for k, v in (line.split(":", 1) for line in text.splitlines())}


def kib(field: str) -> int:
    """``"1234 kB"`` in bytes."""
    return int(field.split()[0]) * 1024


def pss(pid: int) -> int | None:
    """The process's proportional set size (bytes), from /proc/PID/smaps_rollup."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return kib(line.split(":", 1)[1])
    return None


def shims(data_dir: Path) -> list[int]:
    """The pids of the running supervisors, from their ``.pid`` records."""
    found = []
    for record in data_dir.glob("jobs/*/run/*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(record.read_text().strip())
            if SHIM.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


def _spread(values: list[int]) -> dict[str, float | None]:
    if not values:
        return {"mean_mb": None, "max_mb": None}
    return {"mean_mb": statistics.fmean(values) / MB, "max_mb": max(values) / MB}


# -- one run ------------------------------------------------------------------


async def _submit_and_wait(load: Load, jobs: int, seconds: int, timeout: float) -> dict[str, Any]:
    body = _job(seconds)
    began = time.perf_counter()
    sent = await load.run(8, jobs, lambda n: ("POST", f"{API}/jobs", body), expect=201)
    running = 0
    while time.perf_counter() - began < timeout:
        status_code, answer = await load.one("GET", f"{API}/jobs?limit=1")
        if status_code == 200:
            running = json.loads(answer)["counts"].get("running", 0)
            if running >= jobs:
                break
        await asyncio.sleep(0.5)
    return {
        "statuses": sent["statuses"],
        "running": running,
        "all_running_s": time.perf_counter() - began if running >= jobs else None,
    }


def measure(jobs: int, seconds: int, timeout: float, settle: float) -> dict[str, Any]:
    """A server running ``jobs`` sleeping local jobs: its threads and RSS, its shims' RSS."""
    with tempfile.TemporaryDirectory(prefix="trainfleet-scale-") as tmp:
        data_dir = Path(tmp)
        token = secrets.token_urlsafe(24)
        program = ("-c", WRAPPER.format(here=str(HERE)))
        server = Server(data_dir, token, None, program=program)
        found: list[int] = []
        try:
            load = Load(server.port, token)
            ran = asyncio.run(_submit_and_wait(load, jobs, seconds, timeout))
            time.sleep(settle)
            serving = server_processes(server.process.pid)  # the API's process counted in
            threads = sum(int(status(pid).get("Threads", 0)) for pid in serving)
            names = thread_names(*serving)
            rss = sum(kib(status(pid).get("VmRSS", "0 kB")) for pid in serving)
            found = shims(data_dir)
            rsses = [kib(status(p)["VmRSS"]) for p in found if "VmRSS" in status(p)]
            shares = [share for share in map(pss, found) if share is not None]
        finally:
            server.stop()
            for pid in shims(data_dir):  # those still running, checked again
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)  # a shim leads its task's group
    return {
        "jobs": jobs,
        **ran,
        "threads": threads,
        "thread_names": names,
        "rss_mb": rss / MB,
        "supervisors": len(found),
        "supervisor_rss": _spread(rsses),
        "supervisor_pss": _spread(shares),
    }


def _figure(value: Any, peer: Any, target: float | None, ok: bool | None) -> dict[str, Any]:
    ratio = value / peer if isinstance(value, int | float) and peer else None
    return {"value": value, "peer": peer, "ratio": ratio, "target": target, "ok": ok}


def figures(run: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """Each figure of the run beside the peer's: {value, peer, ratio, target, ok}."""
    found: dict[str, Any] = {
        "F jobs running": _figure(
            run["running"], peer["running"], run["jobs"], run["running"] >= run["jobs"]
        ),
        "F all running (s)": _figure(run["all_running_s"], peer["all_running_s"], None, None),
        "F server threads": _figure(
            run["threads"], peer["threads"], THREADS_TARGET, run["threads"] <= THREADS_TARGET
        )
        | {"names": run["thread_names"], "peer_names": peer["thread_names"]},
        "F server RSS (MB)": _figure(run["rss_mb"], peer["rss_mb"], None, None),
    }
    for measure_name, key in (("VmRSS", "supervisor_rss"), ("Pss", "supervisor_pss")):
        for stat in ("mean", "max"):
            value, seen = run[key][f"{stat}_mb"], peer[key][f"{stat}_mb"]
            ok = None if value is None else value < SUPERVISOR_TARGET_MB
            found[f"F supervisor {measure_name} {stat} (MB)"] = _figure(
                value, seen, SUPERVISOR_TARGET_MB, ok
            )
    return found


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Part F's figures (see the module), each {value, peer, ratio, target, ok}."""
    quick = bool(getattr(args, "quick", False))
    jobs = args.local or (20 if quick else 300)
    peer = args.local_peer or (5 if quick else 100)
    runs = {}
    for label, count in (("peer", peer), ("main", jobs)):
        print(f"F: {count} running local jobs ({label})", flush=True)
        runs[label] = measure(count, args.local_sleep, args.local_timeout, args.local_settle)
        print(f"  {runs[label]['running']} ran, {runs[label]['threads']} threads", flush=True)
    return figures(runs["main"], runs["peer"])
