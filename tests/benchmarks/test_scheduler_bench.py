"""Smoke test of benchmarks/scheduler.py: a tiny run, and its figures are sane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "scheduler.py"


def test_tiny_run_writes_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "scheduler.json"
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), "--nodes", "12", "--jobs", "150", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "decisions/s" in result.stdout
    figures = json.loads(out.read_text())
    ours, fifo = figures["ours"], figures["fifo"]
    assert ours["considered"] > 0 and ours["admitted"] > 0
    assert ours["decisions_per_s"] > 0
    assert ours["pass"]["p99_ms"] >= ours["pass"]["p50_ms"] > 0
    assert 0 < ours["per_decision"]["p99_ms"] <= ours["pass"]["max_ms"]
    for run in (ours, fifo):
        assert 0 < run["utilization"] <= 1
        assert 0 <= run["utilization_p10"] <= 1
        assert run["still_waiting"] == 0  # no --sim-hours: it ran until the queue emptied
    assert ours["completed"] + ours["still_running"] == 150
    assert figures["utilization_ratio"] > 0
