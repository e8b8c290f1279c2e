"""Gang scheduler benchmark: a discrete-event simulation of a saturated GPU cluster.

The cluster: --nodes nodes (default 1,000) of 64 CPUs, 512 GiB and 8 GPUs each. The queues:
--queues queues (default 4) in one cohort, with nominal GPU quotas in the ratio N:N-1:...:1
(40/30/20/10 % for 4) summing to the cluster's GPUs, borrowing unlimited within the cohort,
no CPU or memory quota. The jobs: --jobs gang jobs (default 20,000), all submitted at
simulated time 0 so that the queue is saturated from the start, each to a queue drawn
uniformly (so the small-quota queues borrow and the large-quota ones reclaim, preempting),
with a seeded random (--seed) mix meant to look like GPU training:

- tasks per job 1, 2, 4, 8, 16, 32 or 64 with probability 45/20/14/10/6/3/2 %;
- GPUs per task: a single-task job asks for 0.5/1/2/4/8 GPUs (10/35/15/15/25 %); the
  tasks of a multi-task job for 1/2/4/8 GPUs each (5/10/25/60 %); every task asks for
  8 CPUs and 64 GiB per GPU (so the GPU is the scarce resource);
- priority 0, 1 or 2 (70/20/10 %); duration lognormal, median 1 h, sigma 1.2, clipped to
  2 min .. 3 days of simulated time; a job bigger than half the cluster is drawn again
  (never at the default size, where the biggest is 64 x 8 = 512 of 8,000 GPUs).

The event loop, in simulated time: schedule(); start what it admitted (an end event at
now + duration); a preempted job stops after --grace simulated seconds (or at its own end
if that comes first), then finished() puts it back in the queue, to run again from the
start (its lost GPU-seconds are counted); pop the next end event(s), finished(), schedule()
again. It runs until no job waits any more (the queue is no longer saturated) or
--sim-hours of simulated time have passed.

What is measured (time.perf_counter around every schedule() call, the scheduler's own CPU
time, not simulated time):

- decisions/s: jobs considered (Decisions.considered) / total time in schedule();
  admissions/s likewise; submit() and finished() times are reported beside them;
- time per decision (pass time / considered, one sample per pass) p50/p99/max: the
  issue's "p99 time per decision under 5 ms" is compared against this p99; the time per
  schedule() pass p50/p99/max is shown beside it against the same 5 ms, the stricter
  reading (a pass holds at least backfill_depth = 64 decisions), marked in parentheses;
- GPU utilization: allocated GPU-seconds / total GPU-seconds (simulated time) while the
  queue is saturated, i.e. the time-weighted mean of the allocated share (the 90 % target
  is compared against this); also its time-weighted 10th percentile, the useful share
  (allocated less the GPU-seconds of preempted work, which restarts from scratch), the
  number of preemptions and how long the queue stayed saturated (it drains sooner the
  more useful work is done).

The peer, in the same run over the same job stream: strict FIFO in the same order
(priority, then submission) with the same gang placement (trainfleet's Cluster.place),
no backfill, no quotas, no preemption: it admits the head of the queue while it fits and
otherwise waits. Its utilization over its own saturated period is reported beside ours
(it never preempts, so all of its allocated GPU time is useful).
Slurm's documented sustained rate (500 jobs/s) is quoted as a reference, not measured.

usage: python benchmarks/scheduler.py [--nodes 1000] [--jobs 20000] [--queues 4]
       [--seed 1] [--grace 30] [--sim-hours H] [--quick] [--out FILE]
Prints a table and writes the figures as JSON (default benchmarks/results/scheduler.json).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainfleet.scheduling.admission import GangJob, Scheduler
from trainfleet.scheduling.cluster import Cluster, Node, TaskDemand
from trainfleet.scheduling.queues import QueueSpec
from trainfleet.scheduling.resources import GPU_UNIT, Resources

HERE = Path(__file__).resolve().parent
GIB = 2**30
NODE_CPUS, NODE_MEMORY, NODE_GPUS = 64, 512 * GIB, 8
COHORT = "research"

TASKS_PER_JOB = ((1, 45), (2, 20), (4, 14), (8, 10), (16, 6), (32, 3), (64, 2))
GPUS_SINGLE = ((500, 10), (1000, 35), (2000, 15), (4000, 15), (8000, 25))  # thousandths
GPUS_MULTI = ((1000, 5), (2000, 10), (4000, 25), (8000, 60))
PRIORITIES = ((0, 70), (1, 20), (2, 10))
DURATION_MEDIAN_S, DURATION_SIGMA = 3600.0, 1.2
DURATION_MIN_S, DURATION_MAX_S = 120.0, 3 * 86400.0

TARGET_DECISIONS_PER_S = 10_000
TARGET_P99_MS = 5.0
TARGET_UTILIZATION = 0.90
SLURM_JOBS_PER_S = 500


@dataclass(frozen=True)
class SimJob:
    gang: GangJob
    duration: float
    gpu: int  # thousandths, the whole job


def _pick(rng: random.Random, table: tuple[tuple[int, int], ...]) -> int:
    values = [value for value, _ in table]
    return rng.choices(values, [weight for _, weight in table])[0]


def make_cluster(count: int) -> list[Node]:
    capacity = Resources(cpu=NODE_CPUS * 1000, memory=NODE_MEMORY, gpu=NODE_GPUS * GPU_UNIT)
    return [Node(f"node-{i:05d}", capacity) for i in range(count)]


def make_queues(count: int, cluster_gpu: int) -> list[QueueSpec]:
    """Nominal GPU quotas in the ratio count:count-1:...:1, summing to the cluster."""
    weights = list(range(count, 0, -1))
    shares = [cluster_gpu * w // sum(weights) for w in weights]
    shares[0] += cluster_gpu - sum(shares)
    return [QueueSpec(f"q{i}", {"gpu": share}, cohort=COHORT) for i, share in enumerate(shares)]


def make_jobs(rng: random.Random, count: int, queues: int, cluster_gpu: int) -> list[SimJob]:
    demands: dict[int, TaskDemand] = {}

    def demand(gpu: int) -> TaskDemand:
        if gpu not in demands:
            per_gpu = gpu / GPU_UNIT
            demands[gpu] = TaskDemand(
                Resources(cpu=int(8000 * per_gpu), memory=int(64 * GIB * per_gpu), gpu=gpu)
            )
        return demands[gpu]

    jobs = []
    for i in range(count):
        while True:
            tasks = _pick(rng, TASKS_PER_JOB)
            gpu = _pick(rng, GPUS_SINGLE if tasks == 1 else GPUS_MULTI)
            if tasks * gpu * 2 <= cluster_gpu:
                break
        duration = DURATION_MEDIAN_S * math.exp(rng.gauss(0.0, DURATION_SIGMA))
        duration = min(max(duration, DURATION_MIN_S), DURATION_MAX_S)
        gang = GangJob(
            id=f"job-{i:06d}",
            tasks=(demand(gpu),) * tasks,
            queue=f"q{rng.randrange(queues)}",
            priority=_pick(rng, PRIORITIES),
            order=float(i),
        )
        jobs.append(SimJob(gang, duration, tasks * gpu))
    return jobs


# -- figures ------------------------------------------------------------------


def _rank(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted samples."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _timings_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": _rank(ordered, 0.50) * 1000,
        "p99_ms": _rank(ordered, 0.99) * 1000,
        "max_ms": ordered[-1] * 1000,
        "mean_ms": sum(ordered) / len(ordered) * 1000,
        "samples": len(ordered),
    }


class Usage:
    """Allocated GPU thousandths over simulated time, while the queue is saturated."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.allocated = 0
        self.lost = 0.0  # GPU thousandths x seconds of preempted work (restarted from scratch)
        self.segments: list[tuple[int, float]] = []  # (allocated, seconds)

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self.segments.append((self.allocated, seconds))

    def figures(self) -> dict[str, float]:
        total = sum(seconds for _, seconds in self.segments)
        if not total:
            return {
                "utilization": 0.0,
                "useful_utilization": 0.0,
                "utilization_p10": 0.0,
                "saturated_hours": 0.0,
            }
        used = sum(allocated * seconds for allocated, seconds in self.segments)
        tenth, seen = total / 10, 0.0
        p10 = 0.0
        for allocated, seconds in sorted(self.segments):
            seen += seconds
            if seen >= tenth:
                p10 = allocated / self.capacity
                break
        return {
            "utilization": used / (self.capacity * total),
            "useful_utilization": (used - self.lost) / (self.capacity * total),
            "utilization_p10": p10,
            "saturated_hours": total / 3600,
        }


