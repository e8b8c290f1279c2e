"""Per-job Python environments: the first build and a cached start of a job that asks for
numpy, beside building the same environment by hand with uv, in the same run.

Each first build starts from an empty uv cache of its own (UV_CACHE_DIR), so neither
profits from the other's downloads; the cached start is a second job asking for the same
environment (trainfleet finds it by digest: no uv at all).

usage: python benchmarks/environments.py [--runs 3] [--out FILE]
Prints a table and writes the figures as JSON (default benchmarks/results/environments.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from uv import find_uv_bin

HERE = Path(__file__).resolve().parent
JOB = (
    "name: numpy\nenvironment: {pip: [numpy]}\n"
    "roles:\n  worker: {command: python -c 'import numpy'}\n"
)


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "environments.json")
    args = parser.parse_args()
    trainfleet = [sys.executable, "-m", "trainfleet"]
    uv = find_uv_bin()
    by_hand, first, cached, plain = [], [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="trainfleet-bench-env-") as tmp:
            work = Path(tmp)
            (work / "job.yaml").write_text(JOB)
            (work / "plain.yaml").write_text(JOB.replace("environment: {pip: [numpy]}\n", ""))
            env = {**os.environ, "TRAINFLEET_DATA_DIR": str(work / "data")}
            hand = {**env, "UV_CACHE_DIR": str(work / "uv-hand")}
            build = [uv, "venv", "-q", str(work / "venv")]
            install = [uv, "pip", "install", "-q", "--python", str(work / "venv/bin/python")]
            # As trainfleet builds it: with pip, so that `pip` works in the environment.
            by_hand.append(
                _timed(build, hand, work) + _timed([*install, "pip", "numpy"], hand, work)
            )
            ours = {**env, "UV_CACHE_DIR": str(work / "uv-trainfleet")}
            first.append(_timed([*trainfleet, "run", "job.yaml"], ours, work))
            cached.append(_timed([*trainfleet, "run", "job.yaml"], ours, work))
            plain.append(_timed([*trainfleet, "run", "plain.yaml"], ours, work))
    results = {
        "runs": args.runs,
        "by_hand_uv_venv_and_install_s": statistics.median(by_hand),
        "trainfleet_run_first_build_s": statistics.median(first),
        "trainfleet_run_cached_s": statistics.median(cached),
        "trainfleet_run_without_environment_s": statistics.median(plain),
    }
    results["first_build_over_by_hand"] = (
        results["trainfleet_run_first_build_s"] / results["by_hand_uv_venv_and_install_s"]
    )
    for name, value in results.items():
        print(f"{name:45} {value:8.3f}" if isinstance(value, float) else f"{name:45} {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
