"""What functions and workflows cost on one `trainfleet server` on loopback.

--part run:
(run)     ``Client.run`` of a no-op on 4 workers, from call to result, beside its peer: the
          same job (4 tasks of ``python3 -c pass``) submitted by hand with ``Client.submit``
          (the folder sent alike) and waited for with ``Client.wait``. Target: at most 300 ms
          beyond the peer.
(closure) the same call with a 10 MiB closure (random bytes: no compression helps) beside
          the no-op call. Target: at most 200 ms more.
          Each round runs the three in turn, the next round in reverse order.
--part handoff:
          A chain of ``--steps`` no-op steps run as a workflow: each hand-off is the time
          from one step's job ending to the next one's being stored (the jobs' own
          records). Peer: a script doing the same with the SDK, ``Client.wait`` then
          ``Client.submit``. Targets: p50 <= 100 ms, p99 <= 500 ms.
--part dag:
          A DAG of ``--steps`` no-op steps (layers of ``--width``, each step needing two of
          the layer before): the run's scheduling, its time from stored to ended less the
          time its jobs took along its critical path. Target: <= 2 s for 200 steps.
--part schedules:
          ``--schedules`` stored schedules, all but one yearly, one every minute: how late
          the minutely run is stored and its step's job stored, after its time, and the
          server's CPU (all of its threads: an upper bound of the firer's) over the idle
          ``--idle`` seconds after. Targets: <= 1 s late; <= 1% of a core.

usage: python benchmarks/workflows.py [--part run|handoff|dag|schedules|all] [--runs 10] ...
Prints the figures and writes them as JSON (default benchmarks/results/workflows*.json).
"""

from __future__ import annotations

import argparse
import itertools
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
from typing import Any

