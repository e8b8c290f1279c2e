"""A task's supervisor samples what its process tree uses (``shim.Sampling``), with real
tasks under the real shim: CPU of a busy loop, memory a child of the task holds, and a
shim that goes on whatever happens to the tree (kill -9) or to the disk (full)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import fill_disk, tmpfs, wait_for

from trainfleet.backends.supervision import SHIM, sampling
from trainfleet.datadir import usage

EVERY = "0.2"
# Allocates MIB mebibytes (touched), then spins or sleeps until the file "stop" exists.
TASK = """\
import os, sys, time
held = bytearray(int(sys.argv[1]) << 20)
for n in range(0, len(held), 4096):
    held[n] = 1
busy = sys.argv[2] == "busy"
while not os.path.exists("stop"):
    if not busy:
        time.sleep(0.01)
"""


def _shim(
    folder: Path, command: list[str], *more: str, history: Path | None = None
) -> subprocess.Popen[bytes]:
    """The shim, sampling ``command`` (run in ``folder``) into ``history``."""
    history = history or folder / "task.usage"
    options = [str(folder / "task-0-0"), "--log", str(folder / "task.log")]
    options += ["--usage", str(history), "--usage-every", EVERY, *more, "--", *command]
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(SHIM), *options], cwd=folder, start_new_session=True
    )


def _task(folder: Path, mib: int, mode: str) -> list[str]:
    (folder / "task.py").write_text(TASK)
    return [sys.executable, "-S", str(folder / "task.py"), str(mib), mode]


def _samples(path: Path, count: int) -> list[usage.Sample]:
    found = wait_for(
        lambda: len(usage.read(path)) >= count and usage.read(path), 30, f"{count} samples"
    )
    assert isinstance(found, list)
    return found


def _stop(folder: Path, shim: subprocess.Popen[bytes]) -> int:
    (folder / "stop").touch()
    return shim.wait(timeout=30)


def test_a_busy_loop_shows_its_cpu_and_memory(tmp_path: Path) -> None:
    shim = _shim(tmp_path, _task(tmp_path, 20, "busy"))
    try:
        samples = _samples(tmp_path / "task.usage", 6)
    finally:
        assert _stop(tmp_path, shim) == 0
    later = samples[2:]  # once it allocated and spins
    assert max(s.cpu for s in later) > 50
    assert all(s.rss >= 20 << 20 for s in later)
    assert all(s.gpu_util is None and s.gpu_memory is None for s in samples)
    assert samples == sorted(samples, key=lambda s: s.time)


def test_memory_of_the_whole_tree_counts(tmp_path: Path) -> None:
    """The task is a shell whose child holds 100 MiB: the tree's RSS has it; an idle tree
    uses little CPU."""
    python = " ".join(_task(tmp_path, 100, "idle"))
    shim = _shim(tmp_path, ["sh", "-c", f"{python}; true"])
    try:
        wait_for(lambda: any(s.rss >= 100 << 20 for s in usage.read(tmp_path / "task.usage")), 30)
        samples = _samples(tmp_path / "task.usage", 8)
    finally:
        assert _stop(tmp_path, shim) == 0
    settled = [s for s in samples if s.rss >= 100 << 20]
    assert settled and min(s.cpu for s in settled) < 30


def test_the_tree_killed_between_samples_breaks_nothing(tmp_path: Path) -> None:
    """kill -9 of a child of the task, then of the task: sampling goes on after the
    first, and the shim records the exit after the second, its history whole."""
    python = " ".join(_task(tmp_path, 10, "idle"))
    (tmp_path / "pids").mkdir()
    script = f"{python} & echo $! > pids/child; {python}; true"
    shim = _shim(tmp_path, ["sh", "-c", script])
    history = tmp_path / "task.usage"
    _samples(history, 2)
    child = int(wait_for(lambda: (tmp_path / "pids" / "child").read_text().strip(), 30))
    os.kill(child, signal.SIGKILL)
    count = len(usage.read(history))
    _samples(history, count + 3)  # sampled on after the child vanished
    task = int((tmp_path / "task-0-0.pid").read_text())
    assert task == shim.pid
    (root,) = wait_for(lambda: _children(shim.pid), 30)
    os.kill(root, signal.SIGKILL)
    assert shim.wait(timeout=30) == -signal.SIGKILL  # it ends the way its task did
    assert (tmp_path / "task-0-0.exit").read_text() == str(-signal.SIGKILL)
    assert len(usage.read(history)) >= count + 3
    assert not (tmp_path / "task.usage.tmp").exists()
    assert b"Traceback" not in (tmp_path / "task.log").read_bytes()
    (tmp_path / "stop").touch()  # the grandchild left behind, if any, ends


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def test_a_full_disk_drops_samples_but_not_the_task(tmp_path: Path) -> None:
    """The history's disk is full: the task runs on and ends as it would, the shim
    records its exit; once there is room, samples are written again."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        history = disk / "task.usage"
        filler = disk / "filler"
        fill_disk(filler)
        shim = _shim(tmp_path, _task(tmp_path, 5, "idle"), history=history)
        try:
            time.sleep(1.0)  # five samples due meanwhile, none with room
            assert usage.read(history) == []
            filler.unlink()
            _samples(history, 3)
        finally:
            assert _stop(tmp_path, shim) == 0
        assert (tmp_path / "task-0-0.exit").read_text() == "0"
    assert b"Traceback" not in (tmp_path / "task.log").read_bytes()


