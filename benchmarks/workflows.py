"""What ``Client.run`` costs beyond a job file, on one `trainfleet server` on loopback.

(run)     ``Client.run`` of a no-op on 4 workers, from call to result, beside its peer: the
          same job (4 tasks of ``python3 -c pass``) submitted by hand with ``Client.submit``
          (the folder sent alike) and waited for with ``Client.wait``. Target: at most 300 ms
          beyond the peer.
(closure) the same call with a 10 MiB closure (random bytes: no compression helps) beside
          the no-op call. Target: at most 200 ms more.

Each round runs the three in turn, the next round in reverse order, so all see the same
load. The DAG and schedule figures of issue 29 come with workflows.

usage: python benchmarks/workflows.py [--runs 10] [--out FILE]
Prints the medians and writes them as JSON (default benchmarks/results/workflows.json).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from trainfleet.client import Client

HERE = Path(__file__).resolve().parent
WORKERS = 4
JOB = (
    f"name: by-hand\nroles:\n  worker:\n    replicas: {WORKERS}\n"
    "    command: [python3, -c, pass]\nsuccess: all-workers\n"
)


class Server:
    """`trainfleet server` in a subprocess on a free port; its URL and admin token."""

    def __init__(self, data_dir: Path) -> None:
        argv = [sys.executable, "-m", "trainfleet", "--data-dir", str(data_dir), "server"]
        self.process = subprocess.Popen(
            [*argv, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = self._wait_for(r"Uvicorn running on (https?://\S+)")
        self.token = self._wait_for(r"admin token \(shown only this once\): (\S+)")

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def _wait_for(self, pattern: str) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if found := re.search(pattern, line):
                    return found.group(1)
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("the server did not start:\n" + "".join(self.lines[-20:]))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _noop() -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "workflows.json")
    args = parser.parse_args()
    blob = os.urandom(10 << 20)

    def closure() -> int:
        return len(blob)

    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-") as tmp:
        folder = Path(tmp) / "work"
        folder.mkdir()
        (folder / "job.yaml").write_text(JOB)
        server = Server(Path(tmp) / "data")
        try:
            with (
                Client(server.url, server.token, timeout=120) as client,
                open(os.devnull, "w") as quiet,
            ):

                def by_hand() -> None:
                    job = client.submit(JOB, workdir=folder)
                    assert client.wait(job.id).state == "succeeded"

                def run(fn: Callable[[], object]) -> Callable[[], object]:
                    def call() -> object:
                        stdout, sys.stdout = sys.stdout, quiet
                        try:
                            return client.run(
                                fn, workers=WORKERS, framework="generic", workdir=folder
                            )
                        finally:
                            sys.stdout = stdout

                    return call

                cases = {"by_hand": by_hand, "run": run(_noop), "closure": run(closure)}
                for case in cases.values():  # warm: the server's first job, imports
                    case()
                times: dict[str, list[float]] = {name: [] for name in cases}
                for number in range(args.runs):
                    order = list(cases) if number % 2 == 0 else list(reversed(cases))
                    for name in order:
                        times[name].append(_timed(cases[name]))
        finally:
            server.stop()
    medians = {name: statistics.median(samples) for name, samples in times.items()}
    results = {
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "workers": WORKERS,
        "median_s": medians,
        "run_beyond_by_hand_ms": (medians["run"] - medians["by_hand"]) * 1000,
        "closure_beyond_run_ms": (medians["closure"] - medians["run"]) * 1000,
        "ratio_run_to_by_hand": medians["run"] / medians["by_hand"],
        "samples_s": times,
    }
    print(json.dumps({k: v for k, v in results.items() if k != "samples_s"}, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
