"""Smoke test of `benchmarks/api.py --authz` without --baseline-src: a tiny run of (a) and
(b), (c) reported skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "api.py"


def test_tiny_authz_run_writes_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "api-authz.json"
    argv = [sys.executable, str(BENCHMARK), "--authz", "--out", str(out)]
    argv += ["--submit-count", "4", "--submit-clients", "2", "--get-clients", "2"]
    argv += ["--get-requests", "2", "--get-paced-requests", "2", "--get-rates", "50"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(c) skipped: no --baseline-src given" in result.stdout
    figures = json.loads(out.read_text())
    assert set(figures["runs"]) == {"a", "b"} and figures["ratios"] == {}
    assert figures["errors"] == {"a": 0, "b": 0}
    for label in ("a", "b"):
        assert len(figures["runs"][label]) == 2  # two rounds
        for run in figures["runs"][label]:
            assert run["submit"]["submit"]["statuses"] == {"201": 4}
            assert run["get"]["closed_loop"]["get"]["statuses"] == {"200": 4}
        medians = figures["medians"][label]
        assert medians["submit_req_per_s"] > 0
        assert medians["get_at_capacity_p99_ms"] >= medians["get_at_capacity_p50_ms"] > 0
        assert medians["get_paced_100_per_s_p99_ms"] > 0