from trainfleet.client import Client
from trainfleet.domain.workflow_records import RunDetails
from trainfleet.spec.workflows import load_workflow_text

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
    parser.add_argument("--part", default="all")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "workflows.json")
    args = parser.parse_args()
    parts = {"run": run_part, "handoff": handoff_part, "dag": dag_part}
    parts["schedules"] = schedules_part
    chosen = list(parts) if args.part == "all" else args.part.split(",")
    results = {}
    for part in chosen:
        results[part] = parts[part](args)
        print(json.dumps({part: _shown(results[part])}, indent=2), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


def _shown(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in figures.items() if not k.startswith("samples")}


def run_part(args: argparse.Namespace) -> dict[str, Any]:
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
    return {
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "workers": WORKERS,
        "median_s": medians,
        "run_beyond_by_hand_ms": (medians["run"] - medians["by_hand"]) * 1000,
        "closure_beyond_run_ms": (medians["closure"] - medians["run"]) * 1000,
        "ratio_run_to_by_hand": medians["run"] / medians["by_hand"],
        "samples_s": times,
    }


NOOP = "{roles: {worker: {command: [python3, -c, pass]}}}"
"""A step's job that does nothing."""


def _chain(steps: int) -> str:
    lines = ["kind: Workflow", "name: chain", "steps:"]
    for n in range(steps):
        needs = f", needs: [s{n - 1}]" if n else ""
        lines.append(f"  s{n}: {{job: {NOOP}{needs}}}")
    return "\n".join(lines) + "\n"


def _layers(steps: int, width: int) -> str:
    lines = ["kind: Workflow", "name: dag", "steps:"]
    for n in range(steps):
        layer, place = divmod(n, width)
        needs = ""
        if layer:
            before = (layer - 1) * width
            two = sorted({before + place, before + (place + 1) % width})
            needs = ", needs: [" + ", ".join(f"s{m}" for m in two) + "]"
        lines.append(f"  s{n}: {{job: {NOOP}{needs}}}")
    return "\n".join(lines) + "\n"


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _with_server(body: Callable[[Client, Path, int], dict[str, Any]]) -> dict[str, Any]:
    """``body(client, folder, the server's pid)`` against a server of its own."""
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-") as tmp:
        server = Server(Path(tmp) / "data")
        try:
            with Client(server.url, server.token, timeout=120) as client:
                return body(client, Path(tmp), server.process.pid)
        finally:
            server.stop()


def _cpu(pid: int) -> float:
    """Seconds of CPU the process has used (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _workflow_run(client: Client, folder: Path, text: str) -> RunDetails:
    path = folder / "flow.yaml"
    path.write_text(text)
    submitted = client.submit_workflow(path, send_folder=False)
    assert submitted.run is not None
    details = client.wait_run(submitted.run.id, 0.05)
    assert details.run.state == "succeeded", details.run
    return details


def handoff_part(args: argparse.Namespace) -> dict[str, Any]:
    def body(client: Client, tmp: Path, pid: int) -> dict[str, Any]:
        details = _workflow_run(client, tmp, _chain(args.steps))
        jobs = [client.get(step.jobs[-1]) for step in details.steps]
        workflow = [
            after.created_at - (before.finished_at or 0.0)
            for before, after in itertools.pairwise(jobs)
        ]
        by_hand: list[float] = []
        previous = None
        for n in range(args.steps):
            job = client.submit(
                f"name: s{n}\nroles: {{worker: {{command: [python3, -c, pass]}}}}\n"
            )
            if previous is not None:
                ended = client.get(previous)
                by_hand.append(job.created_at - (ended.finished_at or 0.0))
            client.wait(job.id)
            previous = job.id
        return {
            "steps": args.steps,
            "workflow_p50_ms": _percentile(workflow, 0.5) * 1000,
            "workflow_p99_ms": _percentile(workflow, 0.99) * 1000,
            "by_hand_p50_ms": _percentile(by_hand, 0.5) * 1000,
            "by_hand_p99_ms": _percentile(by_hand, 0.99) * 1000,
            "samples_workflow_s": workflow,
            "samples_by_hand_s": by_hand,
        }

    return _with_server(body)


def dag_part(args: argparse.Namespace) -> dict[str, Any]:
    def body(client: Client, tmp: Path, pid: int) -> dict[str, Any]:
        started = time.perf_counter()
        details = _workflow_run(client, tmp, _layers(args.steps, args.width))
        wall = time.perf_counter() - started
        jobs = {step.step: client.get(step.jobs[-1]) for step in details.steps}
        spec = load_workflow_text(_layers(args.steps, args.width))
        longest: dict[str, float] = {}  # the jobs' time along the longest path to each step
        for name in spec.order():
            job = jobs[name]
            own = (job.finished_at or 0.0) - job.created_at
            longest[name] = own + max((longest[n] for n in spec.steps[name].needs), default=0.0)
        run = details.run
        total = (run.finished_at or 0.0) - run.created_at
        critical = max(longest.values())
        return {
            "steps": args.steps,
            "width": args.width,
            "run_s": total,
            "jobs_on_critical_path_s": critical,
            "scheduling_s": total - critical,
            "wall_s": wall,
        }

    return _with_server(body)


def schedules_part(args: argparse.Namespace) -> dict[str, Any]:
    scheduled = (
        "kind: Workflow\nname: {name}\nschedule: {{cron: '{cron}'}}\nsteps:\n  a: {{job: {noop}}}\n"
    )

    def body(client: Client, tmp: Path, pid: int) -> dict[str, Any]:
        for n in range(args.schedules - 1):
            path = tmp / f"y{n}.yaml"
            path.write_text(scheduled.format(name=f"y{n}", cron="0 0 1 1 *", noop=NOOP))
            client.submit_workflow(path, send_folder=False)
        path = tmp / "minutely.yaml"
        path.write_text(scheduled.format(name="minutely", cron="* * * * *", noop=NOOP))
        due = client.submit_workflow(path, send_folder=False).next_times[0]
        time.sleep(max(0.0, due - time.time() + 5))
        runs = client.workflow_runs("default", "minutely")
        assert runs and runs[-1].scheduled_for == due, runs
        details = client.wait_run(runs[-1].id, 0.1)
        job = client.get(details.steps[0].jobs[0])
        before = _cpu(pid)
        time.sleep(args.idle)
        idle = _cpu(pid) - before
        return {
            "schedules": args.schedules,
            "run_stored_late_s": runs[-1].created_at - due,
            "job_stored_late_s": job.created_at - due,
            "idle_s": args.idle,
            "server_cpu_share_idle": idle / args.idle,
        }

    return _with_server(body)


if __name__ == "__main__":
    main()
