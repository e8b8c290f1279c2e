"""A task's start inside a Slurm allocation: learn where every task landed, then run it.

Started by the batch script as ``python -I -S bootstrap.py LAUNCH_FILE ROLE INDEX GROUP`` in
the task's own job step (GROUP: its component of a heterogeneous job). The launch file
(written by the backend) holds each task's argv and environment with a placeholder for
every task's host. The bootstrap writes this task's ``RECORD.host`` (its node and Slurm
step), waits until every task of the start has written its own, puts the real host names
in place of the placeholders, and runs the shim (backends/local/shim.py), which runs the
task and records its exit, with the task's log as its output.

Standard library only, and no trainfleet import: it starts in a few milliseconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import time
from types import ModuleType
from typing import Any

POLL_SECONDS = 0.005


def _write(path: str, text: str) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _read_host(record: str) -> str | None:
    try:
        with open(f"{record}.host") as handle:
            return str(json.load(handle)["host"])
    except (OSError, ValueError, KeyError):
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


def main(argv: list[str]) -> int:
    launch_file, role, index, group = argv
    with open(launch_file) as handle:
        launch = json.load(handle)
    tasks: dict[str, dict[str, Any]] = launch["tasks"]
    me = tasks[f"{role}/{index}"]
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    # A component of a heterogeneous job has its own job id: its steps are named by it.
    job = os.environ.get(f"SLURM_JOB_ID_HET_GROUP_{group}") or os.environ.get("SLURM_JOB_ID")
    step = f"{job}.{os.environ.get('SLURM_STEP_ID', '')}"
    _write(f"{me['record']}.host", json.dumps({"host": host, "step": step}))
    hosts = _hosts(tasks, time.monotonic() + launch["rendezvous_timeout"])
    if hosts is None:
        _write(f"{me['record']}.exit", "75")  # EX_TEMPFAIL: trying again may work
        return 75
    tokens = {task["token"]: hosts[name] for name, task in tasks.items()}
    env = dict(os.environ)
    env.update({key: _placed(value, tokens) for key, value in me["env"].items()})
    slurm_gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    if me["gpus"] and slurm_gpus:  # the devices Slurm gave the step
        env["CUDA_VISIBLE_DEVICES"] = env["TRAINFLEET_GPUS"] = slurm_gpus
    command = [_placed(arg, tokens) for arg in me["argv"]]
    os.makedirs(os.path.dirname(me["log"]), exist_ok=True)
    log = os.open(me["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    try:
        os.chdir(me["cwd"])
    except OSError as error:
        print(f"trainfleet: cannot start the task: {error}", flush=True)
        _write(f"{me['record']}.exit", "127")
        return 127
    os.environ.clear()
    os.environ.update(env)
    return int(_shim(launch["shim"]).main([me["record"], "--", *command]))


def _shim(path: str) -> ModuleType:
    """The shim, loaded from its file: it runs here rather than in a second interpreter."""
    spec = importlib.util.spec_from_file_location("trainfleet_shim", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
