"""Hostile small requests against `trainfleet server`, each beside a peer in the same run.

One server process (`trainfleet server --port 0`, default limits, SQLite in a temporary
data directory), started as benchmarks/api.py starts it.

(huge)    POST of a 4.7 KB job of 100 roles x 10,000 replicas: status and seconds to the
          answer; peer: POST of a one-task job.
(no-token) 4 PUT /api/v1/queues/x without a token, each declaring 300 MB and sending it
          until the server answers: status, bytes sent before the answer, the server's
          RSS after; peer: its RSS before.
(large)   GET /healthz, one after another, while a 1 MiB YAML job (27,000 environment
          variables) is read: the slowest answer; peer: the same with nothing else to do.

usage: python benchmarks/hostile.py [--out FILE]
Prints a table and writes the figures as JSON (default benchmarks/results/hostile.json).
"""

from __future__ import annotations

import argparse
import json
import secrets
import select
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from api import HOST, Server

HERE = Path(__file__).resolve().parent
MB = 1_000_000


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / MB
    raise RuntimeError(f"no VmRSS for {pid}")


def timed_post(http: httpx.Client, text: str) -> tuple[int, float]:
    start = time.perf_counter()
    status = http.post("/api/v1/jobs", content=text).status_code
    return status, time.perf_counter() - start


def bench_huge(http: httpx.Client) -> dict[str, Any]:
    roles = "".join(f"  r{i:02}: {{replicas: 10000, command: 'true'}}\n" for i in range(100))
    huge = f"name: huge\nroles:\n{roles}"
    status, seconds = timed_post(http, huge)
    peer_status, peer_seconds = timed_post(http, "name: one\nroles:\n  w: {command: 'true'}\n")
    return {
        "bytes": len(huge),
        "status": status,
        "seconds": seconds,
        "peer_status": peer_status,
        "peer_seconds": peer_seconds,
    }


def unauthenticated_put(port: int, declared: int) -> tuple[int, int]:
    """(status, bytes sent before the answer) of a PUT without a token."""
    head = (
        f"PUT /api/v1/queues/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    chunk = b"0" * (1 << 20)
    sent = 0
    with socket.create_connection((HOST, port), timeout=300) as connection:
        connection.sendall(head)
        while sent < declared and not select.select([connection], [], [], 0)[0]:
            try:
                connection.sendall(chunk)
            except OSError:
                break
            sent += len(chunk)
        answer = connection.recv(4096)
    return int(answer.split(b" ", 2)[1]), sent


def bench_no_token(server: Server) -> dict[str, Any]:
    pid = server.process.pid
    before = rss_mb(pid)
    answers = [unauthenticated_put(server.port, 300 * MB) for _ in range(4)]
    return {
        "statuses": [status for status, _ in answers],
        "bytes_sent_before_answer": [sent for _, sent in answers],
        "rss_mb_after": rss_mb(pid),
        "peer_rss_mb_before": before,
    }


def slowest_health(http: httpx.Client, go_on: Callable[[int], bool]) -> float:
    """The slowest of GET /healthz one after another while ``go_on(answered so far)``."""
    worst, done = 0.0, 0
    while done == 0 or go_on(done):
        start = time.perf_counter()
        http.get("/healthz")
        worst = max(worst, time.perf_counter() - start)
        done += 1
    return worst


def bench_large(http: httpx.Client) -> dict[str, Any]:
    env = "".join(f"      VARIABLE_{i:06}: value-{i}\n" for i in range(27_000))
    text = f"name: large\nroles:\n  worker:\n    command: 'true'\n    env:\n{env}"
    result: dict[str, Any] = {"bytes": len(text)}

    def submit() -> None:
        result["status"], result["seconds"] = timed_post(http, text)

    busy = threading.Thread(target=submit)
    busy.start()
    result["healthz_max_s"] = slowest_health(http, lambda _: busy.is_alive())
    busy.join()
    result["peer_healthz_max_s"] = slowest_health(http, lambda done: done < 200)
    return result


def table(results: dict[str, Any]) -> str:
    huge, bad, large = results["huge"], results["no_token"], results["large"]
    rows = [
        ("100 roles x 10,000 replicas", f"{huge['status']} in {huge['seconds'] * 1000:.1f} ms"),
        ("  peer: one-task job", f"{huge['peer_status']} in {huge['peer_seconds'] * 1000:.1f} ms"),
        ("4 PUTs of 300 MB, no token", f"{bad['statuses']}"),
        ("  MB sent before the answer", f"{[n / MB for n in bad['bytes_sent_before_answer']]}"),
        ("  server RSS after", f"{bad['rss_mb_after']:.0f} MB"),
        ("  peer: server RSS before", f"{bad['peer_rss_mb_before']:.0f} MB"),
        (
            f"1 MiB job ({large['bytes']} B)",
            f"{large['status']} in {large['seconds'] * 1000:.0f} ms",
        ),
        ("  slowest /healthz meanwhile", f"{large['healthz_max_s'] * 1000:.1f} ms"),
        ("  peer: slowest /healthz idle", f"{large['peer_healthz_max_s'] * 1000:.1f} ms"),
    ]
    return "\n".join(f"{name:<36}{value}" for name, value in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "hostile.json")
    args = parser.parse_args()
    token = secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory(prefix="trainfleet-hostile-") as tmp:
        server = Server(Path(tmp) / "data", token, None)
        try:
            headers = {"Authorization": f"Bearer {token}"}
            url = f"http://{HOST}:{server.port}"
            with httpx.Client(base_url=url, headers=headers, timeout=300) as http:
                results = {
                    "huge": bench_huge(http),
                    "no_token": bench_no_token(server),
                    "large": bench_large(http),
                }
        finally:
            server.stop()
    print(table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
