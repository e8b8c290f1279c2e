"""Smoke test of benchmarks/dashboard.py: a tiny run of every part on SQLite (a real server,
a real chromium), sane figures, and no server left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import missing, processes_naming

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "benchmarks" / "dashboard.py"


def test_tiny_run_writes_sane_figures(tmp_path: Path) -> None:
    pytest.importorskip("playwright.sync_api")
    if not Path("/usr/bin/chromium").exists():
        missing("chromium (bash scripts/browser.sh installs it)")
    out = tmp_path / "dashboard.json"
    tiny = ["--database", "sqlite", "--out", str(out), "--chromium", "/usr/bin/chromium"]
    tiny += ["--jobs", "120", "--list-requests", "10", "--page-loads", "2", "--filter-rounds", "1"]
    tiny += ["--log-mib", "4", "--search-rounds", "1", "--rate", "500", "--seconds", "3"]
    tiny += ["--feeds", "40", "--healthz-requests", "20", "--changes", "2"]
    tiny += ["--tasks", "20", "--metrics-requests", "3"]
    # its servers' data directories, told apart from others' (short: chromium's sockets)
    scratch = Path(tempfile.mkdtemp(prefix="tfdb-"))
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), *tiny],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "first page, gzip -9" in result.stdout
    figures = json.loads(out.read_text())["databases"]["sqlite"]

    listed = figures["list"]
    assert listed["jobs"] == 120
    assert all(run["errors"] == 0 for name, run in listed["api"].items() if "peer" not in name)
    assert 0 < listed["list_p99_ms"] < 5000
    assert 0 < listed["first_rows"]["p50_ms"] < 30_000
    assert listed["filter_change"]["requests"] == 3

    log = figures["log"]
    assert log["log_bytes"] == 4 << 20 and log["download_bytes"] == log["log_bytes"]
    assert 0 < log["tail"]["max_ms"] < 60_000
    assert log["search_near"]["hits"] == 100 and log["search_spread"]["hits"] == 4
    assert log["rss_before_mib"] > 10

    follow = figures["follow"]
    assert follow["job_state"] == "succeeded" and follow["lines_printed"] == 1500
    assert follow["every_line_shown_or_declared"] is True, follow
    assert 0 < follow["max_line_nodes"] < 200
    assert follow["lag"]["p95_ms"] >= follow["lag"]["p50_ms"] >= 0

    feed = figures["feed"]
    assert feed["feeds_open"] == 40 and feed["changes_posted"] == 2
    assert feed["changes_missing"] == 0 and feed["change_delay"]["requests"] == 80

    metrics = figures["metrics"]
    assert metrics["tasks_with_gauges"] == 20 and metrics["fake_tasks"] is True
    assert figures["page"]["gzip_kib"] > 1
    time.sleep(1)
    assert processes_naming(scratch) == []
    shutil.rmtree(scratch, ignore_errors=True)
