"""A task's start inside a Slurm allocation: learn where every task landed, then run it.

The batch script starts it as ``python -I -S bootstrap.py LAUNCH_FILE GROUP`` in one step
per component (GROUP) of the job; the n-th task of the step (``SLURM_PROCID``) is the n-th
task of the component. The launch file (written by the backend) holds each task's argv and
environment with a placeholder for every task's host. The bootstrap writes this task's
``RECORD.host`` (its node and Slurm step, as ``tf-node2 41.0``), waits until every task of
the start has written its own, puts the real host names in place of the placeholders, and
runs the task with its log as output, with the local backend's shim (loaded from its file):
``RECORD.pid`` at the start, ``RECORD.exit`` (the exit status) at the end; meanwhile the
shim's ``Sampling`` keeps the task's resource use in the history beside its log (its GPUs:
those Slurm gave the step).

Tasks of one step share it, so a signal for one task comes as a file: the backend writes
``TERM`` or ``KILL`` to ``RECORD.signal`` and the bootstrap sends it to the task's process
group. Signals Slurm sends the bootstrap itself (a cancelled job) go on to the task.

Standard library only, and no trainfleet import; the launch file is in ``marshal``'s format
and the records are plain text, so that nothing slow to import is needed: it starts in a
few milliseconds.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import signal
import sys
import threading
import time
from types import ModuleType
from typing import Any

POLL_SECONDS = 0.005
SIGNAL_POLL_SECONDS = 0.1
GPUS_FROM_SLURM = "<trainfleet:gpus-from-slurm>"
"""In a container's argv: where its ``--device`` options go, one per GPU of the step (the
same text as ``trainfleet.backends.supervision.containers.GPUS_FROM_SLURM``)."""


def _read_host(record: str) -> str | None:
    try:
        with open(f"{record}.host") as handle:
            return handle.read().split()[0]
    except (OSError, IndexError):
        return None


def _hosts(tasks: dict[str, dict[str, Any]], deadline: float) -> dict[str, str] | None:
    """Every task's host, once each has written it; None when the deadline passes first."""
    hosts: dict[str, str] = {}
    while True:
        for name, task in tasks.items():
            if name not in hosts and (host := _read_host(task["record"])) is not None:
                hosts[name] = host
        if len(hosts) == len(tasks):
            return hosts
        if time.monotonic() > deadline:
            missing = ", ".join(sorted(set(tasks) - set(hosts)))
            print(f"trainfleet: tasks {missing} did not start in time", file=sys.stderr)
            return None
        time.sleep(POLL_SECONDS)


def _placed(text: str, tokens: dict[str, str]) -> str:
    for token, host in tokens.items():
        text = text.replace(token, host)
    return text


def _signal(pid: int, number: int) -> None:
    try:  # noqa: SIM105 (contextlib takes longer to import than this whole script)
        os.killpg(pid, number)
    except ProcessLookupError:
        pass


def _obey_requests(record: str, pid: int, ended: threading.Event) -> None:
    """Send the task the signals the backend asks for in ``RECORD.signal``."""
    path = f"{record}.signal"
    while not ended.wait(SIGNAL_POLL_SECONDS):
        try:
            with open(path) as handle:
                name = handle.read().strip()
            os.remove(path)
        except FileNotFoundError:
            continue
        if name in ("TERM", "KILL"):
            _signal(pid, getattr(signal, f"SIG{name}"))


def _supervise(
    shim: ModuleType,
    record: str,
    command: list[str],
    env: dict[str, str],
    usage: tuple[str, float, list[int], str | None] | None = None,
) -> int:
    """Run the task under the shim's records; ``usage``: sample it (the history's path,
    seconds between samples, its GPUs, NVML's file)."""
    pid = shim.start(record, command, env, new_session=True)
    if pid is None:
        return 127
    sampling = shim.Sampling(pid, *usage) if usage else None
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda number, _: _signal(pid, number))
    ended = threading.Event()
    threading.Thread(target=_obey_requests, args=(record, pid, ended), daemon=True).start()
    try:
        # Leftovers (a container's processes among them) end with the task, as Slurm would
        # end the rest of the step; the runtime starts a container outside of it.
        return int(shim.finish(record, pid, leftovers=True, sampling=sampling))
    finally:
        ended.set()


def _pass_gpus(command: list[str], env: dict[str, str], gpus: str | None) -> None:
    """Give a container the step's GPUs as CDI devices; it sees them numbered from 0."""
    devices = [gpu for gpu in (gpus or "").split(",") if gpu]
    at = command.index(GPUS_FROM_SLURM)
    command[at : at + 1] = [f"--device=nvidia.com/gpu={gpu}" for gpu in devices]
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = env["TRAINFLEET_GPUS"] = ",".join(
            str(n) for n in range(len(devices))
        )


def _load_shim(path: str) -> ModuleType:
    """The local backend's shim (its record writing), loaded from its file."""
    spec = importlib.util.spec_from_file_location("trainfleet_shim", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    launch_file, group = argv
    with open(launch_file, "rb") as handle:
        launch = marshal.load(handle)
    shim = _load_shim(launch["shim"])
    tasks: dict[str, dict[str, Any]] = launch["tasks"]
    me = tasks[launch["groups"][int(group)][int(os.environ["SLURM_PROCID"])]]
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    # A component of a heterogeneous job has its own job id: its steps are named by it.
    job = os.environ.get(f"SLURM_JOB_ID_HET_GROUP_{group}") or os.environ.get("SLURM_JOB_ID")
    step = f"{job}.{os.environ.get('SLURM_STEP_ID', '')}"
    shim.write_record(f"{me['record']}.host", f"{host} {step}\n")
    hosts = _hosts(tasks, time.monotonic() + launch["rendezvous_timeout"])
    if hosts is None:
        shim.write_record(f"{me['record']}.exit", "75")  # EX_TEMPFAIL: trying again may work
        return 75
    tokens = {task["token"]: hosts[name] for name, task in tasks.items()}
    # The task's own environment, and what Slurm says of the step (SLURM*), nothing more.
    env = {key: value for key, value in os.environ.items() if key.startswith("SLURM")}
    env.update({key: _placed(value, tokens) for key, value in me["env"].items()})
    slurm_gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    if me["gpus"] and slurm_gpus:  # the devices Slurm gave the step
        env["CUDA_VISIBLE_DEVICES"] = env["TRAINFLEET_GPUS"] = slurm_gpus
    command = [_placed(arg, tokens) for arg in me["argv"]]
    if GPUS_FROM_SLURM in command:
        _pass_gpus(command, env, slurm_gpus if me["gpus"] else None)
    os.makedirs(os.path.dirname(me["log"]), exist_ok=True)
    log = os.open(me["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    try:
        os.chdir(me["cwd"])
    except OSError as error:
        print(f"trainfleet: cannot start the task: {error}", flush=True)
        shim.write_record(f"{me['record']}.exit", "127")
        return 127
    usage = None
    if me.get("usage") and me.get("usage_every", 0) > 0:
        gpus = [int(gpu) for gpu in (slurm_gpus or "").split(",") if gpu.isdigit()]
        usage = (me["usage"], me["usage_every"], gpus if me["gpus"] else [], launch.get("nvml"))
    return _supervise(shim, me["record"], command, env, usage)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
