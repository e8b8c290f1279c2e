"""Smoke test of `benchmarks/api.py --followers` (memory of followers of big logs): a tiny
run against a real server, and its figures are sane."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "api.py"
DEADLINE = 240
"""Seconds the benchmark is given: less than the test waits, so that a run that hangs ends
itself, with the server's last lines and how far it got."""


def test_tiny_followers_memory_run_writes_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "api-followers.json"
    argv = [sys.executable, str(BENCHMARK), "--followers", "--out", str(out)]
    argv += ["--follower-logs", "3", "--follower-log-mib", "2", "--follower-settle", "0.5"]
    argv += ["--timeout", str(DEADLINE)]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as late:  # one CI run: what it had said by then
        said = f"{late.stdout or ''}{late.stderr or ''}"
        pytest.fail(f"no end in 300 s; it said: {said[-3000:]}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "RSS after within 50 MiB of before" in result.stdout
    figures = json.loads(out.read_text())
    small, big = figures["small"], figures["big"]
    assert small["log_bytes"] == 1000 and big["log_bytes"] == 2 * 1_048_600
    for run in (small, big):
        assert run["followers"] == run["ended"] == run["read_to_the_end"] == 3
        assert run["received_bytes"] > 3 * run["log_bytes"]  # the logs and the framing
        assert run["peak_rss_mib"] > 0
    assert figures["peak_over_small_mib"] == big["peak_rss_mib"] - small["peak_rss_mib"]
    assert figures["rss_before_mib"] > 0 and figures["rss_after_mib"] > 0
    assert figures["settle_s"] == 0.5
    assert figures["server_exit_code"] in (0, -15)  # uvicorn ends by raising SIGTERM again


def test_a_probe_loop_ends_when_cancelled_as_its_request_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The side loops of a run (``/healthz`` probes) are ended by cancelling them; one
    cancelled just as its request had its answer ran on for ever with Python 3.11's
    ``asyncio.wait_for`` (which lost the cancellation), and the run with it (CI, twice).
    Here a loop of ``Load.one`` is cancelled 200 times, a few steps after it started."""
    monkeypatch.syspath_prepend(str(BENCHMARK.parent))
    api = importlib.import_module("api")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")

    async def cancelled_loops() -> int:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        load = api.Load(server.sockets[0].getsockname()[1], "token")
        stop, lost = asyncio.Event(), 0

        async def probe() -> None:
            while not stop.is_set():
                await load.one("GET", "/healthz")

        for attempt in range(200):
            loop = asyncio.create_task(probe())
            for _ in range(attempt % 40 + 1):
                await asyncio.sleep(0)
            loop.cancel()
            done, _ = await asyncio.wait([loop], timeout=2)
            if not done:
                lost += 1
                stop.set()
                await loop
                stop.clear()
        server.close()
        return lost

    assert asyncio.run(cancelled_loops()) == 0
