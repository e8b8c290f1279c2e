"""Resilience benchmarks of the local engine, each beside a peer or a baseline in the same run.

(a) restart: from a failed program's exit to its next start (its own clock, both ends), a
    task restarted alone and a 3-task job restarted whole (scope job), beside torchrun
    restarting its worker (``--max-restarts``), backoff 0 everywhere;
(b) preemption: a job of higher priority preempts one that takes the whole machine and
    saves its step on SIGTERM: from the victim's exit to the preemptor's program running,
    and the steps the victim computed but did not keep (0 when it saves on SIGTERM);
(c) goodput: examples/torch_ddp (3 tasks, an epoch committed each) for ``--goodput-seconds``,
    with a random task's process group killed every ``--kill-every`` seconds, beside the
    same run without faults: the epochs kept in the same wall time (each run in two halves,
    in the order clean, faulty, faulty, clean);
(d) elastic: an elastic group of 3 (min 2) loses a member mid-training: from the kill -9 to
    the first step at world size 2, under trainfleet (member 0 lost: rank 0's node) beside
    bare torchrun with torch's own settings and rank 0's agent holding the store (member 2
    lost: losing rank 0 would end its group).

usage: python benchmarks/resilience.py [--runs 20] [--only a,b,c,d] [--goodput-seconds 600]
                                       [--kill-every 120] [--out FILE]
Prints a table and writes the figures as JSON (default benchmarks/results/resilience.json).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

from trainfleet.control.assembly import engine_at
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
EXAMPLES = HERE.parent / "examples"

FLAKY = """\
import os, sys, time
log, runs = sys.argv[1], int(sys.argv[2])
with open(log, "a") as out:
    out.write(f"start {time.time()}\\n")
done = sum(1 for line in open(log) if line.startswith("start"))
if done > runs:  # the last start: succeed
    sys.exit(0)
with open(log, "a") as out:
    out.write(f"exit {time.time()}\\n")
sys.exit(1)
"""
"""Fails ``runs`` times, writing when it starts and when it exits, then succeeds."""

STEPPER = """\
import os, signal, sys, time
log, saved = sys.argv[1], sys.argv[2]
step = int(open(saved).read()) if os.path.exists(saved) else 0
with open(log, "a") as out:
    out.write(f"start {time.time()} {step}\\n")
def stop(*_):
    open(saved, "w").write(str(step))  # the checkpoint: the step reached
    with open(log, "a") as out:
        out.write(f"exit {time.time()} {step}\\n")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
while step < int(sys.argv[3]):
    time.sleep(0.01)
    step += 1
"""
"""Counts steps (one every 10 ms), keeps the step reached on SIGTERM, resumes from it."""


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p95": ordered[max(0, (len(ordered) * 95) // 100 - 1)],
        "runs": len(ordered),
    }


def _spec(text: str) -> JobSpec:
    import yaml

    return JobSpec.model_validate(yaml.safe_load(textwrap.dedent(text)))


def _gaps(log: Path) -> list[float]:
    """Each exit's time to the next start, from a FLAKY log."""
    events = [line.split() for line in log.read_text().splitlines()]
    return [
        float(after[1]) - float(before[1])
        for before, after in itertools.pairwise(events)
        if before[0] == "exit" and after[0] == "start"
    ]


def bench_restart(work: Path, runs: int) -> dict[str, object]:
    """(a) exit to next start: trainfleet (a task alone, a job of 3 whole) and torchrun."""
    (work / "flaky.py").write_text(FLAKY)
    engine = engine_at(work / "a")
    figures: dict[str, object] = {}
    for scope in ("task", "job"):
        log = work / f"{scope}.log"
        roles: dict[str, object] = {
            "worker": {"command": ["python", "flaky.py", str(log), str(runs)]}
        }
        if scope == "job":  # two peers restarted with it
            roles["other"] = {"replicas": 2, "command": ["sleep", "600"], "tracked": False}
        spec = JobSpec.model_validate(
            {
                "name": f"restart-{scope}",
                "grace_period": 1,
                "restart": {
                    "policy": "on-failure",
                    "max_restarts": runs,
                    "backoff": {"initial": 0},
                    "scope": scope,
                },
                "roles": roles,
            }
        )
        job = engine.wait(engine.submit(spec, work, start=True).id, timeout=60 + 10 * runs)
        if job.state != State.SUCCEEDED:
            raise RuntimeError(f"{job.id}: {job.state} {job.reason}")
        figures[f"trainfleet_{scope}_s"] = _summary(_gaps(log))
    log = work / "torchrun.log"
    subprocess.run(
        [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc-per-node=1",
            f"--max-restarts={runs}",
            "--monitor-interval=0.1",
            str(work / "flaky.py"),
            str(log),
            str(runs),
        ],
        cwd=work,
        check=True,
        capture_output=True,
    )
    figures["torchrun_s"] = _summary(_gaps(log))
    torchrun = figures["torchrun_s"]["median"]  # type: ignore[index]
    for scope in ("task", "job"):
        ours = figures[f"trainfleet_{scope}_s"]["median"]  # type: ignore[index]
        figures[f"ratio_{scope}_to_torchrun"] = ours / torchrun
    figures["target_p95_s"] = 1.0
    return figures


