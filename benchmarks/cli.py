"""How long the everyday read commands take, embedded (no server), over 10,000 stored jobs.

Fills a temporary data directory with ended one-task jobs through trainfleet.store (as
benchmarks/api.py does), writes one 200-line log, then times, as new processes, the median
of N runs of `trainfleet list`, `trainfleet describe ID` and `trainfleet logs ID --role
worker`, beside the peer `python -c "import sqlite3"` (interpreter start-up alone).

usage: python benchmarks/cli.py [--jobs 10000] [--runs 15] [--out FILE]
Prints a table and writes the figures as JSON (default benchmarks/results/cli.json).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from api import fill_store

from trainfleet.datadir.layout import DataDir

HERE = Path(__file__).resolve().parent
TARGET_MS = 150.0


def _median_ms(argv: list[str], runs: int, env: dict[str, str]) -> dict[str, float]:
    """Median and spread of ``runs`` runs of ``argv`` (after one untimed run), in ms."""
    subprocess.run(argv, env=env, check=True, capture_output=True)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        times.append((time.perf_counter() - started) * 1000)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cli.json")
    args = parser.parse_args()
    tag = secrets.token_hex(3)
    results: dict[str, object] = {"jobs": args.jobs, "runs": args.runs, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-cli-") as tmp:
        data_dir = DataDir(Path(tmp) / "data")
        data_dir.ensure()
        print(f"filling the store with {args.jobs:,} ended jobs ...", flush=True)
        results["fill_s"] = fill_store(data_dir.database, args.jobs, tag)
        job_id = f"stored-{tag}-{args.jobs - 1:05d}"
        log = data_dir.log_path(job_id, "worker", 0)
        log.parent.mkdir(parents=True)
        log.write_text("".join(f"step {n} loss 0.{n:03d}\n" for n in range(200)))
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TRAINFLEET_")},
            "TRAINFLEET_DATA_DIR": str(data_dir.root),
            "XDG_CONFIG_HOME": str(Path(tmp) / "config"),  # no server configured
        }
        cli = [sys.executable, "-m", "trainfleet"]
        commands = {
            "python -c 'import sqlite3' (peer)": [sys.executable, "-c", "import sqlite3"],
            "trainfleet list": [*cli, "list"],
            "trainfleet describe ID": [*cli, "describe", job_id],
            "trainfleet logs ID --role worker": [*cli, "logs", job_id, "--role", "worker"],
        }
        figures = {name: _median_ms(argv, args.runs, env) for name, argv in commands.items()}
    results["commands"] = figures
    print(f"{'command':<36} {'median ms':>10} {'min ms':>8} {'max ms':>8}")
    for name, figure in figures.items():
        print(
            f"{name:<36} {figure['median_ms']:>10.1f} {figure['min_ms']:>8.1f} "
            f"{figure['max_ms']:>8.1f}"
        )
    slowest = max(f["median_ms"] for n, f in figures.items() if n.startswith("trainfleet"))
    print(f"every read command's median at most {TARGET_MS:.0f} ms: {slowest <= TARGET_MS}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
