"""Smoke test of `benchmarks/workflows.py`: one round, sane figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "workflows.py"


def test_one_round_of_client_run_beside_a_job_file(tmp_path: Path) -> None:
    out = tmp_path / "workflows.json"
    argv = [sys.executable, str(BENCHMARK), "--runs", "1", "--out", str(out)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    assert set(figures["median_s"]) == {"by_hand", "run", "closure"}
    assert all(len(samples) == 1 for samples in figures["samples_s"].values())
    assert all(value > 0 for value in figures["median_s"].values())
    assert figures["ratio_run_to_by_hand"] > 0