def bench_preemption(work: Path, runs: int) -> dict[str, object]:
    """(b) victim's exit to the preemptor's program running; steps computed, not kept."""
    (work / "stepper.py").write_text(STEPPER)
    engine = engine_at(work / "b")
    cpus = os.cpu_count() or 1
    gaps, lost = [], []
    for run in range(runs):
        log, saved, started = work / f"victim-{run}.log", work / f"saved-{run}", work / f"p-{run}"
        victim = engine.submit(
            _spec(f"""
                name: victim
                grace_period: 10
                roles:
                  worker: {{command: [python, stepper.py, {log}, {saved}, "1000"],
                            resources: {{cpu: {cpus}}}}}
            """),
            work,
            start=True,
        )
        while not log.exists():
            time.sleep(0.01)
        time.sleep(0.5)  # some steps done
        preemptor = engine.submit(
            _spec(f"""
                name: preemptor
                priority: 5
                roles:
                  worker: {{command: [python, -c, "import time; open('{started}', 'w')
                            .write(str(time.time()))"], resources: {{cpu: {cpus}}}}}
            """),
            work,
            start=True,
        )
        engine.wait(preemptor.id, timeout=60)
        ended = engine.wait(victim.id, timeout=120)
        if ended.state != State.SUCCEEDED:
            raise RuntimeError(f"{victim.id}: {ended.state} {ended.reason}")
        lines = [line.split() for line in log.read_text().splitlines()]
        exit_time, exit_step = next((float(w[1]), int(w[2])) for w in lines if w[0] == "exit")
        resumed = [int(w[2]) for w in lines if w[0] == "start"][1]
        gaps.append(float(started.read_text()) - exit_time)
        lost.append(exit_step - resumed)
    return {
        "victim_exit_to_preemptor_running_s": _summary(gaps),
        "steps_lost": max(lost),
        "target_s": 0.5,
    }


def _kept_epochs(work: Path, data: Path, seconds: float, kill_every: float | None) -> int:
    """Run the DDP example for ``seconds``, killing a random task's group every
    ``kill_every``; the newest epoch committed then."""
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(data), "PATH": f"{BIN}:{os.environ['PATH']}"}

    def trainfleet(*args: str) -> str:
        command = [sys.executable, "-m", "trainfleet", *args]
        return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout

    job_id = trainfleet("submit", str(work / "job.yaml")).strip()
    started = time.monotonic()
    next_kill = started + (kill_every or seconds + 1)
    while time.monotonic() < started + seconds:
        time.sleep(0.5)
        if time.monotonic() >= next_kill:
            next_kill += kill_every or 0
            tasks = json.loads(trainfleet("describe", job_id, "-o", "json"))["tasks"]
            pids = [task["pid"] for task in tasks if task["pid"]]
            if pids:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(random.choice(pids), signal.SIGKILL)
    steps = json.loads(trainfleet("checkpoints", job_id, "-o", "json"))
    trainfleet("stop", job_id)
    return int(steps[-1]["step"]) if steps else 0


def bench_goodput(work: Path, seconds: float, kill_every: float) -> dict[str, object]:
    """(c) epochs kept in ``seconds`` with a task killed every ``kill_every``, beside none."""
    shutil.copy(EXAMPLES / "torch_ddp" / "train.py", work)
    job = (EXAMPLES / "torch_ddp" / "job.yaml").read_text()
    job = job.replace("max_restarts: 2", "max_restarts: 1000, backoff: {initial: 0}")
    (work / "job.yaml").write_text(job + 'env: {EPOCHS: "100000"}\ngrace_period: 5\n')
    # Halves in the order clean, faulty, faulty, clean: a load that drifts on the machine
    # meanwhile weighs on both alike.
    clean = faulty = 0
    for turn, kills in enumerate((None, kill_every, kill_every, None)):
        kept = _kept_epochs(work, work / f"c-{turn}", seconds / 2, kills)
        clean, faulty = (clean + kept, faulty) if kills is None else (clean, faulty + kept)
    return {
        "seconds": seconds,
        "kill_every_s": kill_every,
        "epochs_without_faults": clean,
        "epochs_with_faults": faulty,
        "goodput": faulty / clean if clean else 0.0,
        "target": 0.9,
    }


ELASTIC = """\
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
with open(os.environ["OUT"], "a") as out:
    out.write(f"{dist.get_world_size()} {time.time()}\\n")
while True:
    dist.all_reduce(total)
    time.sleep(0.05)
"""
"""An elastic member: writes its world size and the time of each group's first step."""


