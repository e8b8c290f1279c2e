"""Smoke test of `benchmarks/workflows.py`: one round, sane figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "workflows.py"


def test_one_round_of_client_run_beside_a_job_file(tmp_path: Path) -> None:
    out = tmp_path / "workflows.json"
    argv = [sys.executable, str(BENCHMARK), "--part", "run", "--runs", "1", "--out", str(out)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())["run"]
    assert set(figures["median_s"]) == {"by_hand", "run", "closure"}
    assert all(len(samples) == 1 for samples in figures["samples_s"].values())
    assert all(value > 0 for value in figures["median_s"].values())
    assert figures["ratio_run_to_by_hand"] > 0


def test_a_small_chain_and_dag_write_sane_hand_offs_and_scheduling(tmp_path: Path) -> None:
    """The schedules part waits for a minute's start: it is run by hand, not here."""
    out = tmp_path / "workflows.json"
    argv = [sys.executable, str(BENCHMARK), "--part", "handoff,dag", "--steps", "6"]
    argv += ["--width", "3", "--out", str(out)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    handoff, dag = figures["handoff"], figures["dag"]
    assert len(handoff["samples_workflow_s"]) == len(handoff["samples_by_hand_s"]) == 5
    assert all(0 <= sample < 30 for sample in handoff["samples_workflow_s"])
    assert 0 < handoff["workflow_p50_ms"] <= handoff["workflow_p99_ms"]
    assert dag["steps"] == 6 and 0 < dag["jobs_on_critical_path_s"] <= dag["run_s"]
