"""Launch benchmarks of the local engine, each beside a peer in the same run.

(a) submit-to-all-running of a 4-task job of trivial commands (engine in-process);
(b) `trainfleet run` wall time of a 3-replica job of `true`, beside
    `torchx run -s local_cwd --wait utils.sh --num_replicas 3 true`;
(c) time from a worker's death (kill -9) to its restarted process, backoff 0;
(d) training steps/s of a small DDP job under trainfleet, beside plain torchrun;
(e) `trainfleet run` wall time of a task writing 1 GiB to stdout, beside the same
    command writing to a file directly, and through one more pipe (`| cat > file`: the
    least a capped log costs, since its output must pass through a pipe).
(f) with an image (the test image of scripts/images.sh): submit to all 4 tasks' programs
    running, and a failed task's exit to its restarted program running, each beside the
    same job without an image, and the start beside 4 `podman run` by hand.
(g) from the exec of `trainfleet run` to its first task's start (the task writes the time),
    beside `torchx run -s local_cwd` of the same task where TorchX is installed.

usage: python benchmarks/launch.py [--runs 20] [--only a,b,c,d,e,f,g] [--out FILE]
                                  [--baseline-src DIR]   (b, e, g: another tree, in turns)
                                  [--torchx PATH]
Prints a table and writes the figures as JSON (default benchmarks/results/launch.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

from trainfleet.control.assembly import engine_at
from trainfleet.control.engine import Engine
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
DDP_PROGRAM = HERE / "ddp_steps.py"


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p10": ordered[len(ordered) // 10],
        "p90": ordered[(len(ordered) * 9) // 10 - 1 if len(ordered) >= 10 else -1],
        "runs": len(ordered),
    }


def _timed(
    command: list[str] | str,
    cwd: Path,
    shell: bool = False,
    env: dict[str, str] | None = None,
) -> float:
    started = time.perf_counter()
    subprocess.run(
        command,
        cwd=cwd,
        shell=shell,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


class Tree(NamedTuple):
    """A source tree to run `trainfleet` of: its data directory, the command that runs its
    console script's entry point, and the environment (its source first on the path)."""

    data: Path
    command: list[str]
    env: dict[str, str]

    def run(self, *args: str) -> list[str]:
        return [*self.command, *args]


Trees = dict[str, Tree]
"""By the prefix of their figures' names: "" for this checkout's `trainfleet` as users run
it (through its warm starter, once the first run left one), "cold_" for the same without
the starter (TRAINFLEET_STARTER=off), "baseline_" for --baseline-src's."""


def _entry_point(source: Path) -> list[str]:
    """``python -c`` running the ``trainfleet`` console script of the tree at ``source``
    (its pyproject's entry point, as the script pip writes does)."""
    text = (source.parent / "pyproject.toml").read_text()
    found = re.search(r'^trainfleet = "([\w.]+):(\w+)"', text, re.M)
    if found is None:
        raise SystemExit(f"no trainfleet script in {source.parent / 'pyproject.toml'}")
    module, function = found.groups()
    code = f"import sys; sys.argv[0] = 'trainfleet'; from {module} import {function}; "
    code += f"sys.exit({function}())"
    return [sys.executable, "-c", code]


def _trees(work: Path, name: str, baseline: Path | None, cold: bool = True) -> Trees:
    """This checkout's tree (warm, and ``cold``), and the baseline's where one is given,
    each with its own data directory; the starters in a private folder under ``work``.

    Both are compiled first, as an install compiles them: a start timed without the
    bytecode (PYTHONDONTWRITEBYTECODE, a fresh checkout) pays ~0.1 s compiling trainfleet."""
    runtime = work / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    ours = HERE.parent / "src"
    sources = {"": ours, **({"cold_": ours} if cold else {})}
    if baseline is not None:
        sources["baseline_"] = baseline.resolve() / "src"
    trees: Trees = {}
    for prefix, source in sources.items():
        data = work / f"{name}-{prefix or 'warm_'}data"
        env = {
            **os.environ,
            "TRAINFLEET_DATA_DIR": str(data),
            "PYTHONPATH": str(source),
            "XDG_RUNTIME_DIR": str(runtime),
            "TRAINFLEET_STARTER": "off" if prefix == "cold_" else "on",
        }
        trees[prefix] = Tree(data, _entry_point(source), env)
    for source in set(sources.values()):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(source)], check=True)
    _warm_up(trees[""])
    return trees


