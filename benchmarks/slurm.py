"""Slurm benchmark: submit-to-all-tasks-running of a 4-task job, through trainfleet and
through a hand-written equivalent sbatch script, in the same run on the same cluster.

Each task's command writes the time it started (``date +%s.%N``) to a file of its own; a
figure is the latest of those times minus the time its submission began.

(trainfleet) ``Engine.submit`` of a job of 4 workers with the Slurm backend (what the server
             does for ``POST /api/v1/jobs``): admission, the controller, the launch file,
             ``sbatch``, then in the allocation one step whose tasks' bootstrap learns where
             every task landed and builds its environment before it starts the command.
(sbatch)     peer: ``sbatch`` of a script with the same allocation (4 tasks, 1 CPU each,
             spread over the nodes) whose one ``srun`` starts the 4 commands.
(cli)        the same job with ``trainfleet run``, a new process each time (Python start-up
             and the engine's set-up included), for reference, on its own.
(restart)    the same 4 tasks, task 0 failing at once on its first attempt: from its exit to
             the last task of the next attempt running, trainfleet restarting the job whole
             (``restart.policy: on-failure``, no backoff: the allocation is ended and a new
             one submitted, Slurm's scheduling pass included) beside a hand-written retry in
             one allocation (``srun ... || srun ...``: no new allocation, no scheduling pass).

Slurm starts a job at its next scheduling pass (about one a second here), which is most of
either figure and varies by up to a second. So each run submits the trainfleet job and the
sbatch job together (both fit the cluster at once; which goes first alternates), and they
wait for the same pass: the per-run ratio compares what each adds. Runs start at a random
part of a second, on an idle cluster.

usage: SLURM_CONF=... python benchmarks/slurm.py [--runs 40] [--seed 1] [--out FILE]
(start a local cluster with: export SLURM_CONF=$(bash scripts/slurm.sh start | tail -n1))
Prints a table and writes the figures as JSON (default benchmarks/results/slurm.json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainfleet.backends.slurm.backend import SlurmBackend
from trainfleet.control.assembly import engine_at
from trainfleet.domain.records import State
from trainfleet.spec.backends import SlurmConfig
from trainfleet.spec.models import JobSpec

HERE = Path(__file__).resolve().parent
TASKS = 4
CONFIG = SlurmConfig(spread=True, memory_per_task=256 * 1024**2, poll_interval=0.2)
STAMP = "date +%s.%N > {marks}/$TRAINFLEET_INDEX"
SBATCH = """#!/bin/bash
#SBATCH --job-name=raw-bench
#SBATCH --output={out}/raw-%j.out
#SBATCH --ntasks={tasks} --cpus-per-task=1 --mem-per-cpu=256M --spread-job
srun bash -c 'date +%s.%N > {marks}/$SLURM_PROCID'
"""

FAIL_FIRST = (
    'if [ "${{TRAINFLEET_RESTART:-${{RETRY:-0}}}}" = 0 ]; then '
    'if [ "$INDEX" = 0 ]; then date +%s.%N > {marks}/exit; exit 1; fi; exec sleep 600; fi; '
    "date +%s.%N > {marks}/$INDEX"
)
"""Task 0 of the first attempt writes its exit time and fails (the others wait to be
stopped); every task of the second attempt writes its start."""
RETRY_SBATCH = """#!/bin/bash
#SBATCH --job-name=raw-retry
#SBATCH --output={out}/retry-%j.out
#SBATCH --ntasks={tasks} --cpus-per-task=1 --mem-per-cpu=256M --spread-job
step() {{ srun --kill-on-bad-exit=1 bash -c 'INDEX=$SLURM_PROCID; {command}'; }}
RETRY=0 step || RETRY=1 step
"""


def _latest_start(marks: Path, timeout: float = 120) -> float:
    """The latest start time the tasks wrote, once all of them have."""
    deadline = time.monotonic() + timeout
    while True:
        files = [path for path in marks.iterdir() if path.name != "exit"]
        texts = [path.read_text().strip() for path in files]
        if len(files) == TASKS and all(texts):
            return max(map(float, texts))
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(files)} of {TASKS} tasks started in {timeout}s")
        time.sleep(0.01)


def _squeue_ended(job: str) -> bool:
    states = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"], capture_output=True, text=True
    ).stdout.split()
    return all(state in ("COMPLETED", "FAILED", "CANCELLED") for state in states)


def _idle() -> bool:
    """Every node idle: the last job has ended everywhere (no node still completing)."""
    states = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True
    ).stdout.split()
    return bool(states) and all(state == "idle" for state in states)


def _wait(done: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError("a job did not end in time")
        time.sleep(0.05)


class Bench:
    """The three ways to start the job, each returning submit-to-all-running seconds."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.engine = engine_at(root / "data", backend=SlurmBackend(CONFIG))
        self.runs = 0

    def _marks(self) -> Path:
        self.runs += 1
        marks = self.root / f"marks-{self.runs}"
        marks.mkdir()
        return marks

    def _spec(self, marks: Path) -> JobSpec:
        command = ["bash", "-c", STAMP.format(marks=marks)]
        return JobSpec.model_validate(
            {"name": "bench", "roles": {"worker": {"replicas": TASKS, "command": command}}}
        )

    def start_trainfleet(self) -> Started:
        marks = self._marks()
        spec = self._spec(marks)
        began = time.time()
        job = self.engine.submit(spec, self.root, start=True)

        def wait() -> None:
            if self.engine.wait(job.id, timeout=120).state != State.SUCCEEDED:
                raise RuntimeError(f"job {job.id} did not succeed")

        return Started(began, marks, wait)

    def start_sbatch(self) -> Started:
        marks = self._marks()
        script = self.root / f"raw-{self.runs}.sh"
        script.write_text(SBATCH.format(out=self.root, tasks=TASKS, marks=marks))
        began = time.time()
        job = subprocess.run(
            ["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True
        ).stdout.strip()
        return Started(began, marks, lambda: _wait(lambda: _squeue_ended(job)))

    def restart_trainfleet(self) -> float:
        marks = self._marks()
        command = ["bash", "-c", "INDEX=$TRAINFLEET_INDEX; " + FAIL_FIRST.format(marks=marks)]
        spec = JobSpec.model_validate(
            {
                "name": "retry",
                "restart": {"policy": "on-failure", "backoff": {"initial": 0}},
                "roles": {"worker": {"replicas": TASKS, "command": command}},
            }
        )
        job = self.engine.submit(spec, self.root, start=True)
        figure = _latest_start(marks) - float((marks / "exit").read_text())
        if self.engine.wait(job.id, timeout=120).state != State.SUCCEEDED:
            raise RuntimeError(f"job {job.id} did not succeed")
        return figure

    def restart_sbatch(self) -> float:
        marks = self._marks()
        script = self.root / f"retry-{self.runs}.sh"
        command = FAIL_FIRST.format(marks=marks)
        script.write_text(RETRY_SBATCH.format(out=self.root, tasks=TASKS, command=command))
        job = subprocess.run(
            ["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True
        ).stdout.strip()
        figure = _latest_start(marks) - float((marks / "exit").read_text())
        _wait(lambda: _squeue_ended(job))
        return figure

    def cli(self) -> float:
        marks = self._marks()
        job_file = self.root / f"job-{self.runs}.json"
        job_file.write_text(self._spec(marks).model_dump_json(exclude_defaults=True))
        config = self.root / "xdg" / "trainfleet" / "config.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(f"backend: slurm\nslurm: {CONFIG.model_dump_json()}\n")
        env = {**os.environ, "XDG_CONFIG_HOME": str(config.parent.parent)}
        argv = [sys.executable, "-m", "trainfleet", "--data-dir", str(self.root / "cli")]
        began = time.time()
        run = subprocess.Popen([*argv, "run", str(job_file)], env=env, stdout=subprocess.DEVNULL)
        figure = _latest_start(marks) - began
        if run.wait(timeout=120) != 0:
            raise RuntimeError("`trainfleet run` failed")
        return figure


@dataclass(frozen=True)
class Started:
    """A submitted job: when its submission began, where its tasks write, how to await it."""

    began: float
    marks: Path
    wait: Callable[[], None]

    def figure(self) -> float:
        return _latest_start(self.marks) - self.began


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_s": statistics.median(ordered),
        "mean_s": statistics.fmean(ordered),
        "min_s": ordered[0],
        "max_s": ordered[-1],
        "runs": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "slurm.json")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        parser.error("SLURM_CONF is not set (export SLURM_CONF=$(bash scripts/slurm.sh start))")
    samples: dict[str, list[float]] = {"trainfleet": [], "cli": [], "sbatch": []}
    restarts: dict[str, list[float]] = {"trainfleet": [], "sbatch": []}
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-slurm-") as tmp:
        bench = Bench(Path(tmp))
        bench.start_sbatch().wait()  # warm-up: the first job on a fresh cluster is slower
        phase = random.Random(args.seed)
        for run in range(args.runs):
            # The pair goes in together, so that both wait for the same scheduling pass.
            _wait(_idle)
            time.sleep(phase.random())
            ways = ("trainfleet", "sbatch") if run % 2 else ("sbatch", "trainfleet")
            started = {name: getattr(bench, f"start_{name}")() for name in ways}
            for name, job in started.items():
                samples[name].append(job.figure())
            for job in started.values():
                job.wait()
            _wait(_idle)
            time.sleep(phase.random())
            samples["cli"].append(bench.cli())
            for name in ("trainfleet", "sbatch") if run % 2 else ("sbatch", "trainfleet"):
                _wait(_idle)
                restarts[name].append(getattr(bench, f"restart_{name}")())
            print(f"run {run + 1}: " + "  ".join(f"{k} {v[-1]:.3f}s" for k, v in samples.items()))
            print("  restart: " + "  ".join(f"{k} {v[-1]:.3f}s" for k, v in restarts.items()))
        bench.engine.shutdown()
    figures = {name: _summary(values) for name, values in samples.items()}
    peer = figures["sbatch"]
    pairs = list(zip(samples["trainfleet"], samples["sbatch"], strict=True))
    paired = [ours / theirs for ours, theirs in pairs]
    ratios = {
        "paired_ratio_median": statistics.median(paired),
        "trainfleet_median_ratio": figures["trainfleet"]["median_s"] / peer["median_s"],
        "cli_median_ratio": figures["cli"]["median_s"] / peer["median_s"],
        "added_by_trainfleet_median_s": statistics.median(ours - theirs for ours, theirs in pairs),
    }
    restart = {name: _summary(values) for name, values in restarts.items()}
    results = {
        "tasks": TASKS,
        **figures,
        **ratios,
        "target_ratio": 1.2,
        "restart": {**restart, "target_s": 15.0},
    }
    print(f"\nsubmit-to-all-{TASKS}-tasks-running over {args.runs} runs:")
    for name, figure in figures.items():
        print(
            f"  {name:<10} median {figure['median_s']:.3f} s  mean {figure['mean_s']:.3f} s  "
            f"({figure['min_s']:.3f}..{figure['max_s']:.3f})"
        )
    print(
        f"  trainfleet/sbatch, paired: median {ratios['paired_ratio_median']:.2f} "
        f"(target <= 1.2); trainfleet adds {ratios['added_by_trainfleet_median_s'] * 1000:.0f} ms"
    )
    print(
        f"  ratio of medians: trainfleet {ratios['trainfleet_median_ratio']:.2f}, "
        f"cli {ratios['cli_median_ratio']:.2f}"
    )
    print(
        "  exit to next attempt running: trainfleet (job resubmitted) median "
        f"{restart['trainfleet']['median_s']:.3f} s, retry in one allocation "
        f"{restart['sbatch']['median_s']:.3f} s (target <= 15 s)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
