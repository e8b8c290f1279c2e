"""What sampling tasks' resource use costs (goal: at most 1% of a core per 100 tasks at the
default 5 s), each beside a peer in the same run.

(sample)  One sample of one task's tree by the shim's sampler (``sampling.Sampler``: the
          tree through ``/proc/PID/task/*/children``, each process's ``stat``, one record
          appended to its history), on a task like a trainer: a Python process with
          --threads threads and --children child processes. CPU seconds of this process
          per sample, over --samples samples.
          peers: ``ps -o rss=,times= --ppid ... -p ...`` (the same figures from procps: the
          ps process's CPU, from RUSAGE_CHILDREN) and psutil (``children(recursive=True)``,
          ``cpu_times`` and ``memory_info`` of each), per sample of the same tree.
(shims)   End to end: --tasks real shims sampling idle tasks every --every seconds for
          --seconds, beside as many shims with sampling off, started together; the shims'
          own CPU (utime + stime, from /proc) in each group. The difference, per task and
          per sample, scaled to 100 tasks at 5 s, is the figure held against the goal.

Prints a table and writes the figures as JSON (default benchmarks/results/sampling.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from trainfleet.backends.supervision import SHIM, sampling
from trainfleet.datadir import usage

HERE = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")
TRAINER = """\
import os, sys, threading, time
for _ in range(int(sys.argv[1])):
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
for _ in range(int(sys.argv[2])):
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
time.sleep(3600)
"""


def _trainer(threads: int, children: int) -> subprocess.Popen[bytes]:
    task = subprocess.Popen([sys.executable, "-S", "-c", TRAINER, str(threads), str(children)])
    deadline = time.monotonic() + 10
    while len(sampling.tree(task.pid)) < children + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return task


def _cpu() -> float:
    return time.process_time()


def bench_sample(threads: int, children: int, samples: int) -> dict[str, Any]:
    """CPU seconds per sample: the sampler, ps and psutil on the same tree."""
    task = _trainer(threads, children)
    found: dict[str, Any] = {"threads": threads, "children": children, "samples": samples}
    try:
        with tempfile.TemporaryDirectory() as folder:
            writer = usage.UsageWriter(Path(folder) / "t.usage")
            sampler = sampling.Sampler(task.pid, 5.0, writer, usage.Sample)
            sampler.sample()  # the history opened and compacted once, as in a shim
            began = _cpu()
            for _ in range(samples):
                sampler.sample()
            found["ours_s"] = (_cpu() - began) / samples
            writer.close()
            found["tree"] = len(sampling.tree(task.pid))

        pids = [str(pid) for pid in sampling.tree(task.pid)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        runs = max(1, samples // 10)  # ps is slow: fewer runs
        for _ in range(runs):
            subprocess.run(
                ["ps", "-o", "rss=,times=", "-p", ",".join(pids)],
                stdout=subprocess.DEVNULL,
                check=True,
            )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        found["ps_s"] = spent / runs

        root = psutil.Process(task.pid)
        began = _cpu()
        for _ in range(samples):
            tree = [root, *root.children(recursive=True)]
            sum(p.cpu_times().user + p.memory_info().rss for p in tree)
        found["psutil_s"] = (_cpu() - began) / samples
    finally:
        for pid in sampling.tree(task.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        task.wait()
    return found


def _shim(folder: Path, n: int, every: float | None) -> subprocess.Popen[bytes]:
    options = [str(folder / f"t{n}-0-0"), "--log", str(folder / f"t{n}.log")]
    if every is not None:
        options += ["--usage", str(folder / f"t{n}.usage"), "--usage-every", str(every)]
    command = [sys.executable, "-S", "-c", TRAINER, "4", "1"]
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(SHIM), *options, "--", *command],
        start_new_session=True,
    )


def _ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def bench_shims(tasks: int, every: float, seconds: float) -> dict[str, Any]:
    """Shims' own CPU with sampling on and off, over the same span."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        sampled = [_shim(root, n, every) for n in range(tasks)]
        plain = [_shim(root, tasks + n, None) for n in range(tasks)]
        shims = sampled + plain
        try:
            time.sleep(max(2.0, 2 * every))  # started, their modules loaded, first samples
            start = {shim.pid: _ticks(shim.pid) for shim in shims}
            began = time.monotonic()
            time.sleep(seconds)
            spent = {shim.pid: _ticks(shim.pid) - start[shim.pid] for shim in shims}
            elapsed = time.monotonic() - began
            histories = [len(usage.read(root / f"t{n}.usage")) for n in range(tasks)]
        finally:
            for shim in shims:
                os.killpg(shim.pid, 9)
            for shim in shims:
                shim.wait()
    on = sum(spent[shim.pid] for shim in sampled) / TICKS
    off = sum(spent[shim.pid] for shim in plain) / TICKS
    samples = tasks * elapsed / every
    per_sample = max(0.0, on - off) / samples
    return {
        "tasks": tasks,
        "every_s": every,
        "seconds": elapsed,
        "cpu_sampling_s": on,
        "cpu_not_sampling_s": off,
        "per_sample_s": per_sample,
        "samples_min": min(histories),
        "core_percent_per_100_tasks_at_5s": 100 * per_sample * 100 / 5.0,
    }


def table(results: dict[str, Any]) -> str:
    sample, shims = results["sample"], results["shims"]

    def at5(seconds: float) -> str:
        return f"{100 * seconds * 100 / 5.0:.3f}%"

    lines = [
        f"one sample of a tree of {sample['tree']} processes "
        f"({sample['threads']} threads, {sample['children']} children):",
        "                     CPU/sample    core per 100 tasks at 5 s",
        f"  trainfleet sampler {1e6 * sample['ours_s']:8.0f} us    {at5(sample['ours_s'])}",
        f"  ps                 {1e6 * sample['ps_s']:8.0f} us    {at5(sample['ps_s'])}",
        f"  psutil             {1e6 * sample['psutil_s']:8.0f} us    {at5(sample['psutil_s'])}",
        f"  ratio ps / ours {sample['ps_s'] / sample['ours_s']:.1f}, "
        f"psutil / ours {sample['psutil_s'] / sample['ours_s']:.1f}",
        "",
        f"{shims['tasks']} shims sampling every {shims['every_s']} s beside {shims['tasks']} "
        f"not sampling, {shims['seconds']:.0f} s:",
        f"  CPU {shims['cpu_sampling_s']:.2f} s vs {shims['cpu_not_sampling_s']:.2f} s; "
        f"{1e6 * shims['per_sample_s']:.0f} us per sample; "
        f"{shims['core_percent_per_100_tasks_at_5s']:.3f}% of a core per 100 tasks at 5 s "
        "(goal <= 1%)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "sampling.json")
    args = parser.parse_args()
    results = {
        "sample": bench_sample(args.threads, args.children, args.samples),
        "shims": bench_shims(args.tasks, args.every, args.seconds),
        "goal": "<= 1% of a core per 100 tasks at 5 s",
    }
    print(table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