def _warm_up(tree: Tree) -> None:
    """A first command, which leaves a starter behind; back once the starter listens."""
    subprocess.run(tree.run("list"), env=tree.env, check=True, stdout=subprocess.DEVNULL)
    folder = Path(tree.env["XDG_RUNTIME_DIR"], "trainfleet")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for path in folder.glob("*.sock"):
            with socket.socket(socket.AF_UNIX) as probe, contextlib.suppress(OSError):
                probe.connect(str(path))
                return
        time.sleep(0.05)
    raise SystemExit(f"no starter listens in {folder}: see its .log there")


def _end_starters(work: Path) -> None:
    """SIGTERM the starters serving from ``work``'s runtime folder."""
    folder = os.fsencode(work / "runtime" / "trainfleet")
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if proc.name.isdigit() and folder in (proc / "cmdline").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGTERM)


def _torchx(path: Path | None) -> str:
    """The `torchx` program: ``path``, else the one beside this Python, else on PATH."""
    found = path or (BIN / "torchx" if (BIN / "torchx").exists() else shutil.which("torchx"))
    if found is None:
        raise SystemExit("torchx not found: pip install 'trainfleet[bench]' or give --torchx")
    return str(found)


def _spec(text: str) -> JobSpec:
    import yaml

    return JobSpec.model_validate(yaml.safe_load(textwrap.dedent(text)))


def bench_submit(work: Path, runs: int) -> dict[str, object]:
    """(a) from engine.submit() to the last of 4 tasks running (its process started),
    admission by the engine's scheduler included."""
    engine = engine_at(work / "a")
    spec = _spec("""
        name: submit
        grace_period: 1
        roles:
          chief: {command: [sleep, "30"]}
          worker: {replicas: 2, command: [sleep, "30"]}
          ps: {command: [sleep, "30"]}
    """)
    samples = []
    for _ in range(runs):
        started = time.time()
        job = engine.submit(spec, work, start=True)
        while not all(t.state == State.RUNNING for t in engine.tasks(job.id)):
            time.sleep(0.005)
        samples.append(max(t.started_at or 0 for t in engine.tasks(job.id)) - started)
        engine.cancel(job.id)
        engine.wait(job.id)
    return {"submit_to_all_running_s": _summary(samples), "target_median_s": 0.150}


def bench_run_vs_torchx(
    work: Path, runs: int, baseline: Path | None = None, torchx: Path | None = None
) -> dict[str, object]:
    """(b) wall time of the whole CLI for 3 x `true`, beside TorchX, interleaved.

    ``baseline`` (--baseline-src DIR): that source tree's `trainfleet run` too, in turns."""
    job = work / "true3.yaml"
    job.write_text('name: trues\nroles:\n  worker: {replicas: 3, command: ["true"]}\n')
    trees = _trees(work, "b", baseline)
    walls: defaultdict[str, list[float]] = defaultdict(list)
    program = _torchx(torchx)
    for _ in range(runs):
        for tree, of in trees.items():
            walls[tree].append(_timed(of.run("run", str(job)), work, env=of.env))
        replicas = ["--num_replicas", "3", "true"]
        walls["torchx"].append(
            _timed([program, "run", "-s", "local_cwd", "--wait", "utils.sh", *replicas], work)
        )
    theirs = statistics.median(walls["torchx"])
    results: dict[str, object] = {"torchx_s": _summary(walls["torchx"])}
    for tree in trees:
        results[f"{tree}trainfleet_s"] = _summary(walls[tree])
        results[f"{tree}ratio"] = statistics.median(walls[tree]) / theirs
    results["target_ratio_max"] = 0.5  # well ahead of TorchX (issue 24)
    return results


