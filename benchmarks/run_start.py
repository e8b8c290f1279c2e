"""`trainfleet run` wall time of this checkout beside another revision's, in one run.

A 3-replica job of `true`, run by each source tree in turn (interleaved, so both see the
same load), on data directories of their own. It shows what a change costs the everyday
`trainfleet run` (benchmark (b) of launch.py needs TorchX; this one needs only git).

usage: python benchmarks/run_start.py [--baseline REF] [--runs 20] [--out FILE]
Prints the medians and writes them as JSON (default benchmarks/results/run_start.json).
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
JOB = 'name: trues\nroles:\n  worker: {replicas: 3, command: ["true"]}\n'


def _export(ref: str, into: Path) -> Path:
    """The ``src`` folder of ``ref``, written under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def _timed_run(source: Path, job: Path, data_dir: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(source), TRAINFLEET_DATA_DIR=str(data_dir))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trainfleet", "run", str(job)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", default="main", help="git revision to compare with")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "run_start.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-") as tmp:
        work = Path(tmp)
        job = work / "true3.yaml"
        job.write_text(JOB)
        (work / "baseline").mkdir()
        sources = {"baseline": _export(args.baseline, work / "baseline"), "this": ROOT / "src"}
        times: dict[str, list[float]] = {name: [] for name in sources}
        for _ in range(args.runs):
            for name, source in sources.items():
                times[name].append(_timed_run(source, job, work / f"data-{name}"))
    medians = {name: statistics.median(samples) for name, samples in times.items()}
    results = {
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "baseline": args.baseline,
        "baseline_median_s": medians["baseline"],
        "this_median_s": medians["this"],
        "ratio": medians["this"] / medians["baseline"],
    }
    print(json.dumps(results, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