class Events:
    """End events in simulated time; a job's newer event makes its older one stale."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, str]] = []
        self.current: dict[str, int] = {}
        self.sequence = 0

    def push(self, at: float, job: str) -> None:
        self.sequence += 1
        self.current[job] = self.sequence
        heapq.heappush(self.heap, (at, self.sequence, job))

    def next_time(self) -> float | None:
        while self.heap and self.current.get(self.heap[0][2]) != self.heap[0][1]:
            heapq.heappop(self.heap)
        return self.heap[0][0] if self.heap else None

    def pop_at(self, now: float) -> list[str]:
        due = []
        while self.heap and self.heap[0][0] <= now:
            _, sequence, job = heapq.heappop(self.heap)
            if self.current.get(job) == sequence:
                del self.current[job]
                due.append(job)
        return due


@dataclass
class Run:
    started: float
    ends: float
    stopping: bool = False


# -- ours -----------------------------------------------------------------------


def simulate(
    nodes: list[Node], queues: list[QueueSpec], jobs: list[SimJob], grace: float, limit: float
) -> dict[str, Any]:
    """Our scheduler over the job stream; see the module doc."""
    scheduler = Scheduler(nodes, queues)
    by_id = {job.gang.id: job for job in jobs}
    started = time.perf_counter()
    for job in jobs:
        scheduler.submit(job.gang)
    submit_s = time.perf_counter() - started

    usage = Usage(scheduler.cluster.capacity.gpu)
    events = Events()
    running: dict[str, Run] = {}
    waiting = len(jobs)
    now = 0.0
    pass_s: list[float] = []
    per_decision_s: list[float] = []
    considered = admitted = preempted = completed = restarts = 0
    finished_s = 0.0
    finished_calls = 0
    lost_gpu_s = 0.0
    while True:
        t0 = time.perf_counter()
        decisions = scheduler.schedule()
        elapsed = time.perf_counter() - t0
        pass_s.append(elapsed)
        if decisions.considered:
            per_decision_s.append(elapsed / decisions.considered)
        considered += decisions.considered
        admitted += len(decisions.admitted)
        preempted += len(decisions.preempted)
        for admission in decisions.admitted:
            job = by_id[admission.job]
            running[job.gang.id] = Run(now, now + job.duration)
            events.push(now + job.duration, job.gang.id)
            usage.allocated += job.gpu
            waiting -= 1
        for preemption in decisions.preempted:
            run = running[preemption.job]
            run.stopping = True
            if run.ends > now + grace:
                events.push(now + grace, preemption.job)
        if not waiting:
            break
        upcoming = events.next_time()
        if upcoming is None:
            reasons = "\n".join(
                f"  {job_id}: {scheduler.waiting_reason(job_id)}"
                for job_id in scheduler.pending()[:5]
            )
            raise RuntimeError(
                f"{waiting} job(s) wait, none runs: the scheduler is stuck at "
                f"{now / 3600:.1f} h simulated; the first ones:\n{reasons}"
            )
        if upcoming > limit:
            usage.advance(limit - now)
            now = limit
            break
        usage.advance(upcoming - now)
        now = upcoming
        for job_id in events.pop_at(now):
            job, run = by_id[job_id], running.pop(job_id)
            usage.allocated -= job.gpu
            t0 = time.perf_counter()
            scheduler.finished(job_id)
            done = not run.stopping or run.ends <= now
            if run.stopping and done:
                scheduler.withdraw(job_id)  # it ended on its own during the grace period
            finished_s += time.perf_counter() - t0
            finished_calls += 1
            if done:
                completed += 1
            else:
                waiting += 1
                restarts += 1
                lost_gpu_s += job.gpu / GPU_UNIT * (now - run.started)
                usage.lost += job.gpu * (now - run.started)
    schedule_s = sum(pass_s)
    return {
        "passes": len(pass_s),
        "considered": considered,
        "admitted": admitted,
        "preempted": preempted,
        "preempted_restarted": restarts,
        "completed": completed,
        "still_running": len(running),
        "still_waiting": waiting,
        "schedule_s": schedule_s,
        "decisions_per_s": considered / schedule_s,
        "admissions_per_s": admitted / schedule_s,
        "pass": _timings_ms(pass_s),
        "per_decision": _timings_ms(per_decision_s),
        "submit_s": submit_s,
        "submit_us_each": submit_s / len(jobs) * 1e6,
        "finished_us_each": finished_s / max(finished_calls, 1) * 1e6,
        "simulated_hours": now / 3600,
        "lost_to_preemption_gpu_hours": lost_gpu_s / 3600,
        **usage.figures(),
    }


# -- the peer -------------------------------------------------------------------


def simulate_fifo(nodes: list[Node], jobs: list[SimJob], limit: float) -> dict[str, Any]:
    """Strict FIFO over the same stream: same order and placement, no backfill or quotas."""
    cluster = Cluster(nodes)
    queue = sorted(jobs, key=lambda job: (-job.gang.priority, job.gang.order))
    by_id = {job.gang.id: job for job in jobs}
    usage = Usage(cluster.capacity.gpu)
    events = Events()
    now = 0.0
    head = 0
    decide_s = 0.0
    while True:
        t0 = time.perf_counter()
        while head < len(queue):
            job = queue[head]
            if cluster.place(job.gang.id, job.gang.tasks) is None:
                break
            events.push(now + job.duration, job.gang.id)
            usage.allocated += job.gpu
            head += 1
        decide_s += time.perf_counter() - t0
        if head == len(queue):
            break
        upcoming = events.next_time()
        if upcoming is None:
            raise RuntimeError("the FIFO peer is stuck with nothing running")
        if upcoming > limit:
            usage.advance(limit - now)
            now = limit
            break
        usage.advance(upcoming - now)
        now = upcoming
        for job_id in events.pop_at(now):
            cluster.release(job_id)
            usage.allocated -= by_id[job_id].gpu
    return {
        "admitted": head,
        "still_waiting": len(queue) - head,
        "decide_s": decide_s,
        "simulated_hours": now / 3600,
        **usage.figures(),
    }


# -- the report -----------------------------------------------------------------


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def table(results: dict[str, Any]) -> str:
    ours, peer = results["ours"], results["fifo"]
    per_pass, per_decision = ours["pass"], ours["per_decision"]
    rows = [
        ("measure", "trainfleet", "peer", "ratio", "target", "met"),
        (
            f"decisions/s ({ours['considered']:,} in {ours['passes']:,} passes)",
            f"{ours['decisions_per_s']:,.0f}",
            f"Slurm {SLURM_JOBS_PER_S}/s (doc)",
            f"{ours['decisions_per_s'] / SLURM_JOBS_PER_S:.0f}x",
            f">= {TARGET_DECISIONS_PER_S:,}",
            _met(ours["decisions_per_s"] >= TARGET_DECISIONS_PER_S),
        ),
        (
            f"  admissions/s ({ours['admitted']:,} admitted)",
            f"{ours['admissions_per_s']:,.0f}",
            "",
            "",
            "",
            "",
        ),
        (
            "time per decision p50 / p99 / max",
            f"{per_decision['p50_ms'] * 1000:.0f} / {per_decision['p99_ms'] * 1000:.0f} / "
            f"{per_decision['max_ms'] * 1000:,.0f} us",
            "",
            "",
            f"p99 < {TARGET_P99_MS:g} ms",
            _met(per_decision["p99_ms"] < TARGET_P99_MS),
        ),
        (
            "time per schedule() pass p50 / p99 / max",
            f"{per_pass['p50_ms']:.2f} / {per_pass['p99_ms']:.1f} / {per_pass['max_ms']:.0f} ms",
            "",
            "",
            f"(p99 < {TARGET_P99_MS:g} ms)",
            _met(per_pass["p99_ms"] < TARGET_P99_MS),
        ),
        (
            "  submit() / finished() each",
            f"{ours['submit_us_each']:.0f} / {ours['finished_us_each']:.0f} us",
            "",
            "",
            "",
            "",
        ),
        (
            "GPU utilization while saturated",
            f"{ours['utilization']:.1%}",
            f"FIFO {peer['utilization']:.1%}",
            f"{ours['utilization'] / peer['utilization']:.3f}x",
            f">= {TARGET_UTILIZATION:.0%}",
            _met(ours["utilization"] >= TARGET_UTILIZATION),
        ),
        (
            "  useful (less preempted work)",
            f"{ours['useful_utilization']:.1%}",
            f"FIFO {peer['useful_utilization']:.1%}",
            f"{ours['useful_utilization'] / peer['useful_utilization']:.3f}x",
            "",
            "",
        ),
        (
            "  10th percentile (time-weighted)",
            f"{ours['utilization_p10']:.1%}",
            f"FIFO {peer['utilization_p10']:.1%}",
            "",
            "",
            "",
        ),
        (
            "  queue saturated for (simulated)",
            f"{ours['saturated_hours']:,.1f} h",
            f"FIFO {peer['saturated_hours']:,.1f} h",
            f"{ours['saturated_hours'] / peer['saturated_hours']:.3f}x",
            "",
            "",
        ),
        (
            "preemptions (restarted) / GPU-h lost",
            f"{ours['preempted']:,} ({ours['preempted_restarted']:,}) / "
            f"{ours['lost_to_preemption_gpu_hours']:,.0f}",
            "FIFO 0 / 0",
            "",
            "",
            "",
        ),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--grace", type=float, default=30.0, help="simulated seconds a preempted job takes"
    )
    parser.add_argument(
        "--sim-hours", type=float, default=None, help="stop after this much simulated time"
    )
    parser.add_argument("--quick", action="store_true", help="100 nodes, 2,000 jobs")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "scheduler.json")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.jobs = 100, 2000
    limit = math.inf if args.sim_hours is None else args.sim_hours * 3600
    began = time.perf_counter()

    nodes = make_cluster(args.nodes)
    cluster_gpu = args.nodes * NODE_GPUS * GPU_UNIT
    queues = make_queues(args.queues, cluster_gpu)
    jobs = make_jobs(random.Random(args.seed), args.jobs, args.queues, cluster_gpu)
    gpu_hours = sum(job.gpu / GPU_UNIT * job.duration for job in jobs) / 3600
    print(
        f"{args.nodes:,} nodes ({args.nodes * NODE_GPUS:,} GPUs), {args.jobs:,} jobs "
        f"({gpu_hours:,.0f} GPU-h), {args.queues} queues, seed {args.seed}",
        flush=True,
    )
    results: dict[str, Any] = {
        "nodes": args.nodes,
        "gpus": args.nodes * NODE_GPUS,
        "jobs": args.jobs,
        "queues": {queue.name: queue.nominal["gpu"] / GPU_UNIT for queue in queues},
        "seed": args.seed,
        "grace_s": args.grace,
        "sim_hours_limit": args.sim_hours,
        "cpus": os.cpu_count(),
        "job_mix": {
            "tasks_per_job": dict(sorted(Counter(len(job.gang.tasks) for job in jobs).items())),
            "mean_gpus_per_job": sum(job.gpu for job in jobs) / len(jobs) / GPU_UNIT,
            "gpu_hours": gpu_hours,
        },
    }
    results["ours"] = simulate(nodes, queues, jobs, args.grace, limit)
    results["fifo"] = simulate_fifo(nodes, jobs, limit)
    results["utilization_ratio"] = results["ours"]["utilization"] / results["fifo"]["utilization"]
    results["targets"] = {
        "decisions_per_s": TARGET_DECISIONS_PER_S,
        "pass_p99_ms": TARGET_P99_MS,
        "utilization": TARGET_UTILIZATION,
        "slurm_documented_jobs_per_s": SLURM_JOBS_PER_S,
    }
    results["runtime_s"] = time.perf_counter() - began
    print(table(results))
    print(f"runtime {results['runtime_s']:.1f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
