"""Smoke test of benchmarks/soak.py: 20 s of the team soak at 1 job/s with small outputs
writes every figure; nothing is stuck, no secret value leaked, nothing is left behind.

Needs root, setpriv and nft (its server isolates teams) and PostgreSQL
(TRAINFLEET_TEST_POSTGRES_URL): skipped elsewhere, failed under CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import missing, postgres_admin_url

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


def test_tiny_soak_writes_sane_figures(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("nft"):
        missing("the soak's server isolates teams: it needs root, setpriv and nft")
    out = tmp_path / "soak.json"
    argv = [sys.executable, str(BENCHMARK), "--seconds", "20", "--rate", "1"]
    argv += ["--big-output", "100000", "--followers", "6", "--sample-every", "1"]
    argv += ["--postgres-url", postgres_admin_url(), "--out", str(out)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "held: no secret value anywhere" in result.stdout
    figures = json.loads(out.read_text())
    jobs = figures["jobs"]
    assert jobs["acknowledged"] >= 10, figures["errors"]
    assert jobs["stuck"] == 0, jobs["stuck_jobs"]
    assert jobs["as_intended"] == jobs["acknowledged"], jobs["unintended_jobs"]
    kinds = {kind: counts.get("acknowledged", 0) for kind, counts in jobs["by_kind"].items()}
    assert sum(kinds.values()) == jobs["acknowledged"]
    assert all(kinds[kind] > 0 for kind in ("quick", "flaky", "big", "sibling", "stop-later"))
    for name in ("threads", "fds", "rss_mb", "db_connections"):
        assert set(figures["server"][name]) == {"first", "max", "last"}
        assert figures["server"][name]["max"] >= figures["server"][name]["first"] > 0
    assert figures["healthz"]["p99_ms"] >= figures["healthz"]["p50_ms"] > 0
    assert figures["audit"]["one_per_change"], figures["audit"]
    assert figures["audit"]["changes"]["job.submit"] == jobs["acknowledged"]
    read = figures["secrets"]["read"]
    assert read["answers"] > 0 and read["logs read"] > 0 and read["files"] > 0
    assert read["database dumps"] == 1
    assert figures["secrets"]["found"] == []
    assert figures["logs"]["showing token=***"] > 0  # the tasks did print their values
    assert figures["left_behind"] == {"processes": 0, "nft_rules": 0}