GIVE_UP_S = 120.0
"""A group not stepping at the smaller size this long after the loss counts as not back."""


def _first_step_at(out: Path, world: int, after: float) -> float | None:
    """When a member first stepped at ``world`` after ``after``, from an ELASTIC file;
    None when none did within ``GIVE_UP_S``."""
    ends = time.monotonic() + GIVE_UP_S
    while time.monotonic() < ends:
        for line in out.read_text().splitlines() if out.exists() else []:
            size, at = line.split()
            if int(size) == world and float(at) > after:
                return float(at)
        time.sleep(0.1)
    return None


def _since(at: float | None, killed: float) -> float | None:
    return None if at is None else at - killed


def _kill_marked(mark: str) -> None:
    """kill -9 every process (agent and worker) started with ``MEMBER=mark``."""
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("MEMBER") == mark:
                process.kill()


def _elastic_trainfleet(work: Path, run: int) -> float | None:
    out, data = work / f"d-{run}.out", work / f"d-{run}"
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(data), "OUT": str(out)}
    (work / "job.yaml").write_text(
        textwrap.dedent(f"""
            name: elastic
            framework: pytorch
            pytorch: {{elastic: {{min_replicas: 2, max_replicas: 3, max_restarts: 5}}}}
            restart: {{policy: on-failure, backoff: {{initial: 600}}}}
            env: {{OUT: "{out}"}}
            roles:
              worker: {{replicas: 3, command: [{BIN}/torchrun, elastic.py]}}
        """)
    )

    def trainfleet(*args: str) -> str:
        command = [sys.executable, "-m", "trainfleet", *args]
        return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout

    job_id = trainfleet("submit", str(work / "job.yaml")).strip()
    try:
        if _first_step_at(out, 3, 0) is None:
            raise RuntimeError(f"{job_id}: the group of 3 never stepped")
        time.sleep(1)
        tasks = json.loads(trainfleet("describe", job_id, "-o", "json"))["tasks"]
        (pid,) = [t["pid"] for t in tasks if (t["role"], t["index"]) == ("worker", 0)]
        killed = time.time()
        os.killpg(pid, signal.SIGKILL)
        return _since(_first_step_at(out, 2, killed), killed)
    finally:
        trainfleet("stop", job_id)


def _elastic_torchrun(work: Path, run: int) -> float | None:
    out = work / f"t-{run}.out"
    port = 29000 + run
    agents = [
        subprocess.Popen(
            [str(BIN / "torchrun"), "--nnodes", "2:3", "--max-restarts", "5",
             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
             "--rdzv-id", f"bench-{run}", "--rdzv-conf", f"is_host={str(member == 0).lower()}",
             "elastic.py"],
            env={**os.environ, "OUT": str(out), "MEMBER": f"{run}-{member}"},
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for member in range(3)
    ]  # fmt: skip
    try:
        if _first_step_at(out, 3, 0) is None:
            raise RuntimeError("torchrun's group of 3 never stepped")
        time.sleep(1)
        killed = time.time()
        _kill_marked(f"{run}-2")
        return _since(_first_step_at(out, 2, killed), killed)
    finally:
        for member in range(3):
            _kill_marked(f"{run}-{member}")
        for agent in agents:
            agent.wait()


def bench_elastic(work: Path, runs: int) -> dict[str, object]:
    """(d) a member killed to the first step at the smaller world size, beside torchrun."""
    (work / "elastic.py").write_text(ELASTIC)
    ours: list[float | None] = []
    theirs: list[float | None] = []
    for run in range(runs):  # interleaved: a drifting load weighs on both alike
        ours.append(_elastic_trainfleet(work, run))
        theirs.append(_elastic_torchrun(work, run))

    def figures(samples: list[float | None]) -> dict[str, object]:
        back = [sample for sample in samples if sample is not None]
        found: dict[str, object] = {"back_within_s": GIVE_UP_S, "back": len(back)}
        found.update({"of": len(samples), **(_summary(back) if back else {})})
        return found

    return {
        "trainfleet_rank0_lost_s": figures(ours),
        "torchrun_defaults_member_lost_s": figures(theirs),
        "samples": {"trainfleet": ours, "torchrun": theirs},
        "target_s": 30.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", default="a,b,c,d")
    parser.add_argument("--goodput-seconds", type=float, default=600)
    parser.add_argument("--kill-every", type=float, default=120)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "resilience.json")
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="trainfleet-resilience-") as folder:
        work = Path(folder)
        if "a" in wanted:
            results["restart"] = bench_restart(work, args.runs)
        if "b" in wanted:
            results["preemption"] = bench_preemption(work, max(1, args.runs // 4))
        if "c" in wanted:
            results["goodput"] = bench_goodput(work, args.goodput_seconds, args.kill_every)
        if "d" in wanted:
            results["elastic"] = bench_elastic(work, max(1, args.runs // 4))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
