"""Smoke test of benchmarks/slurm.py: one run of each way on the real cluster, sane figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_cluster import SlurmUser

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "slurm.py"

pytestmark = pytest.mark.slow


def test_one_run_writes_sane_figures(slurm_user: SlurmUser, tmp_path: Path) -> None:
    out = tmp_path / "slurm.json"
    env = {key: value for key, value in slurm_user.env.items() if key != "XDG_CONFIG_HOME"}
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), "--runs", "1", "--out", str(out)],
        env={**env, "HOME": os.environ.get("HOME", "/root")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    for name in ("trainfleet", "cli", "sbatch"):
        assert figures[name]["runs"] == 1
        assert 0 < figures[name]["median_s"] < 60
    assert figures["paired_ratio_median"] > 0 and figures["target_ratio"] == 1.2
    assert figures["added_by_trainfleet_median_s"] < 60
    for name in ("trainfleet", "sbatch"):  # a failed first attempt, then the next one running
        assert 0 < figures["restart"][name]["median_s"] < 60, figures["restart"]