FAKE_NVML = """\
# A fake NVML (the pynvml module's calls the sampler makes): no GPU here. It says the
# task's first process holds 300 MiB on GPU 1, and a process outside its tree 1 GiB.
import os

class _Use:
    gpu = 42

class _Process:
    def __init__(self, pid, used):
        self.pid, self.usedGpuMemory = pid, used

def nvmlInit():
    pass

def nvmlShutdown():
    pass

def nvmlDeviceGetHandleByIndex(index):
    return index

def nvmlDeviceGetUtilizationRates(handle):
    return _Use()

def nvmlDeviceGetComputeRunningProcesses(handle):
    shim = os.getpid()
    with open(f"/proc/{shim}/task/{shim}/children") as children:
        task = [int(pid) for pid in children.read().split()]
    if handle != 1:
        return [_Process(os.getppid(), 1 << 30)]
    return [_Process(pid, 300 << 20) for pid in task] + [_Process(1, None)]
"""


def test_gpu_use_comes_from_nvml_for_the_tree_only(tmp_path: Path) -> None:
    """With a fake NVML module injected through ``--nvml`` (no GPU here): the task's GPUs'
    mean utilisation, and the memory its own processes hold on them, no other's."""
    (tmp_path / "fake_nvml.py").write_text(FAKE_NVML)
    nvml = ["--gpus", "0,1", "--nvml", str(tmp_path / "fake_nvml.py")]
    shim = _shim(tmp_path, _task(tmp_path, 1, "idle"), *nvml)
    try:
        samples = _samples(tmp_path / "task.usage", 3)
    finally:
        assert _stop(tmp_path, shim) == 0
    assert {(s.gpu_util, s.gpu_memory, s.gpus) for s in samples} == {(42.0, 300 << 20, 2)}


def test_without_nvml_the_rest_is_sampled(tmp_path: Path) -> None:
    shim = _shim(tmp_path, _task(tmp_path, 1, "idle"), "--gpus", "0", "--nvml", "/nonexistent.py")
    try:
        samples = _samples(tmp_path / "task.usage", 2)
    finally:
        assert _stop(tmp_path, shim) == 0
    assert all(s.rss > 0 and s.gpus == 0 and s.gpu_util is None for s in samples)


# Starts, from a thread other than the main one, a child that holds memory; then waits.
THREADED = """\
import subprocess, sys, threading, time
def spawn():
    subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(600)"])
    time.sleep(600)
threading.Thread(target=spawn, daemon=True).start()
time.sleep(600)
"""


def test_a_child_made_by_another_thread_is_in_the_tree() -> None:
    """Children are listed by the thread that made them: a full look finds this one, and
    the looks between full ones keep asking that thread."""
    task = subprocess.Popen([sys.executable, "-S", "-c", THREADED])
    try:
        found = wait_for(lambda: len(sampling.tree(task.pid)) == 2, 30, "the thread's child")
        assert found
        cheap = sampling.Tree(task.pid, full_every=12)
        assert [len(cheap.processes()) for _ in range(3)] == [2, 2, 2]
    finally:
        for pid in sampling.tree(task.pid):
            os.kill(pid, signal.SIGKILL)
        task.wait()
