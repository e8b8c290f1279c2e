"""Smoke test of benchmarks/launch.py (f), jobs with an image: a tiny run, sane figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from container_images import base_image

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "launch.py"


def test_tiny_run_writes_sane_figures(tmp_path: Path) -> None:
    base_image()
    out = tmp_path / "launch.json"
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), "--only", "f", "--runs", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())["f"]
    for name in ("start_with_image_s", "start_without_image_s", "start_podman_by_hand_s"):
        assert figures[name]["runs"] == 2 and figures[name]["median"] > 0, figures
    assert figures["restart_with_image_s"]["runs"] == 2
    assert figures["ratio_start_image_over_plain"] > 0
    assert figures["ratio_restart_image_over_plain"] > 0
