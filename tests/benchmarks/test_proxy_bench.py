"""Smoke test of benchmarks/proxy.py's jupyter part: a tiny run (a real server, a real
JupyterLab), sane figures, the other part's figures kept, and no server left behind."""

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
from helpers import processes_naming

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "benchmarks" / "proxy.py"


def test_tiny_jupyter_run_writes_sane_figures(tmp_path: Path) -> None:
    pytest.importorskip("jupyterlab")
    out = tmp_path / "proxy.json"
    out.write_text(json.dumps({"tensorboard": {"requests": 7}}))
    tiny = ["--only", "jupyter", "--round-trips", "3", "--opens", "2", "--out", str(out)]
    # its server's data directory, told apart from others'
    scratch = Path(tempfile.mkdtemp(prefix="tfpx-"))
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), *tiny],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "execute 1+1" in result.stdout and "(target <= 1.5)" in result.stdout
    figures = json.loads(out.read_text())
    assert figures["tensorboard"] == {"requests": 7}
    jupyter = figures["jupyter"]
    assert jupyter["round_trips"] == 3 and jupyter["opens"] == 2
    assert jupyter["target_ratio_p50"] == 1.5
    assert jupyter["output_chars"] >= 100_000
    rows = [*jupyter["execute"].values(), jupyter["open"], jupyter["back_to_back_1+1 (peer)"]]
    assert set(jupyter["execute"]) == {"1+1", "100 KB"}
    for row in rows:
        for path in ("direct", "proxy"):
            assert 0 < row[path]["p50_ms"] <= row[path]["p95_ms"] < 30_000
        assert row["ratio_p50"] == pytest.approx(row["proxy"]["p50_ms"] / row["direct"]["p50_ms"])
    time.sleep(1)
    assert processes_naming(scratch) == []
    shutil.rmtree(scratch, ignore_errors=True)
