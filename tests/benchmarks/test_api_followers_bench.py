"""Smoke test of `benchmarks/api.py --followers` (memory of followers of big logs): a tiny
run against a real server, and its figures are sane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "api.py"


def test_tiny_followers_memory_run_writes_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "api-followers.json"
    argv = [sys.executable, str(BENCHMARK), "--followers", "--out", str(out)]
    argv += ["--follower-logs", "3", "--follower-log-mib", "2", "--follower-settle", "0.5"]
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
