"""benchmarks/resilience.py runs and writes sane figures (a tiny run: the figures are
the benchmark's, not this test's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "resilience.py"


def test_a_tiny_run_writes_sane_figures(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the restart's peer is torchrun
    out = tmp_path / "resilience.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--runs", "3", "--only", "a,b", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    restart = figures["restart"]
    for name in ("trainfleet_task_s", "trainfleet_job_s", "torchrun_s"):
        assert restart[name]["runs"] == 3 and 0 < restart[name]["median"] < 30, restart
    preemption = figures["preemption"]
    assert preemption["steps_lost"] == 0, preemption  # the victim saved on SIGTERM
    assert 0 < preemption["victim_exit_to_preemptor_running_s"]["median"] < 30, preemption
