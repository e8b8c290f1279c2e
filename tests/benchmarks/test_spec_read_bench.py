"""Smoke test of `benchmarks/spec_read.py`: a tiny run, and its figures are sane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "spec_read.py"


def test_tiny_spec_read_run_writes_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "spec_read.json"
    argv = [sys.executable, str(BENCHMARK), "--rounds", "3", "--out", str(out)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    assert (
        "tf_ingraph/job.yaml" in figures["files"]
        and "pipeline/workflow.yaml" not in figures["files"]
    )
    assert figures["rounds"] == 3 and figures["libyaml"] is True
    for name in ("ours_us", "pyyaml_parser_us", "plain_safe_load_us"):
        assert figures[name] > 0
    assert figures["pyyaml_parser_over_ours"] == figures["pyyaml_parser_us"] / figures["ours_us"]
    assert "trainfleet's reader (libyaml parser)" in result.stdout
    bad = subprocess.run([*argv[:2], "--rounds", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--rounds: at least 1" in bad.stderr
