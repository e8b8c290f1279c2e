"""Smoke test of benchmarks/launch.py (g), exec of `trainfleet run` to its first task's
start: a tiny run (warm, cold) beside the same tree as its baseline, sane figures, and no
starter left behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "benchmarks" / "launch.py"


def test_tiny_run_writes_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "launch.json"
    tiny = ["--only", "g", "--runs", "2", "--out", str(out), "--baseline-src", str(ROOT)]
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), *tiny],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())["g"]
    for name in ("first_task_start_s", "cold_first_task_start_s", "baseline_first_task_start_s"):
        assert figures[name]["runs"] == 2, figures
        assert 0 < figures[name]["p10"] <= figures[name]["median"] < 60, figures
    assert figures["ratio_over_baseline"] > 0
    assert figures["target_median_s"] == 0.150
    time.sleep(3)
    # this benchmark's folders only: another may run beside it (pytest-xdist)
    mine = b"trainfleet-bench-launch-"
    left = [p for p in Path("/proc").glob("[0-9]*/cmdline") if mine in _read(p)]
    assert left == []


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
