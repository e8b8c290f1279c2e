"""What a task uses, sampled by its supervisor: CPU and RSS of its process tree, and its
GPUs' utilisation and its own GPU memory where NVML sees them.

The tree is the task's process and its descendants, found through the kernel's
``/proc/PID/task/TID/children`` (no scan of every process of the machine: a sample costs
a few reads per process of the task; see ``Tree``). CPU is the tree's time between two samples, in
percent of one core: each process's own and its reaped children's time (``utime``,
``stime``, ``cutime``, ``cstime``), so that short-lived children count too; a process
seen before and reaped since by one of the tree counts only the part after the last
sample. Processes that leave the tree (a daemon that double-forks, a container that its
runtime starts elsewhere) are not counted.

Standard library only, and no trainfleet import: the shim loads this file by its path.
NVML (``pynvml``) is handed in as a module, loaded only for a task with GPUs.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _read(path: str) -> bytes:
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(descriptor, 4096)
    finally:
        os.close(descriptor)


class Stat:
    """What ``/proc/PID/stat`` says of one process."""

    __slots__ = ("cpu", "own", "parent", "rss", "start", "threads")

    def __init__(self, data: bytes) -> None:
        fields = data[data.rindex(b")") + 2 :].split()
        self.parent = int(fields[1])
        own = int(fields[11]) + int(fields[12])
        self.own = own
        self.cpu = own + int(fields[13]) + int(fields[14])
        """Ticks of this process and of the children it has reaped."""
        self.threads = int(fields[17])
        self.start = int(fields[19])
        self.rss = int(fields[21]) * PAGE


def tree(root: int) -> dict[int, Stat]:
    """The live processes of the tree under ``root`` (itself included), by pid; {} once
    it is gone. Every thread of every process is asked for its children."""
    return Tree(root, full_every=1).processes()


class Tree:
    """The processes under ``root``, found cheaply sample after sample.

    The kernel lists a process's children by the thread that made them, so finding them
    all takes a read per thread (a trainer has dozens). Every ``full_every``-th look reads
    every thread's list; the looks between read only the main thread's and those of the
    threads that had children at the last full look. A long-lived child made by another
    thread since then is counted from the next full look (a short-lived one is counted
    anyway: its time is in its parent's ``cutime`` once reaped).
    """

    def __init__(self, root: int, full_every: int = 12) -> None:
        self.root, self.full_every, self.looks = root, full_every, 0
        self.forking: dict[tuple[int, int], list[str]] = {}
        """By (pid, start): its threads other than the main one that had children."""

    def processes(self) -> dict[int, Stat]:
        """The live processes of the tree, by pid; {} once it is gone."""
        full = self.looks % self.full_every == 0
        self.looks += 1
        found: dict[int, Stat] = {}
        forking: dict[tuple[int, int], list[str]] = {}
        waiting = [self.root]
        while waiting:
            pid = waiting.pop()
            try:
                stat = Stat(_read(f"/proc/{pid}/stat"))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            found[pid] = stat
            key, main = (pid, stat.start), str(pid)
            threads = [main, *self.forking.get(key, ())]
            if full and stat.threads > 1:
                try:
                    threads = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
            for thread in threads:
                try:
                    children = _read(f"/proc/{pid}/task/{thread}/children").split()
                except OSError:
                    continue
                if children and thread != main:
                    forking.setdefault(key, []).append(thread)
                waiting.extend(int(child) for child in children if int(child) not in found)
        self.forking = forking
        return found


class Gpus:
    """The task's GPUs as NVML sees them (``nvml``: the ``pynvml`` module)."""

    def __init__(self, nvml: Any, indices: list[int]) -> None:
        nvml.nvmlInit()
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in indices]

    def sample(self, pids: set[int]) -> tuple[float | None, int, int]:
        """The GPUs' mean utilisation (None where NVML tells none), the GPU memory the
        processes ``pids`` hold on them, and how many GPUs were read."""
        utilisation, memory = [], 0
        for handle in self.handles:
            try:  # noqa: SIM105 (NVMLError: not supported here, or lost; the rest stays)
                utilisation.append(float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            except Exception:
                pass
            try:
                processes = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception:
                processes = []
            for process in processes:
                used = getattr(process, "usedGpuMemory", None)
                if process.pid in pids and isinstance(used, int):  # None: not available
                    memory += used
        mean = sum(utilisation) / len(utilisation) if utilisation else None
        return mean, memory, len(self.handles)

    def close(self) -> None:
        try:  # noqa: SIM105
            self.nvml.nvmlShutdown()
        except Exception:
            pass


class Sampler:
    """Samples the tree under ``root`` every ``every`` seconds into ``writer`` (a
    ``datadir.usage.UsageWriter``) until ``stopped`` is set.

    ``sample_type``: ``datadir.usage.Sample``; ``gpus``: the task's GPUs, if any;
    ``started``: when the task started (``time.monotonic``; by default now). A sample
    that fails (the tree gone, the disk full, NVML lost) is skipped: the task never
    notices, and the next sample is taken as usual.
    """

    def __init__(
        self,
        root: int,
        every: float,
        writer: Any,
        sample_type: Any,
        gpus: Gpus | None = None,
        started: float | None = None,
        stopped: threading.Event | None = None,
    ) -> None:
        self.root, self.every, self.writer, self.sample_type = root, every, writer, sample_type
        self.gpus = gpus
        self.tree = Tree(root)
        self.seen: dict[int, tuple[int, int, int]] = {}
        """At the last sample, by pid: its start, its CPU ticks, its parent."""
        self.last = time.monotonic() if started is None else started
        """When the last sample was taken (at first: when the task started)."""
        self.failures = 0
        self.stopped = stopped or threading.Event()

    def run(self) -> None:
        """Sample now, then every ``every`` seconds until ``stopped`` is set (the caller's
        thread: the shim's sampling one); the history is closed at the end."""
        try:
            while True:
                try:
                    self.sample()
                except Exception:  # a sample may fail; the sampler goes on
                    self.failures += 1
                if self.stopped.wait(self.every):
                    break
        finally:
            self.writer.close()
            if self.gpus is not None:
                self.gpus.close()

    def sample(self) -> bool:
        """Take one sample and write it; whether the tree was there and it was written."""
        now = time.monotonic()
        processes = self.tree.processes()
        if not processes:
            return False
        ticks = self._ticks(processes)
        elapsed, self.last = max(now - self.last, 1e-6), now
        gpu_util, gpu_memory, gpus = None, 0, 0
        if self.gpus is not None:
            gpu_util, gpu_memory, gpus = self.gpus.sample(set(processes))
        sample = self.sample_type(
            time.time(),
            100.0 * ticks / TICKS / elapsed,
            sum(stat.rss for stat in processes.values()),
            gpu_util,
            gpu_memory if gpus else None,
            gpus,
        )
        return bool(self.writer.append(sample))

    def _ticks(self, processes: dict[int, Stat]) -> int:
        """CPU ticks the tree used since the last sample (see the module's docstring)."""
        ticks = 0
        for pid, stat in processes.items():
            start, before, _ = self.seen.get(pid, (-1, 0, 0))
            ticks += stat.cpu - (before if start == stat.start else 0)
        for pid, (start, before, parent) in self.seen.items():
            now = processes.get(pid)
            if (now is None or now.start != start) and self._held_in_tree(parent, processes):
                ticks -= before  # its reaper's cutime holds all of it now: count the rest
        self.seen = {pid: (stat.start, stat.cpu, stat.parent) for pid, stat in processes.items()}
        return max(0, ticks)

    def _held_in_tree(self, parent: int, processes: dict[int, Stat]) -> bool:
        """Whether a process of the tree reaped the one whose parent was ``parent``: the
        nearest of its ancestors at the last sample that still lives."""
        passed = set()
        while parent not in passed:
            passed.add(parent)
            remembered = self.seen.get(parent)
            if remembered is None:
                return False
            alive = processes.get(parent)
            if alive is not None and alive.start == remembered[0]:
                return True
            parent = remembered[2]
        return False
