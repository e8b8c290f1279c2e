"""The TensorBoard proxy's added latency: one TensorBoard request (the scalar API of a
job's TensorBoard, ``/data/plugin/scalars/scalars``) through `trainfleet server`'s proxy at
``/jobs/<id>/tensorboard/`` beside the same request straight to the TensorBoard task's
port, in one run, alternating, over one keep-alive connection each (httpx).

The server is a subprocess (`trainfleet --data-dir TMP server --port 0`, SQLite); the job
writes three scalars with torch's SummaryWriter and keeps running. Target: at most 5 ms
added at p50. Prints a table and writes the figures as JSON (default
benchmarks/results/proxy.json).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).parent
WRITER = """\
import os, time
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(os.environ["TRAINFLEET_TENSORBOARD_DIR"])
for step in range(3):
    writer.add_scalar("loss", 1.0 / (step + 1), step)
writer.flush()
time.sleep(3600)
"""
PORT = ["--port", "0"]
SCALARS = "data/plugin/scalars/scalars?run=.&tag=loss"


def _server(data_dir: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    """The server, its output in a file (a pipe nobody reads would block it)."""
    data_dir.mkdir(parents=True)
    log = data_dir.parent / "server.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "trainfleet", "--data-dir", str(data_dir), "server", *PORT],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TRAINFLEET_ADMIN_TOKEN": token},
        )
    found = _until(
        "the server", lambda: re.search(r"Uvicorn running on (http://\S+)", log.read_text())
    )
    return process, found.group(1)


def _until(what: str, check: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def _running_service(api: httpx.Client, job_id: str) -> dict[str, Any] | None:
    services = api.get(f"/api/v1/jobs/{job_id}").json()["services"]
    return services[0] if services and services[0]["state"] == "running" else None


def _scalars(client: httpx.Client, url: str) -> bool:
    response = client.get(url)
    return response.status_code == 200 and len(response.json()) == 3


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(requests: int) -> dict[str, Any]:
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="tf-proxy-") as folder:
        root = Path(folder)
        (root / "write.py").write_text(WRITER)
        process, url = _server(root / "data", token)
        auth = {"Authorization": f"Bearer {token}"}
        try:
            with httpx.Client(base_url=url, headers=auth, timeout=30) as api:
                command = f"{sys.executable} {root / 'write.py'}"
                job = (
                    f"name: bench\nroles:\n  worker: {{command: '{command}'}}\ntensorboard: true\n"
                )
                submitted = api.post(
                    "/api/v1/jobs", content=job, headers={"Content-Type": "application/yaml"}
                )
                submitted.raise_for_status()
                job_id = submitted.json()["job"]["id"]
                link = _until("TensorBoard", lambda: _running_service(api, job_id))
                proxied = f"{url}{link['path']}{SCALARS}"
                direct = f"http://{link['address']}{link['path']}{SCALARS}"
                with (
                    httpx.Client(headers=auth, timeout=30) as via,
                    httpx.Client(timeout=30) as straight,
                ):
                    _until("the scalars", lambda: _scalars(via, proxied))
                    timings: dict[str, list[float]] = {"direct": [], "proxy": []}
                    for _ in range(50):  # warm both paths
                        straight.get(direct), via.get(proxied)
                    for _ in range(requests):
                        for name, client, target in (
                            ("direct", straight, direct),
                            ("proxy", via, proxied),
                        ):
                            started = time.perf_counter()
                            response = client.get(target)
                            timings[name].append((time.perf_counter() - started) * 1000)
                            assert response.status_code == 200, response.text
                api.post(f"/api/v1/jobs/{job_id}/cancel")
        finally:
            process.terminate()
            process.wait(timeout=60)
    figures = {
        name: {
            "p50_ms": statistics.median(values),
            "p95_ms": _percentile(values, 0.95),
            "p99_ms": _percentile(values, 0.99),
        }
        for name, values in timings.items()
    }
    added = figures["proxy"]["p50_ms"] - figures["direct"]["p50_ms"]
    return {"requests": requests, **figures, "added_p50_ms": added, "target_added_p50_ms": 5.0}


def table(results: dict[str, Any]) -> str:
    lines = [f"{'path':<8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}"]
    for name in ("direct", "proxy"):
        row = results[name]
        lines.append(f"{name:<8} {row['p50_ms']:>8.2f} {row['p95_ms']:>8.2f} {row['p99_ms']:>8.2f}")
    lines.append(
        f"added at p50: {results['added_p50_ms']:.2f} ms "
        f"(target <= {results['target_added_p50_ms']:g} ms), "
        f"{results['requests']} requests each"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "proxy.json")
    args = parser.parse_args()
    results = measure(args.requests)
    print(table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
