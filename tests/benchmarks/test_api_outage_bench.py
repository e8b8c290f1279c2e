"""Smoke test of `benchmarks/api.py --outage`: a tiny run with a short stop of its PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from private_postgres import skip_unless_available

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "api.py"


def test_tiny_outage_run_writes_sane_figures(tmp_path: Path) -> None:
    skip_unless_available("the outage benchmark")
    out = tmp_path / "api-outage.json"
    argv = [sys.executable, str(BENCHMARK), "--outage", "--out", str(out)]
    # 0.8 s in: a loaded machine had acknowledged none of 30 jobs 0.2 s in (a flake of CI).
    argv += ["--submit-count", "90", "--submit-clients", "3"]
    argv += ["--outage-after", "0.8", "--outage-seconds", "4", "--drain-timeout", "120"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "of them ended correctly" in result.stdout
    run = json.loads(out.read_text())["outage"]
    assert run["answers"]["201"] + run["answers"]["503"] == 90
    assert run["answers"]["500"] == 0
    assert run["present"] == run["ended_correctly"] == run["acknowledged"] > 0
    assert run["still_active_at_the_end"] == 0
    assert run["readyz_after"] == 200