def bench_restart(work: Path, runs: int) -> dict[str, object]:
    """(c) from kill -9 of a worker to its restarted process running, with backoff 0."""
    engine = engine_at(work / "c")
    spec = _spec(f"""
        name: restart
        grace_period: 1
        restart: {{policy: on-failure, max_restarts: {runs + 1}, backoff: {{initial: 0}}}}
        roles:
          chief: {{command: [sleep, "600"]}}
          worker: {{command: [sleep, "600"]}}
    """)
    job = engine.submit(spec, work, start=True)
    samples = []

    def worker() -> object:
        return next(t for t in engine.tasks(job.id) if t.role == "worker")

    for restarts in range(runs):
        while (task := worker()).state != State.RUNNING or task.restarts != restarts:  # type: ignore[attr-defined]
            time.sleep(0.002)
        time.sleep(0.05)
        killed = time.time()
        os.kill(task.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        while (task := worker()).restarts != restarts + 1 or task.state != State.RUNNING:  # type: ignore[attr-defined]
            time.sleep(0.002)
        samples.append(task.started_at - killed)  # type: ignore[attr-defined]
    engine.cancel(job.id)
    engine.wait(job.id)
    return {"death_to_restart_s": _summary(samples), "backoff_s": 0.0, "target_max_s": 0.100}


def _ddp_steps(output: str) -> float:
    rates = [
        float(line.rsplit("steps_per_s=", 1)[1])
        for line in output.splitlines()
        if "steps_per_s=" in line
    ]
    if not rates:
        raise RuntimeError(f"no throughput in output:\n{output[-2000:]}")
    return min(rates)  # the slowest rank sets the pace


def bench_ddp(work: Path, runs: int) -> dict[str, object]:
    """(d) steps/s of a 2-node DDP (gloo) job under trainfleet, beside plain torchrun."""
    shutil.copy(DDP_PROGRAM, work / "ddp_steps.py")
    job = work / "ddp.yaml"
    job.write_text(
        textwrap.dedent("""
        name: ddp
        framework: pytorch
        grace_period: 5
        roles:
          master: {command: torchrun ddp_steps.py}
          worker: {replicas: 1, command: torchrun ddp_steps.py}
    """)
    )
    os.environ["TRAINFLEET_DATA_DIR"] = str(work / "d")
    ours, theirs = [], []
    for _ in range(runs):
        result = subprocess.run(
            [str(BIN / "trainfleet"), "run", str(job)],
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        )
        ours.append(_ddp_steps(result.stdout))
        theirs.append(_ddp_steps(_plain_torchrun(work)))
    ratio = statistics.median(ours) / statistics.median(theirs)
    return {
        "trainfleet_steps_per_s": _summary(ours),
        "torchrun_steps_per_s": _summary(theirs),
        "ratio": ratio,
        "target_ratio_min": 0.98,
    }


def _plain_torchrun(work: Path) -> str:
    from trainfleet.backends.supervision.ports import free_port

    port = str(free_port())
    nodes = [
        subprocess.Popen(
            [
                str(BIN / "torchrun"),
                "--nnodes=2",
                f"--node_rank={rank}",
                "--nproc_per_node=1",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                "ddp_steps.py",
            ],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    return "".join(node.communicate()[0] for node in nodes)


def bench_stdout(work: Path, runs: int, baseline: Path | None = None) -> dict[str, object]:
    """(e) a task writing 1 GiB to stdout under `trainfleet run`, beside writing it to a file.

    ``baseline`` (--baseline-src DIR): the same `trainfleet run` of that source tree too,
    in turns with this one's (this machine's disk is too noisy for runs one tree after
    the other)."""
    line = "step 123456 loss 0.123456 accuracy 0.987654 learning_rate 0.001 throughput 1234.5/s"
    writer = f"yes '{line}' 2>/dev/null | head -c {1 << 30}"  # stdout alone: no 'Broken pipe'
    job = work / "stdout.yaml"
    job.write_text(f"name: stdout\nroles:\n  worker: {{command: {json.dumps(writer)}}}\n")
    trees = _trees(work, "e", baseline, cold=False)
    walls: defaultdict[str, list[float]] = defaultdict(list)
    for _ in range(runs):
        for tree, of in trees.items():
            # Each timing starts with the disk synced: none pays for writing back another's GiB.
            os.sync()
            walls[f"{tree}run"].append(_timed(of.run("run", str(job)), work, env=of.env))
            walls[f"{tree}task"].append(_last_task_wall(of.data / "trainfleet.db"))
            shutil.rmtree(of.data / "jobs")
        for command, name in (
            (f"{writer} > out.log", "direct"),
            (f"{writer} | cat > out.log", "piped"),
        ):
            os.sync()
            walls[name].append(_timed(command, work, shell=True))
            (work / "out.log").unlink()
    direct = statistics.median(walls["direct"])
    results: dict[str, object] = {
        "direct_to_file_s": _summary(walls["direct"]),
        "through_one_more_pipe_s": _summary(walls["piped"]),
        "ratio_direct_over_one_more_pipe": direct / statistics.median(walls["piped"]),
        "target_ratio_min": 0.9,
    }
    for tree in trees:
        task, run = walls[f"{tree}task"], walls[f"{tree}run"]
        results[f"{tree}task_wall_s"] = _summary(task)
        results[f"{tree}trainfleet_run_wall_s"] = _summary(run)
        results[f"{tree}ratio_direct_over_task"] = direct / statistics.median(task)
        results[f"{tree}ratio_direct_over_run"] = direct / statistics.median(run)
    return results


def _last_task_wall(database: Path) -> float:
    """Seconds the last task of a data directory ran (read with sqlite3: any tree's store)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(database)) as store:
        started, finished = store.execute(
            "SELECT started_at, finished_at FROM tasks ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
    return float(finished - started)


IMAGE = "localhost/trainfleet/python:3.11"
STARTED = 'date +%s.%N > "started-$TRAINFLEET_ROLE-$TRAINFLEET_INDEX"'
"""What each task's program does first: the time it runs, as the program itself sees it."""


def _wait_for_files(paths: list[Path]) -> float:
    """The latest time written in ``paths``, once every one exists and holds one."""
    while True:
        try:
            return max(float(path.read_text()) for path in paths)
        except (OSError, ValueError):
            time.sleep(0.002)


def _start_with(engine: Engine, work: Path, image: str | None) -> float:
    """Seconds from submit to the 4th task's program running (4 x `sleep` after STARTED)."""
    spec = JobSpec.model_validate(
        {
            "name": "images",
            "grace_period": 1,
            **({"image": image} if image else {}),
            "roles": {"worker": {"replicas": 4, "command": f"{STARTED}; sleep 30"}},
        }
    )
    for old in work.glob("started-*"):
        old.unlink()
    submitted = time.time()
    job = engine.submit(spec, work, start=True)
    running = _wait_for_files([work / f"started-worker-{n}" for n in range(4)])
    engine.cancel(job.id)
    engine.wait(job.id)
    return running - submitted


def _start_by_hand(work: Path) -> float:
    """The same 4 programs started with `podman run` by hand, all at once."""
    for old in work.glob("started-*"):
        old.unlink()
    submitted = time.time()
    runs = [
        subprocess.Popen(
            [
                "podman",
                "run",
                "--rm",
                "--network",
                "host",
                "--init",
                "--volume",
                f"{work}:{work}",
                "--workdir",
                str(work),
                "--env",
                "TRAINFLEET_ROLE=worker",
                "--env",
                f"TRAINFLEET_INDEX={n}",
                IMAGE,
                "sh",
                "-c",
                STARTED,
            ],
            stdout=subprocess.DEVNULL,
        )
        for n in range(4)
    ]
    running = _wait_for_files([work / f"started-worker-{n}" for n in range(4)])
    for run in runs:
        run.wait()
    return running - submitted


def _restarts_with(engine: Engine, work: Path, image: str | None, runs: int) -> list[float]:
    """Seconds from a failed task's last word to its restarted program's first, ``runs``
    times (backoff 0; the program writes both times itself)."""
    log = work / "attempts"
    log.unlink(missing_ok=True)
    command = f"date +%s.%N >> {log}; sleep 0.2; date +%s.%N >> {log}; exit 3"
    spec = JobSpec.model_validate(
        {
            "name": "restarts",
            **({"image": image} if image else {}),
            "restart": {"policy": "on-failure", "max_restarts": runs, "backoff": {"initial": 0}},
            "roles": {"worker": {"command": command}},
        }
    )
    job = engine.submit(spec, work, start=True)
    engine.wait(job.id)
    times = [float(line) for line in log.read_text().split()]
    # start, end, start, end, ...: each restart is from an end to the next start
    return [times[n + 1] - times[n] for n in range(1, len(times) - 1, 2)]


def bench_images(work: Path, runs: int) -> dict[str, object]:
    """(f) jobs in containers of an image, beside the same jobs without, and podman by hand."""
    engine = engine_at(work / "f")
    boxed, plain, by_hand = [], [], []
    for _ in range(runs):
        boxed.append(_start_with(engine, work, IMAGE))
        plain.append(_start_with(engine, work, None))
        by_hand.append(_start_by_hand(work))
    boxed_restarts = _restarts_with(engine, work, IMAGE, runs)
    plain_restarts = _restarts_with(engine, work, None, runs)
    return {
        "start_with_image_s": _summary(boxed),
        "start_without_image_s": _summary(plain),
        "start_podman_by_hand_s": _summary(by_hand),
        "ratio_start_image_over_plain": statistics.median(boxed) / statistics.median(plain),
        "ratio_start_image_over_by_hand": statistics.median(boxed) / statistics.median(by_hand),
        "restart_with_image_s": _summary(boxed_restarts),
        "restart_without_image_s": _summary(plain_restarts),
        "ratio_restart_image_over_plain": statistics.median(boxed_restarts)
        / statistics.median(plain_restarts),
    }


FIRST_STARTED = "date +%s%N >> started"
"""What the task of (g) does: append the time it started, in nanoseconds, to ``started``."""


def _first_start(command: list[str], work: Path, env: dict[str, str] | None = None) -> float:
    """Seconds from the exec of ``command`` to the time its first task wrote in ``started``
    (both clocks are this machine's wall clock), once the command has ended."""
    started = work / "started"
    started.unlink(missing_ok=True)
    executed = time.time_ns()
    subprocess.run(
        command, cwd=work, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return (int(started.read_text().split()[0]) - executed) / 1e9


def bench_first_task(
    work: Path, runs: int, baseline: Path | None = None, torchx: Path | None = None
) -> dict[str, object]:
    """(g) from the exec of `trainfleet run` to its first task's start, in turns with the
    baseline tree (--baseline-src) and `torchx run -s local_cwd` of the same task.

    TorchX is left out where it is not installed (and no --torchx is given)."""
    job = work / "first.yaml"
    job.write_text(f"name: first\nroles:\n  worker: {{command: {json.dumps(FIRST_STARTED)}}}\n")
    trees = _trees(work, "g", baseline)
    try:
        program: str | None = _torchx(torchx)
    except SystemExit:
        program = None
    starts: defaultdict[str, list[float]] = defaultdict(list)
    for _ in range(runs):
        for tree, of in trees.items():
            starts[tree].append(_first_start(of.run("run", str(job)), work, of.env))
        if program is not None:
            # utils.sh quotes each word it is given: the shell that reads ">>" is one more
            command = [program, "run", "-s", "local_cwd", "--wait", "utils.sh", "sh", "-c"]
            command.append(FIRST_STARTED)
            starts["torchx"].append(_first_start(command, work))
    ours = statistics.median(starts[""])
    results: dict[str, object] = {}
    for tree in trees:
        results[f"{tree}first_task_start_s"] = _summary(starts[tree])
    if baseline is not None:
        results["ratio_over_baseline"] = ours / statistics.median(starts["baseline_"])
    if program is not None:
        results["torchx_first_task_start_s"] = _summary(starts["torchx"])
        results["ratio_over_torchx"] = ours / statistics.median(starts["torchx"])
    results["target_median_s"] = 0.150  # issue 24
    return results


BENCHMARKS: dict[str, Callable[[Path, int], dict[str, object]]] = {
    "a": bench_submit,
    "b": bench_run_vs_torchx,
    "c": bench_restart,
    "d": bench_ddp,
    "e": bench_stdout,
    "f": bench_images,
    "g": bench_first_task,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", default="a,b,c,d,e,f,g")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "launch.json")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="(b, e, g) also time `trainfleet run` of this source tree (a checkout), in turns",
    )
    parser.add_argument(
        "--torchx", type=Path, help="(b, g) the torchx program [default: beside python, PATH]"
    )
    args = parser.parse_args()
    BENCHMARKS["b"] = partial(bench_run_vs_torchx, baseline=args.baseline_src, torchx=args.torchx)
    BENCHMARKS["e"] = partial(bench_stdout, baseline=args.baseline_src)
    BENCHMARKS["g"] = partial(bench_first_task, baseline=args.baseline_src, torchx=args.torchx)
    results: dict[str, object] = {"runs": args.runs, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-launch-") as tmp:
        for name in args.only.split(","):
            work = Path(tmp) / name
            work.mkdir()
            bench = getattr(BENCHMARKS[name], "func", BENCHMARKS[name])  # partial or not
            print(f"({name}) {bench.__doc__.splitlines()[0]}", flush=True)
            try:
                results[name] = BENCHMARKS[name](work, args.runs)
            finally:
                _end_starters(work)
            print(json.dumps(results[name], indent=2), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
