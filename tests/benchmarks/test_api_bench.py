"""Smoke test of benchmarks/api.py: a tiny run against a real server, and its figures are sane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "api.py"


def test_tiny_run_writes_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "api.json"
    argv = [sys.executable, str(BENCHMARK), "--out", str(out), "--list-jobs", "60"]
    argv += ["--list-requests", "10", "--submit-count", "12", "--submit-clients", "3"]
    argv += ["--get-clients", "4", "--get-requests", "3", "--get-paced-requests", "3"]
    argv += ["--get-rates", "20,40", "--start-burst", "20", "--start-samples", "2"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "highest paced rate" in result.stdout
    figures = json.loads(out.read_text())
    listed, submitted, got = figures["list"], figures["submit"], figures["get"]
    assert listed["page_jobs"] == 50 and listed["list"]["errors"] == 0
    assert submitted["submit"]["statuses"] == {"201": 12}
    assert submitted["final_states"]["succeeded"] == 12
    assert got["closed_loop"]["get"]["statuses"] == {"200": 12}
    assert [run["offered_req_per_s"] for run in got["open_loop"]] == [80, 160]
    for run in got["open_loop"]:
        assert run["get"]["statuses"] == {"200": 12}
        assert run["get"]["latency"]["p99_ms"] >= run["get"]["latency"]["p50_ms"] > 0
    assert got["highest_rate_within_target_req_per_s"] in (0, 80, 160)
    start = figures["start"]
    assert start["burst"]["statuses"] == {"201": 20}
    for probe in (start["idle"], start["after_burst"]):
        assert len(probe["samples_s"]) == 2 and probe["max_s"] >= probe["first_s"] > 0
    assert figures["server_exit_code"] in (0, -15)  # uvicorn ends by raising SIGTERM again
