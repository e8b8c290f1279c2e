"""Smoke test of benchmarks/scale_sim.py: a quick run against a real server on the simulated
backend writes sane figures, and what must hold at any scale holds (no task failed or job
lost by a stall, every failure counted once, every job adopted again after a kill -9)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_sim.py"
KEYS = {"value", "peer", "ratio", "target", "ok"}


def test_a_quick_run_writes_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "scale-sim.json"
    argv = [sys.executable, str(BENCHMARK), "--quick", "--jobs", "60", "--peer", "20"]
    argv += ["--gang", "4x5", "--stall-seconds", "3", "--out", str(out)]
    argv += ["--fail-per-minute", "3", "--steady-minutes", "0.2"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "A all running (s)" in result.stdout
    document = json.loads(out.read_text())
    figures, runs = document["figures"], document["runs"]
    assert all(set(entry) >= KEYS for entry in figures.values())
    assert {"A all running (s)", "gang D all re-adopted (s)"} <= set(figures)
    for label, jobs in (("main", 60), ("peer", 20), ("gang", 4)):
        run = runs[label]
        assert run["A"]["statuses"] == {"201": jobs}, run["A"]
        assert 0 < run["A"]["all_running_s"] < 120 and run["A"]["healthz"]["requests"] > 0
        assert run["A"]["threads"] > 0 and run["A"]["rss_mib"] > 0
        assert run["B"]["restarts"] > 0, "every running task fails at 3 a minute"
        assert run["B"]["latency"]["max_ms"] >= run["B"]["latency"]["p50_ms"] > 0
        stall = run["C"]
        assert stall["failed_tasks"] == 0 and stall["lost_jobs"] == 0, stall
        assert stall["counted_failures"] == stall["injected_failures"] > 0, stall
        adoption = run["D"]
        assert adoption["running_jobs"] == jobs and adoption["readopted_s"] is not None
        assert adoption["double_attempts"] == 0 and adoption["tasks_without_attempt"] == 0
    entry = figures["A threads at peak"]
    assert entry["value"] == runs["main"]["A"]["threads"] and entry["names"], entry
    assert entry["ratio"] == entry["value"] / entry["peer"]
